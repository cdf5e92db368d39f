#!/usr/bin/env bash
# QDQ (statically quantized) models on the engines: a QDQ twin of squeezenet (bench/precision/make_qdq.sh: per-channel
# int8 weights, uint8 activations calibrated with Tessera itself; once more with int8 activations) and of mlp, run
# on native alone and, for each of oneDNN and XNNPACK, with every node that engine claims on it (--backends
# ENGINE,native --placement priority: its int8 convolutions and fully connected layers, table lookups,
# quantize/dequantize loops): the outputs agree (integer outputs exactly; float outputs, which float ops after the
# last dequantization compute, such as oneDNN's average pooling, to 1e-5), the partition puts the QLinearConvs and
# the Quantize/DequantizeLinear nodes on the engine, and the artifact of that placement gives the same again. An
# engine whose plugin is not built is skipped. Native's QDQ path is ONNX Runtime's to the bit on resnet50/mobilenet_v2
# twins (bench/precision/qdq_check.py); this holds the engines to it where CI has no ONNX Runtime.
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

failures=0 ran=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# squeezenet_s8: the same twin with int8 activations (quantize_static's QInt8).
for m in squeezenet mlp squeezenet_s8; do
  src=${m%_s8} args=
  [ "$m" = "$src" ] || args="--activation-type int8"
  q="$work/${m}_qdq.onnx"
  if ! QDQ_ARGS="$args" TESSERA="$tessera" PYTHON="$PYTHON" "$repo/bench/precision/make_qdq.sh" "$work/$src.onnx" "$q" 2 \
    >"$work/$m.make.log" 2>&1; then
    cat "$work/$m.make.log" >&2
    fail "$m: make_qdq.sh"
    continue
  fi
  in="$work/inputs/$src/test_data_set_0"
  "$tessera" run "$q" --input-dir "$in" --output-dir "$work/$m.native" --backends native >/dev/null 2>&1 ||
    fail "$m: native run"
  for engine in dnnl xnnpack; do
    if ! "$tessera" partition "$q" --backends $engine,native --placement priority --no-tune >"$work/$m.$engine.part.txt" 2>&1; then
      if grep -q "unknown backend\|not found\|no backend" "$work/$m.$engine.part.txt"; then
        echo "qdq_engines_test: the $engine plugin is not built; skipping it" >&2
        continue
      fi
      cat "$work/$m.$engine.part.txt" >&2
      fail "$m: partition on $engine"
      continue
    fi
    ran=$((ran + 1))
    # Every quantized op of the twin lands on the engine (the float tail of the model may go anywhere).
    for op in QuantizeLinear DequantizeLinear; do
      grep -E "^region .* $engine .*${op}x" "$work/$m.$engine.part.txt" >/dev/null || fail "$m: no $op on $engine"
    done
    if [ "$src" = squeezenet ]; then
      grep -E "^region .* $engine .*QLinearConvx" "$work/$m.$engine.part.txt" >/dev/null || fail "$m: no QLinearConv on $engine"
      if grep -E "^region .* native .*QLinearConvx" "$work/$m.$engine.part.txt" >/dev/null; then
        fail "$m: a QLinearConv on native beside $engine"
      fi
    fi
    "$tessera" run "$q" --input-dir "$in" --output-dir "$work/$m.$engine" --backends $engine,native --placement priority \
      >/dev/null 2>&1 || fail "$m: $engine run"
    "$tessera" compile "$q" -o "$work/$m.$engine.tsr" --backends $engine,native --placement priority >/dev/null 2>&1 ||
      fail "$m: compile for $engine"
    "$tessera" run "$work/$m.$engine.tsr" --input-dir "$in" --output-dir "$work/$m.$engine.tsr.out" >/dev/null 2>&1 ||
      fail "$m: $engine .tsr run"
    n=$("$PYTHON" - "$work/$m.native" "$work/$m.$engine" "$work/$m.$engine.tsr.out" <<'PY'
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
)   || { fail "$m: outputs differ on $engine"; continue; }
    [ "${n:-0}" -gt 0 ] || fail "$m: no outputs"
    echo "qdq_engines_test: $m: $n output(s) agree on native, $engine and the artifact"
  done
done
if [ "$ran" -eq 0 ]; then
  echo "qdq_engines_test: neither engine plugin is built; skipping" >&2
  exit 77
fi
if [ "$failures" -gt 0 ]; then
  echo "qdq_engines_test: $failures failure(s)" >&2
  exit 1
fi
echo "qdq_engines_test: OK"
