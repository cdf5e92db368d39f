#!/usr/bin/env bash
# Runs the C/C++ API tests (tessera_api_tests) on generated models: makes the mlp and bert_tiny models with
# tests/e2e/gen_models.py into BUILD_DIR/api-models (a folder of its own: the e2e tests write theirs in parallel) and
# points the tests at them and at ONNX Runtime's reference outputs (tests/e2e/reference).
# Usage: run_api_tests.sh BUILD_DIR TEST_BINARY [gtest flags...]. Exit 77 (skipped) without Debian's python3-onnx.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="$(cd "$1" && pwd)"
bin="$2"
shift 2
PYTHON="${PYTHON:-/usr/bin/python3}"
if ! "$PYTHON" -c "import onnx, numpy" 2>/dev/null; then
  echo "run_api_tests: $PYTHON cannot import onnx and numpy (install python3-onnx); skipping" >&2
  exit 77
fi
models="$build/api-models"
mkdir -p "$models"
gen="$here/../e2e/gen_models.py"
for m in mlp bert_tiny; do
  if [ ! -s "$models/$m.onnx" ] || [ "$gen" -nt "$models/$m.onnx" ]; then
    "$PYTHON" "$gen" "$models" --models "$m" >/dev/null
  fi
done
export TESSERA_API_MODELS="$models"
export TESSERA_API_REFERENCE="$here/../e2e/reference"
exec "$bin" "$@"
