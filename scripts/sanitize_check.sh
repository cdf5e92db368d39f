#!/usr/bin/env bash
# The sanitizer stage of ./test.sh, in the clang build of scripts/fuzz.sh (BUILD_DIR, default build-fuzz:
# AddressSanitizer, UndefinedBehaviorSanitizer and LeakSanitizer; operator kernels uninstrumented). Any sanitizer
# report fails the run.
#   - the tests that feed hostile bytes: the artifact reader's unit tests (truncations, flips, bad offsets), the example
#     plugin's corrupt-blob tests, the plugin loader's, the partitioner's (random graphs, tune caches, damaged cache
#     files), the device-memory path's (a simulated device that checks every pointer it is given), the CLI's
#     damaged-artifact test, and the C API's misuse, cancellation and bound-output tests;
#   - every fuzz harness over its checked-in corpus and regressions, then FUZZ_RUNS mutations (default 300);
#   - load, run and unload LEAK_ITERATIONS times (default 3) from .onnx and .tsr on every backend, under LeakSanitizer.
# The long versions: scripts/fuzz.sh SECONDS and scripts/leak_check.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build-fuzz}
scripts/fuzz.sh --build-only "$BUILD_DIR"
cmake --build "$BUILD_DIR" -j "$(nproc)" --target tessera_sanitize_tests tessera_api_tests
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=0:halt_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
"$BUILD_DIR/bin/tessera_sanitize_tests" --gtest_brief=1
FLIPS=${FLIPS:-60} tests/e2e/corrupt_artifact_test.sh "$BUILD_DIR"
# The C API's misuse and cancellation tests (and the C++ wrapper's) through libtessera.so.
tests/api/run_api_tests.sh "$BUILD_DIR" "$BUILD_DIR/bin/tessera_api_tests" --gtest_brief=1 \
  --gtest_filter='CApi.MisuseIsAnErrorNeverACrash:CApi.CancelledRunsReturnCancelled:CApi.BoundOutputsAreWrittenInPlaceAndMustMatch:CppApi.*'
unset ASAN_OPTIONS
BUILD_DIR="$BUILD_DIR" scripts/fuzz.sh --runs "${FUZZ_RUNS:-300}"
scripts/leak_check.sh "$BUILD_DIR" "${LEAK_ITERATIONS:-3}"
