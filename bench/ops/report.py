#!/usr/bin/python3
"""Writes the op sweep's report (bench/OPS.md) and its machine-readable summary from what bench/ops/run_ops.sh left
in the work folder.

Usage: report.py --work DIR [--grid FILE] [--out OPS.md] [--tsv FILE]

Input (all under DIR): raw.tsv (id, engine, median_ms, per-process medians, claimed nodes, total nodes, status, note),
models/ID.meta.json (family, shape summary, GFLOP; written by gen_ops.py), run.env (the run's settings, key=value),
seed.tsv (id, seconds, exit status, last line, warnings). Points appear in grid order, grouped by family.
Ratios are ORT ms / Tessera ms (> 1: Tessera faster). Flags: NATIVE<0.5 when ORT / native < 0.5 (any op); BEST<0.8
when ORT / (fastest Tessera backend that ran the point) < 0.8, for Conv, ConvTranspose, MatMul, Gemm, LSTM and GRU.
The TSV has a header line and one line per point.
"""

import argparse
import collections
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import opsgrid  # noqa: E402

ENGINES = ("native", "dnnl", "xnnpack")
NATIVE_LIMIT, BEST_LIMIT = 0.5, 0.8
NOISY = 1.5  # a time whose per-process medians differ by more than this factor is marked noisy


def read_raw(path):
    rows = collections.defaultdict(dict)
    with open(path) as f:
        for line in f:
            cols = line.rstrip("\n").split("\t")
            if len(cols) < 8:
                continue
            pid, engine, med, values, claimed, total, status, note = cols[:8]
            others = int(cols[8]) if len(cols) > 8 and cols[8].isdigit() else None
            rows[pid][engine] = dict(ms=float(med) if med else None, values=values, claimed=claimed, total=total,
                                     status=status, note=note, others=others)
    return rows


def read_env(path):
    env = {}
    try:
        with open(path) as f:
            for line in f:
                k, _, v = line.rstrip("\n").partition("=")
                env[k] = v
    except OSError:
        pass
    return env


def read_seed(path):
    rows = []
    try:
        with open(path) as f:
            for line in f:
                cols = line.rstrip("\n").split("\t") + [""] * 5
                rows.append(dict(id=cols[0], s=float(cols[1] or 0), rc=cols[2], last=cols[3], warnings=cols[4]))
    except OSError:
        pass
    return rows


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def fmt_ms(v):
    if v is None:
        return ""
    return f"{v:.4f}" if v < 0.01 else f"{v:.3f}" if v < 1 else f"{v:.2f}" if v < 100 else f"{v:.1f}"


def fmt_gflop(v):
    if not v:
        return ""
    return f"{v:.3g}"


def geomean(vals):
    vals = [v for v in vals if v and v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


class Result:
    """One point's numbers, ratios and flags."""

    def __init__(self, point, meta, raw, quiet_limit):
        self.p, self.meta, self.raw = point, meta, raw
        self.others = next((x["others"] for x in raw.values() if x.get("others") is not None), None)
        self.busy = self.others is not None and self.others > quiet_limit
        self.ort = raw.get("ort", {}).get("ms")
        self.ms = {e: raw.get(e, {}).get("ms") if raw.get(e, {}).get("status") == "ok" else None for e in ENGINES}
        ran = {e: v for e, v in self.ms.items() if v is not None}
        self.best_engine = min(ran, key=ran.get) if ran else None
        self.best = ran.get(self.best_engine) if ran else None
        self.native_ratio = self.ort / self.ms["native"] if self.ort and self.ms["native"] else None
        self.best_ratio = self.ort / self.best if self.ort and self.best else None
        self.flags = []
        if self.native_ratio is not None and self.native_ratio < NATIVE_LIMIT:
            self.flags.append("NATIVE<0.5")
        if point.is_compute() and self.best_ratio is not None and self.best_ratio < BEST_LIMIT:
            self.flags.append("BEST<0.8")

    def noisy(self, engine):
        r = self.raw.get(engine)
        vals = [float(v) for v in r["values"].split(",") if v] if r and r["status"] == "ok" else []
        return len(vals) > 1 and min(vals) > 0 and max(vals) / min(vals) > NOISY

    def cell(self, engine):
        r = self.raw.get(engine)
        if r is None:
            return "?"
        if r["status"] == "unclaimed":
            return "-"
        if r["status"] != "ok":
            return "fail"
        text = fmt_ms(r["ms"]) + (" ~" if self.noisy(engine) else "")
        if engine in ("dnnl", "xnnpack") and r["claimed"] and r["total"] and r["claimed"] != r["total"]:
            text += f" ({r['claimed']}/{r['total']})"
        return text


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--grid", default=os.path.join(HERE, "grid.txt"))
    ap.add_argument("--out", default=os.path.join(HERE, "..", "OPS.md"))
    ap.add_argument("--tsv", default=None)
    a = ap.parse_args()
    tsv_path = a.tsv or a.work.rstrip("/") + ".tsv"

    points = opsgrid.parse_grid(a.grid)
    raw = read_raw(os.path.join(a.work, "raw.tsv"))
    env = read_env(os.path.join(a.work, "run.env"))
    seed = read_seed(os.path.join(a.work, "seed.tsv"))
    quiet_limit = int(env["quiet_limit"]) if env.get("quiet_limit", "").isdigit() else 100
    results = []
    for p in points:
        if p.id not in raw:
            continue
        try:
            with open(os.path.join(a.work, "models", p.id + ".meta.json")) as f:
                meta = json.load(f)
        except (OSError, ValueError):
            meta = {"summary": "", "gflop": None}
        results.append(Result(p, meta, raw[p.id], quiet_limit))
    if not results:
        print(f"report: no results in {a.work}/raw.tsv", file=sys.stderr)
        return 1

    fam_order = [t for t, _ in opsgrid.FAMILIES]
    by_family = collections.OrderedDict((t, []) for t in fam_order)
    for r in results:
        by_family[r.p.family()].append(r)
    native_flagged = [r for r in results if "NATIVE<0.5" in r.flags]
    best_flagged = [r for r in results if "BEST<0.8" in r.flags]
    compute = [r for r in results if r.p.is_compute()]

    L = []
    L.append("# Op sweep: single-op models, Tessera backends against ONNX Runtime")
    L.append("")
    L.append(f"Produced by `bench/ops/run_ops.sh` on {env.get('date', '?')} (tessera: HEAD {env.get('commit', '?')} "
             "at the start); "
             "the grid is `bench/ops/grid.txt`, the method `bench/ops/README.md`.")
    L.append("")
    L.append(f"- Machine: {cpu_model()}, {os.cpu_count()} cores; load average (1, 5, 15 min) "
             f"{env.get('load_start', '?')} at the start, {env.get('load_end', '?')} at the end of the timing; "
             f"CPUs {env.get('busy_start') or '?'} % busy with other processes just before the sweep, "
             f"{env.get('busy_end') or '?'} % just after.")
    L.append(f"- Binaries: `bin/tessera` and its plugins as built at {env.get('binary_built', '?')}"
             + (f" ({env['binary_note']})" if env.get("binary_note") else "") + ".")
    busy_points = [r for r in results if r.busy]
    if busy_points:
        L.append(f"- **Shared machine**: {len(busy_points)} of {len(results)} points were timed while other processes "
                 f"kept more than {quiet_limit} % of the CPUs busy (flag `busy N%`: their share while the point was "
                 "timed). Every time is slower then, and multi-threaded engine runs far more than their share: a "
                 "thread descheduled at a barrier stalls the others (XNNPACK's pool then shows flat 16, 24 or 32 ms "
                 "a run; oneDNN a floor near 1 ms). Rerun those points on a quiet machine before acting on them.")
    spin = "off" if env.get("ort_spin") == "0" else "on"
    L.append(f"- {env.get('threads', '?')} thread(s) per engine, pinned ({env.get('pinning', '?')}); median of "
             f"{env.get('repeats', '?')} per-process medians, each over {env.get('runs', '?')} runs after "
             f"{env.get('warmup', '?')} warm-up; engines interleaved, the first one rotating; `TESSERA_TUNE=0` for "
             "every timing run.")
    L.append(f"- ONNX Runtime {env.get('ort_version', '?')} (onnxruntime-node, CPU EP, graph optimisation 'all', "
             f"inter-op 1, spinning {spin}).")
    seed_note = "not run"
    if env.get("seed") in ("1", "force"):
        seed_note = (f"`tessera partition MODEL --tune` for every point into "
                     f"{'`' + env['seed_cache'] + '`' if env.get('seed_cache') else 'the default tune cache'}, "
                     f"{env.get('seed_s', '?')} s")
    L.append(f"- Sweep time: {env.get('timing_s', '?')} s timing, seeding {seed_note}; "
             f"{env.get('total_s', '?')} s in all." + (f" FILTER `{env['filter']}`." if env.get("filter") else ""))
    L.append("")

    # --- summary
    L.append("## Summary")
    L.append("")
    g_native = geomean([r.native_ratio for r in results])
    g_best = geomean([r.best_ratio for r in results])
    g_cbest = geomean([r.best_ratio for r in compute])
    f2 = lambda v: f"{v:.2f}" if v is not None else "-"  # noqa: E731
    L.append(f"- {len(results)} points ({len(compute)} of them Conv, ConvTranspose, MatMul, Gemm, LSTM, GRU).")
    L.append(f"- Flagged NATIVE<0.5 (native below 0.5 x ORT): **{len(native_flagged)}**; flagged BEST<0.8 (best "
             f"Tessera backend below 0.8 x ORT, compute ops only): **{len(best_flagged)}**.")
    L.append(f"- Geometric mean of ORT / native: {f2(g_native)}; of ORT / best Tessera backend: {f2(g_best)} "
             f"(compute ops: {f2(g_cbest)}). > 1: Tessera faster.")
    floor = next((r for r in results if r.p.id == "overhead_relu_1x8"), None)
    if floor and floor.ort is not None and floor.ms["native"] is not None:
        L.append(f"- Call overhead (`overhead_relu_1x8`, Relu on 8 floats): ORT {fmt_ms(floor.ort)} ms, native "
                 f"{fmt_ms(floor.ms['native'])} ms. ORT's figure (onnxruntime-node's session.run from JavaScript) is "
                 "in every ORT time, so points that take ORT well under 0.1 ms favour Tessera; the flags err on the "
                 "side of not flagging them.")
    noisy = sum(r.noisy(e) for r in results for e in ("ort",) + ENGINES)
    timed = sum(1 for r in results for e in ("ort",) + ENGINES if r.raw.get(e, {}).get("status") == "ok")
    L.append(f"- Timed while other processes kept more than {quiet_limit} % of the CPUs busy: {len(busy_points)} "
             "points.")
    L.append(f"- Noisy times (`~`, per-process medians more than {NOISY}x apart): {noisy} of {timed}.")
    wins = collections.Counter(r.best_engine for r in results if r.best_engine)
    L.append("- Fastest Tessera backend: " + ", ".join(f"{e} on {wins[e]}" for e in ENGINES if wins[e]) + " points.")
    L.append("")
    L.append("| family | points | ORT / native (geomean) | ORT / best (geomean) | NATIVE<0.5 | BEST<0.8 | "
             "dnnl claims | xnnpack claims |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    for fam, rs in by_family.items():
        if not rs:
            continue
        claims = {e: sum(1 for r in rs if r.raw.get(e, {}).get("status") == "ok") for e in ("dnnl", "xnnpack")}
        L.append(f"| {fam} | {len(rs)} | {f2(geomean([r.native_ratio for r in rs]))} | "
                 f"{f2(geomean([r.best_ratio for r in rs]))} | {sum('NATIVE<0.5' in r.flags for r in rs)} | "
                 f"{sum('BEST<0.8' in r.flags for r in rs)} | {claims['dnnl']} | {claims['xnnpack']} |")
    L.append("")

    # --- flagged lists
    share = lambda r: f"{r.others} %" + (" (busy)" if r.busy else "") if r.others is not None else "?"  # noqa: E731
    L.append("## Flagged points")
    L.append("")
    def flagged_table(title, rows, header, align, key, cells):
        L.append(f"### {title}")
        L.append("")
        if rows:
            L.append(f"| point | ORT ms | {header} | others' CPU share while timed |")
            L.append(f"|---|---:|{align}|---:|")
            for r in sorted(rows, key=key):
                L.append(f"| `{r.p.id}` | {fmt_ms(r.ort)} | {cells(r)} | {share(r)} |")
        else:
            L.append("None.")
        L.append("")

    flagged_table("NATIVE<0.5", native_flagged, "native ms | ORT / native", "---:|---:", lambda r: r.native_ratio,
                  lambda r: f"{fmt_ms(r.ms['native'])} | {r.native_ratio:.3f}")
    flagged_table("BEST<0.8", best_flagged, "best Tessera ms | best backend | ORT / best", "---:|---|---:",
                  lambda r: r.best_ratio, lambda r: f"{fmt_ms(r.best)} | {r.best_engine} | {r.best_ratio:.3f}")

    # --- per family
    for fam, rs in by_family.items():
        if not rs:
            continue
        L.append(f"## {fam}")
        L.append("")
        L.append("| point | shapes | GFLOP | ORT ms | native ms | dnnl ms | xnnpack ms | ORT / native | ORT / best | "
                 "flags |")
        L.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
        for r in rs:
            ort_cell = r.cell("ort")
            best = f"{r.best_ratio:.2f} ({r.best_engine})" if r.best_ratio is not None else "-"
            cells = [r.cell(e) for e in ENGINES]
            if r.best_engine:
                i = ENGINES.index(r.best_engine)
                cells[i] = f"**{cells[i]}**"
            flags = r.flags + ([f"busy {r.others}%"] if r.busy else [])
            L.append(f"| `{r.p.id}` | {r.meta.get('summary', '')} | {fmt_gflop(r.meta.get('gflop'))} | {ort_cell} | "
                     f"{' | '.join(cells)} | {f2(r.native_ratio)} | {best} | {' '.join(flags)} |")
        L.append("")

    # --- legend, errors, refusals, seeding
    mrn = f" --min-region-nodes {env['min_region_nodes']}" if env.get("min_region_nodes") else ""
    L.append("## Reading the tables")
    L.append("")
    L.append("- Times are the median ms per inference of the whole single-op model (inputs given, outputs returned). "
             "`native` is `tessera bench --backends native`; `dnnl` and `xnnpack` are `--backends ENGINE,native "
             f"--placement priority{mrn}`: the engine takes every node it claims, native the rest. **Bold**: the "
             "fastest Tessera backend.")
    L.append("- `-`: the engine does not claim the op, so that run would only time native again (its refusal is "
             "listed below). `(k/n)`: the engine claims k of the point's n nodes; native runs the rest. `fail`: the "
             "run failed (error below).")
    L.append("- Ratios are ORT ms / Tessera ms (> 1: Tessera faster); ORT / best uses the fastest Tessera backend "
             "that ran the point. GFLOP: 2 x multiply-adds (Conv, ConvTranspose, MatMul, Gemm, LSTM and GRU gates).")
    L.append("- ORT times go through onnxruntime-node: besides the call overhead above, every run moves the inputs "
             "and outputs between JavaScript and native buffers (about 1.4 ms for 3.2 MB in and 3.2 MB out, "
             "measured on `relu_1x64x112x112` at 1 thread), while `tessera bench` reuses its buffers. Memory-bound "
             "points (elementwise, data movement, resize, pooling, softmax) therefore favour Tessera by more than "
             "their kernels do; compute-bound points much less so.")
    L.append(f"- `~`: noisy, the per-process medians behind the time differ by more than {NOISY}x (another "
             "process took the cores during some of them); the median still stands, but read it with care.")
    L.append("- Integer inputs (Gather's indices) are 0 or 1 in both ORT's and Tessera's random inputs, so the "
             "embedding lookup reads two rows of the table.")
    L.append("")
    errors = [(r.p.id, e, r.raw[e]["note"]) for r in results for e in ("ort",) + ENGINES
              if e in r.raw and r.raw[e]["status"] == "fail"]
    L.append("## Errors")
    L.append("")
    if errors:
        for pid, e, note in errors:
            L.append(f"- `{pid}` on {e}: {note}")
    else:
        L.append("None: every engine that claims a point ran it.")
    L.append("")
    refusals = collections.defaultdict(list)
    for r in results:
        for e in ("dnnl", "xnnpack"):
            x = r.raw.get(e)
            if x and x["status"] == "unclaimed":
                reasons = sorted({part.split(": ", 1)[-1] for part in x["note"].split("; ")}) if x["note"] else ["?"]
                refusals[(e, "; ".join(reasons))].append(r.p.id)
    L.append("## Engine refusals")
    L.append("")
    if refusals:
        L.append("| engine | reason | points |")
        L.append("|---|---|---|")
        for (e, reason), pids in sorted(refusals.items()):
            L.append(f"| {e} | {reason} | {', '.join('`' + p + '`' for p in pids)} |")
    else:
        L.append("None.")
    L.append("")
    if seed:
        skipped = [s for s in seed if s["rc"] == "-"]
        seed = [s for s in seed if s["rc"] != "-"]
        failed = [s for s in seed if s["rc"] != "0"]
        warned = [s for s in seed if s["warnings"]]
        L.append("## Seeding the tune cache")
        L.append("")
        now = cached = 0
        for s in seed:
            words = s["last"].split()
            for i, w in enumerate(words[:-1]):
                if w == "measured" and words[i + 1].isdigit():
                    now += int(words[i + 1])
                if w == "now," and words[i + 1].isdigit():
                    cached += int(words[i + 1])
        L.append(f"{len(seed)} points through `tessera partition --tune` ({sum(s['s'] for s in seed):.0f} s in it): "
                 f"{now} measurements taken and cached, {cached} already in the cache; {len(failed)} failed, "
                 f"{len(warned)} warned, {len(skipped)} skipped because other processes held the CPUs.")
        distinct = collections.Counter(w for s in warned for w in [s["warnings"]])
        for w, n in distinct.most_common():
            L.append(f"- {n} x: {w}")
        for s in failed:
            L.append(f"- `{s['id']}` failed: {s['last']}")
        L.append("")

    with open(a.out, "w") as f:
        f.write("\n".join(L))

    with open(tsv_path, "w") as f:
        cols = ["id", "family", "op", "gflop", "ort_ms", "native_ms", "dnnl_ms", "xnnpack_ms", "dnnl_nodes",
                "xnnpack_nodes", "ort_over_native", "ort_over_best", "best_engine", "flags", "others_cpu_pct"]
        f.write("\t".join(cols) + "\n")
        for r in results:
            nodes = lambda e: (f"{r.raw[e]['claimed']}/{r.raw[e]['total']}" if e in r.raw else "")  # noqa: E731
            val = lambda v: "" if v is None else f"{v:.6g}"  # noqa: E731
            row = [r.p.id, r.p.family(), r.p.op, val(r.meta.get("gflop")), val(r.ort)] + \
                [val(r.ms[e]) for e in ENGINES] + [nodes("dnnl"), nodes("xnnpack"), val(r.native_ratio),
                                                   val(r.best_ratio), r.best_engine or "", ",".join(r.flags),
                                                   "" if r.others is None else str(r.others)]
            f.write("\t".join(row) + "\n")
    print(f"report: {len(results)} points, {len(native_flagged)} NATIVE<0.5, {len(best_flagged)} BEST<0.8",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
