#!/usr/bin/env python3
"""Renders the GPU check's report (markdown) from what its phases left in WORK.

    report.py --work DIR --out report.md [--results e2e.json]

Reads WORK/env.txt, WORK/kernels_summary.txt, WORK/fixture_summary.txt, WORK/node_summary.json, the e2e results and
WORK/phases.txt, whichever exist (a phase that timed out or failed leaves its part out, and the report says so).
"""

import argparse
import json
import os
import sys


def read(path, default=""):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return default


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def ms(v):
    return "%.3f" % v if isinstance(v, (int, float)) else "-"


def err(v):
    if not v or "max_abs" not in v:
        return "-"
    return "%.2g / %.2g" % (v["max_abs"], v["max_rel"])


def cell(v):
    """A variant's time, or why there is none."""
    if not v:
        return "-"
    if isinstance(v.get("median_ms"), (int, float)):
        return ms(v["median_ms"]) + ("" if v.get("check") == "PASS" else " (" + v.get("check", "?") + ")")
    return v.get("status") or v.get("bench") or "-"


def failures(work, results=None):
    """What failed, in a few words each (empty: nothing did); the PyTorch baseline's own problems are not failures."""
    bad = []
    stop = read(os.path.join(work, "stop.txt")).strip()
    if stop:
        bad.append(stop)
    e2e = read_json(results or os.path.join(work, "e2e.json"))
    for name in (e2e or {}).get("order", []):
        for vname, v in e2e["models"][name].get("variants", {}).items():
            if v.get("check") != "PASS":
                bad.append("%s/%s: %s" % (name, vname, v.get("status") or v.get("check") or "?"))
            elif "median_ms" not in v:
                bad.append("%s/%s bench: %s" % (name, vname, v.get("bench", "?")))
    nodes = read_json(os.path.join(work, "node_summary.json"))
    if nodes and nodes.get("failed"):
        bad.append("%d node cases" % nodes["failed"])
    k = read(os.path.join(work, "kernels_summary.txt"))
    k0 = k.splitlines()[0] if k.strip() else ""
    if k0 and "not packed" not in k0 and ("rc 0," not in k0 or " 0 FAIL" not in k0 or ", 0 ok" in k0):
        bad.append("kernel_check")
    u = read(os.path.join(work, "units_summary.txt"))
    u0 = u.splitlines()[0] if u.strip() else ""
    if u0 and "not packed" not in u0 and "rc 0," not in u0:
        bad.append("unit tests")
    f = read(os.path.join(work, "fixture_summary.txt"))
    if f and "OK" not in f:
        bad.append("fixture")
    return bad


def render(work, results=None):
    bad = failures(work, results)
    lines = ["# Tessera GPU check", "",
             "**Overall: %s**" % ("FAIL: " + "; ".join(bad) if bad else "no failure among the phases that ran"), ""]
    env = read(os.path.join(work, "env.txt")).strip()
    if env:
        lines += ["## Machine", "```", env, "```", ""]
    e2e = read_json(results or os.path.join(work, "e2e.json"))
    lines += ["## End-to-end models (median ms per run, host inputs and outputs)", ""]
    if e2e is None:
        lines += ["(no end-to-end results: the phase did not run or did not get far)", ""]
    else:
        lines += ["%d timed runs after %d warm-up; error = max abs / max rel against onnxruntime (CPU); PASS: "
                  "rtol 1e-3, atol 1e-3*max(1,max|ref|). `default` = `--backends %s,native` (cost placement; native "
                  "is always last, so `--backends %s` is the same); `priority` = every node the plugin takes on it; "
                  "`naive` = priority with `--min-region-nodes 1`." % (e2e.get("runs", 0), e2e.get("warmup", 0),
                                                                      e2e.get("backend"), e2e.get("backend")), "",
                  "| model | batch | tessera default | priority | naive offload | PyTorch eager | eager/tessera "
                  "| error vs ORT (default) | result |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for name in e2e.get("order", []):
            m = e2e["models"].get(name, {})
            vs = m.get("variants", {})
            d = vs.get("default")
            t = m.get("torch") or {}
            tm = t.get("median_ms")
            ratio = "%.2f" % (tm / d["median_ms"]) if d and isinstance(tm, (int, float)) and \
                isinstance(d.get("median_ms"), (int, float)) and d["median_ms"] > 0 else "-"
            checks = [v.get("check") for v in vs.values()]
            if not vs:
                result = "; ".join(m.get("notes", [])) or "not run"
            elif all(c == "PASS" for c in checks):
                result = "PASS"
            else:
                result = "FAIL (" + ", ".join("%s %s" % (k, v.get("check") or v.get("status", "?"))
                                             for k, v in vs.items() if v.get("check") != "PASS") + ")"
            tcell = "-"
            if t:
                tcell = ms(tm) if isinstance(tm, (int, float)) else t.get("status", "-")
                if t.get("check") not in (None, "PASS"):
                    tcell += " (eager %s vs ORT)" % t.get("check")
            lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                name, m.get("batch", "-"), cell(d), cell(vs.get("priority")), cell(vs.get("naive")), tcell, ratio,
                err(d), result))
        lines += ["", "### Compile cost and placement", "",
                  "| model | variant | compile s | artifact MiB | load ms | engines | run check | error |",
                  "|---|---|---|---|---|---|---|---|"]
        for name in e2e.get("order", []):
            m = e2e["models"].get(name, {})
            for vname, v in m.get("variants", {}).items():
                lines.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                    name, vname, v.get("compile_s", "-"), v.get("tsr_mib", "-"), ms(v.get("load_ms")),
                    v.get("engines", "-"), v.get("check", v.get("status", "-")), err(v)))
        lines.append("")
        for name in e2e.get("order", []):
            m = e2e["models"].get(name, {})
            bits = []
            for key in ("partition", "partition_naive"):
                p = m.get(key)
                if p:
                    bits.append("- %s %s: `%s`%s" % (name, key.replace("partition", "placement").replace("_", " "),
                                                     p.get("summary", ""), " (rc %d: %s)" % (p["rc"], p["last"])
                                                     if p.get("rc") else ""))
                    bits += ["  - %s" % c for c in p.get("cross", [])]
            bits += ["- %s: %s" % (name, n) for n in m.get("notes", []) if m.get("variants")]
            for vname, v in m.get("variants", {}).items():
                ways = v.get("conv_ways")
                if ways:
                    bits.append("- %s %s convolutions: %s" % (name, vname, ", ".join(
                        "%s %d steps, %.3f ms" % (k, w.get("steps", 0), w.get("ms", 0)) if isinstance(w, dict)
                        else "%s: %s" % (k, w) for k, w in ways.items())))
                if v.get("compile_line"):
                    bits.append("- %s %s compile: `%s`" % (name, vname, v["compile_line"][:400]))
            lines += bits
        if e2e.get("notes"):
            lines += [""] + ["- " + n for n in e2e["notes"]]
        lines.append("")
    nodes = read_json(os.path.join(work, "node_summary.json"))
    lines += ["## ONNX node cases (`tessera check`, every claimed node on the plugin)", ""]
    if nodes is None:
        lines += ["(no node-case results)", ""]
    else:
        lines += ["%d cases, %d of them not reached within the time budget; claimed by the plugin %d: **passed %d, "
                  "failed %d** (crashed %d, timed out %d), not run %d; partition errors %d; %.0f s. Failing: %s" % (
                      nodes["cases"], nodes["partition_not_run"], nodes["claimed"], nodes["passed"], nodes["failed"],
                      nodes["crashed"], nodes["timed_out"], nodes["check_not_run"], nodes["partition_errors"],
                      nodes["seconds"],
                      ", ".join(nodes["failing"][:40]) + (" ..." if len(nodes["failing"]) > 40 else "") or "none"),
                  ""]
    lines += ["## Kernel check", "", read(os.path.join(work, "kernels_summary.txt"), "(not run)").strip(), ""]
    lines += ["## Unit tests", "", read(os.path.join(work, "units_summary.txt"), "(not run)").strip(), ""]
    lines += ["## Fixture", "", read(os.path.join(work, "fixture_summary.txt"), "(not made)").strip(), ""]
    phases = read(os.path.join(work, "phases.txt")).strip()
    if phases:
        lines += ["## Phases (elapsed s)", "```", phases, "```", ""]
    return "\n".join(lines)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--results", help="e2e.py's results JSON (default WORK/e2e.json)")
    args = ap.parse_args(argv)
    text = render(args.work, args.results)
    with open(args.out, "w") as f:
        f.write(text + "\n")
    print(text)
    return 1 if failures(args.work, args.results) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
