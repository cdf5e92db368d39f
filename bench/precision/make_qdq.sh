#!/usr/bin/env bash
# A statically quantized (QDQ) twin of a float32 model, calibrated on this machine with Tessera itself:
#   bench/precision/make_qdq.sh MODEL.onnx OUT.onnx [SAMPLES]
# Probes the model (convert.py probe), runs it natively on SAMPLES (default 8) calibration inputs (uniform in
# [-1, 1) for float inputs, from fixed seeds; image-like inputs are what these random-weight models see in every test),
# and writes the QDQ twin from the ranges seen (convert.py qdq: the op types ONNX Runtime's quantize_static quantizes
# by default). Environment: TESSERA (default build/bin/tessera), PYTHON (default /usr/bin/python3), QDQ_OP_TYPES
# (convert.py's --op-types, e.g. Conv,MatMul,Gemm for the products alone), QDQ_ARGS (more convert.py qdq options:
# --activation-type int8, --activation-symmetric). Needs static input shapes.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$1 dst=$2 samples=${3:-8}
python=${PYTHON:-/usr/bin/python3}
tessera=${TESSERA:-$here/../../build/bin/tessera}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ops=(${QDQ_OP_TYPES:+--op-types "$QDQ_OP_TYPES"})
"$python" "$here/convert.py" probe "$src" "$work/probe.onnx" "${ops[@]}"
"$python" - "$src" "$work" "$samples" <<'PY'
import os, sys
import numpy as np
import onnx
from onnx import numpy_helper
m = onnx.load(sys.argv[1], load_external_data=False)
inits = {i.name for i in m.graph.initializer}
for s in range(int(sys.argv[3])):
    d = os.path.join(sys.argv[2], "in%d" % s)
    os.makedirs(d)
    rng = np.random.default_rng(1000 + s)
    for k, vi in enumerate(v for v in m.graph.input if v.name not in inits):
        dims = [x.dim_value for x in vi.type.tensor_type.shape.dim]
        if any(x <= 0 for x in dims):
            sys.exit("make_qdq: input '%s' has a symbolic dim; pin it first" % vi.name)
        dt = onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[vi.type.tensor_type.elem_type]
        a = rng.uniform(-1, 1, dims).astype(dt) if np.issubdtype(dt, np.floating) else rng.integers(0, 2, dims).astype(dt)
        with open(os.path.join(d, "input_%d.pb" % k), "wb") as f:
            f.write(numpy_helper.from_array(a, vi.name).SerializeToString())
PY
dirs=()
for ((s = 0; s < samples; s++)); do
  "$tessera" run "$work/probe.onnx" --backends native --input-dir "$work/in$s" --output-dir "$work/out$s" >/dev/null
  dirs+=("$work/out$s")
done
read -r -a extra <<<"${QDQ_ARGS:-}"
"$python" "$here/convert.py" qdq "$src" "$dst" --calibration "${dirs[@]}" "${ops[@]}" "${extra[@]}"
