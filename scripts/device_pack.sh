#!/usr/bin/env bash
# Packs what the GPU check (scripts/device_check.sh) needs on a machine that has none of this one's libraries into
# .devcarry/ at the repo root (git-ignored through .git/info/exclude), to be carried there with the working tree:
#   .devcarry/bin/tessera                          the CLI
#   .devcarry/lib/tessera/libtessera_backend_cuda.so the cuda engine plugin (the only plugin carried)
#   .devcarry/bin/kernel_check                     the CUDA kernels' own test (the build's, else compiled here)
#   .devcarry/lib/*.so*                            every shared library the two need, except glibc, libstdc++,
#                                                  libgcc_s and the CUDA libraries (cuDNN, cuBLAS, cudart, the
#                                                  driver's libcuda), which the GPU machine brings
# Runs after the build (BUILD_DIR, default build/); fails when something is missing or the pack passes 44 MiB.
set -euo pipefail

cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
D=.devcarry
LIMIT_MIB=44

die() { echo "device_pack: $*" >&2; exit 1; }

[ -x "$BUILD/bin/tessera" ] || die "no $BUILD/bin/tessera: build first"
PLUGIN="$BUILD/lib/tessera/libtessera_backend_cuda.so"
[ -f "$PLUGIN" ] || die "no $PLUGIN: the build made no cuda plugin (is the CUDA toolkit found?)"

EXCLUDE=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$EXCLUDE")"
grep -qxF '/.devcarry/' "$EXCLUDE" 2>/dev/null || echo '/.devcarry/' >> "$EXCLUDE"

rm -rf "$D"
mkdir -p "$D/bin" "$D/lib/tessera"
cp "$BUILD/bin/tessera" "$D/bin/"
cp "$PLUGIN" "$D/lib/tessera/"

# The plugin's unit tests (tests/unit/cuda_backend_test.cc: they run on a device, and skip without one), stripped.
if [ -x "$BUILD/bin/tessera_unit_tests" ]; then
  strip -o "$D/bin/tessera_unit_tests" "$BUILD/bin/tessera_unit_tests"
fi

if [ -x "$BUILD/backends/cuda/kernel_check" ]; then
  cp "$BUILD/backends/cuda/kernel_check" "$D/bin/"
  echo "kernel_check: the build's"
elif [ -f backends/cuda/kernel_check.cu ] && [ -f backends/cuda/cuda_kernels.cu ]; then
  NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
  [ -x "$NVCC" ] || die "no nvcc at $NVCC to build kernel_check"
  echo "kernel_check: compiling with $NVCC (sm_90)"
  "$NVCC" -std=c++17 -O2 -arch=sm_90 -Ibackends/cuda backends/cuda/kernel_check.cu backends/cuda/cuda_kernels.cu \
    -o "$D/bin/kernel_check"
else
  echo "kernel_check: no sources (backends/cuda/kernel_check.cu), not packed" >&2
fi

# The ONNX node cases that use an op the plugin lowers: the GPU machine's onnx package ships no test data.
if [ -d /usr/share/libonnx-testdata/data/node ]; then
  /usr/bin/python3 scripts/device/pick_node_cases.py "$D/node"
else
  echo "node cases: no /usr/share/libonnx-testdata here (apt-get install libonnx-testdata), not packed" >&2
fi

# Libraries every Linux machine has in a version at least as new as this one's (glibc's family, the GCC runtime,
# zlib),
# and the CUDA libraries, which must come from the GPU machine (they match its driver and GPU).
skip_re='^(linux-vdso|ld-linux|libc\.so|libm\.so|libmvec|libpthread|libdl\.so|librt\.so|libresolv|libutil|libanl'
skip_re+='|libstdc\+\+|libgcc_s|libcudnn|libcublas|libcudart|libcuda\.so|libnvrtc|libnvJitLink|libcufft|libcurand'
skip_re+='|libcusparse|libcusolver|libnvToolsExt|libz\.so)'

missing=()
declare -A copied=()
for bin in "$BUILD/bin/tessera" "$PLUGIN"; do
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    [[ "$name" =~ $skip_re ]] && continue
    if [ "$path" = "not" ]; then
      missing+=("$name (needed by $(basename "$bin"))")
      continue
    fi
    [ -n "${copied[$name]:-}" ] && continue
    cp -L "$path" "$D/lib/$name"
    copied[$name]=$path
  done < <(ldd "$bin")
done
[ ${#missing[@]} -eq 0 ] || die "libraries not found here: ${missing[*]}"

echo "bundled libraries:"
for name in "${!copied[@]}"; do
  printf '  %-32s %8s KiB  from %s\n' "$name" "$(( $(stat -c %s "$D/lib/$name") / 1024 ))" "${copied[$name]}"
done | sort
for bin in "$D/bin/tessera" "$D/lib/tessera/libtessera_backend_cuda.so"; do
  # DT_RPATH (unlike DT_RUNPATH) is searched before LD_LIBRARY_PATH: then the device could pick other copies.
  if readelf -d "$bin" | grep -q '(RPATH)'; then
    echo "warning: $bin has DT_RPATH: $(readelf -d "$bin" | grep '(RPATH)')" >&2
  fi
  runpath=$(readelf -d "$bin" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
  needed=$(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
  echo "$(basename "$bin"): RUNPATH ${runpath:-none}; needs $needed"
done

bytes=$(du -sb "$D" | cut -f1)
echo "packed $D: $(find "$D" -type f | wc -l) files, $(( bytes / 1024 / 1024 )) MiB ($bytes bytes)"
[ "$bytes" -le $(( LIMIT_MIB * 1024 * 1024 )) ] || die "the pack is over $LIMIT_MIB MiB"
