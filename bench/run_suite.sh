#!/usr/bin/env bash
# The benchmark suite: tessera against ONNX Runtime on the classic models and the zoo (bench/zoo: exporter-style
# speech, OCR, VAD, keyword, ViT, Whisper and YOLO models), with achieved GFLOP/s against the machine's FMA peak, and
# the cost of ahead-of-time compilation (compile time, artifact size, artifact load time).
#
# Usage: bench/run_suite.sh [BUILD_DIR]      (default build; needs BUILD_DIR/bin/tessera, a Release build)
# Environment: THREADS (default 2), REPEATS (default 9), RUNS (default 20), WARMUP (default 3) for the light models;
#              BERT_RUNS (default 10), BERT_WARMUP (default 2), BERT_REPEATS (default 5) for the heavy models
#              (bert_base*, vit_b16, whisper_tiny_enc);
#              LOAD_REPEATS (default 5); PYTHON (python with onnx + numpy, default /usr/bin/python3);
#              MODELS (default "resnet50 mobilenet_v2 squeezenet bert_base mlp empty" followed by the zoo: "melspec
#              dbnet crnn silero_vad kws vit_b16 whisper_tiny_enc yolo"; empty is a graph without nodes, for the
#              per-run overhead); OUT (default bench/RESULTS.md).
#
# Steps:
#   1. generates the models into BUILD_DIR/bench-models with tests/e2e/gen_models.py and bench/zoo/gen_zoo.py (fixed
#      seeds; bert_base is the BERT-base encoder: 12 layers, hidden 768, 12 heads, sequence 128); a zoo model is
#      counted, timed and compiled at its bench pins (bench/zoo/pins.txt, --shape flags);
#   2. builds bench/peak_fma.cc (g++ -O3 -march=native) into BUILD_DIR/bench-suite and measures the FMA peak; builds
#      bench/gemm_bench.cc with the native SGEMM and measures it on large shapes;
#   3. counts each model's Conv/Gemm/MatMul FLOPs with bench/model_flops.py;
#   4. times ORT and the tessera placements with bench/compare_ort.sh (interleaved, pinned), THREADS threads, placements
#      BACKEND_SETS (default "native dnnl,native xnnpack,native dnnl,xnnpack,native estimated default": each engine
#      alone in priority placement, both engines in priority order, cost-based placement from estimates, and the
#      default — what ./run.sh does: cost-based placement with `compile --tune`);
#   5. per model: wall time of `tessera compile` without --tune and without a tune cache, and of `tessera compile
#      --tune` with an empty cache; the tuned artifact's file_size (`tessera inspect`), load time (load_ms of
#      `tessera bench OUT.tsr --runs 1 --warmup 0`, median of LOAD_REPEATS) and arena;
#   6. writes OUT (bench/suite_report.py) with the machine line and the date.
# Not part of ./test.sh: it takes several minutes and wants a quiet machine.
set -euo pipefail

suite_start=$(date +%s)
bench_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_dir=$(dirname "$bench_dir")
build_dir=${1:-build}
case $build_dir in /*) ;; *) build_dir=$repo_dir/$build_dir ;; esac
python=${PYTHON:-/usr/bin/python3}
[[ -x $python ]] || python=python3
threads=${THREADS:-2}
read -r -a models <<<"${MODELS:-resnet50 mobilenet_v2 squeezenet bert_base mlp empty melspec dbnet crnn silero_vad kws vit_b16 whisper_tiny_enc yolo}"
export BACKEND_SETS=${BACKEND_SETS:-"native dnnl,native xnnpack,native dnnl,xnnpack,native estimated default"}
load_repeats=${LOAD_REPEATS:-5}
out=${OUT:-$bench_dir/RESULTS.md}

log() { printf '[suite %3ds] %s\n' "$(($(date +%s) - suite_start))" "$*" >&2; }
die() { log "error: $*"; exit 1; }
json_field() { sed -n "s/.*\"$1\": *\([-0-9.eE+]*\).*/\1/p" | head -n1; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) exit 1; if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
now_ms() { date +%s%3N; }

tessera=$build_dir/bin/tessera
[[ -x $tessera ]] || die "no $tessera (cmake -G Ninja -B $build_dir -DCMAKE_BUILD_TYPE=Release && ninja -C $build_dir)"
work=$build_dir/bench-suite
model_dir=$build_dir/bench-models
mkdir -p "$work" "$model_dir"
log "load: $(uptime | sed 's/.*load average/load average/')"

# 1. models -------------------------------------------------------------------------------------------------------
missing=()
for m in "${models[@]}"; do [[ -s $model_dir/$m.onnx || $m == empty ]] || missing+=("$m"); done
if [[ ! -s $model_dir/empty.onnx ]]; then  # no nodes: the output is the input
  "$python" -c "
import sys, onnx
from onnx import helper, TensorProto
vi = helper.make_tensor_value_info('x', TensorProto.FLOAT, [1, 16])
m = helper.make_model(helper.make_graph([], 'empty', [vi], [vi]), opset_imports=[helper.make_opsetid('', 17)])
m.ir_version = 8
onnx.save(m, sys.argv[1])" "$model_dir/empty.onnx" || die "cannot write empty.onnx"
fi
# shellcheck source=zoo/models.sh
source "$bench_dir/zoo/models.sh"
if [[ ${#missing[@]} -gt 0 ]]; then
  log "generating ${missing[*]}"
  bench_generate "$model_dir" "${missing[@]}" ||
    die "model generation failed (needs a python with onnx + numpy; set PYTHON)"
fi
declare -A model_pins=()  # model -> its --shape flags (zoo models with symbolic inputs)
for m in "${models[@]}"; do
  bench_pins "$m" || die "cannot read the pins of $m"
  model_pins[$m]="${pins[*]}"
done

# 2. peak ---------------------------------------------------------------------------------------------------------
peak_bin=$work/peak_fma
if [[ ! -x $peak_bin || $bench_dir/peak_fma.cc -nt $peak_bin ]]; then
  log "building $peak_bin"
  g++ -O3 -march=native -std=c++17 -Wall -Wextra -pthread "$bench_dir/peak_fma.cc" -o "$peak_bin" ||
    die "cannot build peak_fma"
fi
"$peak_bin" >"$work/peak.json"
log "peak: $(cat "$work/peak.json")"
gemm_bin=$work/gemm_bench
if [[ ! -x $gemm_bin || $bench_dir/gemm_bench.cc -nt $gemm_bin || $repo_dir/src/ops/kernels/gemm.cc -nt $gemm_bin ]]; then
  log "building $gemm_bin"
  g++ -std=c++20 -O3 -march=native -I"$repo_dir/src" "$bench_dir/gemm_bench.cc" "$repo_dir/src/ops/kernels/gemm.cc" \
    "$repo_dir/src/runtime/thread_pool.cc" -lpthread -o "$gemm_bin" || die "cannot build gemm_bench"
fi
# shellcheck disable=SC2046
taskset -c 0,1 "$gemm_bin" 1024 1024 1024 2048 2048 2048 >"$work/gemm.txt" 2>&1 || die "gemm_bench failed"
log "native SGEMM: $(tr '\n' ' ' <"$work/gemm.txt")"

# 3. FLOPs --------------------------------------------------------------------------------------------------------
: >"$work/flops.jsonl"
for m in "${models[@]}"; do
  read -r -a shape_flags <<<"${model_pins[$m]}"
  "$python" "$bench_dir/model_flops.py" "$model_dir/$m.onnx" "${shape_flags[@]}" >>"$work/flops.jsonl" ||
    die "model_flops failed on $m"
done
log "FLOPs counted"

# 4. latency ------------------------------------------------------------------------------------------------------
light=() heavy=()
for m in "${models[@]}"; do
  case $m in bert_base* | vit_b16 | whisper_tiny_enc) heavy+=("$m") ;; *) light+=("$m") ;; esac
done
: >"$work/latency.tsv"
if [[ ${#light[@]} -gt 0 ]]; then
  log "timing ${light[*]}"
  THREADS=$threads REPEATS=${REPEATS:-9} RESULTS_TSV=$work/latency_light.tsv "$bench_dir/compare_ort.sh" "$build_dir" "${light[@]}" >/dev/null
  cat "$work/latency_light.tsv" >>"$work/latency.tsv"
fi
if [[ ${#heavy[@]} -gt 0 ]]; then
  log "timing ${heavy[*]}"
  THREADS=$threads REPEATS=${BERT_REPEATS:-5} RUNS=${BERT_RUNS:-10} WARMUP=${BERT_WARMUP:-2} \
    RESULTS_TSV=$work/latency_heavy.tsv "$bench_dir/compare_ort.sh" "$build_dir" "${heavy[@]}" >/dev/null
  cat "$work/latency_heavy.tsv" >>"$work/latency.tsv"
fi

# 5. ahead-of-time compilation ------------------------------------------------------------------------------------
printf 'model\tcompile_ms\ttune_ms\tfile_size\tload_ms\tarena_bytes\tcompile_line\n' >"$work/artifact.tsv"
for m in "${models[@]}"; do
  tsr=$work/$m.tsr
  read -r -a shape_flags <<<"${model_pins[$m]}"
  t0=$(now_ms)
  if ! line=$("$tessera" compile "$model_dir/$m.onnx" -o "$tsr" --tune-cache= "${shape_flags[@]}" 2>&1 | tail -n1); then
    log "compile failed for $m: $line"
    printf '%s\t\t\t\t\t\t%s\n' "$m" "$line" >>"$work/artifact.tsv"
    continue
  fi
  compile_ms=$(($(now_ms) - t0))
  rm -f "$work/tune-$m.json"
  t0=$(now_ms)
  if ! line=$(taskset -c 0,1 "$tessera" compile "$model_dir/$m.onnx" -o "$tsr" --tune --tune-cache "$work/tune-$m.json" \
    --threads "$threads" "${shape_flags[@]}" 2>&1 | tail -n1); then
    log "compile --tune failed for $m: $line"
    printf '%s\t%s\t\t\t\t\t%s\n' "$m" "$compile_ms" "$line" >>"$work/artifact.tsv"
    continue
  fi
  tune_ms=$(($(now_ms) - t0))
  size=$("$tessera" inspect "$tsr" --json | json_field file_size)
  loads="" arena=""
  for ((i = 0; i < load_repeats; ++i)); do
    j=$("$tessera" bench "$tsr" --threads "$threads" --runs 1 --warmup 0 --json)
    loads+="$(json_field load_ms <<<"$j") "
    arena=$(json_field arena_bytes <<<"$j")
  done
  load_ms=$(tr ' ' '\n' <<<"$loads" | grep . | median)
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$m" "$compile_ms" "$tune_ms" "$size" "$load_ms" "$arena" "$line" >>"$work/artifact.tsv"
  log "$m: compile ${compile_ms} ms, --tune ${tune_ms} ms, ${size} bytes, load ${load_ms} ms [$loads], arena $arena"
  rm -f "$tsr"
done

# 6. report -------------------------------------------------------------------------------------------------------
cpu=$(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo 2>/dev/null | head -n1)
ort_version=$(NODE_PATH=$bench_dir/node_modules node -e \
  "process.stdout.write(require('onnxruntime-node/package.json').version)" 2>/dev/null || echo unknown)
"$python" "$bench_dir/suite_report.py" --work "$work" --models "${models[*]}" --threads "$threads" \
  --backend-sets "$BACKEND_SETS" --machine "${cpu:-unknown CPU}, $(nproc) cores, $(uname -r)" \
  --ort-version "$ort_version" --git "$(git -C "$repo_dir" rev-parse --short HEAD 2>/dev/null || echo unknown)" \
  --settings "light models: ${REPEATS:-9} repeats x ${RUNS:-20} runs after ${WARMUP:-3} warm-up; heavy models (bert_base, vit_b16, whisper_tiny_enc): ${BERT_REPEATS:-5} repeats x ${BERT_RUNS:-10} runs after ${BERT_WARMUP:-2} warm-up; load time: median of $load_repeats" \
  --seconds "$(($(date +%s) - suite_start))" >"$out"
log "written $out"
