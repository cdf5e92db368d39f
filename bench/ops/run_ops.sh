#!/usr/bin/env bash
# The op sweep: times every point of bench/ops/grid.txt (one op, or one short chain, per ONNX model) on ONNX Runtime
# and on each Tessera backend that claims it, then writes bench/OPS.md (bench/ops/report.py).
#
# Usage: bench/ops/run_ops.sh [BUILD_DIR]
#   BUILD_DIR  a tessera build directory holding bin/tessera (default: build)
# Environment:
#   THREADS (default 2)   intra-op threads of every engine; the processes are pinned to cores 0..THREADS-1 with taskset
#                         (bench/placements.sh's bench_pin_cmd, as compare_ort.sh does)
#   REPEATS (default 5)   processes per engine and point, interleaved (the engine that goes first rotates)
#   RUNS (default 20), WARMUP (default 3)   timed and warm-up runs inside each process
#   FILTER (default: all) a regex (grep -E) over point ids
#   OUT (default bench/OPS.md)              the report; WORK (default BUILD_DIR/bench-ops) the work folder: models,
#                         partition reports, raw.tsv, seed.tsv, run.env; the machine-readable summary goes next to it,
#                         to WORK.tsv (BUILD_DIR/bench-ops.tsv)
#   SEED (default 1)      after timing, `tessera partition MODEL --tune --threads THREADS` for every point, so the
#                         sweep's measurements land in the tune cache later compiles share: the default one
#                         (TESSERA_TUNE_CACHE, else ~/.cache/tessera/tune.json), or SEED_CACHE when set
#                         (--tune-cache SEED_CACHE); 0 skips it.
#                         A point is skipped while other processes keep more than (cores - THREADS) + 0.75 cores busy
#                         (sampled for 0.3 s before it): --tune caches what it measures even then, and a contended
#                         measurement would mislead every later compile (tessera's own default measuring applies the
#                         same rule). SEED=force seeds regardless
#   MIN_REGION_NODES (default 1)  --min-region-nodes for the dnnl and xnnpack runs (partition and bench). A point is
#                         one node (or a short chain); tessera's default, 2, prunes a lone node without a heavy op
#                         (Relu, Resize, Softmax ...) back to native, which would hide the engine's kernel from the
#                         sweep; with 1 an engine runs every op it supports. Empty: tessera's default
#   SNAPSHOT (default 1)  run a copy of bin/tessera and lib/tessera/*.so made at the start (WORK/snapshot), so that
#                         a rebuild of BUILD_DIR during the sweep cannot mix two binaries in one report; 0 runs
#                         BUILD_DIR's
#   WAIT_QUIET (default 0) seconds to wait, at most, before each point for other processes to leave the cores (their
#                         share at or under the limit below); the sweep then times the point whatever the machine does
#   ORT_SPIN (default 1)  0 passes --no-spin to bench/ort_bench.js
#   PYTHON (default /usr/bin/python3)       a python with onnx + numpy
#
# Per point:
#   1. `tessera partition MODEL --backends E,native --placement priority --no-tune --tune-cache= --json
#      [--min-region-nodes N]` for E = dnnl and
#      xnnpack: how many of the point's nodes E claims (and its refusals). An engine that claims none is not timed: it
#      would only time native again; the report shows "-" for it.
#   2. REPEATS rounds of: node bench/ort_bench.js, `tessera bench MODEL --backends native`, `--backends dnnl,native
#      --placement priority`, `--backends xnnpack,native --placement priority` (those claiming), each a fresh process,
#      pinned, with TESSERA_TUNE=0 (nothing is measured or written to a tune cache while timing), JSON output; the
#      median of the per-process medians is the point's time. A bench that reports no engine although the partition
#      said the engine claims nodes is also shown as "-".
#   3. One line per point and engine in WORK/raw.tsv, written as soon as the point is done:
#      id, engine, median_ms, per-process medians (comma separated), claimed nodes, total nodes, status (ok,
#      unclaimed, fail), note (the error line of a failure; the refusals of an engine that claims nothing), and the
#      percent of all CPU time other processes used while the point was timed (from /proc/stat, less this script's
#      own); above (cores - THREADS + 0.75) / cores the report marks the point as timed on a busy machine
# Then the seeding pass (SEED=1), one line per point in WORK/seed.tsv (id, seconds, exit status, last line, warnings),
# and the report. Progress goes to stderr. Exit 0 unless nothing could be measured or the report failed.
set -euo pipefail

sweep_start=$(date +%s)
ops_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bench_dir=$(dirname "$ops_dir")
repo_dir=$(dirname "$bench_dir")

build_dir=${1:-build}
threads=${THREADS:-2}
repeats=${REPEATS:-5}
runs=${RUNS:-20}
warmup=${WARMUP:-3}
filter=${FILTER:-}
seed=${SEED:-1}
seed_cache=${SEED_CACHE:-}
ort_spin=${ORT_SPIN:-1}
min_region_nodes=${MIN_REGION_NODES-1}
python=${PYTHON:-/usr/bin/python3}
[[ -x $python ]] || python=python3

log() { printf '%s\n' "$*" >&2; }
die() { log "run_ops: $*"; exit 1; }

case $build_dir in /*) ;; *) build_dir=$repo_dir/$build_dir ;; esac
work=${WORK:-$build_dir/bench-ops}
case $work in /*) ;; *) work=$repo_dir/$work ;; esac
work=${work%/}
out=${OUT:-$bench_dir/OPS.md}
case $out in /*) ;; *) out=$repo_dir/$out ;; esac
tessera=$build_dir/bin/tessera
[[ -x $tessera ]] ||
  die "no $tessera (build it: cmake -G Ninja -B $build_dir -DCMAKE_BUILD_TYPE=Release && ninja -C $build_dir tessera)"
command -v node >/dev/null || die "node is not installed (ONNX Runtime is driven through onnxruntime-node)"
[[ -z $min_region_nodes || $min_region_nodes =~ ^[1-9][0-9]*$ ]] ||
  die "MIN_REGION_NODES must be a positive integer or empty"
engine_flags=(--placement priority)
[[ -n $min_region_nodes ]] && engine_flags+=(--min-region-nodes "$min_region_nodes")
for v in threads repeats runs; do [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "${v^^} must be a positive integer"; done
[[ $warmup =~ ^[0-9]+$ ]] || die "WARMUP must be a non-negative integer"

# --- ONNX Runtime (as bench/compare_ort.sh) -------------------------------------------------------------------------
# shellcheck source=../ort_env.sh
source "$bench_dir/ort_env.sh"
ort_setup "$bench_dir"

# --- models ---------------------------------------------------------------------------------------------------------
model_dir=$work/models
mkdir -p "$model_dir"
gen_err=$(mktemp)
errfile=$(mktemp)
timesfile=$(mktemp)
trap 'rm -f "$gen_err" "$errfile" "$timesfile"' EXIT
gen_rc=0
mapfile -t ids < <("$python" "$ops_dir/gen_ops.py" "$model_dir" --filter "$filter" 2>"$gen_err") || true
wait $! 2>/dev/null || gen_rc=$?
grep -v '^gen_ops: wrote ' "$gen_err" >&2 || true
((${#ids[@]} > 0)) ||
  die "no grid point matches FILTER='$filter' (or the generator failed: it needs a python with onnx + numpy, PYTHON)"
log "run_ops: ${#ids[@]} point(s), $threads thread(s), $repeats x $runs runs after $warmup warm-up, ORT $ort_version"

# --- helpers --------------------------------------------------------------------------------------------------------
# shellcheck source=../placements.sh
source "$bench_dir/placements.sh"
pin=$(bench_pin_cmd "$threads")
json_field() { sed -n "s/.*\"$1\": *\([-0-9.eE+]*\).*/\1/p" | head -n1; }
median() {
  sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) exit 1; if (NR % 2) print v[(NR + 1) / 2]
    else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
last_line() { grep -v '^[[:space:]]*$' "$1" | tail -n1 || true; }
oneline() { tr '\t\n' '  ' | sed 's/  */ /g; s/ $//'; }

# run_engine ENGINE MODEL: sets `val` (the process's median ms) and `nengines` (tessera: engines it reports) and
# returns 0, or sets `err` to the error line and returns 1.
run_engine() {
  local engine=$1 model=$2 cmd o
  case $engine in
    ort)
      cmd=(node "$bench_dir/ort_bench.js" "$model" --threads "$threads" --runs "$runs" --warmup "$warmup")
      [[ $ort_spin == 0 ]] && cmd+=(--no-spin) ;;
    native) cmd=("$tessera" bench "$model" --backends native --threads "$threads" --runs "$runs" --warmup "$warmup"
      --json) ;;
    *) cmd=("$tessera" bench "$model" --backends "$engine,native" "${engine_flags[@]}" --threads "$threads"
      --runs "$runs" --warmup "$warmup" --json) ;;
  esac
  val="" nengines="" err=""
  # shellcheck disable=SC2086  # word-split the taskset prefix
  if o=$(env TESSERA_TUNE=0 $pin "${cmd[@]}" 2>"$errfile"); then
    val=$(json_field median_ms <<<"$o")
    nengines=$(json_field engines <<<"$o")
    [[ -n $val ]] && return 0
  fi
  err=$( (last_line "$errfile"; printf '%s\n' "$o") | grep -v '^[[:space:]]*$' | head -n1 | oneline || true)
  err=${err:-"$engine exited with an error and no message"}
  return 1
}

# What ran: the commit and the binary's build time now, checked again at the end (another build may replace them).
commit=$(git -C "$repo_dir" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ -n $(git -C "$repo_dir" status --porcelain --untracked-files=no -- src backends include tools 2>/dev/null) ]]
then
  commit+=" (+ uncommitted changes)"
fi
binary_stamp() { stat -c %Y "$build_dir/bin/tessera" "$build_dir"/lib/tessera/*.so 2>/dev/null | sort -n | tail -n1; }
binary_built=$(binary_stamp)
# Run a copy: a build directory shared with someone else may be rebuilt under a long sweep, which would mix two
# binaries in one report. The copy keeps the layout tessera finds its plugins by (bin/../lib/tessera).
if [[ ${SNAPSHOT:-1} == 1 ]]; then
  snap=$work/snapshot
  rm -rf "$snap"
  mkdir -p "$snap/bin" "$snap/lib/tessera"
  cp -p "$build_dir/bin/tessera" "$snap/bin/" || die "cannot copy $build_dir/bin/tessera to $snap"
  cp -p "$build_dir"/lib/tessera/*.so "$snap/lib/tessera/" 2>/dev/null || true
  tessera=$snap/bin/tessera
fi
# How busy the CPUs are without us: one second of /proc/stat while this script sleeps. Other processes on the cores
# slow every engine, and multi-threaded engines far more than their share (a worker descheduled at a barrier).
cpu_busy() {  # [SECONDS]: percent of all cores busy meanwhile (this script only sleeps)
  local a b
  read -r -a a </proc/stat || return 0
  sleep "${1:-1}"
  read -r -a b </proc/stat || return 0
  awk -v a="${a[*]}" -v b="${b[*]}" 'BEGIN { n = split(a, x, " "); split(b, y, " "); t = 0; idle = 0
    for (i = 2; i <= n && i <= 9; ++i) { d = y[i] - x[i]; t += d; if (i == 5 || i == 6) idle += d }
    if (t > 0) printf "%.0f", 100 * (t - idle) / t }'
}
# Busy ticks and all ticks of every CPU so far, and this script's own CPU ticks (itself and its finished children):
# the difference between two readings is what other processes used meanwhile.
hz=$(getconf CLK_TCK 2>/dev/null || echo 100)
cpu_ticks() {
  awk '/^cpu / { b = $2 + $3 + $4 + $7 + $8 + $9; print b, b + $5 + $6; exit }' /proc/stat 2>/dev/null || echo "0 0"
}
own_ticks() {  # sets `own`; `times` must run in this shell, not in a $(...) subshell, to report it
  times >"$timesfile"
  own=$(awk -v hz="$hz" '{ for (i = 1; i <= 2; ++i) { split($i, a, /[ms]/); s += a[1] * 60 + a[2] } }
    END { printf "%.0f", s * hz }' "$timesfile")
}
# Other processes' share of all cores above which a point counts as timed on a busy machine: more than the cores the
# engines leave free, plus three quarters of one (tessera's own rule for keeping a measurement).
ncpu=$(nproc 2>/dev/null || echo 1)
quiet_limit=$(awk -v c="$ncpu" -v t="$threads" \
  'BEGIN { f = c - t; if (f < 0) f = 0; printf "%.0f", 100 * (f + 0.75) / c }')
wait_quiet=${WAIT_QUIET:-0}
[[ $wait_quiet =~ ^[0-9]+$ ]] || die "WAIT_QUIET must be a number of seconds"
busy_start=$(cpu_busy || true)
log "run_ops: CPUs ${busy_start:-?} % busy with other processes before the sweep"

raw=$work/raw.tsv
: >"$raw"
engines_all=(ort native dnnl xnnpack)
load_start=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?")
measured=0

# --- time every point -----------------------------------------------------------------------------------------------
for id in "${ids[@]}"; do
  model=$model_dir/$id.onnx
  declare -A claimed=() total=() status=() note=() lists=()
  engines=(ort native)
  for e in dnnl xnnpack; do
    pj=$work/partition/$id.$e.json
    mkdir -p "$work/partition"
    # shellcheck disable=SC2086
    if env TESSERA_TUNE=0 "$tessera" partition "$model" --backends "$e,native" "${engine_flags[@]}" --no-tune \
      --tune-cache= --threads "$threads" --json >"$pj" 2>"$errfile" &&
      cov=$("$python" "$ops_dir/coverage.py" "$pj" "$e"); then
      IFS=$'\t' read -r c t _ refusals <<<"$cov"
      claimed[$e]=$c total[$e]=$t
      if ((c > 0)); then engines+=("$e"); else status[$e]=unclaimed note[$e]=$refusals; fi
    else
      status[$e]=fail note[$e]="partition: $(last_line "$errfile" | oneline)"
    fi
  done
  # Wait (up to WAIT_QUIET s) for the other processes to leave the cores, then time, watching how busy they keep them.
  waited=0
  while ((waited < wait_quiet)); do
    busy_now=$(cpu_busy 0.5 || true)
    [[ -z $busy_now ]] || ((busy_now <= quiet_limit)) && break
    sleep 1.5
    waited=$((waited + 2))
  done
  read -r busy0 total0 < <(cpu_ticks)
  own_ticks
  own0=$own
  for ((r = 0; r < repeats; ++r)); do
    order=("${engines[@]:r % ${#engines[@]}}" "${engines[@]:0:r % ${#engines[@]}}")
    for e in "${order[@]}"; do
      [[ -n ${status[$e]:-} ]] && continue  # failed (or found unclaimed) earlier: not retried
      if run_engine "$e" "$model"; then
        if [[ $e == dnnl || $e == xnnpack ]] && [[ ${nengines:-0} == 0 ]]; then
          status[$e]=unclaimed note[$e]="partition claims ${claimed[$e]} node(s) but the bench ran no $e engine"
          continue
        fi
        lists[$e]+="${lists[$e]:+,}$val"
      else
        status[$e]=fail note[$e]=$err
      fi
    done
  done
  read -r busy1 total1 < <(cpu_ticks)
  own_ticks
  others=$(awk -v b="$((busy1 - busy0))" -v o="$((own - own0))" -v t="$((total1 - total0))" \
    'BEGIN { v = t > 0 ? 100 * (b - o) / t : 0; printf "%.0f", v < 0 ? 0 : v }')
  line="$id:"
  for e in "${engines_all[@]}"; do
    med=""
    if [[ -n ${lists[$e]:-} && -z ${status[$e]:-} ]]; then
      med=$(tr ',' '\n' <<<"${lists[$e]}" | median)
      status[$e]=ok
      measured=$((measured + 1))
    fi
    case $e in
      ort) c=- t=- ;;
      native) c=${total[dnnl]:-${total[xnnpack]:-}} t=$c ;;
      *) c=${claimed[$e]:-} t=${total[$e]:-} ;;
    esac
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$id" "$e" "$med" "${lists[$e]:-}" "$c" "$t" \
      "${status[$e]:-fail}" "${note[$e]:-}" "$others" >>"$raw"
    case ${status[$e]:-fail} in
      ok) line+=" $e ${med}" ;;
      unclaimed) line+=" $e -" ;;
      *) line+=" $e FAIL" ;;
    esac
  done
  ((others > quiet_limit)) && line+="  [others kept $others % of the CPUs busy]"
  log "$line"
  for e in "${engines_all[@]}"; do
    [[ ${status[$e]:-} == fail ]] && log "  $e error: ${note[$e]}"
  done
  unset claimed total status note lists
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?")
timing_s=$(($(date +%s) - sweep_start))
((measured > 0)) || die "nothing could be measured"

# --- seed the tune cache --------------------------------------------------------------------------------------------
seed_tsv=$work/seed.tsv
: >"$seed_tsv"
seed_s=0
seed_skipped=0
if [[ $seed == 1 || $seed == force ]]; then
  seed_start=$(date +%s)
  seed_limit=$quiet_limit
  seed_flags=()
  [[ -n $seed_cache ]] && seed_flags=(--tune-cache "$seed_cache")
  log "run_ops: seeding the tune cache (${seed_cache:-the default one}) with partition --tune ..."
  std=$(mktemp)
  for id in "${ids[@]}"; do
    if [[ $seed != force ]]; then
      busy_now=$(cpu_busy 0.3 || true)
      if [[ -n $busy_now ]] && ((busy_now > seed_limit)); then
        printf '%s\t\t-\tskipped: other processes kept %s %% of the CPUs busy (limit %s %%)\t\n' "$id" "$busy_now" \
          "$seed_limit" >>"$seed_tsv"
        seed_skipped=$((seed_skipped + 1))
        continue
      fi
    fi
    t0=$(date +%s%3N) rc=0
    # shellcheck disable=SC2086
    env -u TESSERA_TUNE $pin "$tessera" partition "$model_dir/$id.onnx" --tune --threads "$threads" "${seed_flags[@]}" \
      >"$std" 2>"$errfile" || rc=$?
    ms=$(($(date +%s%3N) - t0))
    if ((rc == 0)); then
      # The decision lines of the report; the last names the chosen plan.
      last=$(grep -E '^(backends|end-to-end)' "$std" | oneline)
    else
      last=$(last_line "$errfile" | oneline)
      log "  seed $id failed: $last"
    fi
    warnings=$(grep -i 'warning' "$errfile" | sed 's/^tessera: warning: //' | oneline || true)
    printf '%s\t%s\t%s\t%s\t%s\n' "$id" "$(awk -v m="$ms" 'BEGIN { printf "%.2f", m / 1000 }')" "$rc" "$last" \
      "$warnings" >>"$seed_tsv"
  done
  rm -f "$std"
  seed_s=$(($(date +%s) - seed_start))
  skipped_note=""
  ((seed_skipped == 0)) ||
    skipped_note=", $seed_skipped point(s) skipped while the machine was busy (SEED=force seeds them)"
  log "run_ops: seeding took ${seed_s} s$skipped_note"
fi

# --- report ---------------------------------------------------------------------------------------------------------
busy_end=$(cpu_busy || true)
binary_note=""
if [[ $(binary_stamp) != "$binary_built" ]]; then
  if [[ ${SNAPSHOT:-1} == 1 ]]; then
    binary_note="$build_dir was rebuilt during the sweep; the sweep ran its copy from the start"
  else
    binary_note="tessera or a plugin was rebuilt during the sweep (SNAPSHOT=0)"
  fi
fi
[[ -n $binary_note ]] && log "run_ops: warning: $binary_note"
{
  printf 'threads=%s\nrepeats=%s\nruns=%s\nwarmup=%s\nfilter=%s\nort_version=%s\nort_spin=%s\n' "$threads" "$repeats" \
    "$runs" "$warmup" "$filter" "$ort_version" "$ort_spin"
  printf 'commit=%s\ndate=%s\nload_start=%s\nload_end=%s\ntiming_s=%s\nseed=%s\nseed_cache=%s\nseed_s=%s\n' "$commit" \
    "$(date -u '+%Y-%m-%d %H:%M UTC')" "$load_start" "$load_end" "$timing_s" "$seed" "$seed_cache" "$seed_s"
  printf 'quiet_limit=%s\nwait_quiet=%s\n' "$quiet_limit" "$wait_quiet"
  printf 'min_region_nodes=%s\nbinary_built=%s\nbinary_note=%s\nbusy_start=%s\nbusy_end=%s\n' "$min_region_nodes" \
    "$(date -u -d "@${binary_built:-0}" '+%Y-%m-%d %H:%M UTC' 2>/dev/null || echo '?')" "$binary_note" "$busy_start" \
    "$busy_end"
  printf 'pinning=%s\ntotal_s=%s\n' "${pin:-none}" "$(($(date +%s) - sweep_start))"
} >"$work/run.env"
"$python" "$ops_dir/report.py" --work "$work" --grid "$ops_dir/grid.txt" --out "$out" --tsv "$work.tsv" ||
  die "the report failed"
log "run_ops: written $out and $work.tsv ($(($(date +%s) - sweep_start)) s)"
((gen_rc == 0)) || log "run_ops: some grid points could not be generated (above)"
