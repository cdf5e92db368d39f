#!/usr/bin/env bash
# The benchmark suite: tessera against ONNX Runtime on the classic models and the zoo (bench/zoo: exporter-style
# speech, OCR, VAD, keyword, ViT, Whisper and YOLO models), with achieved GFLOP/s against the machine's FMA peak, the
# goals of "placement grounded in measurement" (the default placement against the best single backend, estimates
# against measurements, compile time with measuring on), and the cost of ahead-of-time compilation.
#
# Usage: bench/run_suite.sh [BUILD_DIR]      (default build; needs BUILD_DIR/bin/tessera, a Release build)
# Environment: THREADS (default 2), REPEATS (default 9), RUNS (default 20), WARMUP (default 3) for the light models;
#              BERT_RUNS (default 10), BERT_WARMUP (default 2), BERT_REPEATS (default 5) for the heavy models
#              (bert_base*, vit_b16, whisper_tiny_enc);
#              LOAD_REPEATS (default 5); PYTHON (python with onnx + numpy, default /usr/bin/python3);
#              MODELS (default "resnet50 mobilenet_v2 squeezenet bert_base mlp empty" followed by the zoo: "melspec
#              dbnet crnn silero_vad kws vit_b16 whisper_tiny_enc yolo unet conformer ecapa"; empty is a graph without nodes, for the
#              per-run overhead); BACKEND_SETS (default "native dnnl,native xnnpack,native estimated default warm
#              tuned", see bench/compare_ort.sh and bench/placements.sh); TUNE=0 skips step 6; OUT (default
#              bench/RESULTS.md).
#
# Steps (work folder BUILD_DIR/bench-suite):
#   1. generates the models into BUILD_DIR/bench-models with tests/e2e/gen_models.py and bench/zoo/gen_zoo.py (fixed
#      seeds; bert_base is the BERT-base encoder: 12 layers, hidden 768, 12 heads, sequence 128); a zoo model is
#      counted, timed and compiled at its bench pins (bench/zoo/pins.txt, --shape flags);
#   2. builds bench/peak_fma.cc (g++ -O3 -march=native) into the work folder and measures the FMA peak; builds
#      bench/gemm_bench.cc with the native SGEMM and measures it on large shapes;
#   3. counts each model's Conv/Gemm/MatMul FLOPs with bench/model_flops.py;
#   4. compiles and times ORT and the tessera placements with bench/compare_ort.sh (interleaved, pinned), THREADS
#      threads: each engine alone in priority placement (native, dnnl,native, xnnpack,native: the single backends),
#      `estimated` (cost model, nothing measured), `default` (plain `tessera compile`, empty tune cache: a fresh cache
#      file per model, so no measurement or calibration carries over from another model or an earlier run), `warm`
#      (the same compile again with the cache default left) and `tuned` (`--tune`, fresh cache); the compile wall
#      times and compile lines land in compile.tsv, the tune caches under tune/;
#   5. per model: the default artifact's file_size (`tessera inspect`), load time (load_ms of `tessera bench OUT.tsr
#      --runs 1 --warmup 0`, median of LOAD_REPEATS) and arena; compile times come from step 4 (a compiled set that
#      BACKEND_SETS left out is compiled here, timed the same way);
#   6. per model: `tessera partition --tune --json` with a fresh tune cache (partition/MODEL.json; every measurement,
#      with the estimate made before it, appended to measurements.jsonl with its model; wall time in partition.tsv);
#   7. writes OUT (bench/suite_report.py) with the machine line and the date.
# Expected time on the 2-core machine (AMD EPYC, quiet), estimated from per-inference and compile times rather than
# timed end to end: about 45 minutes for the default MODELS. Step 4 about 35: the timing runs about 27 (72 processes
# per light model, 40 per heavy one; yolo, dbnet, resnet50 and the three transformers take three quarters of it) and
# the four compiles per model about 7 (the --tune ones of the transformers and of the 640x640 detectors the most);
# step 6 (a full --tune per model) about 5; the rest 2-3 (plus model generation on a first run).
# Not part of ./test.sh: it takes long and wants a quiet machine (a default compile that measures while other
# processes hold the cores keeps nothing in its cache; the report flags it).
set -euo pipefail

suite_start=$(date +%s)
bench_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_dir=$(dirname "$bench_dir")
build_dir=${1:-build}
case $build_dir in /*) ;; *) build_dir=$repo_dir/$build_dir ;; esac
python=${PYTHON:-/usr/bin/python3}
[[ -x $python ]] || python=python3
threads=${THREADS:-2}
read -r -a models <<<"${MODELS:-resnet50 mobilenet_v2 squeezenet bert_base mlp empty melspec dbnet crnn silero_vad kws vit_b16 whisper_tiny_enc yolo unet conformer ecapa}"
export BACKEND_SETS=${BACKEND_SETS:-"native dnnl,native xnnpack,native estimated default warm tuned"}
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
load_now() { sed 's/^\([^ ]* [^ ]* [^ ]*\).*/\1/' /proc/loadavg 2>/dev/null || echo unknown; }
load_start=$(load_now)
log "load average: $load_start"

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
if [[ ! -x $gemm_bin || $bench_dir/gemm_bench.cc -nt $gemm_bin || $build_dir/libtessera_ops.a -nt $gemm_bin ]]; then
  log "building $gemm_bin"
  # The build's own GEMM (both instruction sets, chosen at run time), from its static libraries.
  g++ -std=c++20 -O3 -march=native -I"$repo_dir/src" "$bench_dir/gemm_bench.cc" "$build_dir/libtessera_ops.a" \
    "$build_dir/libtessera_util.a" -lpthread -o "$gemm_bin" || die "cannot build gemm_bench"
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

# 4. latency (and the compiles of the compiled placements) ---------------------------------------------------------
light=() heavy=()
for m in "${models[@]}"; do
  case $m in bert_base* | vit_b16 | whisper_tiny_enc) heavy+=("$m") ;; *) light+=("$m") ;; esac
done
: >"$work/latency.tsv"
: >"$work/compile.tsv"
rm -rf "$work/tune"
if [[ ${#light[@]} -gt 0 ]]; then
  log "compiling and timing ${light[*]}"
  THREADS=$threads REPEATS=${REPEATS:-9} RESULTS_TSV=$work/latency_light.tsv COMPILE_TSV=$work/compile_light.tsv \
    TUNE_DIR=$work/tune "$bench_dir/compare_ort.sh" "$build_dir" "${light[@]}" >/dev/null
  cat "$work/latency_light.tsv" >>"$work/latency.tsv"
  cat "$work/compile_light.tsv" >>"$work/compile.tsv"
fi
if [[ ${#heavy[@]} -gt 0 ]]; then
  log "compiling and timing ${heavy[*]}"
  THREADS=$threads REPEATS=${BERT_REPEATS:-5} RUNS=${BERT_RUNS:-10} WARMUP=${BERT_WARMUP:-2} \
    RESULTS_TSV=$work/latency_heavy.tsv COMPILE_TSV=$work/compile_heavy.tsv TUNE_DIR=$work/tune \
    "$bench_dir/compare_ort.sh" "$build_dir" "${heavy[@]}" >/dev/null
  cat "$work/latency_heavy.tsv" >>"$work/latency.tsv"
  cat "$work/compile_heavy.tsv" >>"$work/compile.tsv"
fi

# 5. ahead-of-time compilation ------------------------------------------------------------------------------------
# shellcheck source=placements.sh
source "$bench_dir/placements.sh"
printf 'model\tartifact\tfile_size\tload_ms\tarena_bytes\n' >"$work/artifact.tsv"
for m in "${models[@]}"; do
  read -r -a shape_flags <<<"${model_pins[$m]}"
  # Compiles step 4 did not do (their set not in BACKEND_SETS): timed here the same way, warm after default.
  for set in estimated default warm tuned; do
    if awk -F'\t' -v m="$m" -v n="$threads" -v s="$set" '$1 == m && $2 == n && $3 == s { found = 1 } END { exit !found }' \
      "$work/compile.tsv"; then continue; fi
    log "$m: compiling $set (not in BACKEND_SETS)"
    tsr=$work/$m.$set.t$threads.tsr
    bench_compile "$set" "$model_dir/$m.onnx" "$tsr" "$threads" "$work/tune" "${shape_flags[@]}" ||
      log "compile $set failed for $m: $compile_line"
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$m" "$threads" "$set" "$compile_ms" "$compile_line" "$compile_notes" >>"$work/compile.tsv"
    if [[ $set != default ]]; then rm -f "$tsr"; fi
  done
  tsr=$model_dir/$m.default.t$threads.tsr
  [[ -s $work/$m.default.t$threads.tsr ]] && tsr=$work/$m.default.t$threads.tsr
  if [[ ! -s $tsr ]]; then
    log "$m: no default artifact"
    printf '%s\t\t\t\t\n' "$m" >>"$work/artifact.tsv"
    continue
  fi
  size=$("$tessera" inspect "$tsr" --json | json_field file_size)
  loads="" arena=""
  for ((i = 0; i < load_repeats; ++i)); do
    j=$("$tessera" bench "$tsr" --threads "$threads" --runs 1 --warmup 0 --json)
    loads+="$(json_field load_ms <<<"$j") "
    arena=$(json_field arena_bytes <<<"$j")
  done
  load_ms=$(tr ' ' '\n' <<<"$loads" | grep . | median)
  printf '%s\t%s\t%s\t%s\t%s\n' "$m" "default" "$size" "$load_ms" "$arena" >>"$work/artifact.tsv"
  log "$m: default artifact ${size} bytes, load ${load_ms} ms [$loads], arena $arena"
  rm -f "$work/$m.default.t$threads.tsr"
done

# 6. estimates against measurements -------------------------------------------------------------------------------
: >"$work/measurements.jsonl"
printf 'model\tpartition_ms\tmeasured\terror\n' >"$work/partition.tsv"
rm -rf "$work/partition"
mkdir -p "$work/partition"
if [[ ${TUNE:-1} != 0 ]]; then
  for m in "${models[@]}"; do
    read -r -a shape_flags <<<"${model_pins[$m]}"
    cache=$work/tune/$m.t$threads.partition.json
    rm -f "$cache"
    t0=$(now_ms)
    # shellcheck disable=SC2046
    if env -u TESSERA_TUNE -u TESSERA_TUNE_CACHE $(bench_pin_cmd "$threads") "$tessera" partition "$model_dir/$m.onnx" \
      --tune --json --threads "$threads" --tune-cache "$cache" "${shape_flags[@]}" >"$work/partition/$m.json" \
      2>"$work/partition/$m.err"; then
      ms=$(($(now_ms) - t0))
      count=$("$python" -c '
import json, sys
report, model = json.load(open(sys.argv[1])), sys.argv[2]
with open(sys.argv[3], "a") as f:
    for x in report.get("measurements", []):
        f.write(json.dumps(dict(model=model, **x), sort_keys=True) + "\n")
print(len(report.get("measurements", [])))' "$work/partition/$m.json" "$m" "$work/measurements.jsonl") || count=""
      printf '%s\t%s\t%s\t\n' "$m" "$ms" "$count" >>"$work/partition.tsv"
      log "$m: partition --tune ${ms} ms, $count measurements"
    else
      err=$(grep -v '^[[:space:]]*$' "$work/partition/$m.err" | tail -n1 || true)
      printf '%s\t\t\t%s\n' "$m" "${err:-partition --tune failed}" >>"$work/partition.tsv"
      log "$m: partition --tune failed: $err"
    fi
  done
fi

# 7. report -------------------------------------------------------------------------------------------------------
cpu=$(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo 2>/dev/null | head -n1)
ort_version=$(NODE_PATH=$bench_dir/node_modules node -e \
  "process.stdout.write(require('onnxruntime-node/package.json').version)" 2>/dev/null || echo unknown)
zoo_models=$("$python" "$bench_dir/zoo/gen_zoo.py" --list | tr "\n" " ")
"$python" "$bench_dir/suite_report.py" --work "$work" --models "${models[*]}" --zoo "$zoo_models" --threads "$threads" \
  --backend-sets "$BACKEND_SETS" --machine "${cpu:-unknown CPU}, $(nproc) cores, $(uname -r)" \
  --ort-version "$ort_version" --git "$(git -C "$repo_dir" rev-parse --short HEAD 2>/dev/null || echo unknown)" \
  --settings "light models: ${REPEATS:-9} repeats x ${RUNS:-20} runs after ${WARMUP:-3} warm-up; heavy models (bert_base, vit_b16, whisper_tiny_enc): ${BERT_REPEATS:-5} repeats x ${BERT_RUNS:-10} runs after ${BERT_WARMUP:-2} warm-up; load time: median of $load_repeats" \
  --seconds "$(($(date +%s) - suite_start))" --load "at the start $load_start, at the end $(load_now)" >"$out"
log "written $out"
