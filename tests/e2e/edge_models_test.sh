#!/usr/bin/env bash
# The edge cases of placement, each compiled, exported, reloaded and run (make_edge_models.py writes them with
# numpy-computed expected outputs): for every case and backend set (example+native, native), `tessera check` of the
# .onnx, `tessera compile` to a .tsr, and `tessera check --model` of the .tsr. Also checks placements the cases are
# about: all_external is one example region; no_external has no engine; shared_constant stores its weight once.
#
#     tests/e2e/edge_models_test.sh BUILD_DIR
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="$(cd "$1" && pwd)"
PYTHON="${PYTHON:-/usr/bin/python3}"
tessera="${TESSERA_BIN:-$build/bin/tessera}"
export TESSERA_BACKEND_PATH="$build/examples${TESSERA_BACKEND_PATH:+:$TESSERA_BACKEND_PATH}"
if ! "$PYTHON" -c "import onnx, numpy" 2>/dev/null; then
  echo "edge_models_test: $PYTHON cannot import onnx and numpy; skipping" >&2
  exit 77
fi
work="$build/e2e/edge"
rm -rf "$work"
mkdir -p "$work"
"$PYTHON" "$here/make_edge_models.py" "$work" || exit 1

failures=0
passes=0
expect_ok() {  # NAME -- command...
  local name="$1"
  shift 2
  if "$@" >"$work/out.txt" 2>&1; then
    passes=$((passes + 1))
  else
    echo "FAIL $name: $(tail -3 "$work/out.txt")"
    failures=$((failures + 1))
  fi
}
json_field() {  # FILE PYTHON-EXPR over j
  "$PYTHON" -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"
}

for case_dir in "$work"/*/; do
  c=$(basename "$case_dir")
  for backends in example,native native; do
    tag="$c [$backends]"
    expect_ok "$tag check .onnx" -- "$tessera" check "$case_dir" --backends "$backends" --min-region-nodes 1 \
      --placement priority
    tsr="$work/$c.${backends%%,*}.tsr"
    expect_ok "$tag compile" -- "$tessera" compile "$case_dir/model.onnx" -o "$tsr" --backends "$backends" \
      --min-region-nodes 1 --placement priority
    expect_ok "$tag check .tsr" -- "$tessera" check "$case_dir" --model "$tsr"
    expect_ok "$tag inspect" -- "$tessera" inspect "$tsr"
  done
done

"$tessera" inspect "$work/all_external.example.tsr" --json >"$work/j.json"
[ "$(json_field "$work/j.json" 'len(j["engines"]), j["graph"]["nodes"]')" = "1 1" ] \
  && passes=$((passes + 1)) || { echo "FAIL all_external: expected one engine and one glue node"; failures=$((failures + 1)); }
"$tessera" inspect "$work/no_external.example.tsr" --json >"$work/j.json"
[ "$(json_field "$work/j.json" 'len(j["engines"])')" = "0" ] \
  && passes=$((passes + 1)) || { echo "FAIL no_external: expected no engine"; failures=$((failures + 1)); }
"$tessera" inspect "$work/shared_constant.example.tsr" --json >"$work/j.json"
[ "$(json_field "$work/j.json" 'len(j["engines"]), j["constants"]["count"], j["constants"]["stored_bytes"]')" = "2 1 36" ] \
  && passes=$((passes + 1)) || { echo "FAIL shared_constant: expected 2 engines sharing one 36-byte constant: $(json_field "$work/j.json" 'j["engines"], j["constants"]')"; failures=$((failures + 1)); }
"$tessera" inspect "$work/if_body.example.tsr" --json >"$work/j.json"
[ "$(json_field "$work/j.json" 'len(j["engines"])')" = "2" ] \
  && passes=$((passes + 1)) || { echo "FAIL if_body: expected one engine per branch"; failures=$((failures + 1)); }

# A model that lives entirely in one engine: every engine plugin this build has must take conv_stack whole (one
# engine, one glue node, no native code) and give the expected outputs from the .tsr.
for plugin in "$build"/lib/tessera/libtessera_backend_*.so; do
  [ -e "$plugin" ] || continue
  engine=$(basename "$plugin" .so)
  engine=${engine#libtessera_backend_}
  # A plugin for an accelerator this machine lacks refuses every node, saying so: nothing to check here.
  no_device=$("$tessera" partition "$work/conv_stack/model.onnx" --backends "$engine,native" --json 2>/dev/null |
    /usr/bin/python3 -c 'import json, sys; r = {x["reason"] for x in json.load(sys.stdin)["refusals"] if x["backend"] == sys.argv[1]}; print(r.pop() if len(r) == 1 and next(iter(r)).startswith("no ") and "device" in next(iter(r)) else "")' "$engine")
  if [ -n "$no_device" ]; then
    echo "SKIP conv_stack [$engine]: $no_device"
    continue
  fi
  tsr="$work/conv_stack.only_$engine.tsr"
  expect_ok "conv_stack [$engine] compile" -- "$tessera" compile "$work/conv_stack/model.onnx" -o "$tsr" \
    --backends "$engine,native" --placement priority
  expect_ok "conv_stack [$engine] check .tsr" -- "$tessera" check "$work/conv_stack" --model "$tsr"
  "$tessera" inspect "$tsr" --json >"$work/j.json"
  [ "$(json_field "$work/j.json" 'len(j["engines"]), j["graph"]["nodes"], j["engines"][0]["backend"] if j["engines"] else "-"')" = "1 1 $engine" ] \
    && passes=$((passes + 1)) || { echo "FAIL conv_stack [$engine]: expected the whole model in one $engine engine: $("$tessera" partition "$work/conv_stack/model.onnx" --backends "$engine,native" --placement priority | head -5)"; failures=$((failures + 1)); }
done

echo "edge_models_test: $passes passed, $failures failed"
[ "$failures" -eq 0 ]
