#!/usr/bin/env bash
# Damaged artifacts must be refused, never crash: compiles the MLP with the example plugin (so the artifact has an
# engine section) and without, then runs every damaged copy from make_corrupt_artifacts.py through `tessera run` and
# `tessera inspect`. Each must exit 2 with exactly one line on stderr naming what is wrong, and nothing from a
# sanitizer. test.sh runs this script a second time against an AddressSanitizer + UndefinedBehaviorSanitizer build.
#
#     tests/e2e/corrupt_artifact_test.sh BUILD_DIR
#
# Exit 0 when every case behaves; 1 otherwise (one FAIL line per case); 77 without Python onnx.
# Environment: TESSERA_BIN (default BUILD_DIR/bin/tessera), PYTHON (default /usr/bin/python3), FLIPS (default 150).
set -uo pipefail
if [ "$#" -ne 1 ]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="$(cd "$1" && pwd)"
PYTHON="${PYTHON:-/usr/bin/python3}"
tessera="${TESSERA_BIN:-$build/bin/tessera}"
export TESSERA_BACKEND_PATH="$build/examples${TESSERA_BACKEND_PATH:+:$TESSERA_BACKEND_PATH}"
if ! "$PYTHON" -c "import onnx, numpy" 2>/dev/null; then
  echo "corrupt_artifact_test: $PYTHON cannot import onnx and numpy; skipping" >&2
  exit 77
fi
work="$build/e2e/corrupt_artifacts"
rm -rf "$work"
mkdir -p "$work/in"
"$PYTHON" "$here/gen_models.py" "$work" --models mlp >/dev/null || exit 1
"$PYTHON" - "$work/in" <<'PY' || exit 1
import sys, numpy as np
from onnx import numpy_helper
x = np.random.default_rng(7).standard_normal((1, 256)).astype(np.float32)
open(sys.argv[1] + "/input_0.pb", "wb").write(numpy_helper.from_array(x, "input").SerializeToString())
PY

failures=0
passes=0
check_case() {  # NAME EXPECT -- tessera args...
  local name="$1" expect="$2"
  shift 3
  local err="$work/stderr.txt"
  timeout 120 "$tessera" "$@" >/dev/null 2>"$err" </dev/null
  local rc=$?
  local lines
  lines=$(grep -c . "$err")
  if [ "$rc" -ne 2 ] || [ "$lines" -ne 1 ] || grep -qiE "sanitizer|runtime error|core dumped" "$err"; then
    echo "FAIL $name: exit $rc, $lines stderr lines: $(head -c 300 "$err")"
    failures=$((failures + 1))
  elif [ "$expect" != "-" ] && ! grep -qi "$expect" "$err"; then
    echo "FAIL $name: message lacks '$expect': $(cat "$err")"
    failures=$((failures + 1))
  else
    passes=$((passes + 1))
  fi
}

for variant in "example,native" "native"; do
  tag=${variant%%,*}
  good="$work/good_$tag.tsr"
  if ! "$tessera" compile "$work/mlp.onnx" -o "$good" --backends "$variant" --placement priority >/dev/null \
    2>"$work/stderr.txt"; then
    echo "FAIL compile --backends $variant: $(cat "$work/stderr.txt")"
    exit 1
  fi
  # Control: the undamaged artifact runs.
  if ! "$tessera" run "$good" --input-dir "$work/in" --output-dir "$work/out_$tag" >/dev/null 2>"$work/stderr.txt"; then
    echo "FAIL control run of $good: $(cat "$work/stderr.txt")"
    exit 1
  fi
  "$PYTHON" "$here/make_corrupt_artifacts.py" "$good" "$work/$tag" --flips "${FLIPS:-150}" || exit 1
  while read -r name expect; do
    check_case "$tag/$name/run" "$expect" -- run "$work/$tag/$name.tsr" --input-dir "$work/in" --output-dir "$work/o"
  done <"$work/$tag/cases.txt"
  # inspect reads the same way; a sample of cases keeps the test short.
  while read -r name expect; do
    check_case "$tag/$name/inspect" "$expect" -- inspect "$work/$tag/$name.tsr"
  done < <(awk 'NR % 5 == 1' "$work/$tag/cases.txt")
done
echo "corrupt_artifact_test: $passes passed, $failures failed"
[ "$failures" -eq 0 ]
