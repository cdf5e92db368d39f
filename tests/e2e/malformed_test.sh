#!/usr/bin/env bash
# The CLI's contract for bad input (docs: DESIGN.md, "Command line"): exit code 2, exactly one non-empty line on
# stderr naming what was wrong, never a crash or a hang.
#
#     tests/e2e/malformed_test.sh BUILD_DIR
#
# Builds its cases with make_malformed.py into BUILD_DIR/e2e/malformed/ (truncated, garbage, empty and structurally
# broken models; input sets with a wrong shape, rank or dtype, a missing input, unreadable tensors), then:
#   - controls first: `tessera run` of the valid MLP and BERT with good inputs must exit 0 and write output_<i>.pb
#     (otherwise every "exit 2" below could be an unimplemented command answering 2);
#   - every broken model through `run` and `compile`, a missing file and a directory given as the model;
#   - every broken input set through `run`; a missing input dir; bad flags and an unknown command; `CMD --help`;
#   - garbage .tsr through `run` and `inspect`; when `compile` of the MLP succeeds, also truncated copies of its
#     artifact and one with a flipped byte in the weights (skipped, and said so, when compile does not work yet).
# Exit 0 when every case behaves; 1 otherwise, with one FAIL line per case. 77 (skipped) without Python onnx.
# Environment: TESSERA_BIN (default BUILD_DIR/bin/tessera), PYTHON (default /usr/bin/python3), CASE_TIMEOUT (s, 120).
set -uo pipefail

if [ "$#" -ne 1 ]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="$(cd "$1" && pwd)"
PYTHON="${PYTHON:-/usr/bin/python3}"
tessera="${TESSERA_BIN:-$build/bin/tessera}"
timeout_s="${CASE_TIMEOUT:-120}"

if [ ! -x "$tessera" ]; then
  echo "malformed_test: $tessera is not built" >&2
  exit 2
fi
if ! "$PYTHON" -c "import onnx, numpy" 2>/dev/null; then
  echo "malformed_test: $PYTHON cannot import onnx and numpy (install python3-onnx); skipping" >&2
  exit 77
fi

work="$build/e2e/malformed"
rm -rf "$work"
mkdir -p "$work"
"$PYTHON" "$here/make_malformed.py" "$work" || { echo "malformed_test: make_malformed.py failed" >&2; exit 1; }
models="$work/models"
inputs="$work/inputs"

failures=0
passes=0
fail() {
  echo "FAIL $1"
  failures=$((failures + 1))
}

# run_case NAME MUST_MENTION_REGEX -- ARGS...: runs tessera ARGS, expects exit 2 and one stderr line (matching the
# regex when it is not empty).
run_case() {
  local name="$1" mention="$2"
  shift 3
  local err="$work/stderr.txt" out_dir="$work/out/$name"
  rm -rf "$out_dir"
  mkdir -p "$out_dir"
  timeout --kill-after=10 "$timeout_s" "$tessera" "$@" >"$work/stdout.txt" 2>"$err" </dev/null
  local rc=$?
  local lines
  lines=$(grep -c . "$err")
  local first
  first=$(grep -m1 . "$err" | cut -c1-200)
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    fail "$name: hung (killed after ${timeout_s}s)"
  elif [ "$rc" -ge 128 ]; then
    fail "$name: crashed (signal $((rc - 128))): $first"
  elif [ "$rc" -ne 2 ]; then
    fail "$name: exit $rc, expected 2; stderr: ${first:-<empty>}"
  elif [ "$lines" -ne 1 ]; then
    fail "$name: $lines lines on stderr, expected 1; first: ${first:-<empty>}"
  elif [ -n "$mention" ] && ! grep -Eq "$mention" "$err"; then
    fail "$name: message does not name /$mention/: $first"
  else
    passes=$((passes + 1))
    echo "ok   $name: $first"
  fi
}

# --- controls ------------------------------------------------------------------------------------------------------
control_ok=1
for pair in "mlp:mlp_good:1" "bert_tiny:bert_good:2"; do
  IFS=: read -r model set n_out <<<"$pair"
  out_dir="$work/out/control_$model"
  mkdir -p "$out_dir"
  timeout --kill-after=10 "$timeout_s" "$tessera" run "$models/$model.onnx" --input-dir "$inputs/$set" \
    --output-dir "$out_dir" >"$work/stdout.txt" 2>"$work/stderr.txt" </dev/null
  rc=$?
  if [ "$rc" -ne 0 ] || [ ! -s "$out_dir/output_$((n_out - 1)).pb" ]; then
    fail "control: tessera run $model.onnx with good inputs: exit $rc, stderr: $(grep -m1 . "$work/stderr.txt")"
    control_ok=0
  else
    echo "ok   control: tessera run $model.onnx with good inputs"
  fi
done

# --- bad models ----------------------------------------------------------------------------------------------------
good_in="$inputs/mlp_good"
# `compile` arrives with the artifact; until the CLI lists it, its cases are not run.
has_compile=0
"$tessera" --help 2>/dev/null | grep -q "^  compile" && has_compile=1
for f in "$models"/bad_*.onnx; do
  case_name="$(basename "$f" .onnx)"
  run_case "run_$case_name" "" -- run "$f" --input-dir "$good_in" --output-dir "$work/out/run_$case_name"
  if [ "$has_compile" = 1 ]; then run_case "compile_$case_name" "" -- compile "$f" -o "$work/out/$case_name.tsr"; fi
done
run_case "run_missing_model_file" "no_such_model" -- run "$work/no_such_model.onnx" --input-dir "$good_in" \
  --output-dir "$work/out/missing"
if [ "$has_compile" = 1 ]; then
  run_case "compile_missing_model_file" "no_such_model" -- compile "$work/no_such_model.onnx" -o "$work/out/x.tsr"
fi
run_case "run_directory_as_model" "" -- run "$models" --input-dir "$good_in" --output-dir "$work/out/dir"
run_case "check_missing_case_dir" "no_such_case" -- check "$work/no_such_case"

# Several cases in one `check`: each ends with its own line, a case that fails or cannot be read does not stop the
# ones after it, and the exit code is the worst case's (2: one was bad input). Cases from the MLP control: its
# expected output, and the BERT control's output where the MLP's is expected.
if [ "$control_ok" = 1 ]; then
  for c in good wrong; do
    mkdir -p "$work/cases/$c/test_data_set_0"
    cp "$models/mlp.onnx" "$work/cases/$c/model.onnx"
    cp "$good_in"/input_*.pb "$work/cases/$c/test_data_set_0/"
  done
  cp "$work/out/control_mlp/output_0.pb" "$work/cases/good/test_data_set_0/"
  cp "$work/out/control_bert_tiny/output_0.pb" "$work/cases/wrong/test_data_set_0/"
  c="$work/cases"
  timeout --kill-after=10 "$timeout_s" "$tessera" check "$c/good" "$c/wrong" "$c/missing" "$c/good" \
    >"$work/stdout.txt" 2>"$work/stderr.txt" </dev/null
  rc=$?
  if [ "$rc" -eq 2 ] && [ "$(grep -c '^PASS '"$c"'/good ' "$work/stdout.txt")" -eq 2 ] \
     && grep -q "^FAIL $c/wrong: test_data_set_0 output 0 " "$work/stdout.txt" \
     && grep -q "^FAIL $c/missing: .*does not exist" "$work/stdout.txt" && [ "$(grep -c '^\(PASS\|FAIL\) '"$c"'/' \
     "$work/stdout.txt")" -eq 4 ]; then
    passes=$((passes + 1))
    echo "ok   check_several_cases: a line per case, exit 2"
  else
    fail "check_several_cases: exit $rc; stdout: $(tr '\n' '|' <"$work/stdout.txt" | cut -c1-400)"
  fi
fi

# --- bad inputs ----------------------------------------------------------------------------------------------------
for d in "$inputs"/mlp_*; do
  set_name="$(basename "$d")"
  [ "$set_name" = mlp_good ] && continue
  mention=""
  [ "$set_name" = mlp_missing_input ] && mention="input"
  run_case "run_$set_name" "$mention" -- run "$models/mlp.onnx" --input-dir "$d" --output-dir "$work/out/$set_name"
done
run_case "run_bert_missing_second_input" "attention_mask|input_1" -- run "$models/bert_tiny.onnx" \
  --input-dir "$inputs/bert_missing_second_input" --output-dir "$work/out/bert_missing"
run_case "run_bert_float_for_int64_ids" "" -- run "$models/bert_tiny.onnx" --input-dir "$inputs/mlp_good" \
  --output-dir "$work/out/bert_float"
run_case "run_missing_input_dir" "no_such_dir" -- run "$models/mlp.onnx" --input-dir "$work/no_such_dir" \
  --output-dir "$work/out/nodir"

# --- bad flags -----------------------------------------------------------------------------------------------------
run_case "run_without_input_dir" "" -- run "$models/mlp.onnx" --output-dir "$work/out/noflag"
run_case "run_unknown_flag" "bogus" -- run "$models/mlp.onnx" --input-dir "$good_in" --output-dir "$work/out/u" --bogus
run_case "run_bad_threads" "" -- run "$models/mlp.onnx" --input-dir "$good_in" --output-dir "$work/out/t" \
  --threads notanumber
run_case "run_unknown_backend" "no_such_backend" -- run "$models/mlp.onnx" --input-dir "$good_in" \
  --output-dir "$work/out/b" --backends no_such_backend
run_case "unknown_command" "frobnicate" -- frobnicate
run_case "option_without_value" "option .--rtol. needs a value" -- check "$work" --rtol
run_case "flag_of_another_command" "option .--tune. for .run." -- run "$models/mlp.onnx" --tune
# Limits: a run that needs more memory than --max-memory is refused before it allocates; a bad size is named.
run_case "over_memory_limit" "memory limit" -- run "$models/mlp.onnx" --backends native --max-memory 1K
run_case "bad_memory_size" "max-memory" -- run "$models/mlp.onnx" --max-memory 12Q
run_case "bert_over_memory_limit" "memory limit" -- run "$models/bert_tiny.onnx" --backends native --max-memory 4K

# --- help: every command's --help exits 0 and lists its own options -------------------------------------------------
for spec in "compile:--output" "run:--input-dir" "check:--rtol" "bench:--warmup" "partition:--svg" "inspect:--json"; do
  cmd="${spec%%:*}" opt="${spec#*:}"
  if "$tessera" "$cmd" --help >"$work/help.txt" 2>&1 && grep -q -- "$opt" "$work/help.txt"; then
    passes=$((passes + 1))
    echo "ok   help_$cmd: lists $opt"
  else
    fail "help_$cmd: exit $? or no $opt in: $(head -c 200 "$work/help.txt")"
  fi
done

# --- bad artifacts -------------------------------------------------------------------------------------------------
head -c 8192 "$models/bad_garbage_random.onnx" >"$work/garbage.tsr"
cat "$work/garbage.tsr" "$work/garbage.tsr" >"$work/garbage2.tsr"
: >"$work/empty.tsr"
for f in garbage garbage2 empty; do
  run_case "run_${f}_tsr" "" -- run "$work/$f.tsr" --input-dir "$good_in" --output-dir "$work/out/$f"
  run_case "inspect_${f}_tsr" "" -- inspect "$work/$f.tsr"
done

tsr="$work/mlp.tsr"
if timeout "$timeout_s" "$tessera" compile "$models/mlp.onnx" -o "$tsr" >/dev/null 2>"$work/stderr.txt" </dev/null \
   && [ -s "$tsr" ]; then
  size=$(stat -c %s "$tsr")
  for cut in 8 64 $((size / 2)) $((size - 1)); do
    head -c "$cut" "$tsr" >"$work/cut_$cut.tsr"
    run_case "run_tsr_truncated_at_$cut" "" -- run "$work/cut_$cut.tsr" --input-dir "$good_in" \
      --output-dir "$work/out/cut_$cut"
    run_case "inspect_tsr_truncated_at_$cut" "" -- inspect "$work/cut_$cut.tsr"
  done
  # One flipped byte in the middle of the file (the MLP's weights): the artifact's checksums must catch it.
  at=$((size / 2))
  "$PYTHON" -c 'import sys; d = bytearray(open(sys.argv[1], "rb").read()); d[int(sys.argv[3])] ^= 0x5A; open(sys.argv[2], "wb").write(d)' \
    "$tsr" "$work/flip.tsr" "$at"
  run_case "run_tsr_byte_flipped_at_$at" "" -- run "$work/flip.tsr" --input-dir "$good_in" --output-dir "$work/out/flip"
else
  echo "SKIP truncated/bit-flipped artifact cases: tessera compile mlp.onnx failed: $(grep -m1 . "$work/stderr.txt")"
fi

echo "malformed_test: $passes cases ok, $failures failed (controls $([ "$control_ok" = 1 ] && echo ok || echo FAILED))"
[ "$failures" -eq 0 ]
