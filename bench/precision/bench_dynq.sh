#!/usr/bin/env bash
# Dynamically quantized models (DynamicQuantizeLinear + ConvInteger, as ONNX Runtime's quantize_dynamic writes them)
# against ONNX Runtime on the same model, in the same run: latency, and each quantized tensor's distance from ONNX
# Runtime's in quantization steps.
#
# Usage: bench/precision/bench_dynq.sh [BUILD_DIR] [MODELS...]
#   BUILD_DIR  a Release build holding bin/tessera (default: build)
#   MODELS     zoo twins (bench/zoo/gen_zoo.py): dbnet_dynq (int8 weights), yolo_dynq (uint8 weights with zero
#              points), yolo_dynq_s8 (the same YOLO with int8 weights, written here by convert.py); default all three
# Environment: THREADS (default 2), REPEATS (default 3), RUNS (default 20), WARMUP (default 3),
#              PYTHON (a python with onnx + numpy; default /usr/bin/python3).
#
# Per model, at its bench pins (bench/zoo/pins.txt): `tessera compile` with the default placement from a fresh tune
# cache, then `tessera bench` and ONNX Runtime (bench/ort_bench.js, onnxruntime-node from bench/node_modules)
# alternately REPEATS times; the table gives the median of the per-process medians and the ratio against the goal of
# issue 15 (>= 1.5x ONNX Runtime), qdq_check.py's largest difference of a DynamicQuantizeLinear output from ONNX
# Runtime's (one random input at the pins; goal: one step), and the timed artifact's largest absolute output
# difference from ONNX Runtime's on that input.
# Writes the table to BUILD_DIR/bench-dynq.md too.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
default_models=(dbnet_dynq yolo_dynq yolo_dynq_s8)
# shellcheck source=bench_args.sh
source "$here/bench_args.sh"
runs=${RUNS:-20}
warmup=${WARMUP:-3}
work=$build/bench-dynq
mkdir -p "$work"
log() { echo "bench_dynq: $*" >&2; }
die() { log "$*"; exit 1; }
# shellcheck source=../ort_env.sh
source "$repo/bench/ort_env.sh"
ort_setup "$repo/bench"

rows=()
for m in "${models[@]}"; do
  onnx=$work/$m.onnx
  zoo=${m%_s8}
  if [[ ! -f $onnx ]]; then
    if [[ $m == *_s8 ]]; then  # the zoo model's float twin, quantized with int8 weights
      "$python" - "$repo" "$onnx" "${zoo%_dynq}" <<'EOF'
import sys
sys.path[:0] = [sys.argv[1] + "/bench/zoo", sys.argv[1] + "/bench/precision"]
import convert, gen_zoo, onnx
onnx.save(convert.dynamic(getattr(gen_zoo, "build_" + sys.argv[3])(), "int8", False), sys.argv[2])
EOF
    else
      "$python" "$repo/bench/zoo/gen_zoo.py" "$work" --models "$m" >/dev/null
    fi
  fi
  read -r -a pins <<<"$("$python" "$repo/bench/zoo/gen_zoo.py" --pins "$zoo" --bench)"
  # One random input at the pins (uniform in [0, 1), as an image), for the steps check.
  "$python" - "$onnx" "$work/$m.inputs" "${pins[@]}" <<'EOF'
import os, sys
import numpy as np, onnx
from onnx import numpy_helper
m = onnx.load(sys.argv[1])
shapes = dict(a.split("=") for a in sys.argv[3:] if a != "--shape")
os.makedirs(sys.argv[2], exist_ok=True)
rng = np.random.RandomState(0)
for k, i in enumerate(m.graph.input):
    dims = [int(d) for d in shapes[i.name].split(",")]
    t = numpy_helper.from_array(rng.rand(*dims).astype(np.float32), i.name)
    open(os.path.join(sys.argv[2], "input_%d.pb" % k), "wb").write(t.SerializeToString())
EOF
  rm -f "$work/$m.tune.json"
  TESSERA_TUNE_CACHE=$work/$m.tune.json "$tessera" compile "$onnx" "${pins[@]}" -o "$work/$m.tsr" \
    --threads "$threads" >"$work/$m.compile.txt" 2>&1 || die "$m: $(tail -1 "$work/$m.compile.txt")"
  placement=$(sed -n 's/.*\.tsr: \([0-9]* regions ([^)]*)\).*/\1/p' "$work/$m.compile.txt")
  : >"$work/$m.ts.ms"; : >"$work/$m.ort.ms"
  for ((r = 0; r < repeats; r++)); do
    "$tessera" bench "$work/$m.tsr" --threads "$threads" --runs "$runs" --warmup "$warmup" --json |
      "$python" -c "import json,sys; print(json.load(sys.stdin)['median_ms'])" >>"$work/$m.ts.ms"
    node "$repo/bench/ort_bench.js" "$onnx" --threads "$threads" --runs "$runs" --warmup "$warmup" "${pins[@]}" |
      "$python" -c "import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])['median_ms'])" \
        >>"$work/$m.ort.ms"
  done
  t=$(median <"$work/$m.ts.ms"); o=$(median <"$work/$m.ort.ms")
  ratio=$(awk -v o="$o" -v t="$t" 'BEGIN {printf "%.2f", o / t}')
  ok=$(awk -v r="$ratio" 'BEGIN {print (r >= 1.5) ? "met" : "MISS"}')
  # Steps: with every DynamicQuantizeLinear output exposed (a model of its own, placed by estimates) and with every
  # node oneDNN takes on oneDNN; output: the timed artifact itself against ONNX Runtime.
  steps=""
  for how in "" "--backends dnnl,native --placement priority"; do
    # shellcheck disable=SC2086
    s=$("$python" "$here/qdq_check.py" "$onnx" "$work/$m.inputs" --tessera "$tessera" "${pins[@]}" $how |
      sed -n 's/^quantized tensors: \([0-9]*\), largest difference \([0-9]*\).*/\2/p')
    steps+="${steps:+ / }$s"
  done
  rm -rf "$work/$m.ts.out" "$work/$m.ort.out"
  "$tessera" run "$work/$m.tsr" --input-dir "$work/$m.inputs" --output-dir "$work/$m.ts.out" >/dev/null
  node "$repo/tests/e2e/ort_reference.js" "$onnx" "$work/$m.inputs" --out "$work/$m.ort.out" >/dev/null
  out=$("$python" - "$work/$m.ts.out" "$work/$m.ort.out" <<'EOF'
import glob, os, sys
import numpy as np, onnx
from onnx import numpy_helper
def load(p):
    t = onnx.TensorProto()
    t.ParseFromString(open(p, "rb").read())
    return numpy_helper.to_array(t).astype(np.float64)
print("%.3g" % max(float(np.max(np.abs(load(f) - load(os.path.join(sys.argv[2], os.path.basename(f))))))
                   for f in glob.glob(os.path.join(sys.argv[1], "output_*.pb"))))
EOF
)
  rows+=("| $m | ${pins[*]:1} | $placement | $(printf %.3f "$t") | $(printf %.3f "$o") | ${ratio}x ($ok) | $steps | $out |")
done
{
  echo "| model | pins | default placement | Tessera ms | ONNX Runtime ms | vs ONNX Runtime (goal 1.5x) | largest step from ONNX Runtime (estimated placement / all on oneDNN) | output max abs diff (timed artifact) |"
  echo "|---|---|---|---:|---:|---|---|---:|"
  printf '%s\n' "${rows[@]}"
} | tee "$build/bench-dynq.md"
