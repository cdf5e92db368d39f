#!/usr/bin/env bash
# Installs a built tree into a temporary prefix (cmake --install), then builds the embedding examples
# (examples/embed: a C and a C++ program) against it -- with find_package(Tessera) and, for the C one, with
# pkg-config -- and runs them on a generated model, from outside the build tree. Runs the installed CLI (which must
# use the installed libtessera.so), and imports the installed Python package when it was built.
# Usage: scripts/install_check.sh [BUILD_DIR]   (default build)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:-$root/build}" && pwd)"
PYTHON="${PYTHON:-/usr/bin/python3}"
work="$(mktemp -d "${TMPDIR:-/tmp}/tessera-install.XXXXXX")"
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
for f in lib/libtessera.so include/tessera/tessera.h include/tessera/tessera.hpp lib/pkgconfig/tessera.pc \
         lib/cmake/Tessera/TesseraConfig.cmake bin/tessera; do
  [ -e "$prefix/$f" ] || { echo "install_check: $f is not installed" >&2; exit 1; }
done
# The exported symbols: the C API and nothing else.
if nm -D --defined-only "$prefix/lib/libtessera.so" | awk '$2 ~ /[TDBRW]/ {print $3}' | grep -v '^tessera_' | grep -q .; then
  echo "install_check: libtessera.so exports symbols outside tessera_*:" >&2
  nm -D --defined-only "$prefix/lib/libtessera.so" | awk '$2 ~ /[TDBRW]/ {print $3}' | grep -v '^tessera_' | head >&2
  exit 1
fi
soname="$(objdump -p "$prefix/lib/libtessera.so" | awk '/SONAME/ {print $2}')"
[ "$soname" = libtessera.so.0 ] || { echo "install_check: SONAME is '$soname', expected libtessera.so.0" >&2; exit 1; }

cmake -S "$root/examples/embed" -B "$work/embed" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/embed" >/dev/null
PKG_CONFIG_PATH="$prefix/lib/pkgconfig" cc -std=c11 -Wall -Werror -o "$work/embed_pc" "$root/examples/embed/embed.c" \
  $(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs tessera)

"$PYTHON" "$root/tests/e2e/gen_models.py" "$work" --models mlp >/dev/null
cd "$work"  # away from the build tree: plugins must come from the prefix
export TESSERA_TUNE=0 TESSERA_TUNE_CACHE=
"$work/embed/embed" "$work/mlp.onnx"
"$work/embed_pc" "$work/mlp.onnx" >/dev/null
out="$("$work/embed/embed_cpp" "$work/mlp.onnx" "$work/mlp.tsr")"
echo "$out"
case "$out" in
  *"backends available: "*native*) ;;
  *) echo "install_check: embed_cpp printed no backend list" >&2; exit 1 ;;
esac
if [ -d "$build/lib/tessera" ] && ls "$build"/lib/tessera/*.so >/dev/null 2>&1; then
  case "$out" in
    *dnnl*|*xnnpack*) ;;
    *) echo "install_check: the installed library found no plugin in $prefix/lib/tessera" >&2; exit 1 ;;
  esac
fi
# The installed CLI: it links libtessera.so from the prefix (RPATH $ORIGIN/../lib) and holds none of the core.
loaded="$(ldd "$prefix/bin/tessera" | awk '/libtessera\.so\.0/ {print $3}')"
if [ -n "$loaded" ] && [ "$(readlink -f "$loaded")" = "$(readlink -f "$prefix/lib/libtessera.so.0")" ]; then :; else
  echo "install_check: bin/tessera does not load libtessera.so from $prefix/lib:" >&2
  ldd "$prefix/bin/tessera" >&2
  exit 1
fi
if nm -C "$prefix/bin/tessera" | grep -q "InferenceSession\|tessera::Graph"; then
  echo "install_check: bin/tessera holds the core instead of using libtessera.so" >&2
  exit 1
fi
"$prefix/bin/tessera" compile "$work/mlp.onnx" -o "$work/cli.tsr" >/dev/null
"$prefix/bin/tessera" run "$work/cli.tsr" | grep -q "output: float32\[1,10\]" ||
  { echo "install_check: the installed CLI did not run the model" >&2; exit 1; }
if ls "$build"/python/tessera/_tessera*.so >/dev/null 2>&1; then
  PYTHONPATH="$prefix/lib/python3/dist-packages" "$PYTHON" -c \
    "import tessera, numpy as np; s = tessera.InferenceSession('$work/mlp.tsr'); \
print('python:', tessera.__version__, s.run(None, {'input': np.zeros((1, 256), np.float32)})[0].shape)"
fi
echo "install_check: OK ($prefix)"
