#!/usr/bin/env python3
"""ONNX node test cases on a backend: which ones it claims, and whether those pass `tessera check`.

    node_cases.py --tessera BIN --backend cuda --out node_cases.txt --summary summary.json
                  [--cases DIR] [--jobs 16] [--timeout 60] [--budget SECONDS] [--flags "..."]

For every case (16 at a time) it asks `tessera partition CASE/model.onnx --backends B,native --json <flags>` and
calls the case claimed when a region is placed on B; a claimed case then runs `tessera check CASE --backends B,native
<flags>` at once, so that a run cut short by the budget still covers both steps evenly. The cases go in a fixed
shuffled order, so such a run samples every kind of op. The flags default to `--placement priority
--min-region-nodes 1 --no-tune`: every node B takes goes to B, however small, and nothing is measured. Cases B
refuses entirely (most non-float32 ones) are not run. --budget stops starting new work after that many seconds;
what was not run is counted as such.
"""

import argparse
import collections
import concurrent.futures as cf
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Deadline, last_line, log, parse_json_doc, sh, write_json  # noqa: E402


def default_cases_dir():
    import onnx
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")


def claimed_by(report, backend):
    """Nodes placed on backend in a partition report (main graph and buckets)."""
    n = 0
    regions = list(report.get("regions", []))
    for b in report.get("buckets", []):
        regions += b.get("regions", [])
    for r in regions:
        if r.get("backend") == backend:
            n += int(r.get("num_nodes", len(r.get("nodes", []))))
    return n


def refusal_reasons(report, backend):
    return [(g.get("reason", ""), len(g.get("nodes", []))) for g in report.get("refusals", [])
            if g.get("backend") == backend]


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--cases", default=None, help="the node cases' directory (default: the onnx package's)")
    ap.add_argument("--jobs", type=int, default=16)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--budget", type=float, default=None, help="seconds; no new work starts after them")
    ap.add_argument("--flags", default="--placement priority --min-region-nodes 1 --no-tune")
    ap.add_argument("--out", required=True, help="the text report")
    ap.add_argument("--summary", required=True, help="a JSON summary for report.py")
    ap.add_argument("--limit", type=int, default=0, help="only the first N cases (testing)")
    args = ap.parse_args(argv)

    t0 = time.time()
    deadline = Deadline(None if args.budget is None else t0 + args.budget)
    cases_dir = args.cases or default_cases_dir()
    if not os.path.isdir(cases_dir):
        msg = "no ONNX node test cases at %s (this onnx package ships none)" % cases_dir
        log(msg)
        with open(args.out, "w") as f:
            f.write(msg + "\n")
        return 1
    cases = sorted(d for d in os.listdir(cases_dir) if os.path.isfile(os.path.join(cases_dir, d, "model.onnx")))
    if args.limit:
        cases = cases[:args.limit]
    backends = "%s,native" % args.backend
    flags = args.flags.split()
    log("node cases: %d in %s; partition with --backends %s %s" % (len(cases), cases_dir, backends, args.flags))

    def partition(case):
        rc, out, _ = sh([args.tessera, "partition", os.path.join(cases_dir, case, "model.onnx"), "--backends",
                         backends, "--json"] + flags, timeout=min(args.timeout, 30), deadline=deadline, quiet=True)
        if rc == 125:
            return "not run", 0, "out of time", []
        if rc != 0:
            return "error", 0, "rc %d: %s" % (rc, last_line(out)), []
        rep = parse_json_doc(out)
        if rep is None:
            return "error", 0, "no JSON in partition output: " + last_line(out), []
        n = claimed_by(rep, args.backend)
        return "claimed" if n else "refused", n, "", refusal_reasons(rep, args.backend)

    def check(case):
        rc, out, secs = sh([args.tessera, "check", os.path.join(cases_dir, case), "--backends", backends] + flags,
                           timeout=args.timeout, deadline=deadline, quiet=True)
        engines = next((ln for ln in out.splitlines() if ln.startswith("engines:")), "")
        if rc == 0:
            return "pass", engines, ""
        if rc == 125:
            return "not run", engines, "out of time"
        if rc == 124 and secs < args.timeout - 1:  # the budget's end cut it short, not its own time limit
            return "not run", engines, "cut by the budget's end after %.0f s" % secs
        if rc == 124:
            return "timeout", engines, "timed out after %.0f s" % secs
        if rc < 0:
            return "crash", engines, "killed by signal %d: %s" % (-rc, last_line(out))
        return "fail", engines, "rc %d: %s" % (rc, last_line(out))

    def one(case):
        if deadline.left() < 3:
            return case, ("not run", 0, "out of time", []), None
        p = partition(case)
        return case, p, check(case) if p[0] == "claimed" else None

    order = list(cases)
    random.Random(0).shuffle(order)
    part, res = {}, {}
    reasons = collections.Counter()
    with cf.ThreadPoolExecutor(args.jobs) as ex:
        for case, p, c in ex.map(one, order):
            part[case] = p[:3]
            if p[0] == "refused":
                for r, k in p[3]:
                    reasons[r] += k
            if c is not None:
                res[case] = c
    t2 = time.time()
    claimed = [c for c in cases if part[c][0] == "claimed"]
    perr = [c for c in cases if part[c][0] == "error"]
    log("  partition: %d claimed by %s, %d refused, %d errors, %d not run" % (
        len(claimed), args.backend, sum(1 for c in cases if part[c][0] == "refused"), len(perr),
        sum(1 for c in cases if part[c][0] == "not run")))
    count = collections.Counter(s for s, _, _ in res.values())
    no_engine = [c for c in claimed if res[c][0] == "pass" and args.backend + "=" not in res[c][1]]
    summary = {
        "cases": len(cases), "claimed": len(claimed), "passed": count["pass"],
        "failed": count["fail"] + count["crash"] + count["timeout"], "crashed": count["crash"],
        "timed_out": count["timeout"], "check_not_run": count["not run"],
        "partition_errors": len(perr), "partition_not_run": sum(1 for c in cases if part[c][0] == "not run"),
        "passed_without_engine": len(no_engine), "seconds": round(t2 - t0, 1),
        "failing": sorted(c for c in claimed if res[c][0] in ("fail", "crash", "timeout")),
    }
    lines = ["# ONNX node cases on %s (tessera partition/check --backends %s %s)" % (args.backend, backends,
                                                                                      args.flags),
             "cases %d, claimed by %s %d: passed %d, failed %d (crashed %d, timed out %d), not run %d; "
             "partition errors %d, partition not run %d; %.0f s" % (
                 len(cases), args.backend, len(claimed), count["pass"], summary["failed"], count["crash"],
                 count["timeout"], count["not run"], len(perr), summary["partition_not_run"], t2 - t0), ""]
    if summary["failing"]:
        lines.append("## failing (case: last line of output)")
        for c in summary["failing"]:
            lines.append("%s [%s] %s: %s" % (c, res[c][0], res[c][1], res[c][2]))
        lines.append("")
    if no_engine:
        lines.append("## passed, but check reported no %s engine (placement differs from partition?)" % args.backend)
        lines += no_engine
        lines.append("")
    lines.append("## passed")
    lines += ["%s (%d nodes on %s) %s" % (c, part[c][1], args.backend, res[c][1]) for c in claimed
              if res[c][0] == "pass"]
    lines.append("")
    if count["not run"]:
        lines.append("## claimed, check not run (time budget)")
        lines += [c for c in claimed if res[c][0] == "not run"]
        lines.append("")
    lines.append("## why %s refused whole cases (reason: nodes)" % args.backend)
    lines += ["%6d  %s" % (k, r) for r, k in reasons.most_common(40)]
    lines.append("")
    if perr:
        lines.append("## partition errors (tessera itself could not take the case; not the plugin's doing)")
        lines += ["%s: %s" % (c, part[c][2]) for c in perr]
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    write_json(args.summary, summary)
    log("  check: %d passed, %d failed (%d crashed, %d timed out), %d not run (%.0f s in all)" % (
        count["pass"], summary["failed"], count["crash"], count["timeout"], count["not run"], t2 - t0))
    for c in summary["failing"][:15]:
        log("    FAIL %s: %s" % (c, res[c][2]))
    if len(summary["failing"]) > 15:
        log("    ... %d more in %s" % (len(summary["failing"]) - 15, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
