#!/usr/bin/env bash
# The soak: 8 threads x 10,000 runs over three models (MLP, BERT encoder, SqueezeNet) on three backends (dnnl,
# xnnpack, native), every output bit-identical to a serial run, and the resident set after all runs at most 5 % above
# the resident set after the first tenth (tests/stress/stress.cc). ./test.sh runs it with fewer runs.
#   scripts/soak.sh [BUILD_DIR] [RUNS_PER_THREAD] [MAX_RSS_GROWTH_PCT]      defaults: build, 10000, 5
# A short soak is mostly the bit-identity check: its first tenth is too short for the session's arena pools and the
# allocator to settle, so ./test.sh gives it a wider RSS bound.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
RUNS=${2:-10000}
GROWTH=${3:-5}
cmake --build "$BUILD_DIR" --target tessera_stress tessera_backend_dnnl tessera_backend_xnnpack > /dev/null
mapfile -t models < <(scripts/stress_models.sh "$BUILD_DIR/stress-models")
"$BUILD_DIR/bin/tessera_stress" soak --threads 8 --runs "$RUNS" --backends dnnl,xnnpack,native \
  --max-rss-growth "$GROWTH" "${models[@]}"
