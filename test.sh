#!/usr/bin/env bash
# Installs what Tessera needs from Debian packages, builds it with Ninja and
# runs every test: unit tests, ONNX's conformance suites, end-to-end models
# against ONNX Runtime's reference outputs, and the malformed-input checks.
set -euo pipefail
cd "$(dirname "$0")"
./scripts/install_deps.sh
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD_DIR" -j "$(nproc)"
cd "$BUILD_DIR"
ctest --output-on-failure -j "$(nproc)" --timeout 1800 "$@"
