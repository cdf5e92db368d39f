#!/usr/bin/env bash
# Runs the Python package's tests (tests/python, pytest) with Debian's /usr/bin/python3 against BUILD_DIR/python, on
# the models tests/api/run_api_tests.sh generates. Usage: run_python_tests.sh BUILD_DIR. Exit 77 (skipped) when
# python3-onnx, python3-pytest or the built package is missing.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="$(cd "$1" && pwd)"
PYTHON="${PYTHON:-/usr/bin/python3}"
if ! "$PYTHON" -c "import onnx, numpy, pytest" 2>/dev/null; then
  echo "run_python_tests: $PYTHON cannot import onnx, numpy and pytest; skipping" >&2
  exit 77
fi
if ! ls "$build"/python/tessera/_tessera*.so >/dev/null 2>&1; then
  echo "run_python_tests: $build/python/tessera has no built module (python3-pybind11 missing at configure?); skipping" >&2
  exit 77
fi
# The models, made the way the API tests make them.
"$here/../api/run_api_tests.sh" "$build" true
export TESSERA_API_MODELS="$build/api-models"
export TESSERA_API_REFERENCE="$here/../e2e/reference"
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
cd "$here"
exec "$PYTHON" -m pytest -q -p no:cacheprovider "$here"
