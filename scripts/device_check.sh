#!/usr/bin/env bash
# The GPU check: runs ON the GPU machine from the repo root, with .devcarry/ (scripts/device_pack.sh) carried there.
#
#   bash scripts/device_check.sh [--quick] [--budget SECONDS]
#
# Phases, each timed and capped so that the whole run stays within the budget (default 420 s; --quick: 360 s):
#   env        the machine, driver, Python packages; finds cuDNN and cuBLASLt; TLD: the LD_LIBRARY_PATH that
#              tessera and kernel_check run with (through the wrapper $WORK/bin/tessera; the Python processes keep
#              the machine's own libraries)
#   startup    tessera --help, ldd of the plugin, and a probe: does the cuda backend take a MatMul+Add+Relu model?
#              (stops here, cleanly, where it cannot, e.g. on a machine without a GPU)
#   kernels    .devcarry/bin/kernel_check                               -> $OUT/kernels.txt
#   units      the plugin's unit tests (CudaBackend.*), where packed      -> $OUT/units.txt
#   fixture    a tiny artifact with a cuda engine                       -> $OUT/cuda_engine.{onnx,tsr}
#   nodes      the ONNX node cases the plugin claims, under tessera check -> $OUT/node_cases.txt
#   e2e        resnet50, bert_base_ln, resnet50_mixed, squeezenet_mixed, resnet50_b32 (not with --quick), mobilenet_v2: accuracy
#              against onnxruntime, compile cost, Tessera's and PyTorch eager's times
#                                                                       -> $OUT/results.json, $OUT/partition.txt
#   report     $OUT/report.md (also printed); the whole log is $OUT/log.txt
# $OUT defaults to /tmp/tessera_devcheck_out; the scratch folder is $DEVCHECK_WORK (default /tmp/tessera_devcheck).
# For testing the script elsewhere: DEVCHECK_BACKEND (default cuda) names the plugin under test, DEVCHECK_MODELS
# replaces the model list, DEVCHECK_NODE_BUDGET the node cases' seconds, DEVCHECK_E2E_RESERVE the seconds they leave
# to the models (default 150), PYTHON the Python interpreter.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 2
QUICK=0
BUDGET=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --budget) BUDGET=$2; shift ;;
    -h|--help) sed -n '2,/^set /{/^#/p}' "$0"; exit 0 ;;
    *) echo "device_check: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
if [ -z "$BUDGET" ]; then
  if [ "$QUICK" = 1 ]; then BUDGET=360; else BUDGET=420; fi
fi
if [ "$QUICK" = 1 ]; then
  RUNS=20; WARMUP=5; NODE_BUDGET=75; MODELS=resnet50,bert_base_ln,resnet50_mixed,squeezenet_mixed,mobilenet_v2
else
  RUNS=50; WARMUP=10; NODE_BUDGET=100; MODELS=resnet50,bert_base_ln,resnet50_mixed,squeezenet_mixed,resnet50_b32,mobilenet_v2
fi

[ -n "${DEVCHECK_MODELS:-}" ] && MODELS=$DEVCHECK_MODELS
[ -n "${DEVCHECK_NODE_BUDGET:-}" ] && NODE_BUDGET=$DEVCHECK_NODE_BUDGET
E2E_RESERVE=${DEVCHECK_E2E_RESERVE:-150}  # seconds the node cases leave to the models
B=${DEVCHECK_BACKEND:-cuda}
OUT=${OUT:-/tmp/tessera_devcheck_out}
WORK=${DEVCHECK_WORK:-/tmp/tessera_devcheck}
mkdir -p "$OUT"
rm -rf "$WORK"
mkdir -p "$WORK"
exec > >(tee -a "$OUT/log.txt") 2>&1
TEE_PID=$!

T0=$(date +%s)
PHASE=""
PHASE_T=$T0
elapsed() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
phase() {  # phase NAME: closes the previous phase's timing, opens NAME
  local now
  now=$(date +%s)
  if [ -n "$PHASE" ]; then
    printf '%-8s %4d s  (at %d s)\n' "$PHASE" $(( now - PHASE_T )) $(( now - T0 )) >> "$WORK/phases.txt"
  fi
  PHASE=$1
  PHASE_T=$now
  [ "$1" = end ] || echo "=== $1 (elapsed $(( now - T0 )) s, $(( BUDGET - (now - T0) )) s left)"
}
finish() {  # finish RC: the report, then exit RC (1 where the report found a failure and RC is 0)
  local rc=$1 rrc=0
  phase end
  echo "=== report (elapsed $(elapsed) s)"
  timeout 60 "$PY" scripts/device/report.py --work "$WORK" --results "$OUT/results.json" --out "$OUT/report.md" ||
    rrc=$?
  [ "$rrc" -gt 1 ] && echo "report.py failed (rc $rrc)"
  [ "$rc" = 0 ] && [ "$rrc" != 0 ] && rc=1
  echo "device_check: done in $(elapsed) s, exit $rc"
  exec 1>&- 2>&-
  wait "$TEE_PID" 2> /dev/null  # the log is complete before the machine hands $OUT back
  exit "$rc"
}
run_kernels() {  # kernel_check -> $OUT/kernels.txt and a summary
  local krc=0
  if [ ! -x .devcarry/bin/kernel_check ]; then
    echo "kernel_check: not packed" | tee "$WORK/kernels_summary.txt"
    return
  fi
  LD_LIBRARY_PATH=$TLD timeout 120 .devcarry/bin/kernel_check > "$OUT/kernels.txt" 2>&1 || krc=$?
  {
    echo "kernel_check: rc $krc, $(grep -ci '^ *ok' "$OUT/kernels.txt") ok, $(grep -c 'FAIL' "$OUT/kernels.txt") FAIL"
    grep 'FAIL' "$OUT/kernels.txt" | head -20 | sed 's/^/  /'
    [ "$krc" = 124 ] && echo "  (timed out after 120 s)"
  } | tee "$WORK/kernels_summary.txt"
}

if [ -n "${PYTHON:-}" ]; then PY=$PYTHON
elif [ -x /opt/torch/.venv/bin/python3 ]; then PY=/opt/torch/.venv/bin/python3
else PY=$(command -v python3)
fi
TESSERA_BIN=$PWD/.devcarry/bin/tessera
TESSERA=$WORK/bin/tessera  # the wrapper that sets LD_LIBRARY_PATH
PLUGIN=$PWD/.devcarry/lib/tessera/libtessera_backend_$B.so

# ---------------------------------------------------------------------------------------------------------------------
phase env
{
  echo "date:    $(date -u '+%Y-%m-%d %H:%M:%S UTC')  quick=$QUICK budget=${BUDGET}s runs=$RUNS warmup=$WARMUP"
  os=$(sed -n 's/^PRETTY_NAME=//p' /etc/os-release 2>/dev/null | tr -d '"')
  echo "host:    $os, kernel $(uname -r), $(nproc) cores,"\
       "$(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
  echo "glibc:   $(ldd --version 2>&1 | head -1)"
  if command -v nvidia-smi > /dev/null; then
    echo "gpu:     $(timeout 30 nvidia-smi -L 2>&1 | head -4 | tr '\n' ' ')"
    echo "driver:  $(timeout 30 nvidia-smi --query-gpu=driver_version,memory.total,clocks.max.sm,power.limit \
                     --format=csv,noheader 2>&1 | head -1)"
  else
    echo "gpu:     no nvidia-smi"
  fi
  echo "python:  $PY"
  timeout 90 "$PY" - <<'EOF' 2>&1
import importlib, sys
print("         python %s" % sys.version.split()[0])
for m in ("numpy", "onnx", "onnxruntime", "torch"):
    try:
        mod = importlib.import_module(m)
        extra = ""
        if m == "torch":
            extra = " (cuda %s, cudnn %s, gpu %s)" % (mod.version.cuda, mod.backends.cudnn.version(),
                                                     mod.cuda.get_device_name(0) if mod.cuda.is_available() else "none")
        if m == "onnxruntime":
            extra = " (%s)" % ",".join(mod.get_available_providers())
        print("         %s %s%s" % (m, mod.__version__, extra))
    except Exception as e:
        print("         %s: not importable (%s)" % (m, e))
EOF
} | tee "$WORK/env.txt"

# cuDNN, cuBLASLt and whatever else the plugin needs that the carried libraries do not cover: the Python packages'
# copies first (nvidia-cudnn-cu13, nvidia-cublas), then the toolkit's, then anywhere.
SITE=$(timeout 30 "$PY" -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
ROOTS=()
for root in $SITE /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda/lib \
            /usr/lib/x86_64-linux-gnu; do
  [ -d "$root" ] && ROOTS+=("$root")
done
find_lib() {  # find_lib NAME-GLOB: the first match, in site-packages first, then the CUDA toolkit's folders
  local hit=""
  [ ${#ROOTS[@]} -gt 0 ] &&
    hit=$(find -H "${ROOTS[@]}" -name "$1" \( -type f -o -type l \) 2>/dev/null | head -1)
  if [ -z "$hit" ]; then  # anywhere else, within 30 s
    hit=$(timeout 30 find / -name "$1" -not -path '/proc/*' -not -path '/sys/*' 2>/dev/null | sort | head -1)
  fi
  echo "$hit"
}
LIBDIRS=()
add_dir() { local d; d=$(dirname "$1"); [[ " ${LIBDIRS[*]} " == *" $d "* ]] || LIBDIRS+=("$d"); }
for lib in 'libcudnn.so.9*' 'libcublasLt.so.13*' 'libcudnn_ops.so.9*' 'libcublas.so.13*'; do
  hit=$(find_lib "$lib")
  if [ -n "$hit" ]; then
    echo "found:   $hit"
    add_dir "$hit"
  else
    echo "missing: no $lib on this machine"
  fi
done
build_ld_path() {
  local IFS=:
  TLD="$PWD/.devcarry/lib${LIBDIRS[*]:+:${LIBDIRS[*]}}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}
build_ld_path
# Anything else the plugin cannot find (cudart, nvrtc, nvJitLink...): look for it by name.
if [ -f "$PLUGIN" ]; then
  for lib in $(LD_LIBRARY_PATH=$TLD ldd "$PLUGIN" 2>/dev/null | awk '$2 == "=>" && $3 == "not" {print $1}'); do
    hit=$(find_lib "$lib")
    if [ -n "$hit" ]; then echo "found:   $hit (for the plugin)"; add_dir "$hit"; fi
  done
  build_ld_path
fi
export TESSERA_BACKEND_PATH=$PWD/.devcarry/lib/tessera
export TESSERA_TUNE_CACHE=$WORK/tune.json
echo "LD_LIBRARY_PATH for tessera: $TLD"
mkdir -p "$WORK/bin"
printf '#!/bin/bash\nLD_LIBRARY_PATH=%q exec %q "$@"\n' "$TLD" "$TESSERA_BIN" > "$TESSERA"
chmod +x "$TESSERA"
echo "TESSERA_BACKEND_PATH=$TESSERA_BACKEND_PATH"

# ---------------------------------------------------------------------------------------------------------------------
phase startup
if [ ! -x "$TESSERA_BIN" ]; then
  echo "device_check: STOP: no $TESSERA_BIN (run scripts/device_pack.sh after the build, and carry .devcarry)" |
    tee "$WORK/stop.txt"
  finish 3
fi
if ! timeout 60 "$TESSERA" --help > /dev/null 2> "$WORK/help.err"; then
  echo "device_check: STOP: tessera cannot start here: $(head -1 "$WORK/help.err")" | tee "$WORK/stop.txt"
  sed 's/^/  /' "$WORK/help.err" | head -20
  LD_LIBRARY_PATH=$TLD ldd "$TESSERA_BIN" | grep -i 'not found' | sed 's/^/  missing: /'
  finish 3
fi
echo "tessera $(timeout 30 "$TESSERA" --version 2>&1 | head -1)"
if [ -f "$PLUGIN" ]; then
  nf=$(LD_LIBRARY_PATH=$TLD ldd "$PLUGIN" 2>&1 | grep 'not found' || true)
  if [ -n "$nf" ]; then
    echo "plugin: MISSING libraries:"
    printf '%s\n' "$nf" | while read -r l; do echo "  $l"; done
  else
    echo "plugin: every library found"
  fi
  LD_LIBRARY_PATH=$TLD ldd "$PLUGIN" | grep -Ei 'cudnn|cublas|cudart|libcuda|protobuf' | sed 's/^/  /'
else
  echo "plugin: no $PLUGIN"
fi
# The probe: a MatMul+Add+Relu model must go to the backend under test; if not, nothing below can test it.
"$PY" - "$WORK/probe.onnx" <<'EOF'
import sys
sys.path.insert(0, "scripts/device")
import fixture
fixture.build(sys.argv[1])
EOF
probe_rc=0
timeout 90 "$TESSERA" partition "$WORK/probe.onnx" --backends "$B",native --placement priority \
  --min-region-nodes 1 --no-tune --json > "$WORK/probe.json" 2> "$WORK/probe.err" || probe_rc=$?
on_b=$("$PY" - "$WORK/probe.json" "$B" 2>> "$WORK/probe.err" <<'EOF'
import json, sys
sys.path.insert(0, "scripts/device")
from common import parse_json_doc
from node_cases import claimed_by
from node_cases import refusal_reasons
rep = parse_json_doc(open(sys.argv[1]).read())
b = sys.argv[2]
print(claimed_by(rep, b) if rep else 0)
for reason, n in (refusal_reasons(rep, b) if rep else []):
    print("%s refused %d node(s): %s" % (b, n, reason), file=sys.stderr)
EOF
)
sed 's/^/  /' "$WORK/probe.err" | head -20
if [ "$probe_rc" -ne 0 ] || [ "${on_b:-0}" = 0 ]; then
  echo "device_check: STOP: the $B backend does not take the probe model (partition rc $probe_rc):" \
    "$(grep -m1 . "$WORK/probe.err")" | tee "$WORK/stop.txt"
  phase kernels
  run_kernels
  finish 3
fi
echo "probe: the $B backend takes $on_b of the probe model's 3 nodes"

# ---------------------------------------------------------------------------------------------------------------------
phase kernels
run_kernels

# ---------------------------------------------------------------------------------------------------------------------
phase units
if [ -x .devcarry/bin/tessera_unit_tests ]; then
  urc=0
  LD_LIBRARY_PATH=$TLD timeout 150 .devcarry/bin/tessera_unit_tests --gtest_filter='CudaBackend.*' \
    > "$OUT/units.txt" 2>&1 || urc=$?
  {
    echo "unit tests (CudaBackend.*): rc $urc, $(grep -c '^\[       OK \]' "$OUT/units.txt") ok," \
      "$(grep -c '^\[  SKIPPED \]' "$OUT/units.txt") skipped, $(grep -c '^\[  FAILED  \] [A-Za-z]' "$OUT/units.txt") failed"
    grep -E '^\[  FAILED  \] [A-Za-z]|Failure|error:' "$OUT/units.txt" | head -20 | sed 's/^/  /'
  } | tee "$WORK/units_summary.txt"
else
  echo "unit tests: not packed" | tee "$WORK/units_summary.txt"
fi

# ---------------------------------------------------------------------------------------------------------------------
phase fixture
timeout 150 "$PY" scripts/device/fixture.py --tessera "$TESSERA" --backend "$B" --work "$WORK/fixture" \
  --out "$OUT" 2>&1 | tee "$WORK/fixture.log"
grep '^fixture:' "$WORK/fixture.log" | tail -1 > "$WORK/fixture_summary.txt"

# ---------------------------------------------------------------------------------------------------------------------
phase nodes
nb=$NODE_BUDGET
[ "$(left)" -lt $(( nb + E2E_RESERVE )) ] && nb=$(( $(left) - E2E_RESERVE ))
if [ "$nb" -gt 20 ]; then
  cases_arg=()
  [ -d .devcarry/node ] && cases_arg=(--cases "$PWD/.devcarry/node")
  timeout $(( nb + 60 )) "$PY" scripts/device/node_cases.py --tessera "$TESSERA" --backend "$B" --jobs 16 "${cases_arg[@]}" \
    --timeout 60 --budget "$nb" --out "$OUT/node_cases.txt" --summary "$WORK/node_summary.json" ||
    echo "node_cases.py failed (rc $?)"
else
  echo "node cases: skipped, out of time"
fi

# ---------------------------------------------------------------------------------------------------------------------
phase e2e
eb=$(( $(left) - 15 ))
if [ "$eb" -gt 30 ]; then
  timeout $(( eb + 30 )) "$PY" scripts/device/e2e.py --tessera "$TESSERA" --work "$WORK/e2e" --out "$OUT" \
    --results "$OUT/results.json" --backend "$B" --models "$MODELS" --runs "$RUNS" --warmup "$WARMUP" --budget "$eb" ||
    echo "e2e.py failed (rc $?)"
else
  echo "e2e: skipped, out of time"
fi

finish 0
