#!/usr/bin/env bash
# Writes the seed corpora of the fuzz harnesses into fuzz/corpus/<harness> (checked in; rerun when a format changes):
#   fuzz_onnx          every model of ONNX's node test suite (Debian libonnx-testdata) and of tests/quirks
#   fuzz_artifact      .tsr artifacts compiled from a dozen node-test models for each backend
#   fuzz_tensor        input and output TensorProto files of the node suite, one per dtype and rank
#   fuzz_tune_cache    a tune cache written by a real `tessera compile --tune`
#   fuzz_blob_<plugin> the plugin's own blobs for the harness's region models
#   fuzz/make_corpus.sh [FUZZ_BUILD_DIR] [BUILD_DIR]      defaults: build-fuzz, build
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZ_BUILD=${1:-build-fuzz}
BUILD=${2:-build}
NODE=/usr/share/libonnx-testdata/data/node
out=fuzz/corpus
rm -rf "$out"
mkdir -p "$out"/{fuzz_onnx,fuzz_artifact,fuzz_tensor,fuzz_tune_cache}

for d in "$NODE"/*/; do cp "$d/model.onnx" "$out/fuzz_onnx/$(basename "$d").onnx"; done
for f in tests/quirks/cases/*/model.onnx; do cp "$f" "$out/fuzz_onnx/quirk_$(basename "$(dirname "$f")").onnx"; done

declare -A seen
for d in "$NODE"/*/; do
  for f in "$d"test_data_set_0/*.pb; do
    [ -f "$f" ] || continue
    key=$(/usr/bin/python3 -c "import onnx,sys; t=onnx.TensorProto(); t.ParseFromString(open(sys.argv[1],'rb').read()); print(t.data_type, len(t.dims))" "$f")
    [ -n "${seen[$key]:-}" ] && continue
    seen[$key]=1
    cp "$f" "$out/fuzz_tensor/$(basename "$d")_$(basename "$f")"
  done
done

for m in test_conv_with_strides_padding test_matmul_2d test_gemm_default_single_elem_vector_bias test_maxpool_2d_pads \
         test_softmax_axis_0 test_layer_normalization_2d_axis0 test_add_bcast test_relu test_concat_2d_axis_0 \
         test_transpose_default test_resize_upsample_scales_linear test_if test_loop11; do
  for b in native dnnl,native xnnpack,native example,native; do
    TESSERA_BACKEND_PATH="$BUILD/lib/tessera:$BUILD/examples" "$BUILD/bin/tessera" compile "$NODE/$m/model.onnx" \
      --backends "$b" --placement priority --no-tune -o "$out/fuzz_artifact/${m}_${b%%,*}.tsr" > /dev/null 2>&1 || true
  done
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$BUILD/bin/tessera" compile "$NODE/test_conv_with_strides_padding/model.onnx" --tune --tune-budget 2 \
  --tune-cache "$work/tune.json" -o "$work/m.tsr" > /dev/null
cp "$work/tune.json" "$out/fuzz_tune_cache/tune.json"

for p in dnnl xnnpack example; do
  mkdir -p "$out/fuzz_blob_$p"
  TESSERA_BACKEND_PATH="$FUZZ_BUILD/lib/tessera:$FUZZ_BUILD/examples" TESSERA_FUZZ_WRITE_SEEDS="$out/fuzz_blob_$p" \
    ASAN_OPTIONS=detect_leaks=0 "$FUZZ_BUILD/bin/fuzz_blob_$p" > /dev/null 2>&1
done
for h in "$out"/*/; do echo "$(basename "$h"): $(ls "$h" | wc -l) files, $(du -sh "$h" | cut -f1)"; done
