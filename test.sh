#!/usr/bin/env bash
# Installs what Tessera needs from Debian packages, builds it with Ninja and
# runs every test: unit tests, ONNX's conformance suites, end-to-end models
# against ONNX Runtime's reference outputs, placement across backends, the
# malformed-input checks, the C/C++/Python APIs, an installed tree with the embedding examples, then the artifact
# reader and the C API's misuse tests under ASan + UBSan.
set -euo pipefail
cd "$(dirname "$0")"
./scripts/install_deps.sh
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_TESTS=ON
cmake --build "$BUILD_DIR" -j "$(nproc)"
(cd "$BUILD_DIR" && ctest --output-on-failure -j "$(nproc)" --timeout 1800 "$@")
# An installed tree: the embedding examples built against it (CMake package and pkg-config) and run.
./scripts/install_check.sh "$BUILD_DIR"
# The artifact reader and the example plugin once more, under AddressSanitizer and UndefinedBehaviorSanitizer
# (TESSERA_SKIP_SANITIZE=1 skips it).
if [ "${TESSERA_SKIP_SANITIZE:-0}" != 1 ]; then
  ./scripts/sanitize_check.sh
fi
