#!/usr/bin/env bash
# --precision and --accuracy-budget through the command line.
#  - Where the CPU has the BF16 dot products: a bf16 compile of the e2e models (convolutions: squeezenet; matmuls:
#    bert_tiny, mlp), on oneDNN and on native alone, reports every output's error against fp32, and that report is what an independent comparison of
#    the bf16 artifact's outputs with native fp32 outputs on the same inputs (--input-dir) finds; cosine >= 0.999;
#    partition --json carries the figures; bench of the ONNX model prints them; a budget the error exceeds fails the
#    compile with exit 2 naming the output; an fp32 artifact run with --precision bf16 is refused.
#  - Where the CPU has AVX512-FP16: the same for fp16 on native alone (its fp16 GEMM; oneDNN 2.6 has no fp16 products).
#  - Everywhere: TESSERA_ISA=avx2 (the dispatch switch) refuses bf16 and fp16 with the reason, a CPU without the
#    instructions refuses them too, and malformed values exit 2 with one line; float16-stored twins of squeezenet and
#    mlp give the float32 model's outputs within the float16 rounding of their weights.
#
#     tests/e2e/precision_cli_test.sh BUILD_DIR
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="$(cd "$1" && pwd)"
PYTHON="${PYTHON:-/usr/bin/python3}"
tessera="${TESSERA_BIN:-$build/bin/tessera}"
export TESSERA_TUNE_CACHE_BUSY=1
if ! "$PYTHON" -c "import onnx, numpy" 2>/dev/null; then
  echo "precision_cli_test: $PYTHON cannot import onnx and numpy; skipping" >&2
  exit 77
fi
work="$build/e2e/precision_cli"
rm -rf "$work"
mkdir -p "$work"
export TESSERA_TUNE_CACHE="$work/tune.json"
"$PYTHON" "$here/gen_models.py" "$work" --models squeezenet,bert_tiny,mlp >/dev/null || exit 1
"$PYTHON" "$here/gen_models.py" "$work/inputs" --inputs --models squeezenet,bert_tiny,mlp >/dev/null || exit 1

failures=0
passes=0
pass() { passes=$((passes + 1)); }
fail() { echo "FAIL $*"; failures=$((failures + 1)); }
# CMD... expecting exit 2 and one line on stderr containing $want
expect_refusal() {
  local want="$1"; shift
  "$@" >"$work/out.txt" 2>"$work/err.txt"
  local rc=$?
  if [[ $rc -eq 2 && $(wc -l <"$work/err.txt") -eq 1 ]] && grep -q -- "$want" "$work/err.txt"; then
    pass
  else
    fail "$* -> rc $rc, wanted 2 and '$want': $(cat "$work/err.txt")"
  fi
}

have() { grep -qw "$1" /proc/cpuinfo; }
m=squeezenet
have avx512_fp16 || expect_refusal "FP16" "$tessera" compile "$work/$m.onnx" -o "$work/x.tsr" --precision fp16 --no-tune
expect_refusal "FP16" env TESSERA_ISA=avx2 "$tessera" compile "$work/$m.onnx" -o "$work/x.tsr" --precision fp16 --no-tune
expect_refusal "expects fp32, bf16 or fp16" "$tessera" compile "$work/$m.onnx" -o "$work/x.tsr" --precision int4
expect_refusal "accuracy-budget" "$tessera" compile "$work/$m.onnx" -o "$work/x.tsr" --accuracy-budget cos=7
expect_refusal "BF16" env TESSERA_ISA=avx2 "$tessera" compile "$work/$m.onnx" -o "$work/x.tsr" --precision bf16 --no-tune

# A float16-stored twin (bench/precision/convert.py fp16, float32 I/O) computes in float32 (passes/widen_float16):
# its outputs are the float32 model's within the float16 rounding of its weights, on any CPU.
for m in squeezenet mlp; do
  in="$work/inputs/$m/test_data_set_0"
  "$PYTHON" "$here/../../bench/precision/convert.py" fp16 "$work/$m.onnx" "$work/$m.fp16.onnx" --keep-io-types \
    >/dev/null 2>"$work/err.txt" || { fail "$m: convert.py fp16: $(tail -1 "$work/err.txt")"; continue; }
  rm -rf "$work/o16" "$work/o32"
  "$tessera" run "$work/$m.fp16.onnx" --input-dir "$in" --output-dir "$work/o16" --no-tune >/dev/null 2>"$work/err.txt" ||
    { fail "$m: run of the float16 twin: $(cat "$work/err.txt")"; continue; }
  "$tessera" run "$work/$m.onnx" --backends native --input-dir "$in" --output-dir "$work/o32" >/dev/null 2>&1 ||
    { fail "$m: run fp32"; continue; }
  verdict=$("$PYTHON" - "$work/o16" "$work/o32" <<'PY'
import glob, os, sys
import numpy as np
from onnx import numpy_helper, TensorProto
def load(p):
    t = TensorProto(); t.ParseFromString(open(p, "rb").read()); return numpy_helper.to_array(t).astype(np.float64).ravel()
for p in sorted(glob.glob(os.path.join(sys.argv[2], "output_*.pb"))):
    want, got = load(p), load(os.path.join(sys.argv[1], os.path.basename(p)))
    cos = got @ want / np.sqrt((got @ got) * (want @ want))
    if not cos >= 0.9999 or np.abs(got - want).max() > 1e-2 * np.abs(want).max():
        print("%s: cosine %.7f, max abs %g" % (os.path.basename(p), cos, np.abs(got - want).max())); sys.exit()
print("ok")
PY
)
  [[ $verdict == ok ]] && pass || fail "$m float16 twin: $verdict"
done

have avx512_bf16 || expect_refusal "BF16" "$tessera" compile "$work/$m.onnx" -o "$work/x.tsr" --precision bf16 --no-tune
if ! have avx512_bf16 && ! have avx512_fp16; then
  echo "precision_cli_test: this CPU has neither AVX-512 BF16 nor FP16: checked the refusals only; $passes passed, $failures failed"
  [[ $failures -eq 0 ]] || exit 1
  exit 0
fi

# oneDNN takes every node it can (--placement priority): cost placement may rightly leave a model this small to native.
# The report against an independent comparison on the same inputs.
compare() {  # PRECISION EXACT_OK REPORT_JSON LOW_OUT_DIR FP32_OUT_DIR -> "ok" or why not
  "$PYTHON" - "$@" <<'PY'
import glob, json, os, sys
import numpy as np
from onnx import numpy_helper, TensorProto
precision = sys.argv.pop(1)
exact_ok = sys.argv.pop(1) == "1"  # the compile said native products stay float32 on this CPU
rep = json.load(open(sys.argv[1]))
acc = rep.get("accuracy", [])
outs = sorted(glob.glob(os.path.join(sys.argv[2], "output_*.pb")), key=lambda p: int(p.rsplit("_", 1)[1][:-3]))
if rep.get("precision") != precision or len(acc) != len(outs) or not outs:
    print("report: precision %s, %d outputs reported, %d written" % (rep.get("precision"), len(acc), len(outs))); sys.exit()
for i, a in enumerate(acc):
    def load(d):
        t = TensorProto(); t.ParseFromString(open(os.path.join(d, "output_%d.pb" % i), "rb").read())
        return numpy_helper.to_array(t).astype(np.float64).ravel()
    got, want = load(sys.argv[2]), load(sys.argv[3])
    max_abs = float(np.max(np.abs(got - want)))
    cos = float(got @ want / np.sqrt((got @ got) * (want @ want)))
    if abs(max_abs - a["max_abs"]) > 1e-6 * max(1.0, max_abs) or abs(cos - a["cosine"]) > 1e-6:
        print("output %s: reported max abs %g cosine %.7f, found %g %.7f" % (a["output"], a["max_abs"], a["cosine"], max_abs, cos)); sys.exit()
    if not a["cosine"] >= 0.999 or (max_abs == 0) != exact_ok:
        print("output %s: cosine %.7f, max abs %g" % (a["output"], a["cosine"], max_abs)); sys.exit()
print("ok")
PY
}

# Each model at bf16 on oneDNN (every node it takes), then on native alone (its bf16 GEMM), and at fp16 on native
# alone (its fp16 GEMM): the report's error is not 0, unless the compile said native products stay float32 (a CPU
# whose bf16 dot products are slower than its fp32 FMAs), and then it is 0.
runs=()
have avx512_bf16 && runs+=("bf16 dnnl,native --placement priority" "bf16 native")
have avx512_fp16 && runs+=("fp16 native")
for run in "${runs[@]}"; do
  read -r p placement <<<"$run"
  read -r -a where <<<"--backends $placement"
  for m in squeezenet bert_tiny mlp; do
    in="$work/inputs/$m/test_data_set_0"
    if ! "$tessera" compile "$work/$m.onnx" -o "$work/$m.$p.tsr" --precision "$p" "${where[@]}" \
        --input-dir "$in" >"$work/compile.txt" 2>&1; then
      fail "$m ($p, $placement): compile --precision $p: $(tail -2 "$work/compile.txt")"
      continue
    fi
    grep -q "^accuracy: $p against fp32 ($in inputs): " "$work/compile.txt" && pass ||
      fail "$m ($p, $placement): compile printed no accuracy line: $(cat "$work/compile.txt")"
    "$tessera" partition "$work/$m.onnx" --precision "$p" "${where[@]}" --input-dir "$in" --json \
      >"$work/$m.report.json" 2>"$work/err.txt" || fail "$m ($p, $placement): partition --json: $(cat "$work/err.txt")"
    rm -rf "$work/out16" "$work/out32" "$work/out16_onnx"
    "$tessera" run "$work/$m.$p.tsr" --input-dir "$in" --output-dir "$work/out16" >/dev/null 2>"$work/err.txt" ||
      fail "$m ($p, $placement): run $p: $(cat "$work/err.txt")"
    "$tessera" run "$work/$m.onnx" --backends native --input-dir "$in" --output-dir "$work/out32" >/dev/null 2>"$work/err.txt" ||
      fail "$m ($p, $placement): run fp32: $(cat "$work/err.txt")"
    # Where this CPU's narrow products measure no faster than fp32 ones, native computes in fp32 and says so.
    exact=0
    [[ $placement == native ]] && grep -q "native products stay float32" "$work/compile.txt" && exact=1
    verdict=$(compare "$p" "$exact" "$work/$m.report.json" "$work/out16" "$work/out32")
    [[ $verdict == ok ]] && pass || fail "$m ($p, $placement): $verdict"
    if [[ $placement == native ]]; then  # the ONNX model run directly at the precision computes what its artifact does
      "$tessera" run "$work/$m.onnx" --precision "$p" "${where[@]}" --input-dir "$in" --output-dir "$work/out16_onnx" \
        >/dev/null 2>"$work/err.txt" || fail "$m: run of the ONNX model at $p: $(cat "$work/err.txt")"
      for f in "$work"/out16/output_*.pb; do
        cmp -s "$f" "$work/out16_onnx/$(basename "$f")" || fail "$m: $(basename "$f") of the ONNX model at $p differs"
      done
    fi
  done
done

if ! have avx512_bf16; then
  echo "precision_cli_test: $passes passed, $failures failed (no AVX-512 BF16: the bf16 bench and budget checks skipped)"
  [[ $failures -eq 0 ]]
  exit
fi
m=mlp
"$tessera" bench "$work/$m.onnx" --precision bf16 --backends dnnl,native --placement priority --runs 2 --warmup 0 >"$work/bench.txt" 2>&1 &&
  grep -q "^accuracy: bf16 against fp32 (random inputs): " "$work/bench.txt" && pass ||
  fail "bench --precision bf16: $(cat "$work/bench.txt")"
"$tessera" bench "$work/$m.onnx" --precision bf16 --backends dnnl,native --placement priority --runs 2 --warmup 0 --json >"$work/bench.json" 2>"$work/err.txt" &&
  "$PYTHON" -c "import json,sys; j=json.load(open(sys.argv[1])); assert j['accuracy'].startswith('bf16 against fp32')" \
    "$work/bench.json" && pass || fail "bench --json --precision bf16: $(cat "$work/bench.json" "$work/err.txt")"
expect_refusal "output '" "$tessera" compile "$work/$m.onnx" -o "$work/x.tsr" --precision bf16 --backends dnnl,native --placement priority \
  --accuracy-budget abs=0
"$tessera" compile "$work/$m.onnx" -o "$work/$m.fp32.tsr" --backends dnnl,native --placement priority --no-tune >/dev/null 2>&1 || fail "fp32 compile"
expect_refusal "compiled at fp32" "$tessera" run "$work/$m.fp32.tsr" --precision bf16
"$tessera" run "$work/$m.bf16.tsr" --precision bf16 >/dev/null 2>"$work/err.txt" && pass ||
  fail "a bf16 artifact run with --precision bf16: $(cat "$work/err.txt")"

echo "precision_cli_test: $passes passed, $failures failed"
[[ $failures -eq 0 ]]
