#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz/, clang with AddressSanitizer, UndefinedBehaviorSanitizer and coverage; BUILD_DIR
# default build-fuzz) and runs every one of them, JOBS at a time (default: the cores):
#   scripts/fuzz.sh [SECONDS]          each harness for SECONDS (default 60), or until it has made MAX_EXECS
#                                      executions when that is set; a working corpus grows in
#                                      BUILD_DIR/corpus/<harness>, starting from fuzz/corpus/<harness>
#   scripts/fuzz.sh --runs N           each harness over its checked-in corpus and regressions, then N mutations
#                                      (what ./test.sh runs)
#   scripts/fuzz.sh --build-only [BUILD_DIR]
# HARNESSES="fuzz_onnx fuzz_tensor" runs only those. One line per harness: executions, coverage (libFuzzer's edge
# count "cov"), exec/s and crashes. A crash, leak or timeout leaves its input in BUILD_DIR/crashes/ and fails the run;
# once fixed, it goes to fuzz/regressions/<harness>/, which every run replays.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-fuzz}
ROOT=$PWD
ALL_HARNESSES="fuzz_onnx fuzz_artifact fuzz_tensor fuzz_tune_cache fuzz_blob_dnnl fuzz_blob_xnnpack fuzz_blob_example"
HARNESSES=${HARNESSES:-$ALL_HARNESSES}
JOBS=${JOBS:-$(nproc)}
MAX_EXECS=${MAX_EXECS:-0}
mode=time
SECONDS_EACH=60
RUNS=0
case "${1:-}" in
  --build-only) mode=build; BUILD_DIR=${2:-$BUILD_DIR} ;;
  --runs) mode=runs; RUNS=$2 ;;
  "") ;;
  *) SECONDS_EACH=$1 ;;
esac

# -O1 with line tables: what fuzzing wants (fast enough, readable stacks), and half the build time of -O2 -g.
CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" -DTESSERA_FUZZ=ON -DTESSERA_BUILD_TESTS=ON \
  -DTESSERA_BUILD_PYTHON=OFF -DTESSERA_WERROR=OFF > /dev/null
# shellcheck disable=SC2086
cmake --build "$BUILD_DIR" -j "$(nproc)" --target $ALL_HARNESSES tessera tessera_stress tessera_backend_dnnl \
  tessera_backend_xnnpack tessera_backend_example
[ "$mode" = build ] && exit 0

# Absolute paths from here on: the ONNX harness works in an empty directory of its own.
BUILD_DIR=$(cd "$BUILD_DIR" && pwd)
export TESSERA_BACKEND_PATH="$BUILD_DIR/lib/tessera:$BUILD_DIR/examples"
# intercept_tls_get_addr=0: clang 14's LeakSanitizer guesses a glibc-2.19 header in front of dynamic TLS blocks (the
# plugins' thread_locals) and, when a block lands at that offset by chance, its stop-the-world tracer dies with "Tracer
# caught signal 11" at exit (fixed in LLVM 17). Leaks are still found; pointers held only in dynamic TLS are not roots.
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:allocator_may_return_null=1:intercept_tls_get_addr=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
mkdir -p "$BUILD_DIR/crashes" "$BUILD_DIR/logs"
# Each harness once: "NAME EXECUTIONS COVERAGE CRASHES".
run_one() {
  local h=$1 log="$BUILD_DIR/logs/$1.log" work="$BUILD_DIR/corpus/$1" args status=0
  mkdir -p "$work"
  args=(-rss_limit_mb=4096 -timeout=30 -print_final_stats=1 -artifact_prefix="$BUILD_DIR/crashes/$h-")
  [ -f "$ROOT/fuzz/dict/$h.dict" ] && args+=(-dict="$ROOT/fuzz/dict/$h.dict")
  # The ONNX harness reaches ~80,000 features per input; libFuzzer's entropic scheduling then spends 60 % of the
  # time updating feature frequencies (3x fewer executions per second), so it schedules the plain way.
  [ "$h" = fuzz_onnx ] && args+=(-entropic=0)
  local dirs=("$work" "$ROOT/fuzz/corpus/$h")
  [ -d "$ROOT/fuzz/regressions/$h" ] && dirs+=("$ROOT/fuzz/regressions/$h")
  if [ "$mode" = runs ]; then
    work=$(mktemp -d)
    dirs[0]=$work
    args+=(-runs="$RUNS")
  else
    args+=(-max_total_time="$SECONDS_EACH")
    [ "$MAX_EXECS" -gt 0 ] && args+=(-runs="$MAX_EXECS")
  fi
  "$BUILD_DIR/bin/$h" "${args[@]}" "${dirs[@]}" > "$log" 2>&1 || status=$?
  [ "$mode" = runs ] && rm -rf "$work"
  local execs cov rate
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  echo "$h ${execs:-?} ${cov:-?} ${rate:-?} $([ $status -eq 0 ] && echo 0 || echo 1)"
}
export -f run_one
export BUILD_DIR ROOT mode RUNS SECONDS_EACH MAX_EXECS
results=$(printf '%s\n' $HARNESSES | xargs -P "$JOBS" -I{} bash -c 'run_one {}')
failed=0
printf '%-20s %12s %10s %8s %8s\n' harness executions coverage exec/s crashes
while read -r h execs cov rate crashed; do
  printf '%-20s %12s %10s %8s %8s\n' "$h" "$execs" "$cov" "$rate" "$crashed"
  if [ "$crashed" != 0 ]; then
    failed=1
    echo "--- $h: the end of $BUILD_DIR/logs/$h.log" >&2
    tail -40 "$BUILD_DIR/logs/$h.log" >&2
  fi
done <<< "$(sort <<< "$results")"
exit $failed
