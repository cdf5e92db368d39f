#!/usr/bin/env bash
# QDQ (statically quantized) models on the engines: a QDQ twin of squeezenet (bench/precision/make_qdq.sh: per-channel
# int8 weights, uint8 activations calibrated with Tessera itself) and of mlp, run on native alone and with every node
# oneDNN claims on oneDNN (--backends dnnl,native --placement priority: its int8 convolutions, table lookups,
# quantize/dequantize loops): the outputs agree (integer outputs exactly; float outputs, which float ops after the last
# dequantization compute, such as oneDNN's average pooling, to 1e-5), the partition puts the QLinearConvs and the
# Quantize/DequantizeLinear nodes on dnnl, and the artifact of that placement gives the same again. Native's
# QDQ path is ONNX Runtime's to the bit on resnet50/mobilenet_v2 twins (bench/precision/qdq_check.py); this holds the
# engines to it where CI has no ONNX Runtime.
#
#     tests/e2e/qdq_engines_test.sh BUILD_DIR
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
build="$(cd "$1" && pwd)"
PYTHON="${PYTHON:-/usr/bin/python3}"
tessera="${TESSERA_BIN:-$build/bin/tessera}"
if ! "$PYTHON" -c "import onnx, numpy" 2>/dev/null; then
  echo "qdq_engines_test: $PYTHON cannot import onnx and numpy; skipping" >&2
  exit 77
fi
work="$build/e2e/qdq_engines"
rm -rf "$work"
mkdir -p "$work"
export TESSERA_TUNE=0
"$PYTHON" "$here/gen_models.py" "$work" --models squeezenet,mlp >/dev/null || exit 1
"$PYTHON" "$here/gen_models.py" "$work/inputs" --inputs --models squeezenet,mlp >/dev/null || exit 1

failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

for m in squeezenet mlp; do
  q="$work/${m}_qdq.onnx"
  if ! TESSERA="$tessera" PYTHON="$PYTHON" "$repo/bench/precision/make_qdq.sh" "$work/$m.onnx" "$q" 2 >"$work/$m.make.log" 2>&1; then
    cat "$work/$m.make.log" >&2
    fail "$m: make_qdq.sh"
    continue
  fi
  in="$work/inputs/$m/test_data_set_0"
  if ! "$tessera" partition "$q" --backends dnnl,native --placement priority --no-tune >"$work/$m.part.txt" 2>&1; then
    if grep -q "unknown backend\|not found\|no backend" "$work/$m.part.txt"; then
      echo "qdq_engines_test: the dnnl plugin is not built; skipping" >&2
      exit 77
    fi
    cat "$work/$m.part.txt" >&2
    fail "$m: partition"
    continue
  fi
  # Every quantized op of the twin lands on dnnl (the float tail of the model may go anywhere).
  for op in QuantizeLinear DequantizeLinear; do
    grep -E "^region .* dnnl .*${op}x" "$work/$m.part.txt" >/dev/null || fail "$m: no $op on dnnl"
  done
  if [ "$m" = squeezenet ]; then
    grep -E "^region .* dnnl .*QLinearConvx" "$work/$m.part.txt" >/dev/null || fail "$m: no QLinearConv on dnnl"
    if grep -E "^region .* native .*QLinearConvx" "$work/$m.part.txt" >/dev/null; then fail "$m: a QLinearConv on native"; fi
  fi
  "$tessera" run "$q" --input-dir "$in" --output-dir "$work/$m.native" --backends native >/dev/null 2>&1 ||
    fail "$m: native run"
  "$tessera" run "$q" --input-dir "$in" --output-dir "$work/$m.dnnl" --backends dnnl,native --placement priority \
    >/dev/null 2>&1 || fail "$m: dnnl run"
  "$tessera" compile "$q" -o "$work/$m.tsr" --backends dnnl,native --placement priority >/dev/null 2>&1 ||
    fail "$m: compile"
  "$tessera" run "$work/$m.tsr" --input-dir "$in" --output-dir "$work/$m.tsr.out" >/dev/null 2>&1 || fail "$m: .tsr run"
  n=$("$PYTHON" - "$work/$m.native" "$work/$m.dnnl" "$work/$m.tsr.out" <<'PY'
import glob, os, sys
import numpy as np
from onnx import TensorProto, numpy_helper
ref_dir, *others = sys.argv[1:]
n = 0
for f in sorted(glob.glob(os.path.join(ref_dir, "output_*.pb"))):
    t = TensorProto()
    t.ParseFromString(open(f, "rb").read())
    want = numpy_helper.to_array(t)
    for d in others:
        u = TensorProto()
        u.ParseFromString(open(os.path.join(d, os.path.basename(f)), "rb").read())
        got = numpy_helper.to_array(u)
        ok = got.shape == want.shape and (np.array_equal(got, want) if want.dtype.kind in "iu" else
                                          np.allclose(got, want, rtol=1e-5, atol=1e-5))
        if not ok:
            sys.stderr.write("%s differs from native in %s\n" % (os.path.basename(f), d))
            sys.exit(1)
    n += 1
print(n)
PY
)  || { fail "$m: outputs differ"; continue; }
  [ "${n:-0}" -gt 0 ] || fail "$m: no outputs"
  echo "qdq_engines_test: $m: $n output(s) agree on native, dnnl and the artifact"
done
if [ "$failures" -gt 0 ]; then
  echo "qdq_engines_test: $failures failure(s)" >&2
  exit 1
fi
echo "qdq_engines_test: OK"
