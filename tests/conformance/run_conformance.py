#!/usr/bin/python3
"""Runs ONNX's backend test cases through `tessera check` in parallel, 16 cases per process (--chunk; the plugins
load once per process, which was most of a small case's time); a case a crashed process did not report runs again
alone.

Suites come from Debian's libonnx-testdata (node, pytorch-converted,
pytorch-operator, simple). Every case is run; the outcome is compared with
expectations.txt, which lists each case expected to fail or to be skipped,
with a one-line reason. The run fails when a case outside the list fails and
when a listed failure starts passing, so the list stays honest.

Prints, last, "N passed, M failed, K skipped" (M counts every failing case,
expected or not).
"""
import argparse
import concurrent.futures
import os
import subprocess
import sys

DEFAULT_ROOT = "/usr/share/libonnx-testdata/data"
SUITES = ["node", "pytorch-converted", "pytorch-operator", "simple"]


def load_expectations(path):
    exp = {}
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 2)
            if len(parts) < 3 or parts[1] not in ("fail", "skip"):
                sys.exit(f"{path}:{lineno}: expected 'SUITE/CASE fail|skip REASON'")
            exp[parts[0]] = (parts[1], parts[2])
    return exp


def engines_of(line, engines):
    for tok in line.split()[1:]:
        name, _, count = tok.partition("=")
        engines[name] = int(count or 0)


def run_case(tessera, case_dir, timeout, extra):
    """One case in a process of its own: (status, message, engines)."""
    cmd = [tessera, "check", case_dir, "--threads", "1"] + extra
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "fail", f"timeout after {timeout}s", {}
    engines = {}
    for line in p.stdout.splitlines():
        if line.startswith("engines:"):
            engines_of(line, engines)
    msg = (p.stdout + p.stderr).strip().splitlines()
    msg = msg[-1] if msg else ""
    if p.returncode == 0:
        return "pass", "", engines
    if p.returncode < 0:
        return "fail", f"crashed with signal {-p.returncode}", engines
    return "fail", msg[:300], engines


def run_chunk(tessera, case_dirs, timeout, extra):
    """Several cases in one process (`tessera check DIR..`: the plugins load once), a result per case in order. Each
    case ends with "PASS DIR .." or "FAIL DIR: REASON"; the cases a process that crashed or timed out did not report
    run again one per process, so that a crash is its own case's. The chunk gets one case's timeout: a case that
    hangs costs that, then its own run."""
    cmd = [tessera, "check", *case_dirs, "--threads", "1"] + extra
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        out = p.stdout
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
    results = []
    engines = {}
    for line in out.splitlines():
        if len(results) == len(case_dirs):
            break
        d = case_dirs[len(results)]
        if line.startswith("engines:"):
            engines_of(line, engines)
        elif line.startswith(f"PASS {d} "):
            results.append(("pass", "", engines))
            engines = {}
        elif line.startswith(f"FAIL {d}: "):
            results.append(("fail", line[len(f"FAIL {d}: "):][:300], engines))
            engines = {}
    return results + [run_case(tessera, d, timeout, extra) for d in case_dirs[len(results):]]


def float_cases(root):
    """Names of node cases whose outputs are all float32 and inputs float32/int64."""
    try:
        import onnx  # Debian's python3-onnx
    except ImportError:
        return None
    sel = set()
    ndir = os.path.join(root, "node")
    for c in os.listdir(ndir):
        try:
            m = onnx.load(os.path.join(ndir, c, "model.onnx"), load_external_data=False)
        except Exception:
            continue
        et = lambda v: v.type.tensor_type.elem_type if v.type.HasField("tensor_type") else None
        if all(et(o) == 1 for o in m.graph.output) and all(et(i) in (1, 7) for i in m.graph.input):
            sel.add("node/" + c)
    return sel


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--root", default=DEFAULT_ROOT)
    ap.add_argument("--suites", default=",".join(SUITES))
    ap.add_argument("--expectations", default=os.path.join(os.path.dirname(__file__), "expectations.txt"))
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--timeout", type=int, default=300, help="seconds per case")
    ap.add_argument("--chunk", type=int, default=16, help="cases per tessera process")
    ap.add_argument("--filter", default="", help="only cases whose name contains this")
    ap.add_argument("--backends", default="", help="passed to tessera check --backends")
    ap.add_argument("--min-region-nodes", default="", help="passed to tessera check (1: offload single-node cases)")
    ap.add_argument("--placement", default="", help="passed to tessera check (priority: every claimed node offloaded)")
    ap.add_argument("--write-expectations", metavar="FILE",
                    help="write the failures of this run as an expectations file (reasons from the error)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()

    if not os.path.isdir(args.root):
        print(f"conformance: {args.root} not found (install libonnx-testdata)", file=sys.stderr)
        return 2
    exp = load_expectations(args.expectations) if os.path.exists(args.expectations) else {}
    cases = []
    for suite in args.suites.split(","):
        d = os.path.join(args.root, suite)
        for c in sorted(os.listdir(d)):
            name = f"{suite}/{c}"
            if args.filter and args.filter not in name:
                continue
            cases.append((name, os.path.join(d, c)))

    extra = ["--backends", args.backends] if args.backends else []
    if args.min_region_nodes:
        extra += ["--min-region-nodes", args.min_region_nodes]
    if args.placement:
        extra += ["--placement", args.placement]
    results = {}
    skipped = []
    to_run = []
    for name, path in cases:
        if exp.get(name, ("",))[0] == "skip":
            skipped.append(name)
        else:
            to_run.append((name, path))
    # Chunks dealt round-robin, so that each holds cases from all over the suites (the slow ones are spread out).
    n_chunks = max(1, -(-len(to_run) // max(1, args.chunk)))
    chunks = [to_run[i::n_chunks] for i in range(n_chunks)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futs = {pool.submit(run_chunk, args.tessera, [p for _, p in chunk], args.timeout, extra): chunk
                for chunk in chunks}
        for fut in concurrent.futures.as_completed(futs):
            for (name, _), result in zip(futs[fut], fut.result()):
                results[name] = result

    passed = sorted(n for n, (s, _, _) in results.items() if s == "pass")
    failed = sorted(n for n, (s, _, _) in results.items() if s != "pass")
    unexpected_fail = [n for n in failed if n not in exp]
    unexpected_pass = [n for n in passed if n in exp]

    for n in unexpected_fail:
        print(f"UNEXPECTED FAIL {n}: {results[n][1]}")
    for n in unexpected_pass:
        print(f"UNEXPECTED PASS {n} (listed as: {exp[n][1]}); remove it from {os.path.basename(args.expectations)}")
    if args.verbose:
        for n in failed:
            if n in exp:
                print(f"expected fail {n}: {results[n][1]}")

    if args.write_expectations:
        with open(args.write_expectations, "w") as f:
            for n in sorted(set(failed) | set(skipped)):
                if n in exp:
                    f.write(f"{n} {exp[n][0]} {exp[n][1]}\n")
                else:
                    f.write(f"{n} fail {results[n][1]}\n")

    fl = float_cases(args.root)
    if fl is not None and not args.filter and not args.backends and "node" in args.suites:
        fp = len([n for n in passed if n in fl])
        print(f"float-output node cases: {fp}/{len(fl)} passed ({100.0 * fp / max(1, len(fl)):.1f}%)")
    by_suite = {}
    for n in passed:
        by_suite.setdefault(n.split("/")[0], [0, 0])[0] += 1
    for n in failed:
        by_suite.setdefault(n.split("/")[0], [0, 0])[1] += 1
    for s, (p, f) in sorted(by_suite.items()):
        print(f"  {s}: {p} passed, {f} failed")
    print(f"{len(passed)} passed, {len(failed)} failed, {len(skipped)} skipped")
    # Per external backend: the cases in which it ran at least one engine, and how many of those passed. Every one
    # must pass, expected failures included: a backend may only claim what it computes correctly.
    claimed = {}
    for n, (s, _, engines) in results.items():
        for b in engines:
            claimed.setdefault(b, [0, 0, []])
            claimed[b][0] += 1
            if s == "pass":
                claimed[b][1] += 1
            else:
                claimed[b][2].append(n)
    for b, (c, p, bad) in sorted(claimed.items()):
        print(f"backend {b}: claimed nodes in {c} cases, {p} passed")
        for n in sorted(bad):
            print(f"CLAIMED FAIL {b} {n}: {results[n][1]}")
    claimed_fail = any(bad for _, _, bad in claimed.values())
    return 1 if unexpected_fail or unexpected_pass or claimed_fail else 0


if __name__ == "__main__":
    sys.exit(main())
