#!/usr/bin/env python3
"""End-to-end models on the GPU: accuracy against onnxruntime, compile cost, Tessera's times, PyTorch eager's.

    e2e.py --tessera BIN --work DIR --out OUTDIR [--models resnet50,bert_base_ln,...] [--runs 50] [--warmup 10]
           [--budget SECONDS] [--backend cuda] [--no-torch]

Models come from tests/e2e/gen_models.py (resnet50, mobilenet_v2, bert_base_ln; resnet50_b32 with --batch 32) and
some built here: resnet50_mixed and squeezenet_mixed, with every third Relu replaced by ThresholdedRelu(alpha=0) (the
same function), an op the backend refuses, so that its regions are cut in the middle of the network; and
mobilenet_v2_mixed, with a ThresholdedRelu(alpha=0) before every Clip (ReLU6 = Clip(Relu(x)), the same function), so
that the backend's regions are one or two convolutions each: the fragmentation that offloading everything it takes
turns into a crossing per layer. Inputs are
gen_models.py's own (--inputs). For each model and placement variant:

    default   --backends B,native                      (cost placement; native is always last, so this is also
                                                         what `--backends B` gives)
    priority  --backends B,native --placement priority (every node B takes goes to B)
    naive     ... --placement priority --min-region-nodes 1   (mixed and BERT only: offload whatever B takes)

it compiles a .tsr (timed), runs it on the inputs and compares every output with onnxruntime's (rtol 1e-3, atol
1e-3 * max(1, max|ref|)), and benches it (`tessera bench --json`, median_ms). The partition reports go to
OUTDIR/partition.txt. torch_eager.py gives the PyTorch eager time on the same weights and inputs. Results go to
--results (default WORK/e2e.json) after every step (report.py renders them); no new step starts once --budget
seconds have passed.
"""

import argparse
import glob
import json
import os
import re
import shutil
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import PY, Deadline, compare, last_line, log, parse_json_line, read_tensor, sh, write_json  # noqa: E402

REPO = os.path.dirname(os.path.dirname(HERE))
GEN = os.path.join(REPO, "tests", "e2e", "gen_models.py")
ALL_MODELS = ["resnet50", "bert_base_ln", "resnet50_mixed", "squeezenet_mixed", "mobilenet_v2", "resnet50_b32",
              "mobilenet_v2_mixed"]
BATCH = {"resnet50_b32": 32}
NAIVE = {"resnet50_mixed", "squeezenet_mixed", "mobilenet_v2_mixed", "bert_base_ln"}
# A mixed model: its base model with every third Relu through an op the plugin refuses.
MIXED = {"resnet50_mixed": "resnet50", "squeezenet_mixed": "squeezenet", "mobilenet_v2_mixed": "mobilenet_v2"}
MIXED_OP = "ThresholdedRelu"


def make_mixed(src, dst, name, every=3):
    """A model with every `every`-th Relu (1st, 4th, ...) as ThresholdedRelu(alpha=0): relu, through another op. A
    model without Relu but with Clip (mobilenet_v2's ReLU6) gets a ThresholdedRelu(alpha=0) before every Clip
    instead. Returns (ops made, Relu or Clip nodes)."""
    import onnx
    from onnx import helper
    m = onnx.load(src)
    n = 0
    relus = [node for node in m.graph.node if node.op_type == "Relu"]
    for i, node in enumerate(relus):
        if i % every == 1:
            node.op_type = MIXED_OP
            node.attribute.append(helper.make_attribute("alpha", 0.0))
            n += 1
    if not relus:
        nodes = []
        for node in m.graph.node:
            if node.op_type == "Clip":
                t = node.input[0] + "_thresholded_%d" % n
                nodes.append(helper.make_node(MIXED_OP, [node.input[0]], [t], name=t, alpha=0.0))
                node.input[0] = t
                n += 1
            nodes.append(node)
        relus = [node for node in nodes if node.op_type == "Clip"]
        del m.graph.node[:]
        m.graph.node.extend(nodes)
    m.graph.name = name
    onnx.checker.check_model(m)
    with open(dst, "wb") as f:
        f.write(m.SerializeToString())
    return n, len(relus)


class E2E:
    def __init__(self, args):
        self.a = args
        self.t0 = time.time()
        self.deadline = Deadline(None if args.budget is None else self.t0 + args.budget)
        self.work = args.work
        self.res = {"models": {}, "order": [], "runs": args.runs, "warmup": args.warmup, "backend": args.backend,
                    "notes": [], "phases": {}}
        self.json_path = args.results or os.path.join(self.work, "e2e.json")
        self.part_path = os.path.join(args.out, "partition.txt")
        with open(self.part_path, "w") as f:
            f.write("# tessera partition reports (device check)\n")

    def save(self):
        self.res["elapsed_s"] = round(time.time() - self.t0, 1)
        write_json(self.json_path, self.res)

    def tessera(self, *argv, timeout=120):
        return sh([self.a.tessera] + list(argv), timeout=timeout, deadline=self.deadline)

    # -- models and references ---------------------------------------------------------------------------------------
    def generate(self, models):
        t = time.time()
        d = os.path.join(self.work, "models")
        os.makedirs(d, exist_ok=True)
        base = sorted({m for m in models if m in ("resnet50", "mobilenet_v2", "bert_base_ln")} |
                      {MIXED[m] for m in models if m in MIXED})
        ok = set()
        if base:
            for extra in ([], ["--inputs"]):
                rc, out, _ = sh([PY, GEN] + extra + [d, "--models", ",".join(base)], timeout=180,
                                deadline=self.deadline)
                if rc != 0:
                    self.res["notes"].append("gen_models.py %s failed: %s" % (" ".join(extra), last_line(out)))
                    log(out)
                    base = []
            ok |= set(base)
        if "resnet50_b32" in models:
            good = True
            for extra in ([], ["--inputs"]):
                rc, out, _ = sh([PY, GEN] + extra + [d, "--models", "resnet50", "--batch", "32"], timeout=120,
                                deadline=self.deadline)
                if rc != 0:
                    self.res["notes"].append("gen_models.py --batch 32 failed: %s" % last_line(out))
                    log(out)
                    good = False
            if good:
                ok.add("resnet50_b32")
        for mixed, src in MIXED.items():
            if mixed not in models or src not in ok:
                continue
            n, total = make_mixed(os.path.join(d, src + ".onnx"), os.path.join(d, mixed + ".onnx"), mixed)
            shutil.copytree(os.path.join(d, src), os.path.join(d, mixed), dirs_exist_ok=True)
            self.res["notes"].append("%s: %d %s(alpha=0) for %d %s" % (mixed, n, MIXED_OP, total,
                                                                       "Clip" if src == "mobilenet_v2" else "Relu"))
            ok.add(mixed)
        self.res["phases"]["generate_s"] = round(time.time() - t, 1)
        log("generated %s in %.1f s" % (", ".join(sorted(ok)), time.time() - t))
        return d, ok

    def ort_reference(self, model, in_dir, ref_dir):
        import onnxruntime as ort
        t = time.time()
        so = ort.SessionOptions()
        so.intra_op_num_threads = os.cpu_count() or 1
        sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        feeds = {}
        for i, inp in enumerate(sess.get_inputs()):
            feeds[inp.name] = read_tensor(os.path.join(in_dir, "input_%d.pb" % i))
        outs = sess.run(None, feeds)
        os.makedirs(ref_dir, exist_ok=True)
        for i, o in enumerate(outs):
            np.save(os.path.join(ref_dir, "ref_%d.npy" % i), o)
        return len(outs), time.time() - t

    def compare_outputs(self, out_dir, ref_dir, n):
        worst_abs, worst_rel, all_ok = 0.0, 0.0, True
        for i in range(n):
            p = os.path.join(out_dir, "output_%d.pb" % i)
            if not os.path.exists(p):
                return float("inf"), float("inf"), False
            a, r, ok = compare(read_tensor(p), np.load(os.path.join(ref_dir, "ref_%d.npy" % i)))
            worst_abs, worst_rel, all_ok = max(worst_abs, a), max(worst_rel, r), all_ok and ok
        return worst_abs, worst_rel, all_ok

    def partition(self, name, model, flags, title):
        rc, out, secs = self.tessera("partition", model, *flags, timeout=120)
        with open(self.part_path, "a") as f:
            f.write("\n## %s: tessera partition %s %s (rc %d, %.1f s)\n%s\n" % (name, os.path.basename(model),
                                                                              " ".join(flags), rc, secs, out))
        cross = [ln.strip() for ln in out.splitlines() if re.search(r"cross", ln, re.I)]
        head = next((ln for ln in out.splitlines() if ln.startswith("backends ")), last_line(out))
        return {"rc": rc, "seconds": round(secs, 1), "summary": head[:300], "cross": cross[:10],
                "last": last_line(out) if rc else ""}

    # -- one placement variant -----------------------------------------------------------------------------------------
    def variant(self, name, vname, model, flags, in_dir, ref_dir, nout):
        v = {"flags": " ".join(flags)}
        mres = self.res["models"][name]
        mres["variants"][vname] = v
        tsr = os.path.join(self.work, "%s.%s.tsr" % (name, vname))
        rc, out, secs = self.tessera("compile", model, "-o", tsr, *flags, timeout=240)
        v.update(compile_rc=rc, compile_s=round(secs, 2), compile_line=last_line(out))
        log("  compile %s/%s: rc %d, %.1f s: %s" % (name, vname, rc, secs, last_line(out)))
        if rc != 0:
            log(out[-3000:])
            v["status"] = "compile failed" if rc != 124 else "compile timed out"
            self.save()
            return v
        v["tsr_mib"] = round(os.path.getsize(tsr) / 2**20, 2)
        out_dir = os.path.join(self.work, "%s.%s.out" % (name, vname))
        shutil.rmtree(out_dir, ignore_errors=True)
        os.makedirs(out_dir)
        rc, out, secs = self.tessera("run", tsr, "--input-dir", in_dir, "--output-dir", out_dir, timeout=120)
        v.update(run_rc=rc, run_s=round(secs, 2))
        if rc != 0:
            log(out[-3000:])
            v.update(status="run failed (rc %d): %s" % (rc, last_line(out)), check="FAIL")
        else:
            a, r, ok = self.compare_outputs(out_dir, ref_dir, nout)
            v.update(max_abs=a, max_rel=r, check="PASS" if ok else "FAIL")
            log("  run %s/%s: %s, max abs %.3g, max rel %.3g (%.1f s)" % (name, vname, v["check"], a, r, secs))
        self.save()
        rc, out, secs = self.tessera("bench", tsr, "--runs", str(self.a.runs), "--warmup", str(self.a.warmup),
                                     "--json", timeout=180)
        j = parse_json_line(out) if rc == 0 else None
        if j is None:
            log(out[-3000:])
            v["bench"] = "failed (rc %d): %s" % (rc, last_line(out))
        else:
            v.update(median_ms=j.get("median_ms"), min_ms=j.get("min_ms"), load_ms=j.get("load_ms"),
                     engines=j.get("engines"), arena_bytes=j.get("arena_bytes"), threads=j.get("threads"))
            log("  bench %s/%s: median %.3f ms, min %.3f ms, %s engines, loaded in %.0f ms" % (
                name, vname, j.get("median_ms", -1), j.get("min_ms", -1), j.get("engines"), j.get("load_ms", -1)))
        if vname == "default":
            v["conv_ways"] = self.conv_ways(tsr)
        try:
            os.remove(tsr)  # BERT's artifacts are ~440 MiB each
        except OSError:
            pass
        self.save()
        return v

    def conv_search(self, name, model, flags):
        """The plugin's choice for every convolution, with each candidate's time (TESSERA_CUDA_VERBOSE=1), from one
        more compile -> OUT/conv_search_NAME.txt; a summary of the chosen ways goes into the results' notes."""
        tsr = os.path.join(self.work, name + ".verbose.tsr")
        env = dict(os.environ, TESSERA_CUDA_VERBOSE="1")
        rc, out, secs = sh([self.a.tessera, "compile", model, "-o", tsr] + flags, timeout=240, deadline=self.deadline,
                           env=env)
        with open(os.path.join(self.a.out, "conv_search_%s.txt" % name), "w") as f:
            f.write(out)
        chosen = {}
        for m in re.finditer(r": chose (graph fused|graph|legacy) ", out):
            chosen[m.group(1)] = chosen.get(m.group(1), 0) + 1
        refused = len(re.findall(r"^.*: (graph fused|graph) engine .*: (?!\d)", out, re.M))
        self.res["models"][name]["notes"].append(
            "convolution search (compile rc %d, %.1f s): chose %s; %d graph candidates refused or left out" % (
                rc, secs, ", ".join("%s %d" % kv for kv in sorted(chosen.items())) or "nothing", refused))
        try:
            os.remove(tsr)
        except OSError:
            pass

    def conv_ways(self, tsr):
        """How the artifact's convolutions run: from a profiled run's trace, the steps of the cuda plugin whose
        description names a cuDNN way ("cudnn conv+bias+relu (graph fused engine 12 ...)"), counted per way with
        their time."""
        trace = tsr + ".trace.json"
        rc, out, _ = self.tessera("bench", tsr, "--runs", "2", "--warmup", "1", "--trace", trace, timeout=120)
        if rc != 0:
            return {"error": "rc %d: %s" % (rc, last_line(out))}
        ways = {}
        try:
            with open(trace) as f:
                events = json.load(f).get("traceEvents", [])
            for e in events:
                what = (e.get("args") or {}).get("what", "")
                m = re.search(r"\((graph fused|graph|legacy) (engine|algo) ", what) if e.get("cat") == "step" else None
                if m:
                    w = ways.setdefault(m.group(1), {"steps": 0, "ms": 0.0})
                    w["steps"] += 1
                    w["ms"] += float(e.get("dur", 0)) / 1000.0
        except (OSError, ValueError) as e:
            return {"error": str(e)}
        finally:
            try:
                os.remove(trace)
            except OSError:
                pass
        for w in ways.values():  # two runs were traced
            w["steps"] //= 2
            w["ms"] = round(w["ms"] / 2, 3)
        log("  convolutions: %s" % (", ".join("%s %d (%.3f ms)" % (k, w["steps"], w["ms"]) for k, w in ways.items())
                                    or "none"))
        return ways

    def torch_eager(self, name, model, in_dir, ref_dir):
        jpath = os.path.join(self.work, "%s.torch.json" % name)
        rc, out, secs = sh([PY, os.path.join(HERE, "torch_eager.py"), model, "--input-dir", in_dir, "--ref-dir",
                            ref_dir, "--runs", str(self.a.runs), "--warmup", str(self.a.warmup), "--json", jpath],
                           timeout=180, deadline=self.deadline)
        j = parse_json_line(out)
        if j is None:
            log(out[-3000:])
            return {"status": "failed (rc %d): %s" % (rc, last_line(out)), "seconds": round(secs, 1)}
        j["seconds"] = round(secs, 1)
        log("  torch eager %s: %s, median %.3f ms (max abs %s) in %.0f s" % (
            name, j.get("check"), j.get("median_ms", -1), j.get("max_abs"), secs))
        return j

    # -- one model ---------------------------------------------------------------------------------------------------
    def model(self, name, mdir):
        model = os.path.join(mdir, name + ".onnx")
        in_dir = os.path.join(mdir, name, "test_data_set_0")
        ref_dir = os.path.join(self.work, name + ".ref")
        mres = {"batch": BATCH.get(name, 1), "variants": {}, "notes": []}
        self.res["models"][name] = mres
        self.res["order"].append(name)
        t = time.time()
        try:
            nout, secs = self.ort_reference(model, in_dir, ref_dir)
        except Exception as e:  # noqa: BLE001 - reported, the rest goes on
            mres["notes"].append("onnxruntime failed: %s" % e)
            log("  onnxruntime failed on %s: %s" % (name, e))
            self.save()
            return
        mres["ort_s"] = round(secs, 1)
        log("  onnxruntime reference %s: %d outputs in %.1f s" % (name, nout, secs))
        B = self.a.backend
        base = ["--backends", B + ",native"]
        extra = []
        if name in MIXED:
            extra = self.mixed_guard(name, model)
        self.variant(name, "default", model, base + extra, in_dir, ref_dir, nout)
        mres["partition"] = self.partition(name, model, base + extra, "default")
        self.variant(name, "priority", model, base + ["--placement", "priority"] + extra, in_dir, ref_dir, nout)
        if name in ("resnet50", "resnet50_b32"):
            self.conv_search(name, model, base + ["--placement", "priority"])
        if name in NAIVE:
            naive = base + ["--placement", "priority", "--min-region-nodes", "1"] + extra
            self.variant(name, "naive", model, naive, in_dir, ref_dir, nout)
            mres["partition_naive"] = self.partition(name, model, naive, "naive")
        if not self.a.no_torch:
            mres["torch"] = self.torch_eager(name, model, in_dir, ref_dir)
        mres["seconds"] = round(time.time() - t, 1)
        self.save()

    def mixed_guard(self, name, model):
        """The mixed model must keep its ThresholdedRelu nodes off the backend; if the backend claims them, pin them
        to native with --place (and say so)."""
        from common import parse_json_doc
        rc, out, _ = self.tessera("partition", model, "--backends", self.a.backend + ",native", "--placement",
                                  "priority", "--min-region-nodes", "1", "--no-tune", "--json", timeout=120)
        rep = parse_json_doc(out) if rc == 0 else None
        mres = self.res["models"][name]
        if rep is None:
            mres["notes"].append("could not read the placement of %s (rc %d): %s" % (MIXED_OP, rc, last_line(out)))
            return []
        on_backend = sum(int(r.get("ops", {}).get(MIXED_OP, 0)) for r in rep.get("regions", [])
                         if r.get("backend") == self.a.backend)
        regions = [r for r in rep.get("regions", []) if r.get("backend") == self.a.backend]
        mres["notes"].append("naive placement: %d %s regions; %d %s nodes on %s" % (
            len(regions), self.a.backend, on_backend, MIXED_OP, self.a.backend))
        if on_backend:
            mres["notes"].append("%s claims %s: pinned to native with --place %s=native" % (
                self.a.backend, MIXED_OP, MIXED_OP))
            return ["--place", "%s=native" % MIXED_OP]
        return []

    def run(self, models):
        mdir, ok = self.generate(models)
        for name in models:
            if name not in ok:
                self.res["models"][name] = {"notes": ["not generated"], "variants": {}}
                self.res["order"].append(name)
                continue
            if self.deadline.left() < 30:
                self.res["models"][name] = {"notes": ["skipped: out of time"], "variants": {},
                                            "batch": BATCH.get(name, 1)}
                self.res["order"].append(name)
                log("skipping %s: out of time" % name)
                continue
            log("== %s (%.0f s left)" % (name, self.deadline.left()))
            self.model(name, mdir)
            for p in glob.glob(os.path.join(self.work, name + ".*.out")):
                shutil.rmtree(p, ignore_errors=True)
        self.save()


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default=",".join(ALL_MODELS))
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--budget", type=float, default=None)
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--results", help="the results JSON, rewritten after every step (default WORK/e2e.json)")
    args = ap.parse_args(argv)
    os.makedirs(args.work, exist_ok=True)
    models = [m for m in args.models.split(",") if m]
    for m in models:
        if m not in ALL_MODELS:
            ap.error("unknown model %s (known: %s)" % (m, ", ".join(ALL_MODELS)))
    E2E(args).run(models)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
