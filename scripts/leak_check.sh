#!/usr/bin/env bash
# Load, run and unload, ITERATIONS times (default 1000), an MLP and SqueezeNet from their .onnx and from their
# compiled .tsr, on every backend (dnnl, xnnpack, native), under AddressSanitizer's LeakSanitizer, in the sanitizer
# build of scripts/fuzz.sh (BUILD_DIR, default build-fuzz). A leak fails the run. ./test.sh runs fewer iterations.
#   scripts/leak_check.sh [BUILD_DIR] [ITERATIONS]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build-fuzz}
ITERATIONS=${2:-1000}
scripts/fuzz.sh --build-only "$BUILD_DIR"
mapfile -t models < <(scripts/stress_models.sh "$BUILD_DIR/stress-models" mlp,squeezenet)
# intercept_tls_get_addr=0: see scripts/fuzz.sh (clang 14's tracer can die on dynamic TLS at exit).
ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:intercept_tls_get_addr=0 \
  "$BUILD_DIR/bin/tessera_stress" leaks --iterations "$ITERATIONS" --backends dnnl,xnnpack,native "${models[@]}"
