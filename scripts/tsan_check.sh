#!/usr/bin/env bash
# Builds Tessera with ThreadSanitizer (BUILD_DIR, default build-tsan) and runs what is concurrent in it:
#   - 8 threads running at once on one session per model and backend (native sessions with two threads of their own,
#     so the native pool runs too; dnnl and xnnpack on their callers' threads), outputs bit-identical to serial runs;
#   - 8 threads running one session at 24 input shapes, so that plans are built and evicted while others run, and
#     again with dnnl, so that buckets with engines are compiled in the background and swapped in;
#   - two processes compiling the same model with measurement at once, sharing one tune cache (its file lock and
#     merge), then a third reading what they left.
# Any ThreadSanitizer report fails the run. Suppressions (scripts/tsan.supp) name only libgomp and oneDNN.
#   scripts/tsan_check.sh [BUILD_DIR] [RUNS_PER_THREAD]      defaults: build-tsan, 200
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build-tsan}
RUNS=${2:-200}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DTESSERA_TSAN=ON -DTESSERA_BUILD_TESTS=OFF -DTESSERA_BUILD_PYTHON=OFF > /dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)" --target tessera tessera_stress tessera_backend_dnnl tessera_backend_xnnpack
export TSAN_OPTIONS="suppressions=$PWD/scripts/tsan.supp halt_on_error=1 exitcode=66 second_deadlock_stack=1 history_size=7"
mapfile -t models < <(scripts/stress_models.sh "$BUILD_DIR/stress-models")
"$BUILD_DIR/bin/tessera_stress" soak --threads 8 --runs "$RUNS" --session-threads 2 --backends native \
  --max-rss-growth 100 "${models[@]}"
# Plans built, shared and evicted under concurrent runs: 24 input shapes of a BERT encoder with symbolic batch and
# sequence, more than a session keeps plans for.
symbolic="$BUILD_DIR/stress-models-symbolic"
[ -f "$symbolic/bert_tiny.onnx" ] || /usr/bin/python3 tests/e2e/gen_models.py "$symbolic" --models bert_tiny \
  --symbolic-dims > /dev/null
"$BUILD_DIR/bin/tessera_stress" shapes --threads 8 --runs "$RUNS" --session-threads 2 --backends native \
  "$symbolic/bert_tiny.onnx"
# The engines' sessions run on their callers' threads. Their own pools are uninstrumented libraries whose
# synchronisation ThreadSanitizer cannot see: pthreadpool's atomics and futexes, and libgomp's worker threads, whose
# exits race in glibc's TLS bookkeeping (dl-tls.c) with no oneDNN or libgomp frame to suppress by.
"$BUILD_DIR/bin/tessera_stress" soak --threads 8 --runs "$RUNS" --session-threads 1 --backends dnnl,xnnpack \
  --max-rss-growth 100 "${models[@]}"
# Buckets compiled in the background for shapes seen twice (engines for their exact dims) and swapped in while the
# other threads run.
"$BUILD_DIR/bin/tessera_stress" shapes --threads 8 --runs "$RUNS" --session-threads 1 --backends dnnl \
  "$symbolic/bert_tiny.onnx"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bert="$BUILD_DIR/stress-models/bert_tiny.onnx"
compile() {
  "$BUILD_DIR/bin/tessera" compile "$bert" -o "$work/$1.tsr" --tune --tune-budget 5 --tune-cache "$work/tune.json" \
    --threads 1 > "$work/$1.log" 2>&1
}
compile first & a=$!
compile second & b=$!
status=0
wait $a || status=$?
wait $b || status=$((status | $?))
if [ $status -ne 0 ]; then
  cat "$work/first.log" "$work/second.log"
  echo "tsan_check: two compiles sharing one tune cache failed" >&2
  exit 1
fi
# The cache both wrote is a valid cache: a third compile reads it without a warning and measures nothing new.
"$BUILD_DIR/bin/tessera" compile "$bert" -o "$work/third.tsr" --tune-cache "$work/tune.json" --threads 1 \
  > "$work/third.log" 2>&1 || { cat "$work/third.log"; exit 1; }
if grep -q "ignoring it" "$work/third.log"; then
  cat "$work/third.log"
  echo "tsan_check: the shared tune cache was damaged" >&2
  exit 1
fi
echo "tsan_check: two processes compiled $(basename "$bert") with one tune cache ($(grep -c '"us"' "$work/tune.json") measurements); no ThreadSanitizer report"
