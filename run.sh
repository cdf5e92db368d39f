#!/usr/bin/env bash
# Installs what Tessera needs, builds it (Release) and runs the main job on a model:
#   ./run.sh                      a bundled CNN (SqueezeNet 1.1 topology, generated deterministically with fixed seeds)
#   ./run.sh MODEL.onnx [FLAGS]   your model; FLAGS go to `tessera compile` (--shape NAME=D0,D1 for symbolic dims,
#                                 --backends LIST, --place OP=BACKEND, --placement priority)
# The main job: `tessera compile` places the model on the backends available with cost-based placement, measuring the
# nodes and regions that matter on this machine (kept in the tune cache, ~/.cache/tessera/tune.json, which every later
# compile on this machine shares; TESSERA_TUNE=0 skips measuring and uses the estimates and the cache; --tune measures
# every candidate), and writes one artifact, BUILD_DIR/models/NAME.tsr; then `tessera run` runs the artifact on random
# inputs and prints the outputs, and `tessera bench` times it.
set -euo pipefail
cd "$(dirname "$0")"
./scripts/install_deps.sh
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_TESTS=OFF > /dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)"
mkdir -p "$BUILD_DIR/models"
if [ $# -ge 1 ]; then
  MODEL=$1
  shift
else
  MODEL="$BUILD_DIR/models/squeezenet.onnx"
  if [ ! -f "$MODEL" ]; then
    /usr/bin/python3 tests/e2e/gen_models.py "$BUILD_DIR/models" --models squeezenet
  fi
fi
ARTIFACT="$BUILD_DIR/models/$(basename "${MODEL%.onnx}").tsr"
tessera="$BUILD_DIR/bin/tessera"
if [ -z "${TESSERA_TUNE_CACHE:-}${XDG_CACHE_HOME:-}${HOME:-}" ]; then export TESSERA_TUNE_CACHE="$BUILD_DIR/tune-cache.json"; fi
echo "== tessera compile $MODEL -o $ARTIFACT $*"
"$tessera" compile "$MODEL" -o "$ARTIFACT" "$@"
echo "== tessera run $ARTIFACT"
"$tessera" run "$ARTIFACT"
echo "== tessera bench $ARTIFACT"
"$tessera" bench "$ARTIFACT" --runs 20 --warmup 3
