#!/usr/bin/env bash
# Prints the paths of the models the soak, ThreadSanitizer and leak checks run (generated into DIR when missing, with
# tests/e2e/gen_models.py and Debian's /usr/bin/python3): an MLP, a BERT encoder and SqueezeNet, which between them
# give every backend work (dense layers, attention, convolutions and pools).
#   scripts/stress_models.sh DIR [MODELS]     MODELS: comma-separated, default mlp,bert_tiny,squeezenet
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dir=$1
models=${2:-mlp,bert_tiny,squeezenet}
mkdir -p "$dir"
missing=
for m in ${models//,/ }; do
  [ -f "$dir/$m.onnx" ] || missing="$missing,$m"
done
if [ -n "$missing" ]; then
  /usr/bin/python3 "$here/tests/e2e/gen_models.py" "$dir" --models "${missing#,}" > /dev/null
fi
for m in ${models//,/ }; do echo "$dir/$m.onnx"; done
