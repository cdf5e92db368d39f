#!/usr/bin/env python3
"""Writes bench/RESULTS.md from the files bench/run_suite.sh leaves in its work folder.

Input (--work DIR): peak.json (bench/peak_fma), gemm.txt (bench/gemm_bench), flops.jsonl (bench/model_flops.py, one
line per model), latency.tsv (bench/compare_ort.sh's RESULTS_TSV lines "model threads engine median_ms"),
compile.tsv (its COMPILE_TSV lines "model threads set compile_ms line notes"), artifact.tsv (model, artifact,
file_size, load_ms, arena_bytes), measurements.jsonl (every measurement of `tessera partition --tune --json`, one JSON
object per line with its model), partition.tsv (model, partition_ms, measured, error) and partition/MODEL.json.
Output: Markdown on stdout.

Method: per model, GFLOP/s = dense-op FLOPs / median time, and % of peak divides by the FMA peak measured at the same
thread count; ratios against ORT are ORT ms / tessera ms (> 1: tessera faster). The best single backend is the
fastest of the placements that use one engine (native alone, or one plugin with native for the rest: `native`,
`dnnl,native`, `xnnpack,native`). The goals of "placement grounded in measurement" are checked on `default` (plain
`tessera compile` from an empty tune cache) with `warm` (the same compile with the cache it left) beside it:
  1. default / best single <= 1.05 on every model;
  2. measured / estimated within [0.5, 2] for every candidate `--tune` times (the estimate made before measuring);
  3. compile wall time, default flags: dbnet cold <= 10 s and warm <= 2 s, resnet50 cold <= 5 s.
A placement is mixed when its compile line names more than one backend among its regions ("3 regions (2 dnnl,
1 native)"). Geometric means are taken over the suite models, over the zoo (--zoo) and over both; `empty` (a graph
without nodes, timed for the per-run overhead) stays out of them.
"""
import argparse
import csv
import datetime
import json
import math
import os
import re
import sys

SINGLES = ("native", "dnnl,native", "xnnpack,native")
DEFAULT_SLACK = 1.05         # goal 1: default within 5 % of the best single backend
ESTIMATE_FACTOR = 2.0        # goal 2: estimate within 2x of the measurement
COMPILE_GOALS = {            # goal 3: (model, set) -> seconds
    ("dbnet", "default"): 10.0,
    ("dbnet", "warm"): 2.0,
    ("resnet50", "default"): 5.0,
}


def fmt_ms(v):
    if v is None:
        return "fail"
    if v < 0.01:
        return "%.4f" % v
    return "%.3f" % v if v < 1 else "%.2f" % v


def fmt_s(ms):
    return "-" if ms is None else "%.2f" % (ms / 1e3)


def md(text):
    """Text safe inside a Markdown table cell."""
    return str(text).replace("|", "\\|")


def verdict(ok):
    return "-" if ok is None else ("PASS" if ok else "**MISS**")


def geomean(values):
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def percentile(sorted_values, q):
    """Linear interpolation between closest ranks (numpy's default)."""
    if not sorted_values:
        return None
    k = (len(sorted_values) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


def single_engine(s):
    """A placement that uses one engine: native alone or one plugin before native."""
    parts = s.split(",")
    return s == "native" or (len(parts) == 2 and parts[1] == "native")


def read_gemm(path):
    """(M, N, K, packed, GFLOP/s on 1 thread, on 2 threads) rows of gemm_bench's table."""
    rows = []
    if not os.path.exists(path):
        return rows
    with open(path) as f:
        for line in f:
            t = line.split()
            if len(t) == 9 and t[0].isdigit():
                rows.append((int(t[0]), int(t[1]), int(t[2]), int(t[5]), float(t[6]), float(t[8])))
    return rows


def read_latency(path, threads):
    lat = {}
    if not os.path.exists(path):
        return lat
    with open(path) as f:
        for row in csv.reader(f, delimiter="\t"):
            if len(row) < 4 or row[1] != str(threads):
                continue
            model, _threads, engine, ms = row[:4]
            lat[(model, engine)] = float(ms) if ms else None
    return lat


class Compile:
    """One `tessera compile` of compile.tsv, with what its compile line says."""

    def __init__(self, row):
        row = row + [""] * (6 - len(row))
        self.model, self.threads, self.set = row[0], row[1], row[2]
        self.ms = float(row[3]) if row[3] else None
        self.line, self.notes = row[4], row[5]
        self.said = self.line.split(": ", 1)[-1] if self.ms is not None else self.line
        self.regions = {}  # backend -> regions
        m = re.search(r"(\d+) regions \(([^)]*)\)", self.line)
        if m:
            for item in m.group(2).split(","):
                t = item.split()
                if len(t) == 2 and t[0].isdigit():
                    self.regions[t[1]] = self.regions.get(t[1], 0) + int(t[0])
        m = re.search(r"measured (\d+) candidates now \(([\d.]+) s(, budget reached)?\), reused (\d+) measurements",
                      self.line)
        self.measured, self.measure_s, self.budget_reached, self.reused = (
            (int(m.group(1)), float(m.group(2)), bool(m.group(3)), int(m.group(4))) if m else (None, None, False, None))
        self.not_cached = "not cached" in self.notes

    def mixed(self):
        return len(self.regions) > 1

    def backends(self):
        return " + ".join(b for b in sorted(self.regions, key=lambda b: (-self.regions[b], b))) or "no regions"

    def regions_text(self):
        n = sum(self.regions.values())
        return "%d region%s: %s" % (n, "" if n == 1 else "s",
                                    ", ".join("%d %s" % (c, b) for b, c in sorted(self.regions.items())))

    def measuring_text(self):
        if self.measured is None:
            return "-"
        t = "measured %d (%.2f s%s), reused %d" % (self.measured, self.measure_s,
                                                    ", budget reached" if self.budget_reached else "", self.reused)
        return t + (", **not cached** (cores busy)" if self.not_cached else "")


def read_compiles(path, threads):
    out = {}
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for row in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
            if len(row) >= 4 and row[1] == str(threads):
                c = Compile(row)
                out[(c.model, c.set)] = c
    return out


def read_tsv_dicts(path):
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return {row["model"]: row for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)}


def read_measurements(path):
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    return rows


def ratio_stats(rows):
    """count, share within the factor, median, p10, p90 of measured / estimated, worst row (furthest in log)."""
    rs = sorted(r["measured_us"] / r["estimated_us"] for r in rows)
    if not rs:
        return None
    within = sum(1 for r in rs if 1 / ESTIMATE_FACTOR <= r <= ESTIMATE_FACTOR)
    worst = max(rows, key=lambda r: abs(math.log(r["measured_us"] / r["estimated_us"])))
    complete = [r["measured_us"] / r["estimated_us"] for r in rows if not r.get("cut_short")]
    return dict(n=len(rs), within=within, complete=len(complete),
                complete_within=sum(1 for r in complete if 1 / ESTIMATE_FACTOR <= r <= ESTIMATE_FACTOR), median=percentile(rs, 0.5), p10=percentile(rs, 0.1),
                p90=percentile(rs, 0.9), worst=worst, cut=sum(1 for r in rows if r.get("cut_short")),
                regions=sum(1 for r in rows if r.get("kind") == "region"))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--models", required=True, help="space-separated model names")
    ap.add_argument("--zoo", default="", help="space-separated names of the zoo models (the others are the suite)")
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--backend-sets", required=True, help="space-separated tessera placements")
    ap.add_argument("--machine", default="")
    ap.add_argument("--ort-version", default="unknown")
    ap.add_argument("--git", default="unknown")
    ap.add_argument("--settings", default="")
    ap.add_argument("--seconds", default="")
    ap.add_argument("--load", default="", help="load averages seen during the run, for the record")
    a = ap.parse_args(argv)

    models, sets = a.models.split(), a.backend_sets.split()
    zoo_all = set(a.zoo.split())
    groups = [("suite", [m for m in models if m not in zoo_all]), ("zoo", [m for m in models if m in zoo_all]),
              ("all", models)]
    with open(os.path.join(a.work, "peak.json")) as f:
        peak = json.load(f)
    peak_g = peak["gflops_1t"] if a.threads == 1 else peak["gflops_2t"]
    flops = {}
    with open(os.path.join(a.work, "flops.jsonl")) as f:
        for line in f:
            d = json.loads(line)
            flops[os.path.splitext(os.path.basename(d["model"]))[0]] = d
    lat = read_latency(os.path.join(a.work, "latency.tsv"), a.threads)
    comp = read_compiles(os.path.join(a.work, "compile.tsv"), a.threads)
    art = read_tsv_dicts(os.path.join(a.work, "artifact.tsv"))
    part = read_tsv_dicts(os.path.join(a.work, "partition.tsv"))
    meas_all = read_measurements(os.path.join(a.work, "measurements.jsonl"))

    # Per model: the figures every section draws on.
    info = {}
    for m in models:
        times = {s: lat.get((m, "tessera:" + s)) for s in sets}
        ok = {s: t for s, t in times.items() if t is not None}
        singles = {s: t for s, t in ok.items() if single_engine(s)}
        bs = min(singles, key=singles.get) if singles else None
        info[m] = dict(times=times, ok=ok, best=min(ok, key=ok.get) if ok else None, ort=lat.get((m, "ort")),
                       best_single=bs, best_single_ms=singles.get(bs), default=ok.get("default"), warm=ok.get("warm"),
                       gf=flops.get(m, {}).get("flops", 0) / 1e9)

    def rel(m, s):  # set s's time / the best single backend's
        i = info[m]
        t = i["ok"].get(s)
        return t / i["best_single_ms"] if t and i["best_single_ms"] else None

    def rate(m, ms):
        gf = info[m]["gf"]
        if not ms or not gf:
            return "-"
        g = gf / (ms / 1e3)
        return "%.1f (%.0f%%)" % (g, 100 * g / peak_g)

    p = []
    p.append("# Benchmark results")
    p.append("")
    p.append("Produced by `bench/run_suite.sh` on %s (tessera %s)." % (
        datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), a.git))
    p.append("")
    p.append("- Machine: %s." % a.machine)
    p.append("- FP32 FMA peak (bench/peak_fma, %s): %.1f GFLOP/s on 1 thread, %.1f GFLOP/s on 2 threads." % (
        peak.get("isa", "?"), peak["gflops_1t"], peak["gflops_2t"]))
    machines = []
    for m in models:
        path = os.path.join(a.work, "partition", m + ".json")
        if os.path.exists(path) and os.path.getsize(path):
            try:
                with open(path) as f:
                    mach = json.load(f).get("machine")
            except ValueError:
                mach = None
            if mach:
                machines.append(mach)
    if machines:
        p.append("- Tessera's calibration (first `partition --tune`, fresh cache; every model calibrates anew): %s."
                 % machines[0])
    p.append("- %d thread(s), pinned with taskset; ONNX Runtime %s (onnxruntime-node, CPU EP, graph optimisation "
             "'all'). %s." % (a.threads, a.ort_version, a.settings))
    if a.load:
        p.append("- Load average (1, 5, 15 min) %s." % a.load)
    busy = sorted(m for (m, s), c in comp.items() if s == "default" and c.not_cached)
    if busy:
        p.append("- **Caveat**: other processes held the cores while the default compile of %s measured, so it kept "
                 "nothing in its cache and `warm` started from an empty cache too (its compile line says reused 0). "
                 "Run the suite on a quiet machine." % ", ".join(busy))
    p.append("")

    # Latency ------------------------------------------------------------------------------------------------------
    p.append("## Latency (median ms per inference)")
    p.append("")
    p.append("| model | GFLOP | " + " | ".join("`%s`" % s for s in sets) +
             " | ORT | best single | default / best single | warm / best single | ORT / default "
             "| best tessera GFLOP/s (% peak) | ORT GFLOP/s (% peak) |")
    p.append("|---|---:|" + "---:|" * len(sets) + "---:|---|---:|---:|---:|---:|---:|")
    for m in models:
        i = info[m]
        cells = ["**%s**" % fmt_ms(i["times"][s]) if s == i["best"] else fmt_ms(i["times"][s]) for s in sets]
        bs = "%s (`%s`)" % (fmt_ms(i["best_single_ms"]), i["best_single"]) if i["best_single"] else "-"
        r_def, r_warm = rel(m, "default"), rel(m, "warm")
        vs_ort = "%.2f" % (i["ort"] / i["default"]) if i["ort"] and i["default"] else "-"
        p.append("| %s%s | %s | %s | %s | %s | %s | %s | %s | %s (`%s`) | %s |" % (
            m, " (zoo)" if m in zoo_all else "", "%.3g" % i["gf"] if m in flops else "-", " | ".join(cells), fmt_ms(i["ort"]), bs,
            "%.3f" % r_def if r_def else "-", "%.3f" % r_warm if r_warm else "-", vs_ort,
            rate(m, i["ok"].get(i["best"])), i["best"] or "-", rate(m, i["ort"])))
    p.append("")
    p.append("Placements: a list is `--backends` in priority order (`--placement priority`: each engine as far as it "
             "goes, native for the rest); `estimated` is `tessera compile --no-tune --tune-cache=` (cost model, "
             "nothing measured); `default` is plain `tessera compile` starting from an empty tune cache (a fresh "
             "cache file per model: it calibrates the machine and measures what matters within the default budget); "
             "`warm` compiles again with the cache `default` left; `tuned` is `tessera compile --tune` (every candidate "
             "measured, fresh cache). Best single: the fastest of %s. default / best single <= 1.05 is goal 1; "
             "< 1 means the default placement is faster than every single backend. ORT / default > 1: tessera faster. "
             "Bold: fastest placement. GFLOP counts Conv/ConvTranspose/Gemm/MatMul only (2 x MACs, "
             "bench/model_flops.py); the other ops are memory-bound and not counted, so the percentages understate "
             "the work of models rich in them." % ", ".join("`%s`" % s for s in SINGLES))
    p.append("")
    notes = []
    for m in models:
        c, i = comp.get((m, "default")), info[m]
        if c and c.mixed() and i["default"] and i["best_single_ms"] and i["default"] < i["best_single_ms"]:
            notes.append("- %s: the default placement mixes %s (%s) and beats `%s` by %.1f %% (%s ms against %s ms)."
                         % (m, c.backends(), c.regions_text(), i["best_single"],
                            100 * (1 - i["default"] / i["best_single_ms"]), fmt_ms(i["default"]),
                            fmt_ms(i["best_single_ms"])))
    p.append("Mixed placements that beat the best single backend:")
    p.append("")
    p.extend(notes or ["- none: on no model did a default placement that uses more than one backend beat the best "
                       "single one."])
    p.append("")

    # Geometric means -------------------------------------------------------------------------------------------------
    p.append("## Geometric means")
    p.append("")
    p.append("| models | n | ORT / default | ORT / best tessera | default / best single | warm / best single "
             "| tuned / best single |")
    p.append("|---|---:|---:|---:|---:|---:|---:|")
    for name, ms in groups:
        ms = [m for m in ms if m != "empty"]
        if not ms:
            continue
        i = info
        cols = [[i[m]["ort"] / i[m]["default"] for m in ms if i[m]["ort"] and i[m]["default"]],
                [i[m]["ort"] / i[m]["ok"][i[m]["best"]] for m in ms if i[m]["ort"] and i[m]["best"]],
                [rel(m, "default") for m in ms], [rel(m, "warm") for m in ms], [rel(m, "tuned") for m in ms]]
        cells = []
        for col in cols:
            col = [v for v in col if v]
            g = geomean(col)
            cells.append("-" if g is None else "%.3f%s" % (g, "" if len(col) == len(ms) else " (%d)" % len(col)))
        p.append("| %s (%s) | %d | %s |" % (name, ", ".join(ms), len(ms), " | ".join(cells)))
    p.append("")
    p.append("n: models in the group (`empty` left out); a figure over fewer of them (a placement failed) says how many "
             "in brackets. The ratios to the best single backend are times (< 1: faster than it).")
    p.append("")

    # Goals ---------------------------------------------------------------------------------------------------------
    p.append("## Goals")
    p.append("")
    # 1.
    p.append("### 1. The default placement is at least as fast as the best single backend (within 5 %)")
    p.append("")
    p.append("Default: plain `tessera compile`, empty tune cache per model. Warm (reported beside it, not the goal): "
             "the same compile again with the cache the default compile left.")
    p.append("")
    p.append("| model | default ms | best single ms | default / best single | goal <= %.2f | default placement "
             "| default measuring | warm ms | warm / best single | warm placement |" % DEFAULT_SLACK)
    p.append("|---|---:|---:|---:|---|---|---|---:|---:|---|")
    passed = []
    for m in models:
        i, c, w = info[m], comp.get((m, "default")), comp.get((m, "warm"))
        r, rw = rel(m, "default"), rel(m, "warm")
        ok = None if r is None else r <= DEFAULT_SLACK
        passed.append(ok)
        p.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            m, fmt_ms(i["default"]),
            "%s (`%s`)" % (fmt_ms(i["best_single_ms"]), i["best_single"]) if i["best_single"] else "-",
            "%.3f" % r if r else "-", verdict(ok),
            "%s (%s)" % (c.backends(), c.regions_text()) if c and c.ms is not None else md(c.said if c else "-"),
            c.measuring_text() if c else "-", fmt_ms(i["warm"]) if "warm" in sets else "-",
            "%.3f" % rw if rw else "-",
            "%s (%s)" % (w.backends(), w.regions_text()) if w and w.ms is not None else md(w.said if w else "-")))
    p.append("")
    judged = [x for x in passed if x is not None]
    p.append("Goal 1: **%d of %d** models PASS%s." % (
        sum(judged), len(judged), "" if len(judged) == len(models) else " (%d not measured)" % (len(models) - len(judged))))
    p.append("")

    # 2.
    p.append("### 2. Estimates within 2x of the measured time (every candidate `--tune` times)")
    p.append("")
    usable = [r for r in meas_all if not r.get("from_cache") and r.get("estimated_us", 0) > 0
              and r.get("measured_us", 0) > 0]
    skipped = len(meas_all) - len(usable)
    if not usable:
        p.append("No measurements (step 6 did not run, or `partition --tune` failed: see partition.tsv).")
    else:
        p.append("`tessera partition MODEL --tune --json --tune-cache FRESH` per model, at the bench pins; ratio = "
                 "measured / estimated (the estimate made before any measurement); within 2x: 0.5 <= ratio <= 2. "
                 "Cut short: measuring stopped early because the candidate was already far slower than another "
                 "(its time is what was seen until then). Regions: candidates of more than one node (the others are "
                 "single nodes). Raw: `measurements.jsonl` in the work folder.%s" % (
                     " %d measurement(s) left out (from the cache, or a zero time)." % skipped if skipped else ""))
        p.append("")
        p.append("| backend | measured (regions) | within 2x | median ratio | p10 | p90 | cut short "
                 "| within 2x, not cut short | worst |")
        p.append("|---|---:|---:|---:|---:|---:|---:|---:|---|")
        backends = sorted({r["backend"] for r in usable})
        for b in backends + ["all"]:
            st = ratio_stats([r for r in usable if b == "all" or r["backend"] == b])
            wr = st["worst"]
            p.append("| %s | %d (%d) | %.0f %% (%d) | %.2f | %.2f | %.2f | %d | %s | %.3gx: %s, %s%s (%s) |" % (
                "**all**" if b == "all" else b, st["n"], st["regions"], 100 * st["within"] / st["n"], st["within"],
                st["median"], st["p10"], st["p90"], st["cut"],
                "%.0f %% of %d" % (100 * st["complete_within"] / st["complete"], st["complete"]) if st["complete"]
                else "-", wr["measured_us"] / wr["estimated_us"], wr["model"],
                md(wr["what"]), " [%s]" % wr["backend"] if b == "all" else "",
                "%.3g us estimated, %.3g us measured" % (wr["estimated_us"], wr["measured_us"])))
        p.append("")
        p.append("| model | measured | within 2x | " + " | ".join("%s within 2x" % b for b in backends) +
                 " | goal: all within 2x | partition --tune (s) |")
        p.append("|---|---:|---:|" + "---:|" * len(backends) + "---|---:|")
        for m in models:
            rows = [r for r in usable if r["model"] == m]
            pr = part.get(m, {})
            pms = float(pr["partition_ms"]) if pr.get("partition_ms") else None
            if not rows:
                p.append("| %s | 0 | - |%s %s | %s |" % (m, " - |" * len(backends),
                                                         md(pr.get("error") or "-"), fmt_s(pms)))
                continue
            st = ratio_stats(rows)
            per = []
            for b in backends:
                sb = ratio_stats([r for r in rows if r["backend"] == b])
                per.append("%.0f %% of %d" % (100 * sb["within"] / sb["n"], sb["n"]) if sb else "-")
            p.append("| %s | %d | %.0f %% | %s | %s | %s |" % (
                m, st["n"], 100 * st["within"] / st["n"], " | ".join(per), verdict(st["within"] == st["n"]), fmt_s(pms)))
        st = ratio_stats(usable)
        p.append("")
        p.append("Goal 2: **%.0f %%** of %d measured candidates within 2x of their estimate (goal: all)." % (
            100 * st["within"] / st["n"], st["n"]))
    p.append("")

    # 3.
    p.append("### 3. Compile time with default measuring, empty and warm caches")
    p.append("")
    p.append("| model | no measuring (s) | default, cold (s) | default, warm (s) | --tune (s) | goals |")
    p.append("|---|---:|---:|---:|---:|---|")
    for m in models:
        cells = []
        for s in ("estimated", "default", "warm", "tuned"):
            c = comp.get((m, s))
            cells.append("fail" if c and c.ms is None else fmt_s(c.ms if c else None))
        goals = []
        for (gm, s), limit in sorted(COMPILE_GOALS.items()):
            if gm != m:
                continue
            c = comp.get((m, s))
            ms = c.ms if c else None
            goals.append("%s <= %g s: %s" % ("cold" if s == "default" else s, limit,
                                            verdict(None if ms is None else ms / 1e3 <= limit)))
        p.append("| %s | %s | %s |" % (m, " | ".join(cells), "; ".join(goals) or "-"))
    p.append("")
    p.append("Wall time of `tessera compile MODEL.onnx -o OUT.tsr --threads %d [pins]` (process start to exit: parse, "
             "calibration on an empty cache, measuring, partitioning, engine compilation, writing), pinned like the "
             "timing runs. No measuring: `--no-tune --tune-cache=`; cold: fresh cache; warm: the cache cold left; "
             "--tune: fresh cache, every candidate measured. What the default compiles measured is in goal 1's table."
             % a.threads)
    p.append("")

    # Kept goals of the benchmark issue ---------------------------------------------------------------------------
    p.append("### Other goals (default placement)")
    p.append("")
    for name, ms in groups:
        sp = [(m, info[m]["ort"] / info[m]["default"]) for m in ms
              if m != "empty" and info[m]["ort"] and info[m]["default"]]
        if sp:
            g = geomean([r for _, r in sp])
            p.append("- Geometric-mean speedup over ONNX Runtime, %s (%d models): **%.2fx** (goal >= 1.3x): %s." % (
                name, len(sp), g, verdict(g >= 1.3)))
    sp = [(m, info[m]["ort"] / info[m]["default"]) for m in models
          if m != "empty" and info[m]["ort"] and info[m]["default"]]
    if sp:
        worst = min(sp, key=lambda x: x[1])
        p.append("- Slowest model against ONNX Runtime: %s at **%.2fx** (goal: none below 1.0x): %s." % (
            worst[0], worst[1], verdict(worst[1] >= 1.0)))
    r50 = info.get("resnet50", {}).get("default")
    if r50 and flops.get("resnet50"):
        g = flops["resnet50"]["flops"] / 1e9 / (r50 / 1e3)
        p.append("- resnet50: %.1f GFLOP/s = **%.0f%%** of the measured peak (goal >= 92%%): %s." % (
            g, 100 * g / peak_g, verdict(100 * g / peak_g >= 92)))
    if "empty" in info and info["empty"]["default"] is not None:
        e = info["empty"]
        p.append("- Per-run overhead of an empty graph: **%.2f us** (ONNX Runtime %s us; goal <= 5 us): %s." % (
            e["default"] * 1e3, "%.1f" % (e["ort"] * 1e3) if e["ort"] else "-", verdict(e["default"] * 1e3 <= 5)))
    r = art.get("resnet50")
    if r and r.get("load_ms"):
        lm = float(r["load_ms"])
        p.append("- resnet50 artifact load: **%s ms** (goal <= 100 ms): %s." % (fmt_ms(lm), verdict(lm <= 100)))
    gemm = read_gemm(os.path.join(a.work, "gemm.txt"))
    for mm, nn, kk, packed, _g1, g2 in gemm:
        if packed:
            p.append("- Native SGEMM %dx%dx%d (packed B), 2 threads: **%.1f GFLOP/s = %.0f%%** of peak (goal >= 80%%): "
                     "%s." % (mm, nn, kk, g2, 100 * g2 / peak_g, verdict(100 * g2 / peak_g >= 80)))
    p.append("")

    # Artifacts -----------------------------------------------------------------------------------------------------
    p.append("## Ahead-of-time compilation (default placement)")
    p.append("")
    p.append("| model | artifact (MiB) | artifact load (ms) | arena (KiB) | `tessera compile` (default, cold) says |")
    p.append("|---|---:|---:|---:|---|")
    for m in models:
        r, c = art.get(m, {}), comp.get((m, "default"))
        size = "%.2f" % (int(r["file_size"]) / 2**20) if r.get("file_size") else "-"
        load = fmt_ms(float(r["load_ms"])) if r.get("load_ms") else "-"
        arena = "%.0f" % (int(r["arena_bytes"]) / 1024) if r.get("arena_bytes") else "-"
        said = (c.said + (" [warning: %s]" % c.notes if c.notes else "")) if c else "-"
        p.append("| %s | %s | %s | %s | %s |" % (m, size, load, arena, md(said)))
    p.append("")
    p.append("Load = `load_ms` of `tessera bench OUT.tsr --runs 1 --warmup 0` (median; map, checksums, engines, plan). "
             "Arena = the memory planner's peak for the glue graph.")
    if a.seconds:
        p.append("")
        p.append("Whole suite: %s s." % a.seconds)
    print("\n".join(p))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
