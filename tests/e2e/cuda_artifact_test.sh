#!/usr/bin/env bash
# An artifact that holds a CUDA engine (tests/e2e/data/cuda_engine.tsr: a MatMul + Add + Relu region compiled on an
# NVIDIA H200 by scripts/device_check.sh, from cuda_engine.onnx beside it) on the machine running this test:
#   - inspect reads it and names the engine's backend, its version and the GPU architecture it was built for;
#   - without that GPU (no device, or no cuda plugin at all), run and bench refuse it with exit 2 and one line naming
#     the cuda region and why, never a crash; on a machine whose plugin matches, it runs.
#
#     tests/e2e/cuda_artifact_test.sh BUILD_DIR
set -uo pipefail
build="$(cd "$1" && pwd)"
tessera="${TESSERA_BIN:-$build/bin/tessera}"
data="$(cd "$(dirname "$0")/data" && pwd)"
tsr="$data/cuda_engine.tsr"
work="$build/e2e/cuda_artifact"
rm -rf "$work"
mkdir -p "$work"
failures=0 passes=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

out=$("$tessera" inspect "$tsr" 2>&1)
if [ $? -eq 0 ] && grep -q "region 0 (cuda): cuda 0.1 (.*sm_90)" <<<"$out"; then
  passes=$((passes + 1))
else
  fail "inspect: expected a cuda engine built for sm_90: $out"
fi

for cmd in run bench; do
  args=(--runs 1)
  [ "$cmd" = run ] && args=()
  msg=$("$tessera" "$cmd" "$tsr" "${args[@]}" 2>&1 >/dev/null)
  rc=$?
  lines=$(grep -c . <<<"$msg")
  if [ $rc -eq 0 ]; then
    echo "note: $cmd ran the cuda engine (this machine has the GPU and the plugin it was built for)"
    passes=$((passes + 1))
  elif [ $rc -eq 2 ] && [ "$lines" -eq 1 ] && grep -q "region 0 (cuda)" <<<"$msg" &&
    grep -Eq "recompile the model|not found" <<<"$msg"; then
    passes=$((passes + 1))
  else
    fail "$cmd: expected exit 2 with one line naming the cuda region, got rc $rc: $msg"
  fi
done

echo "cuda_artifact_test: $passes passed, $failures failed"
[ "$failures" -eq 0 ]
