#!/usr/bin/env bash
# Installs what Tessera needs, builds it (Release) and runs a model:
#   ./run.sh              a bundled CNN (SqueezeNet 1.1 topology, generated
#                         deterministically with fixed seeds)
#   ./run.sh MODEL.onnx   your model, on random inputs
# It prints the outputs, then the timing of `tessera bench`.
set -euo pipefail
cd "$(dirname "$0")"
./scripts/install_deps.sh
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_TESTS=OFF > /dev/null
cmake --build "$BUILD_DIR" --target tessera -j "$(nproc)"
if [ $# -ge 1 ]; then
  MODEL=$1
  shift
else
  mkdir -p "$BUILD_DIR/models"
  MODEL="$BUILD_DIR/models/squeezenet.onnx"
  if [ ! -f "$MODEL" ]; then
    /usr/bin/python3 tests/e2e/gen_models.py "$BUILD_DIR/models" --models squeezenet
  fi
fi
echo "== tessera run $MODEL"
"$BUILD_DIR/bin/tessera" run "$MODEL" "$@"
echo "== tessera bench $MODEL"
"$BUILD_DIR/bin/tessera" bench "$MODEL" --runs 20 --warmup 3 "$@"
