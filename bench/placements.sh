# Sourced by bench/compare_ort.sh and bench/run_suite.sh (after they set `tessera`): the one definition of the
# compiled tessera placements the benchmarks time, and of how their compiles are timed.
#
#   estimated  `tessera compile --no-tune --tune-cache=`: cost-based placement from the estimates alone, nothing
#              measured, no cache read or written, nominal machine figures
#   default    `tessera compile` with no flags (but the model's pins and --threads), starting from an EMPTY tune cache:
#              a fresh cache file per model and thread count, handed over as $TESSERA_TUNE_CACHE so the command line
#              is exactly a user's; the compile calibrates the machine and measures what matters within the default
#              budget, as on a machine tessera has never seen
#   warm       the same compile again with the cache `default` left (must follow `default`)
#   tuned      `tessera compile --tune` with a fresh cache file: every candidate region measured thoroughly
#
#   bench_is_compiled SET                      0 when SET is one of the four above (a LIST set is timed from the .onnx)
#   bench_compile SET ONNX OUT THREADS DIR [FLAGS...]
#                                              compiles ONNX to OUT as SET at THREADS threads, pinned, the cache files
#                                              under DIR; sets compile_ms (wall), compile_line (the compile's last
#                                              stdout line, or its error) and compile_notes (its warnings, joined by
#                                              " / "); returns 1 when the compile failed
#   bench_pin_cmd N                            prints the taskset prefix that pins N threads to cores 0..N-1, or
#                                              nothing (no taskset, or fewer cores)
# The caller's TESSERA_TUNE and TESSERA_TUNE_CACHE never reach these compiles: `default` means the default.
# shellcheck shell=bash
# shellcheck disable=SC2034  # compile_ms, compile_line and compile_notes are this file's answers to its caller

bench_is_compiled() {
  case $1 in estimated | default | warm | tuned) return 0 ;; *) return 1 ;; esac
}

bench_pin_cmd() {
  local n=$1 cpus=0 i
  if command -v taskset >/dev/null && ((n <= $(nproc 2>/dev/null || echo 1))); then
    for ((i = 1; i < n; ++i)); do cpus+=",$i"; done
    printf 'taskset -c %s' "$cpus"
  fi
}

bench_compile() {
  local set=$1 onnx=$2 out=$3 n=$4 dir=$5
  shift 5
  local base cache flags=() env_args=(-u TESSERA_TUNE -u TESSERA_TUNE_CACHE) err std rc=0 t0
  base=$(basename "$onnx" .onnx)
  mkdir -p "$dir"
  case $set in
    estimated) flags=(--no-tune --tune-cache=) ;;
    default | warm)
      # (A default compile that measured while other processes held the cores caches nothing, and says so in a
      # warning; the warm compile then starts from an empty cache too, and its compile line shows it: reused 0.)
      cache=$dir/$base.t$n.default.json
      if [[ $set == default ]]; then rm -f "$cache"; fi
      env_args+=("TESSERA_TUNE_CACHE=$cache") ;;
    tuned)
      cache=$dir/$base.t$n.tuned.json
      rm -f "$cache"
      flags=(--tune --tune-cache "$cache") ;;
    *) compile_ms="" compile_line="bench_compile: unknown set '$set'" compile_notes=""; return 1 ;;
  esac
  err=$(mktemp) std=$(mktemp)
  rm -f "$out"
  t0=$(date +%s%3N)
  # shellcheck disable=SC2046,SC2154  # word-split the taskset prefix; `tessera` is the caller's
  env "${env_args[@]}" $(bench_pin_cmd "$n") "$tessera" compile "$onnx" -o "$out" --threads "$n" "${flags[@]}" "$@" \
    >"$std" 2>"$err" || rc=$?
  compile_ms=$(($(date +%s%3N) - t0))
  compile_line=$(grep -v '^[[:space:]]*$' "$std" | tail -n1 || true)
  compile_notes=$(grep -i 'warning' "$err" | sed 's/^tessera: warning: //' | paste -sd'|' - | sed 's/|/ \/ /g' || true)
  if ((rc != 0)) || [[ ! -s $out ]]; then
    compile_line=$(grep -v '^[[:space:]]*$' "$err" | tail -n1 || true)
    compile_line=${compile_line:-"tessera compile exited with status $rc and no message"}
    compile_ms=""
  fi
  rm -f "$err" "$std"
  [[ -n $compile_ms ]]
}
