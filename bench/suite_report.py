#!/usr/bin/env python3
"""Writes bench/RESULTS.md from the files bench/run_suite.sh leaves in its work folder.

Input (--work DIR): peak.json (bench/peak_fma), gemm.txt (bench/gemm_bench), flops.jsonl (bench/model_flops.py,
one line per model), latency.tsv (bench/compare_ort.sh's RESULTS_TSV lines "model threads engine median_ms"),
artifact.tsv (model, compile_ms, tune_ms, file_size, load_ms, arena_bytes, compile_line). Output: Markdown on stdout.
Method: per model, GFLOP/s = dense-op FLOPs / median time, and % of peak divides by the FMA peak measured at the same
thread count; ratios are ORT ms / tessera ms (> 1: tessera faster). The best single backend is the fastest of the
placements that use one engine (native, or one plugin with native for the rest). The goals of the benchmark issue
are checked against the `default` placement (what ./run.sh gives).
"""
import math
import argparse
import csv
import datetime
import json
import os
import sys


def fmt_ms(v):
    if v is None:
        return "fail"
    if v < 0.01:
        return "%.4f" % v
    return "%.3f" % v if v < 1 else "%.2f" % v


def single_engine(s):
    """A placement that uses one engine: native alone or one plugin before native."""
    parts = s.split(",")
    return s == "native" or (len(parts) == 2 and parts[1] == "native")


def read_gemm(path):
    """(M, N, K, GFLOP/s on 2 threads) rows of gemm_bench's table."""
    rows = []
    if not os.path.exists(path):
        return rows
    with open(path) as f:
        for line in f:
            t = line.split()
            if len(t) == 9 and t[0].isdigit():
                rows.append((int(t[0]), int(t[1]), int(t[2]), int(t[5]), float(t[6]), float(t[8])))
    return rows


def read_latency(path):
    lat = {}
    with open(path) as f:
        for row in csv.reader(f, delimiter="\t"):
            if len(row) < 4:
                continue
            model, _threads, engine, ms = row[:4]
            lat[(model, engine)] = float(ms) if ms else None
    return lat


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--models", required=True, help="space-separated model names")
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--backend-sets", required=True, help="space-separated tessera placements")
    ap.add_argument("--machine", default="")
    ap.add_argument("--ort-version", default="unknown")
    ap.add_argument("--git", default="unknown")
    ap.add_argument("--settings", default="")
    ap.add_argument("--seconds", default="")
    a = ap.parse_args(argv)

    models, sets = a.models.split(), a.backend_sets.split()
    with open(os.path.join(a.work, "peak.json")) as f:
        peak = json.load(f)
    peak_g = peak["gflops_1t"] if a.threads == 1 else peak["gflops_2t"]
    flops = {}
    with open(os.path.join(a.work, "flops.jsonl")) as f:
        for line in f:
            d = json.loads(line)
            flops[os.path.splitext(os.path.basename(d["model"]))[0]] = d
    lat = read_latency(os.path.join(a.work, "latency.tsv"))
    art = {}
    with open(os.path.join(a.work, "artifact.tsv")) as f:
        for row in csv.DictReader(f, delimiter="\t"):
            art[row["model"]] = row

    p = []
    p.append("# Benchmark results")
    p.append("")
    p.append("Produced by `bench/run_suite.sh` on %s (tessera %s)." % (
        datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), a.git))
    p.append("")
    p.append("- Machine: %s." % a.machine)
    p.append("- FP32 FMA peak (bench/peak_fma, %s): %.1f GFLOP/s on 1 thread, %.1f GFLOP/s on 2 threads." % (
        peak.get("isa", "?"), peak["gflops_1t"], peak["gflops_2t"]))
    p.append("- %d thread(s), pinned with taskset; ONNX Runtime %s (onnxruntime-node, CPU EP, graph optimisation "
             "'all'). %s." % (a.threads, a.ort_version, a.settings))
    p.append("")
    p.append("## Latency (median ms per inference)")
    p.append("")
    p.append("| model | GFLOP | " + " | ".join("tessera `%s`" % s for s in sets) +
             " | ORT | ORT / default | best single / default | best tessera GFLOP/s (% peak) | ORT GFLOP/s (% peak) |")
    p.append("|---|---:|" + "---:|" * len(sets) + "---:|---:|---:|---:|---:|")
    goal_rows = []
    for m in models:
        gf = flops.get(m, {}).get("flops", 0) / 1e9
        times = {s: lat.get((m, "tessera:" + s)) for s in sets}
        ok = {s: t for s, t in times.items() if t is not None}
        best = min(ok, key=ok.get) if ok else None
        ort = lat.get((m, "ort"))
        cells = []
        for s in sets:
            c = fmt_ms(times[s])
            cells.append("**%s**" % c if s == best else c)
        default = ok.get("default")
        singles = {s: t for s, t in ok.items() if single_engine(s)}
        best_single = min(singles, key=singles.get) if singles else None
        ratio = "%.2f" % (ort / default) if default and ort else "-"
        vs_single = "%.2f (`%s`)" % (singles[best_single] / default, best_single) if default and best_single else "-"
        goal_rows.append((m, ort, default, singles.get(best_single), best_single))

        def rate(ms):
            if not ms or not gf:
                return "-"
            g = gf / (ms / 1e3)
            return "%.1f (%.0f%%)" % (g, 100 * g / peak_g)

        p.append("| %s | %.3g | %s | %s | %s | %s | %s (`%s`) | %s |" % (
            m, gf, " | ".join(cells), fmt_ms(ort), ratio, vs_single, rate(ok.get(best)), best or "-", rate(ort)))
    p.append("")
    p.append("GFLOP counts Conv/ConvTranspose/Gemm/MatMul only (2 x MACs, bench/model_flops.py); the other ops are "
             "memory-bound and not counted, so the percentages understate the work of models rich in them "
             "(mobilenet_v2's depthwise convolutions are counted, but cannot reach FMA peak). Bold: fastest placement. "
             "Placements: a list is --backends in priority order (--placement priority); `estimated` is cost-based "
             "placement from the estimates alone; `default` is what ./run.sh gives (cost-based, `compile --tune`). "
             "best single / default > 1 means the default placement is faster than every single-engine placement.")
    p.append("")
    # Goals of the benchmark issue, on the default placement.
    p.append("## Goals (default placement)")
    p.append("")
    speedups = [(m, o / d) for m, o, d, _, _ in goal_rows if o and d and m != "empty"]
    if speedups:
        geo = math.exp(sum(math.log(r) for _, r in speedups) / len(speedups))
        worst = min(speedups, key=lambda x: x[1])
        p.append("- Geometric-mean speedup over ONNX Runtime (%s): **%.2fx** (goal >= 1.3x)." % (
            ", ".join(m for m, _ in speedups), geo))
        p.append("- Slowest model against ONNX Runtime: %s at **%.2fx** (goal: none below 1.0x)." % worst)
    behind = [(m, d / b, bs) for m, _, d, b, bs in goal_rows if d and b and m != "empty"]
    if behind:
        worst = max(behind, key=lambda x: x[1])
        p.append("- Default against the best single backend: worst on %s, default takes %.2fx the time of `%s` "
                 "(goal <= 1.00x)." % worst)
    r50 = [d for m, _, d, _, _ in goal_rows if m == "resnet50" and d]
    if r50 and flops.get("resnet50"):
        g = flops["resnet50"]["flops"] / 1e9 / (r50[0] / 1e3)
        p.append("- resnet50: %.1f GFLOP/s = **%.0f%%** of the measured peak (goal >= 92%%)." % (g, 100 * g / peak_g))
    empty = [(o, d) for m, o, d, _, _ in goal_rows if m == "empty"]
    if empty and empty[0][1] is not None:
        p.append("- Per-run overhead of an empty graph: **%.2f us** (ONNX Runtime %s us; goal <= 5 us)." % (
            empty[0][1] * 1e3, "%.1f" % (empty[0][0] * 1e3) if empty[0][0] else "-"))
    if "resnet50" in art and art["resnet50"].get("compile_ms"):
        r = art["resnet50"]
        p.append("- resnet50 compile without --tune: **%.2f s** (goal <= 5 s); artifact load **%s ms** (goal <= 100 ms)."
                 % (int(r["compile_ms"]) / 1e3, fmt_ms(float(r["load_ms"])) if r.get("load_ms") else "-"))
    gemm = read_gemm(os.path.join(a.work, "gemm.txt"))
    for mm, nn, kk, packed, _g1, g2 in gemm:
        if packed:
            p.append("- Native SGEMM %dx%dx%d (packed B), 2 threads: **%.1f GFLOP/s = %.0f%%** of peak (goal >= 80%%)."
                     % (mm, nn, kk, g2, 100 * g2 / peak_g))
    p.append("")
    p.append("## Ahead-of-time compilation (default placement)")
    p.append("")
    p.append("| model | compile (ms, wall) | compile --tune (ms, wall) | artifact (MiB) | artifact load (ms) | arena (KiB) "
             "| tessera compile --tune says |")
    p.append("|---|---:|---:|---:|---:|---:|---|")
    for m in models:
        r = art.get(m)
        if not r or not r.get("tune_ms"):
            p.append("| %s | %s | fail | - | - | - | %s |" % (m, (r or {}).get("compile_ms") or "fail",
                                                            (r or {}).get("compile_line", "")))
            continue
        said = r["compile_line"].split(": ", 1)[-1]
        arena = "%.0f" % (int(r["arena_bytes"]) / 1024) if r.get("arena_bytes") else "-"
        p.append("| %s | %s | %s | %.2f | %s | %s | %s |" % (
            m, r["compile_ms"], r["tune_ms"], int(r["file_size"]) / 2**20, fmt_ms(float(r["load_ms"])), arena, said))
    p.append("")
    p.append("Compile = wall time of `tessera compile MODEL.onnx -o OUT.tsr` without a tune cache (process start, ONNX "
             "parse, cost estimates, partitioning, engine compilation, writing); compile --tune adds measuring the "
             "candidate regions (empty cache). Load = `load_ms` of `tessera bench OUT.tsr --runs 1 --warmup 0` "
             "(median; map, checksums, engines, plan). Arena = the memory planner's peak for the glue graph.")
    if a.seconds:
        p.append("")
        p.append("Whole suite: %s s." % a.seconds)
    print("\n".join(p))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
