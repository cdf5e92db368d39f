#!/usr/bin/env python3
"""Writes bench/RESULTS.md from the files bench/run_suite.sh leaves in its work folder.

Input (--work DIR): peak.json (bench/peak_fma), flops.jsonl (bench/model_flops.py, one line per model), latency.tsv
(bench/compare_ort.sh's RESULTS_TSV lines "model threads engine median_ms"), artifact.tsv (model, compile_ms,
file_size, load_ms, compile_line). Output: Markdown on stdout.
Method: per model, the fastest tessera placement is the one with the lowest median; GFLOP/s = dense-op FLOPs / median
time, and % of peak divides by the FMA peak measured at the same thread count; ratio = ORT ms / fastest tessera ms
(> 1: tessera faster).
"""
import argparse
import csv
import datetime
import json
import os
import sys


def fmt_ms(v):
    if v is None:
        return "fail"
    return "%.3f" % v if v < 1 else "%.2f" % v


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
             " | ORT | ORT / best tessera | best tessera GFLOP/s (% peak) | ORT GFLOP/s (% peak) |")
    p.append("|---|---:|" + "---:|" * len(sets) + "---:|---:|---:|---:|")
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
        ratio = "%.2f" % (ort / ok[best]) if best and ort else "-"

        def rate(ms):
            if not ms or not gf:
                return "-"
            g = gf / (ms / 1e3)
            return "%.1f (%.0f%%)" % (g, 100 * g / peak_g)

        p.append("| %s | %.3g | %s | %s | %s | %s (`%s`) | %s |" % (
            m, gf, " | ".join(cells), fmt_ms(ort), ratio, rate(ok.get(best)), best or "-", rate(ort)))
    p.append("")
    p.append("GFLOP counts Conv/ConvTranspose/Gemm/MatMul only (2 x MACs, bench/model_flops.py); the other ops are "
             "memory-bound and not counted, so the percentages understate the work of models rich in them "
             "(mobilenet_v2's depthwise convolutions are counted, but cannot reach FMA peak). Bold: fastest placement.")
    p.append("")
    p.append("## Ahead-of-time compilation (default placement)")
    p.append("")
    p.append("| model | compile (ms, wall) | artifact (MiB) | artifact load (ms) | tessera compile says |")
    p.append("|---|---:|---:|---:|---|")
    for m in models:
        r = art.get(m)
        if not r or not r.get("compile_ms"):
            p.append("| %s | fail | - | - | %s |" % (m, (r or {}).get("compile_line", "")))
            continue
        said = r["compile_line"].split(": ", 1)[-1]
        p.append("| %s | %s | %.2f | %s | %s |" % (
            m, r["compile_ms"], int(r["file_size"]) / 2**20, fmt_ms(float(r["load_ms"])), said))
    p.append("")
    p.append("Compile = wall time of `tessera compile MODEL.onnx -o OUT.tsr` (process start, ONNX parse, partitioning, "
             "engine compilation, writing). Load = `load_ms` of `tessera bench OUT.tsr --runs 1 --warmup 0` (median).")
    if a.seconds:
        p.append("")
        p.append("Whole suite: %s s." % a.seconds)
    print("\n".join(p))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
