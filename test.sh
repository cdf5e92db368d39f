#!/usr/bin/env bash
# Installs what Tessera needs from Debian packages, builds it with Ninja and
# runs every test: unit tests, ONNX's conformance suites, end-to-end models
# against ONNX Runtime's reference outputs, placement across backends, the
# malformed-input checks, the C/C++/Python APIs, an installed tree with the embedding examples, a short soak, then the
# parsers, the fuzz corpora, the C API's misuse tests and a leak check under ASan + UBSan + LSan, and a short
# ThreadSanitizer run.
set -euo pipefail
cd "$(dirname "$0")"
# Each stage's wall time, printed as it ends and summed up last (the suite must stay well under 30 minutes on 2 cores).
start=$SECONDS last=$SECONDS timings=()
stage() {
  timings+=("$(printf '%-34s %5d s' "$1" $((SECONDS - last)))")
  echo "test.sh: $1 took $((SECONDS - last)) s"
  last=$SECONDS
}
trap 'printf "%s\n" "${timings[@]}"; echo "test.sh: $((SECONDS - start)) s in all"' EXIT
./scripts/install_deps.sh
stage "dependencies"
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_TESTS=ON
cmake --build "$BUILD_DIR" -j "$(nproc)"
stage "release build"
(cd "$BUILD_DIR" && ctest --output-on-failure -j "$(nproc)" --timeout 1800 "$@")
stage "ctest"
# An installed tree: the embedding examples built against it (CMake package and pkg-config) and run.
./scripts/install_check.sh "$BUILD_DIR"
stage "install check"
# A short soak: 8 threads running at once on three models x three backends, bit-identical to serial runs, RSS held.
./scripts/soak.sh "$BUILD_DIR" 300 25
stage "soak"
# The parsers, the plugins' blob loaders and the C API under AddressSanitizer, UndefinedBehaviorSanitizer and
# LeakSanitizer (clang): their tests, every fuzz harness over its corpus, a short load/unload leak check
# (TESSERA_SKIP_SANITIZE=1 skips it).
if [ "${TESSERA_SKIP_SANITIZE:-0}" != 1 ]; then
  ./scripts/sanitize_check.sh
  stage "sanitizers (build and run)"
fi
# ThreadSanitizer: concurrent runs on one session per backend and two processes sharing a tune cache, briefly
# (TESSERA_SKIP_TSAN=1 skips it).
if [ "${TESSERA_SKIP_TSAN:-0}" != 1 ]; then
  ./scripts/tsan_check.sh build-tsan 10
  stage "ThreadSanitizer (build and run)"
fi
