#!/usr/bin/env python3
"""Streams of requests whose input shape changes, against artifacts compiled statically for each shape.

  /usr/bin/python3 bench/shape_streams.py [--build BUILD] [--work DIR] [--threads N]
                                          [--streams crnn,detector,bert] [--sample K] [--requests-scale F]
                                          [--no-background-buckets] [--repeats N]

For each stream (models from bench/stream_models.py; BERT-base from tests/e2e/gen_models.py with symbolic dims):
  crnn      CRNN-style recogniser, x [1,3,48,W], 1000 requests, W uniform in 32..2048
  detector  detector, x [1,3,H,W], 100 requests, H and W uniform in 320..1280 in steps of 32
  bert      BERT-base encoder, input_ids and attention_mask [B,S], 200 requests, B uniform in 1..8, S in 8..512
it
  1. compiles one artifact for the whole range (`tessera compile --shape x=..,MIN..MAX`, default placement);
  2. replays the stream once on it (`tessera bench --shapes-from`, no warm-up: every first request at a new shape
     counts) and takes each request's latency, the runs that waited for a plan, and the peak RSS;
  3. for the first K shapes (default 8) that first appear in the second half of the stream, compiles a static artifact for exactly that shape
     (`--shape x=..,W`) and times it (`tessera bench`, median of 10 runs after 2 warm-up runs);
  4. slowdown of a request = its latency / the static artifact's median at its shape, over the requests at the
     sampled shapes (p50, p99, max, and the first request at each shape);
  5. throughput after warm-up: the sampled shapes' requests (all in the second half of the stream), static time /
     stream time;
  6. checks the ranged artifact's outputs against ONNX Runtime (tests/e2e/ort_reference.js, CPU, optimisations
     off) at every sampled shape: max |a-b| <= 1e-3 * (1 + |b|).
  With --repeats N, steps 2 and 3 run N times in turn (the static artifacts compiled once): each replay is followed
  by the static timings it is compared with, and the repeat with the median throughput is reported, every repeat's
  throughput and p99 slowdown beside it. A later replay may read engines an earlier one compiled in the
  background from the engine cache (each repeat's buckets_from_cache says how many).
Prints one JSON line per stream and a Markdown table row for bench/RESULTS.md.
"""
import argparse
import json
import os
import random
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

STREAMS = {
    # name: (requests, random shape of each input, --shape specs of the range)
    "crnn": (1000, lambda r: ((1, 3, 48, r.randint(32, 2048)),), ["x=1,3,48,32..2048"]),
    "detector": (100, lambda r: ((1, 3, 32 * r.randint(10, 40), 32 * r.randint(10, 40)),),
                 ["x=1,3,320..1280,320..1280"]),
    "bert": (200, lambda r: (lambda d: (d, d))((r.randint(1, 8), r.randint(8, 512))),
             ["input_ids=1..8,8..512", "attention_mask=1..8,8..512"]),
}
INPUT_NAMES = {"crnn": ["x"], "detector": ["x"], "bert": ["input_ids", "attention_mask"]}


def spec(name, dims):
    """--shape / --shapes-from text of one request: NAME=D0,D1,.. per input."""
    return " ".join("%s=%s" % (n, ",".join(str(v) for v in d)) for n, d in zip(INPUT_NAMES[name], dims))


def shape_args(name, dims):
    return [a for s in spec(name, dims).split() for a in ("--shape", s)]


def tag(dims):
    return "_".join("x".join(map(str, d)) for d in dims)


def random_inputs(name, dims):
    rng = np.random.default_rng(sum(sum(d) for d in dims))
    if name == "bert":
        ids = rng.integers(1, 30522, size=dims[0]).astype(np.int64)
        return [ids, np.ones(dims[1], dtype=np.int64)]
    return [(rng.random(dims[0]) - 0.5).astype(np.float32)]


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        sys.exit("shape_streams: %s failed (%d): %s" % (" ".join(cmd), p.returncode, (p.stderr or p.stdout)[-800:]))
    return p.stdout


def measure(stream, j, rss_kb, static_ms):
    """One replay's figures: slowdowns at the sampled shapes and the throughput after warm-up."""
    lat = j["latency_ms"]
    slow, first_slow, seen = [], [], set()
    half_stream, half_static = 0.0, 0.0
    for i, d in enumerate(stream):
        if d not in static_ms:
            continue
        s = lat[i] / static_ms[d]
        slow.append(s)
        if d not in seen:
            first_slow.append(s)
            seen.add(d)
        if i >= len(stream) // 2:
            half_stream += lat[i]
            half_static += static_ms[d]
    slow.sort()
    pct = lambda p: slow[min(len(slow) - 1, int(p / 100.0 * len(slow)))]
    return {
        "distinct_shapes": j["distinct_shapes"], "p50_ms": j["p50_ms"], "p99_ms": j["p99_ms"],
        "waited_for_a_plan": j["waited_for_a_plan"], "ran_generic": j["ran_generic"], "plans_built": j["plans_built"],
        "ran_on_a_bucket": j["ran_on_a_bucket"], "buckets_compiled": j.get("buckets_compiled", 0),
        "buckets_from_cache": j.get("buckets_from_cache", 0), "sampled_requests": len(slow),
        "slowdown_p50": pct(50), "slowdown_p99": pct(99), "slowdown_max": slow[-1],
        "first_request_slowdown_max": max(first_slow),
        "throughput_vs_static_after_warmup": (half_static / half_stream) if half_stream else None,
        "first_request_ms": lat[0], "max_rss_mb": rss_kb / 1024.0,
        # Resident once the artifact was loaded (libraries, weights, the engines compiled ahead of time): what the
        # stream adds on top of it is what --max-memory bounds.
        "rss_loaded_mb": j.get("rss_loaded_mib", 0.0) * 1.048576,
        # What the plan cache held at the end, as counted against --max-memory (arenas, buckets' engines).
        "plan_cache_mb": (j.get("plan_cache_arena_bytes", 0) + j.get("plan_cache_engine_bytes", 0)) / 1048576.0,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--work", default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--streams", default="crnn,detector")
    ap.add_argument("--sample", type=int, default=8)
    ap.add_argument("--requests-scale", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=1,
                    help="replay the stream this many times, each followed by the static timings; report the median")
    ap.add_argument("--max-memory", default=None,
                    help="passed to the stream's replay (bench --max-memory SIZE: one run's memory, and the plan "
                         "cache's arenas and buckets' engines)")
    ap.add_argument("--bucket-step", type=int, default=None,
                    help="passed to the ranged compile (compile --bucket-step N: masked buckets every N along each "
                         "ranged dim; 0: none)")
    ap.add_argument("--no-background-buckets", action="store_true",
                    help="replay the stream without engines compiled in the background for shapes seen twice")
    a = ap.parse_args()
    tessera = os.path.join(a.build, "bin", "tessera")
    work = a.work or os.path.join(a.build, "shape-streams")
    os.makedirs(work, exist_ok=True)
    run(["/usr/bin/python3", os.path.join(ROOT, "bench", "stream_models.py"), work])
    if "bert" in a.streams.split(","):
        run(["/usr/bin/python3", os.path.join(ROOT, "tests", "e2e", "gen_models.py"), work, "--models", "bert_base",
             "--symbolic-dims"])
        os.replace(os.path.join(work, "bert_base.onnx"), os.path.join(work, "bert.onnx"))
    env = dict(os.environ)
    env.setdefault("NODE_PATH", os.path.join(ROOT, "bench", "node_modules"))
    threads = ["--threads", str(a.threads)]
    rows = []
    for name in a.streams.split(","):
        count, draw, range_specs = STREAMS[name]
        count = max(1, int(count * a.requests_scale))
        model = os.path.join(work, name + ".onnx")
        rng = random.Random(7)
        stream = [draw(rng) for _ in range(count)]
        stream_file = os.path.join(work, name + ".stream")
        with open(stream_file, "w") as f:
            f.write("".join(spec(name, d) + "\n" for d in stream))
        ranged = os.path.join(work, name + ".ranged.tsr")
        run([tessera, "compile", model, "-o", ranged] + [a for r in range_specs for a in ("--shape", r)] + threads +
            (["--bucket-step", str(a.bucket_step)] if a.bucket_step is not None else []))
        # Shapes first seen in the second half of the stream: their first request counts, in a process already
        # warm (the stream's very first requests also pay for the process's first allocations; reported apart).
        sampled, before = [], set(stream[:len(stream) // 2])
        for d in stream[len(stream) // 2:]:
            if d not in sampled and d not in before:
                sampled.append(d)
            if len(sampled) == a.sample:
                break
        statics, ort_ok, max_err = {}, True, 0.0
        for d in sampled:
            tsr = os.path.join(work, "%s.%s.tsr" % (name, tag(d)))
            run([tessera, "compile", model, "-o", tsr] + shape_args(name, d) + threads)
            statics[d] = tsr
            # Outputs against ONNX Runtime at this shape.
            data = os.path.join(work, "in_%s_%s" % (name, tag(d)))
            os.makedirs(data, exist_ok=True)
            for i, (n, x) in enumerate(zip(INPUT_NAMES[name], random_inputs(name, d))):
                with open(os.path.join(data, "input_%d.pb" % i), "wb") as f:
                    f.write(numpy_helper.from_array(x, n).SerializeToString())
            ref = data + "/ort"
            run(["node", os.path.join(ROOT, "tests", "e2e", "ort_reference.js"), model, data, "--out", ref], env=env)
            got = data + "/tessera"
            run([tessera, "run", ranged, "--input-dir", data, "--output-dir", got] + threads)
            outs = sorted(f for f in os.listdir(ref) if f.startswith("output_"))
            ort_ok = ort_ok and bool(outs)
            for o in outs:
                ya = numpy_helper.to_array(onnx.load_tensor(os.path.join(got, o)))
                yb = numpy_helper.to_array(onnx.load_tensor(os.path.join(ref, o)))
                ok = ya.shape == yb.shape and bool(np.all(np.abs(ya - yb) <= 1e-3 * (1 + np.abs(yb))))
                ort_ok = ort_ok and ok
                if ya.shape == yb.shape and ya.size:
                    max_err = max(max_err, float(np.max(np.abs(ya - yb))))
        # Each repeat replays the stream in a fresh process, then times the static artifacts right after it, so that
        # the two sides of a repeat's ratios share the host's speed of those minutes (on a shared VM it drifts by
        # tens of percent from one minute to the next).
        reps = []
        for _ in range(max(1, a.repeats)):
            p = subprocess.run(["/usr/bin/time", "-f", "maxrss_kb=%M", tessera, "bench", ranged, "--shapes-from",
                                stream_file, "--json"] + threads +
                               (["--no-background-buckets"] if a.no_background_buckets else []) +
                               (["--max-memory", a.max_memory] if a.max_memory else []),
                               capture_output=True, text=True)
            if p.returncode != 0:
                sys.exit("shape_streams: bench --shapes-from failed: " + p.stderr[-800:])
            j = json.loads(p.stdout.strip().splitlines()[-1])
            rss_kb = int([l for l in p.stderr.splitlines() if l.startswith("maxrss_kb=")][-1].split("=")[1])
            static_ms = {}
            for d, tsr in statics.items():
                b = json.loads(run([tessera, "bench", tsr, "--runs", "10", "--warmup", "2", "--json"] + threads))
                static_ms[d] = b["median_ms"]
            reps.append(measure(stream, j, rss_kb, static_ms))
        # The repeat with the median throughput stands for the stream; every repeat's figures are listed too.
        order = sorted(range(len(reps)), key=lambda i: reps[i]["throughput_vs_static_after_warmup"] or 0.0)
        result = dict(reps[order[len(order) // 2]])
        result.update({"stream": name, "requests": len(stream), "sampled_shapes": len(sampled),
                       "ort_match": ort_ok, "ort_max_abs_diff": max_err, "threads": a.threads,
                       "repeats": [{k: r[k] for k in ("throughput_vs_static_after_warmup", "slowdown_p99", "p50_ms",
                                                      "p99_ms", "max_rss_mb", "rss_loaded_mb", "plan_cache_mb",
                                                      "waited_for_a_plan",
                                                      "buckets_compiled", "buckets_from_cache")} for r in reps]})
        print(json.dumps(result), flush=True)
        rows.append(result)
    print()
    print("| stream | requests | p50 / p99 ms | p99 slowdown (max; first request) | waits for a compile | "
          "throughput vs static after warm-up | max RSS (once loaded) | vs ONNX Runtime |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        tp = r["throughput_vs_static_after_warmup"]
        tp_text = "%.2f" % tp if tp else "-"
        p99_text = "%.2f (%.2f; %.2f)" % (r["slowdown_p99"], r["slowdown_max"], r["first_request_slowdown_max"])
        if len(r["repeats"]) > 1:  # every repeat's figures, in the order they ran
            tp_text += " (%s)" % ", ".join("%.2f" % (x["throughput_vs_static_after_warmup"] or 0.0)
                                           for x in r["repeats"])
            p99_text += " [%s]" % ", ".join("%.2f" % x["slowdown_p99"] for x in r["repeats"])
        print("| %s | %d (%d shapes) | %.1f / %.1f | %s | %d | %s | %.0f MB (%.0f MB) | %s (max diff %.1e) |" % (
            r["stream"], r["requests"], r["distinct_shapes"], r["p50_ms"], r["p99_ms"], p99_text,
            max(x["waited_for_a_plan"] for x in r["repeats"]), tp_text,
            max(x["max_rss_mb"] for x in r["repeats"]), max(x["rss_loaded_mb"] for x in r["repeats"]),
            "match" if r["ort_match"] else "DIFFER", r["ort_max_abs_diff"]))


if __name__ == "__main__":
    main()
