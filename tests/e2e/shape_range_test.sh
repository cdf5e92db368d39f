#!/usr/bin/env bash
# Shape ranges through the command line: a convolution over inputs of any width (x [1,3,48,W], as an OCR line
# recogniser takes), compiled with --shape x=1,3,48,32..2048. Checks that
#   - the artifact runs widths inside the range, and its outputs match a compile pinned to each width exactly;
#   - a width outside the range, and a malformed range, exit 2 naming the input, the dim and the range;
#   - random inputs take the range's low end, and without a range a failed random run says which --shape to give;
#   - inspect lists the ranges;
#   - run/bench --input-dir size an ONNX model's symbolic dims from the inputs (engines compiled for them), bench
#     times those inputs, and --shape on an artifact gives its random inputs' exact dims within its ranges.
#
#     tests/e2e/shape_range_test.sh BUILD_DIR
set -uo pipefail
build="$(cd "$1" && pwd)"
PYTHON="${PYTHON:-/usr/bin/python3}"
tessera="${TESSERA_BIN:-$build/bin/tessera}"
if ! "$PYTHON" -c "import onnx, numpy" 2>/dev/null; then
  echo "shape_range_test: $PYTHON cannot import onnx and numpy; skipping" >&2
  exit 77
fi
work="$build/e2e/shape_range"
rm -rf "$work"
mkdir -p "$work"
"$PYTHON" - "$work" <<'EOF' || exit 1
import sys, numpy as np, onnx
from onnx import helper as h, numpy_helper as nh, TensorProto as T
work = sys.argv[1]
rng = np.random.default_rng(3)
w = nh.from_array((rng.random((8, 3, 3, 3)) - 0.5).astype(np.float32), "w")
b = nh.from_array((rng.random(8) - 0.5).astype(np.float32), "b")
x = h.make_tensor_value_info("x", T.FLOAT, [1, 3, 48, "W"])
y = h.make_tensor_value_info("y", T.FLOAT, None)
nodes = [h.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], strides=[2, 2]),
         h.make_node("Relu", ["c"], ["y"])]
graph = h.make_graph(nodes, "line", [x], [y], [w, b])
onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 13)]), f"{work}/line.onnx")
for width in (32, 77, 500, 2048, 4096, 16):
    d = f"{work}/in_{width}"
    import os
    os.makedirs(d, exist_ok=True)
    v = (rng.random((1, 3, 48, width)) - 0.5).astype(np.float32)
    open(f"{d}/input_0.pb", "wb").write(nh.from_array(v, "x").SerializeToString())
EOF

failures=0
passes=0
check() {  # EXIT-CODE NAME (the code first: it is expanded before the name's command substitutions run)
  if [ "$1" -eq 0 ]; then passes=$((passes + 1)); else echo "FAIL $2"; failures=$((failures + 1)); fi
}
expect_error() {  # NAME TEXT -- command...: exit 2 and TEXT in the message
  local name="$1" text="$2" rc=0
  shift 3
  "$@" >"$work/out.txt" 2>&1 || rc=$?
  if [ "$rc" -eq 2 ] && grep -qF -- "$text" "$work/out.txt"; then
    passes=$((passes + 1))
  else
    echo "FAIL $name: exit $rc, $(tail -2 "$work/out.txt")"
    failures=$((failures + 1))
  fi
}

"$tessera" compile "$work/line.onnx" -o "$work/line.tsr" --shape x=1,3,48,32..2048 --shape x=1,3,48,320 \
  >"$work/compile.txt" 2>&1
check $? "compile with a range: $(tail -1 "$work/compile.txt")"
grep -q "symbolic input dims: 'x' dim 3 ('W')" "$work/compile.txt"
check $? "compile says which dims are symbolic"
"$tessera" inspect "$work/line.tsr" | grep -qF "x=1,3,48,32..2048"
check $? "inspect lists the range"

for width in 32 77 500 2048; do
  "$tessera" run "$work/line.tsr" --input-dir "$work/in_$width" --output-dir "$work/out_range_$width" \
    >"$work/out.txt" 2>&1
  check $? "run width $width on the ranged artifact: $(tail -1 "$work/out.txt")"
  "$tessera" run "$work/line.onnx" --shape "x=1,3,48,$width" --input-dir "$work/in_$width" \
    --output-dir "$work/out_exact_$width" >"$work/out.txt" 2>&1
  check $? "run width $width pinned exactly: $(tail -1 "$work/out.txt")"
  "$PYTHON" - "$work/out_range_$width/output_0.pb" "$work/out_exact_$width/output_0.pb" "$width" <<'EOF'
import sys, numpy as np, onnx
from onnx import numpy_helper as nh
a, b = (nh.to_array(onnx.load_tensor(p)) for p in sys.argv[1:3])
want = (1, 8, 23, (int(sys.argv[3]) - 3) // 2 + 1)
sys.exit(0 if a.shape == want and b.shape == want and np.allclose(a, b, rtol=1e-4, atol=1e-5) else 1)
EOF
  check $? "width $width: the ranged artifact matches the exact compile"
done

expect_error "width above the range" "input 'x': dim 3 is 4096, outside the compiled range 32..2048" -- \
  "$tessera" run "$work/line.tsr" --input-dir "$work/in_4096"
expect_error "width below the range" "input 'x': dim 3 is 16, outside the compiled range 32..2048" -- \
  "$tessera" run "$work/line.tsr" --input-dir "$work/in_16"
expect_error "reversed range" "bad dimension '2048..32'" -- \
  "$tessera" compile "$work/line.onnx" -o "$work/bad.tsr" --shape x=1,3,48,2048..32
expect_error "open range" "bad dimension '32..'" -- "$tessera" run "$work/line.onnx" --shape x=1,3,48,32..
expect_error "no such input" "no input named 'z'" -- "$tessera" run "$work/line.onnx" --shape z=1,2

# Random inputs: the low end of the range runs; without a range, width 1 cannot, and the error says what to give.
"$tessera" run "$work/line.tsr" >"$work/out.txt" 2>&1 && grep -qF "y: float32[1,8,23,15]" "$work/out.txt"
check $? "random inputs take the range's low end: $(tail -1 "$work/out.txt")"
expect_error "random inputs without a range" "give real inputs with --input-dir, or sizes with --shape" -- \
  "$tessera" run "$work/line.onnx"

# bench --shapes-from: a stream of three widths, each new one run at once on the generic plan and planned once in the
# background.
printf '# widths\nx=1,3,48,64\nx=1,3,48,1000\n\nx=1,3,48,64\nx=1,3,48,320\nx=1,3,48,1000\n' >"$work/stream.txt"
"$tessera" bench "$work/line.tsr" --shapes-from "$work/stream.txt" --json >"$work/out.txt" 2>&1
check $? "bench --shapes-from: $(tail -1 "$work/out.txt")"
"$PYTHON" -c "import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if j['requests'] == 5 and \
j['distinct_shapes'] == 3 and j['waited_for_a_plan'] == 0 and j['ran_generic'] >= 3 and j['plans_built'] <= 3 \
and j['p99_ms'] >= j['p50_ms'] > 0 else 1)" "$work/out.txt"
check $? "bench --shapes-from counts the requests, shapes and plans: $(cat "$work/out.txt")"
printf 'x=1,3,48,64\nx=1,3,48,9000\n' >"$work/far.txt"
expect_error "a streamed request outside the range" "request 'x=1,3,48,9000': input 'x': dim 3 is 9000" -- \
  "$tessera" bench "$work/line.tsr" --shapes-from "$work/far.txt"
printf 'y=1,2\n' >"$work/bad.txt"
expect_error "a stream naming no input" "bad.txt:1: expected NAME=D0,D1,.. naming a model input" -- \
  "$tessera" bench "$work/line.tsr" --shapes-from "$work/bad.txt"

# Buckets: the exact width named beside the range gets engines of its own (dnnl, first by priority); inspect and the
# partition report say which; a request at that width runs on them, and matches the exact compile.
bucket_args=(--backends dnnl,native --placement priority --shape x=1,3,48,32..2048 --shape x=1,3,48,320
  --bucket-step 0)
"$tessera" compile "$work/line.onnx" -o "$work/bucket.tsr" "${bucket_args[@]}" >"$work/out.txt" 2>&1
check $? "compile with a bucket: $(tail -1 "$work/out.txt")"
"$tessera" inspect "$work/bucket.tsr" >"$work/inspect.txt" 2>&1
grep -q "^buckets: 1" "$work/inspect.txt" && grep -q "^  \[1,3,48,320\]: .*(dnnl)" "$work/inspect.txt" &&
  grep -q "^glue graph: .* engines none" "$work/inspect.txt"
check $? "inspect says which bucket holds which engines: $(cat "$work/inspect.txt")"
"$tessera" partition "$work/line.onnx" "${bucket_args[@]}" >"$work/out.txt" 2>&1 &&
  grep -q "^bucket x=1,3,48,320  regions 1 (1 with engines)" "$work/out.txt"
check $? "the partition report lists the bucket's regions: $(grep bucket "$work/out.txt")"
mkdir -p "$work/in_320"
"$PYTHON" -c "import sys, numpy as np, onnx; from onnx import numpy_helper as nh
v = (np.random.default_rng(9).random((1, 3, 48, 320)) - 0.5).astype(np.float32)
open(sys.argv[1], 'wb').write(nh.from_array(v, 'x').SerializeToString())" "$work/in_320/input_0.pb"
"$tessera" run "$work/bucket.tsr" --input-dir "$work/in_320" --output-dir "$work/out_bucket_320" >"$work/out.txt" 2>&1
check $? "run the bucket's width: $(tail -1 "$work/out.txt")"
"$tessera" run "$work/line.onnx" --shape x=1,3,48,320 --input-dir "$work/in_320" --output-dir "$work/out_exact_320" \
  >"$work/out.txt" 2>&1
"$PYTHON" -c "import sys, numpy as np, onnx; from onnx import numpy_helper as nh
a, b = (nh.to_array(onnx.load_tensor(p)) for p in sys.argv[1:3])
sys.exit(0 if a.shape == b.shape == (1, 8, 23, 159) and np.allclose(a, b, rtol=1e-4, atol=1e-5) else 1)" \
  "$work/out_bucket_320/output_0.pb" "$work/out_exact_320/output_0.pb"
check $? "the bucket's answer matches the exact compile"
"$tessera" bench "$work/bucket.tsr" --shapes-from "$work/stream.txt" --json >"$work/out.txt" 2>&1
"$PYTHON" -c "import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if j['ran_on_a_bucket'] == 1 and \
j['waited_for_a_plan'] == 0 else 1)" "$work/out.txt"
check $? "bench --shapes-from counts the request on the bucket: $(cat "$work/out.txt")"
# bench at a width with no bucket of its own: the warm-up compiles one for it (the convolution on dnnl) and waits for
# it, so the timed runs are on its engines; the next bench reads it from the engine cache; without background buckets
# the width runs natively.
timed_bucket() {
  "$tessera" bench "$work/bucket.tsr" --shape x=1,3,48,500 --runs 2 --profile --json --tune-cache "$work/tune.json" \
    --placement priority \
    "$@" 2>/dev/null | "$PYTHON" -c "import json,sys; j=json.load(sys.stdin)
print(j['bucket_in_warmup'], j['bucket_from_cache'], any(i['backend'] == 'dnnl' for i in j['profile']['items']))"
}
first=$(timed_bucket) again=$(timed_bucket) off=$(timed_bucket --no-background-buckets)
[ "$first" = "True False True" ] && [ "$again" = "True True True" ] && [ "$off" = "False False False" ]
check $? "bench's warm-up compiles the timed width's bucket, then reads it from the cache ('$first', '$again', '$off')"

# Real inputs size an ONNX model's symbolic dims: run and bench with --input-dir compile engines for them (the
# convolution goes to dnnl, first by priority; left symbolic, it would stay native).
"$tessera" bench "$work/line.onnx" --input-dir "$work/in_77" --backends dnnl,native --placement priority --runs 1 \
  --json >"$work/out.txt" 2>&1
"$PYTHON" -c "import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if j['engines'] == 1 else 1)" "$work/out.txt"
check $? "bench --input-dir compiles engines for the inputs' shapes: $(tail -1 "$work/out.txt")"
"$tessera" run "$work/line.onnx" --input-dir "$work/in_77" --backends dnnl,native --placement priority \
  --output-dir "$work/out_pinned_77" >"$work/out.txt" 2>&1
"$PYTHON" -c "import sys, numpy as np, onnx; from onnx import numpy_helper as nh
a, b = (nh.to_array(onnx.load_tensor(p)) for p in sys.argv[1:3])
sys.exit(0 if a.shape == b.shape == (1, 8, 23, 38) and np.allclose(a, b, rtol=1e-4, atol=1e-5) else 1)" \
  "$work/out_pinned_77/output_0.pb" "$work/out_exact_77/output_0.pb"
check $? "run --input-dir on the ONNX model matches the exact compile"

# bench times the inputs given: on the ranged artifact, --input-dir at width 500, and --shape x=1,3,48,500 (exact dims
# for an artifact's random inputs); without either, the range's low end, with a warning.
timed() { "$tessera" bench "$work/line.tsr" --runs 1 --json "$@" 2>/dev/null |
  "$PYTHON" -c "import json,sys; print(json.load(sys.stdin)['input_shapes'])"; }
t_dir=$(timed --input-dir "$work/in_500") t_shape=$(timed --shape x=1,3,48,500) t_low=$(timed)
[ "$t_dir" = "x=1,3,48,500" ] && [ "$t_shape" = "x=1,3,48,500" ] && [ "$t_low" = "x=1,3,48,32" ]
check $? "bench times --input-dir's and an artifact's --shape dims (timed: '$t_dir', '$t_shape', '$t_low')"
"$tessera" bench "$work/line.tsr" --runs 1 >"$work/out.txt" 2>&1 &&
  grep -qF "warning: random inputs size the symbolic dims (x dim 3)" "$work/out.txt" &&
  grep -qF "over 1 runs at x=1,3,48,32 (" "$work/out.txt"
check $? "bench on random inputs says which dims it sized: $(cat "$work/out.txt")"
"$tessera" run "$work/line.tsr" --shape x=1,3,48,500 >"$work/out.txt" 2>&1 && grep -qF "y: float32[1,8,23,249]" "$work/out.txt"
check $? "run on an artifact: random inputs take the dims --shape gives: $(tail -1 "$work/out.txt")"
expect_error "an artifact's --shape outside its range" "input 'x': dim 3 is 4096, outside the compiled range 32..2048" -- \
  "$tessera" bench "$work/line.tsr" --shape x=1,3,48,4096
expect_error "a range given to an artifact" "an artifact's ranges are compiled in" -- \
  "$tessera" bench "$work/line.tsr" --shape x=1,3,48,64..128
expect_error "an artifact's --shape naming no input" "--shape names 'z', which is not a model input" -- \
  "$tessera" run "$work/line.tsr" --shape z=1,2

# Masked buckets: the range alone, one bucket every 256 columns (8), each with dnnl engines compiled at its largest
# width; every width in the range runs on one of them (padded, sliced back) and matches the exact compile.
masked_args=(--backends dnnl,native --placement priority --shape x=1,3,48,32..2048 --bucket-step 256)
"$tessera" compile "$work/line.onnx" -o "$work/masked.tsr" "${masked_args[@]}" >"$work/out.txt" 2>&1
check $? "compile with masked buckets: $(tail -1 "$work/out.txt")"
"$tessera" inspect "$work/masked.tsr" >"$work/inspect.txt" 2>&1
grep -q "^buckets: 8 .*; 8 masked" "$work/inspect.txt" && grep -q "^  \[1,3,48,32..256\]: .*(dnnl)" "$work/inspect.txt" &&
  grep -q "^  \[1,3,48,1793..2048\]: .*(dnnl)" "$work/inspect.txt"
check $? "inspect lists the masked buckets with their ranges: $(grep -A3 '^buckets' "$work/inspect.txt")"
for width in 32 77 500 2048; do
  "$tessera" run "$work/masked.tsr" --input-dir "$work/in_$width" --output-dir "$work/out_masked_$width" \
    >"$work/out.txt" 2>&1
  check $? "run width $width on the masked buckets: $(tail -1 "$work/out.txt")"
  "$PYTHON" -c "import sys, numpy as np, onnx; from onnx import numpy_helper as nh
a, b = (nh.to_array(onnx.load_tensor(p)) for p in sys.argv[1:3])
sys.exit(0 if a.shape == b.shape and np.allclose(a, b, rtol=1e-4, atol=1e-5) else 1)" \
    "$work/out_masked_$width/output_0.pb" "$work/out_exact_$width/output_0.pb"
  check $? "width $width on a masked bucket matches the exact compile"
done
"$tessera" bench "$work/masked.tsr" --shapes-from "$work/stream.txt" --json >"$work/out.txt" 2>&1
"$PYTHON" -c "import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if j['ran_on_a_bucket'] == 5 and \
j['ran_generic'] == 0 and j['waited_for_a_plan'] == 0 else 1)" "$work/out.txt"
check $? "bench --shapes-from runs every request on a masked bucket: $(cat "$work/out.txt")"
"$tessera" compile "$work/line.onnx" -o "$work/none.tsr" --backends dnnl,native --placement priority \
  --shape x=1,3,48,32..2048 --bucket-step 16 >"$work/out.txt" 2>&1 &&
  grep -qF "no masked buckets: more than 64 buckets of 16 would be needed" "$work/out.txt" &&
  ! "$tessera" inspect "$work/none.tsr" | grep -q "^buckets"
check $? "too many masked buckets: none, and the compile says why: $(grep -i bucket "$work/out.txt")"
expect_error "a negative --bucket-step" "option --bucket-step expects an integer >= 0" -- \
  "$tessera" compile "$work/line.onnx" -o "$work/none.tsr" --shape x=1,3,48,32..2048 --bucket-step -1

echo "shape_range_test: $passes passed, $failures failed"
[ "$failures" -eq 0 ]
