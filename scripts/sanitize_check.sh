#!/usr/bin/env bash
# Builds Tessera with AddressSanitizer + UndefinedBehaviorSanitizer (BUILD_DIR, default build-asan) and runs the
# tests that feed it hostile bytes: the artifact reader's unit tests (truncations, flips, bad offsets), the example
# plugin's corrupt-blob tests, the plugin loader's, the partitioner's (random graphs, tune caches, damaged cache
# files), and the CLI's damaged-artifact test. Any sanitizer report fails
# the run. Operator kernels are built without instrumentation (CMakeLists.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build-asan}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTESSERA_SANITIZE=ON > /dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)" --target tessera tessera_backend_example tessera_sanitize_tests \
  tessera_api_tests
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=0:halt_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
"$BUILD_DIR/bin/tessera_sanitize_tests" --gtest_brief=1
FLIPS=${FLIPS:-60} tests/e2e/corrupt_artifact_test.sh "$BUILD_DIR"
# The C API's misuse and cancellation tests (and the C++ wrapper's) through libtessera.so.
tests/api/run_api_tests.sh "$BUILD_DIR" "$BUILD_DIR/bin/tessera_api_tests" --gtest_brief=1 \
  --gtest_filter='CApi.MisuseIsAnErrorNeverACrash:CApi.CancelledRunsReturnCancelled:CApi.BoundOutputsAreWrittenInPlaceAndMustMatch:CppApi.*'
