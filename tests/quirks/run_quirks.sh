#!/usr/bin/env bash
# The quirk corpus (tests/quirks/cases, made by make_quirks.sh from gen_quirks.py with ONNX Runtime's outputs): each
# case through `tessera check` at rtol 1e-3, atol 1e-5 (the ort_all_* cases to the bit with --backends native).
#     tests/quirks/run_quirks.sh BUILD_DIR [TESSERA_FLAGS ...]      e.g. --backends native
# expected_failures.txt lists the cases known to fail, one per line with the reason; the run fails when another case
# fails, or when a listed case passes (so the list stays true). Prints "quirks: P passed of N".
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="$(cd "$1" && pwd)"
shift
tessera="${TESSERA_BIN:-$build/bin/tessera}"
expected="$here/expected_failures.txt"
passed=0
total=0
bad=0
for d in "$here"/cases/*/; do
  name="$(basename "$d")"
  total=$((total + 1))
  tol=(--rtol 1e-3 --atol 1e-5)
  # ONNX Runtime's fusions reproduced: to the bit where the native backend runs everything.
  [[ $name == ort_all_* && " $* " == *" --backends native "* ]] && tol=(--rtol 0 --atol 0)
  out="$("$tessera" check "$d" "${tol[@]}" "$@" 2>&1)"
  rc=$?
  listed=0
  grep -q "^$name " "$expected" 2>/dev/null && listed=1
  if [ "$rc" -eq 0 ]; then
    passed=$((passed + 1))
    if [ "$listed" -eq 1 ]; then
      echo "UNEXPECTED PASS $name (remove it from expected_failures.txt)"
      bad=$((bad + 1))
    fi
  elif [ "$listed" -eq 1 ]; then
    echo "expected failure $name: $(echo "$out" | tail -1)"
  else
    echo "FAIL $name (exit $rc): $(echo "$out" | tail -1)"
    bad=$((bad + 1))
  fi
done
echo "quirks: $passed passed of $total"
[ "$bad" -eq 0 ]
