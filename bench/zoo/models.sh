# Sourced by bench/compare_ort.sh and bench/run_suite.sh (after they set `python` and `repo_dir`): which generator
# writes a benchmark model, and the --shape pins a zoo model is timed at (bench/zoo/pins.txt, read through
# `gen_zoo.py --pins MODEL --bench`, the one parser of that table).
#   bench_pins MODEL          sets the array `pins` to MODEL's --shape flags (empty for a model that is not in the zoo
#                             or has no symbolic input); returns 1 when the zoo generator cannot be asked
#   bench_generate DIR M...   writes DIR/M.onnx for every M missing there: zoo models with bench/zoo/gen_zoo.py, the
#                             others with tests/e2e/gen_models.py; returns 1 when a generator fails
# shellcheck shell=bash

declare -A _bench_pins=() _bench_is_zoo=()
_bench_zoo_gen=$repo_dir/bench/zoo/gen_zoo.py

_bench_lookup() {  # MODEL: fills the two caches (one Python start per model)
  local m=$1 line rc=0
  [[ -n ${_bench_is_zoo[$m]:-} ]] && return 0
  line=$("$python" "$_bench_zoo_gen" --pins "$m" --bench) || rc=$?
  case $rc in
    0) _bench_is_zoo[$m]=1 _bench_pins[$m]=$line ;;
    3) _bench_is_zoo[$m]=0 ;;
    *) printf '%s --pins %s failed (exit %d)\n' "$_bench_zoo_gen" "$m" "$rc" >&2; return 1 ;;
  esac
}

bench_pins() {
  _bench_lookup "$1" || return 1
  read -r -a pins <<<"${_bench_pins[$1]:-}"
}

bench_generate() {
  local dir=$1 m
  shift
  local zoo=() plain=()
  for m in "$@"; do
    [[ -s $dir/$m.onnx ]] && continue
    _bench_lookup "$m" || return 1
    if [[ ${_bench_is_zoo[$m]} == 1 ]]; then zoo+=("$m"); else plain+=("$m"); fi
  done
  if [[ ${#plain[@]} -gt 0 ]]; then
    (IFS=,; "$python" "$repo_dir/tests/e2e/gen_models.py" "$dir" --models "${plain[*]}") >&2 || return 1
  fi
  if [[ ${#zoo[@]} -gt 0 ]]; then
    (IFS=,; "$python" "$_bench_zoo_gen" "$dir" --models "${zoo[*]}") >&2 || return 1
  fi
  return 0
}
