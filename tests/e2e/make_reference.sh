#!/usr/bin/env bash
# Regenerates the checked-in end-to-end reference data:
#     tests/e2e/reference/<model>/test_data_set_<k>/{input,output}_*.pb
#
# Run by hand after changing gen_models.py or bench/zoo/gen_zoo.py (the test suite never runs it):
#     tests/e2e/make_reference.sh [MODEL ...]          default: every test model (gen_models.py TEST_MODELS)
#     tests/e2e/make_reference.sh --zoo [MODEL ...]    the zoo (bench/zoo/gen_zoo.py; default: its TEST_MODELS),
#                                                      inputs at the test pins of bench/zoo/pins.txt
# Needs Debian's /usr/bin/python3 (onnx + numpy; override with PYTHON=...) and node with onnxruntime-node reachable
# from tests/e2e/ (a node_modules above it) or through NODE_PATH, e.g.
#     mkdir -p /tmp/ort && (cd /tmp/ort && npm install --ignore-scripts onnxruntime-node)
#     NODE_PATH=/tmp/ort/node_modules tests/e2e/make_reference.sh
#
# Steps, per model: generate the model into a temporary directory (with the ONNX checker on), write its deterministic
# inputs (one or more data sets), run ONNX Runtime with graph optimizations disabled (the plain node-by-node
# computation) to produce the expected outputs, check that the output files load with onnx and match the graph
# outputs, and run ONNX Runtime a second time with every optimization and two threads: a reference whose two runs
# differ by more than the e2e tolerance (rtol 1e-4, atol 1e-5) is too fragile to test against, and the script fails.
# reference/<model>/model.sha256 records the model the outputs came from; run_e2e.sh warns when a regenerated model
# differs from it.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${PYTHON:-/usr/bin/python3}"
NODE="${NODE:-node}"

gen="$here/gen_models.py"
if [ "${1:-}" = "--zoo" ]; then
  gen="$(cd "$here/../../bench/zoo" && pwd)/gen_zoo.py"
  shift
fi
if [ "$#" -gt 0 ]; then
  models=("$@")
else
  read -r -a models <<<"$("$PYTHON" -c "import sys; sys.path.insert(0, '$(dirname "$gen")')
import $(basename "$gen" .py) as g; print(' '.join(g.TEST_MODELS))")"
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

list="$(IFS=,; echo "${models[*]}")"
start=$(date +%s.%N)
"$PYTHON" "$gen" "$tmp/models" --models "$list" --check
"$PYTHON" "$gen" --inputs "$tmp/data" --models "$list"
echo "generated ${#models[@]} models and inputs in $(echo "$(date +%s.%N) - $start" | bc) s"

for m in "${models[@]}"; do
  rm -rf "$here/reference/$m"
  mkdir -p "$here/reference/$m"
  sha256sum "$tmp/models/$m.onnx" | cut -d' ' -f1 >"$here/reference/$m/model.sha256"
  for set_dir in "$tmp/data/$m"/test_data_set_*; do
    set_name="$(basename "$set_dir")"
    ref="$here/reference/$m/$set_name"
    mkdir -p "$ref"
    cp "$set_dir"/input_*.pb "$ref/"
    "$NODE" "$here/ort_reference.js" "$tmp/models/$m.onnx" "$ref"
    "$NODE" "$here/ort_reference.js" "$tmp/models/$m.onnx" "$ref" --opt all --threads 2 --out "$tmp/check/$m/$set_name"
    "$PYTHON" - "$tmp/models/$m.onnx" "$ref" "$tmp/check/$m/$set_name" <<'EOF'
import os, sys
import numpy as np
import onnx
from onnx import numpy_helper

model_path, ref, other = sys.argv[1:]
graph = onnx.load(model_path, load_external_data=False).graph
for i, out in enumerate(graph.output):
    t = onnx.load_tensor(os.path.join(ref, "output_%d.pb" % i))
    a = numpy_helper.to_array(t)
    want = [d.dim_value if d.HasField("dim_value") else None for d in out.type.tensor_type.shape.dim]
    if t.name != out.name or t.data_type != out.type.tensor_type.elem_type or \
       any(w is not None and w != d for w, d in zip(want, a.shape)) or len(want) != a.ndim:
        sys.exit("%s output_%d: got %s %s %s, graph output is %s %s" % (ref, i, t.name, t.data_type, a.shape, out.name,
                                                                       want))
    b = numpy_helper.to_array(onnx.load_tensor(os.path.join(other, "output_%d.pb" % i)))
    err = np.abs(a.astype(np.float64) - b) / (1e-5 + 1e-4 * np.abs(a.astype(np.float64)))
    print("  output_%d %s: ORT optimized vs unoptimized uses %.3f of the e2e tolerance" % (i, out.name, err.max()))
    if not err.max() <= 1.0:
        sys.exit("%s output_%d: ORT's own runs differ beyond the e2e tolerance; rescale the model" % (ref, i))
EOF
  done
done
du -sh "$here/reference"
