# Sourced by bench_precision.sh and bench_dynq.sh after `here` is set: reads [BUILD_DIR] [MODELS...] from "$@" (the
# default models in `default_models`), and sets repo, build, models, python, threads, repeats, tessera, the backend
# path, and median() (of numbers on stdin).
repo=$(cd "$here/../.." && pwd)
build=${1:-build}
case $build in /*) ;; *) build=$repo/$build ;; esac
shift || true
models=("$@")
[[ ${#models[@]} -gt 0 ]] || models=("${default_models[@]}")
python=${PYTHON:-/usr/bin/python3}
threads=${THREADS:-2}
repeats=${REPEATS:-3}
tessera=$build/bin/tessera
export TESSERA_BACKEND_PATH=${TESSERA_BACKEND_PATH:-$build/lib/tessera}

median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
