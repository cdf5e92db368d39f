#!/usr/bin/env bash
# Side-by-side latency of tessera and ONNX Runtime (CPU) on the generated benchmark models.
#
# Usage: bench/compare_ort.sh [BUILD_DIR] [MODELS...]
#   BUILD_DIR  a tessera build directory holding bin/tessera (default: build)
#   MODELS     names known to tests/e2e/gen_models.py or to the zoo, bench/zoo/gen_zoo.py (default: resnet50
#              mobilenet_v2 bert_tiny; bert_base is a heavier optional one). A zoo model is timed at its bench pins
#              (bench/zoo/pins.txt): ORT, `tessera bench` and `tessera compile` all get its --shape flags.
# Environment: THREADS (default "1 2"), REPEATS (default 3), RUNS (default 20), WARMUP (default 3),
#              BACKEND_SETS (default "default"): tessera placements to time, each one of (bench/placements.sh defines
#              the compiled ones)
#                LIST       a --backends list in priority order (--placement priority: each engine as far as it
#                           goes, native for the rest), e.g. dnnl,native; timed from the .onnx
#                estimated  `tessera compile --no-tune --tune-cache=`: cost-based placement from estimates only
#                default    `tessera compile` with no flags (pins and --threads only) from an EMPTY tune cache: a fresh
#                           cache file per model and thread count (TUNE_DIR/MODEL.tN.default.json, given as
#                           $TESSERA_TUNE_CACHE), so it calibrates and measures as on a machine it has never seen
#                warm       the same compile again with the cache `default` left (needs `default` in the list; it is
#                           compiled after it whatever the order)
#                tuned      `tessera compile --tune` with a fresh cache file (TUNE_DIR/MODEL.tN.tuned.json)
#              a compiled set is compiled to BUILD_DIR/bench-models/MODEL.SET.tN.tsr and that artifact is timed;
#              TUNE_DIR (default BUILD_DIR/bench-tune), COMPILE_TSV (default BUILD_DIR/bench-compile.tsv): where each
#              compile's wall time goes, as tab-separated lines "model threads set compile_ms line notes" (compile_ms
#              empty and line = the error when it failed; notes = the compile's warnings, e.g. measurements not
#              cached because other processes held the cores);
#              PYTHON (a python with onnx + numpy; default /usr/bin/python3), ORT_SPIN (default 1; 0 passes
#              --no-spin to ort_bench.js: ORT's spin-waiting pool threads collapse on an oversubscribed machine),
#              RESULTS_TSV (default BUILD_DIR/bench-results.tsv): where the machine-readable results go.
#
# What it does:
#   * installs onnxruntime-node into bench/node_modules (npm install --ignore-scripts --no-save) unless it is there;
#   * generates the models into BUILD_DIR/bench-models (kept between runs: the generators are deterministic);
#   * compiles the compiled sets (per thread count, model: estimated, default, warm, tuned, each as listed), pinned
#     like the timing runs, and records their wall times in COMPILE_TSV;
#   * for each thread count and model, runs `tessera bench` and bench/ort_bench.js alternately REPEATS times (the
#     order flips every repeat), each RUNS timed runs after WARMUP warm-up runs, pinned with taskset to cores 0..N-1
#     when taskset exists and the machine has enough cores;
#   * takes the median of the per-process medians and prints a Markdown table (also written to
#     BUILD_DIR/bench-results.md); ratio = ORT ms / tessera ms, so > 1 means tessera is faster;
#   * writes the same medians as tab-separated lines "model threads engine median_ms" (engine: ort or tessera:<set>,
#     median_ms empty when it failed) to RESULTS_TSV, for bench/run_suite.sh.
# Progress and errors go to stderr, the table to stdout. A model that fails under one engine gets "fail" in that
# column and its error line under the table; the script still exits 0 unless nothing could be measured at all.
set -euo pipefail

script_start=$(date +%s)
bench_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_dir=$(dirname "$bench_dir")

build_dir=${1:-build}
[[ $# -gt 0 ]] && shift
if [[ $# -gt 0 ]]; then models=("$@"); else models=(resnet50 mobilenet_v2 bert_tiny); fi
read -r -a thread_counts <<<"${THREADS:-1 2}"
read -r -a backend_sets <<<"${BACKEND_SETS:-default}"
repeats=${REPEATS:-3}
runs=${RUNS:-20}
warmup=${WARMUP:-3}
python=${PYTHON:-/usr/bin/python3}
ort_spin=${ORT_SPIN:-1}
[[ -x $python ]] || python=python3

log() { printf '%s\n' "$*" >&2; }
die() { log "compare_ort: $*"; exit 1; }

case $build_dir in /*) ;; *) build_dir=$repo_dir/$build_dir ;; esac
tessera=$build_dir/bin/tessera
[[ -x $tessera ]] || die "no $tessera (build it: cmake -G Ninja -B $build_dir -DCMAKE_BUILD_TYPE=Release && ninja -C $build_dir tessera)"
command -v node >/dev/null || die "node is not installed (ONNX Runtime is driven through onnxruntime-node)"

# --- ONNX Runtime -------------------------------------------------------------------------------------------------
# shellcheck source=ort_env.sh
source "$bench_dir/ort_env.sh"
ort_setup "$bench_dir"

# --- models -------------------------------------------------------------------------------------------------------
# shellcheck source=zoo/models.sh
source "$bench_dir/zoo/models.sh"
model_dir=$build_dir/bench-models
mkdir -p "$model_dir"
missing=()
for m in "${models[@]}"; do [[ -s $model_dir/$m.onnx ]] || missing+=("$m"); done
if [[ ${#missing[@]} -gt 0 ]]; then
  log "generating ${missing[*]} into $model_dir ..."
  bench_generate "$model_dir" "${missing[@]}" ||
    die "model generation failed (needs a python with onnx + numpy; set PYTHON)"
fi
declare -A model_pins=()  # model -> its --shape flags (zoo models with symbolic inputs)
for m in "${models[@]}"; do
  bench_pins "$m" || die "cannot read the pins of $m"
  model_pins[$m]="${pins[*]}"
done

# --- helpers ------------------------------------------------------------------------------------------------------
ncpu=$(nproc 2>/dev/null || echo 1)
# shellcheck source=placements.sh
source "$bench_dir/placements.sh"
pin_cmd() { bench_pin_cmd "$@"; }
json_field() { sed -n "s/.*\"$1\": *\([-0-9.eE+]*\).*/\1/p" | head -n1; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) exit 1; if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
fmt_ms() { if [[ -z $1 ]]; then echo fail; else awk -v v="$1" 'BEGIN { printf(v < 1 ? "%.3f" : "%.2f", v) }'; fi; }
last_line() { grep -v '^[[:space:]]*$' "$1" | tail -n1; }

errfile=$(mktemp)
trap 'rm -f "$errfile"' EXIT
declare -A tessera_ms=() ort_ms=()

# Each run_* sets `val` to the process's median ms and returns 0, or records the error line and returns 1.
run_engine() {  # engine model threads; engine = ort or tessera:<backend set>
  local engine=$1 m=$2 n=$3 out cmd shape_flags
  read -r -a shape_flags <<<"${model_pins[$m]}"
  if [[ $engine == tessera:* ]]; then
    local set=${engine#tessera:}
    if bench_is_compiled "$set"; then  # the artifact compiled above
      cmd=("$tessera" bench "$model_dir/$m.$set.t$n.tsr" --threads "$n" --runs "$runs" --warmup "$warmup" --json)
    else
      cmd=("$tessera" bench "$model_dir/$m.onnx" --threads "$n" --runs "$runs" --warmup "$warmup" --json
        --backends "$set" --placement priority "${shape_flags[@]}")
    fi
  else
    cmd=(node "$bench_dir/ort_bench.js" "$model_dir/$m.onnx" --threads "$n" --runs "$runs" --warmup "$warmup"
      "${shape_flags[@]}")
    if [[ $ort_spin == 0 ]]; then cmd+=(--no-spin); fi
  fi
  # shellcheck disable=SC2046
  if out=$($(pin_cmd "$n") "${cmd[@]}" 2>"$errfile"); then
    val=$(json_field median_ms <<<"$out")
    [[ -n $val ]] && return 0
  fi
  local msg
  msg=$( (last_line "$errfile"; printf '%s\n' "$out") | grep -v '^[[:space:]]*$' | head -n1 || true)
  errors[$engine/$m/$n]=${msg:-"$engine exited with an error and no message"}
  return 1
}

# --- compile the cost-based placements -----------------------------------------------------------------------------
declare -A errors=() compile_ms_of=()
tune_dir=${TUNE_DIR:-$build_dir/bench-tune}
compile_tsv=${COMPILE_TSV:-$build_dir/bench-compile.tsv}
compiled_sets=()  # in the order they must be compiled: warm after default
for s in estimated default warm tuned; do
  for b in "${backend_sets[@]}"; do if [[ $b == "$s" ]]; then compiled_sets+=("$s"); break; fi; done
done
if [[ " ${compiled_sets[*]} " == *" warm "* && " ${compiled_sets[*]} " != *" default "* ]]; then
  die "BACKEND_SETS: warm compiles again with the cache default left; list default too"
fi
: >"$compile_tsv"
for n in "${thread_counts[@]}"; do
  for m in "${models[@]}"; do
    read -r -a shape_flags <<<"${model_pins[$m]}"
    for set in "${compiled_sets[@]}"; do
      if [[ $set == warm && -n ${errors[tessera:default/$m/$n]:-} ]]; then
        errors[tessera:warm/$m/$n]="not compiled: the default compile failed"
        continue
      fi
      if bench_compile "$set" "$model_dir/$m.onnx" "$model_dir/$m.$set.t$n.tsr" "$n" "$tune_dir" "${shape_flags[@]}"; then
        compile_ms_of[$set/$m/$n]=$compile_ms
        log "$set $m, $n thread(s), ${compile_ms} ms: $compile_line${compile_notes:+ [warning: $compile_notes]}"
      else
        errors[tessera:$set/$m/$n]=$compile_line
        log "$set $m, $n thread(s): compile failed: $compile_line"
      fi
      printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$m" "$n" "$set" "$compile_ms" "$compile_line" "$compile_notes" >>"$compile_tsv"
    done
  done
done

# --- measure ------------------------------------------------------------------------------------------------------
for n in "${thread_counts[@]}"; do
  for m in "${models[@]}"; do
    engines=(ort)
    for b in "${backend_sets[@]}"; do engines+=("tessera:$b"); done
    declare -A lists=()
    for ((r = 0; r < repeats; ++r)); do
      # Rotate which engine goes first, so none always runs on a cooler (or warmer) machine.
      order=("${engines[@]:r % ${#engines[@]}}" "${engines[@]:0:r % ${#engines[@]}}")
      for engine in "${order[@]}"; do
        if [[ -n ${errors[$engine/$m/$n]:-} ]]; then continue; fi  # a failing engine is not retried for this model
        run_engine "$engine" "$m" "$n" || continue
        lists[$engine]+="$val "
      done
    done
    line=$(printf '%-14s %d thread(s):' "$m" "$n")
    for engine in "${engines[@]}"; do
      if [[ -n ${lists[$engine]:-} ]]; then
        med=$(tr ' ' '\n' <<<"${lists[$engine]}" | grep . | median)
        if [[ $engine == ort ]]; then ort_ms[$m/$n]=$med; else tessera_ms[$engine/$m/$n]=$med; fi
      fi
      line+=" ${engine#tessera:} ${med:-fail} [${lists[$engine]:-}]"
      med=""
      if [[ -n ${errors[$engine/$m/$n]:-} ]]; then log "  $engine error: ${errors[$engine/$m/$n]}"; fi
    done
    unset lists
    log "$line"
  done
done

# --- report -------------------------------------------------------------------------------------------------------
results=$build_dir/bench-results.md
cpu=$(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo 2>/dev/null | head -n1)
{
  header="| model | threads |"
  rule="|---|---:|"
  for b in "${backend_sets[@]}"; do header+=" tessera $b ms |"; rule+="---:|"; done
  echo "$header ORT ms | ratio (best tessera) |"
  echo "$rule---:|---:|"
  for n in "${thread_counts[@]}"; do
    for m in "${models[@]}"; do
      o=${ort_ms[$m/$n]:-} best=""
      row="| $m | $n |"
      for b in "${backend_sets[@]}"; do
        t=${tessera_ms[tessera:$b/$m/$n]:-}
        row+=" $(fmt_ms "$t") |"
        if [[ -n $t ]] && { [[ -z $best ]] || awk -v a="$t" -v b="$best" 'BEGIN { exit !(a < b) }'; }; then best=$t; fi
      done
      ratio="-"
      if [[ -n $best && -n $o ]]; then ratio=$(awk -v t="$best" -v o="$o" 'BEGIN { printf "%.2f", o / t }'); fi
      echo "$row $(fmt_ms "$o") | $ratio |"
    done
  done
  echo
  echo "Median of $repeats per-process medians ($runs runs after $warmup warm-up each, engines interleaved);" \
    "ratio = ORT ms / fastest tessera ms (> 1: tessera faster)."
  echo "ONNX Runtime $ort_version (onnxruntime-node, CPU EP, graph optimisation 'all', inter-op 1, spinning $([[ $ort_spin == 0 ]] && echo off || echo on));" \
    "${cpu:-unknown CPU}, $ncpu cores; pinning: $(command -v taskset >/dev/null && echo taskset || echo none)."
  for n in "${thread_counts[@]}"; do
    for m in "${models[@]}"; do
      for b in "${backend_sets[@]}"; do
        if [[ -n ${errors[tessera:$b/$m/$n]:-} ]]; then echo "- tessera $b $m, $n thread(s): ${errors[tessera:$b/$m/$n]}"; fi
      done
      if [[ -n ${errors[ort/$m/$n]:-} ]]; then echo "- ORT $m, $n thread(s): ${errors[ort/$m/$n]}"; fi
    done
  done
  if [[ ${#compiled_sets[@]} -gt 0 ]]; then
    echo
    header="| model | threads |" rule="|---|---:|"
    for s in "${compiled_sets[@]}"; do header+=" compile $s ms |"; rule+="---:|"; done
    echo "$header"
    echo "$rule"
    for n in "${thread_counts[@]}"; do
      for m in "${models[@]}"; do
        row="| $m | $n |"
        for s in "${compiled_sets[@]}"; do row+=" ${compile_ms_of[$s/$m/$n]:-fail} |"; done
        echo "$row"
      done
    done
    echo
    echo "Wall time of \`tessera compile\` (process start to exit, pinned like the timing runs); default: fresh tune" \
      "cache, warm: the cache default left, tuned: --tune with a fresh cache. Compile lines in $compile_tsv."
  fi
} | tee "$results"

tsv=${RESULTS_TSV:-$build_dir/bench-results.tsv}
{
  for n in "${thread_counts[@]}"; do
    for m in "${models[@]}"; do
      printf '%s\t%s\tort\t%s\n' "$m" "$n" "${ort_ms[$m/$n]:-}"
      for b in "${backend_sets[@]}"; do printf '%s\t%s\ttessera:%s\t%s\n' "$m" "$n" "$b" "${tessera_ms[tessera:$b/$m/$n]:-}"; done
    done
  done
} >"$tsv"

log "written $results, $tsv and $compile_tsv ($(($(date +%s) - script_start)) s)"
if [[ ${#tessera_ms[@]} -eq 0 && ${#ort_ms[@]} -eq 0 ]]; then exit 1; fi
