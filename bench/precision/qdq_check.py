#!/usr/bin/python3
"""Tessera against ONNX Runtime on a QDQ model, in quantization steps:

  qdq_check.py MODEL.onnx INPUT_DIR [--tessera BIN] [--backends LIST] [--placement P] [--shape NAME=D0,..] [--opt disabled|all]

Exposes every QuantizeLinear output of the model as a graph output, runs that model with `tessera run` and with ONNX
Runtime (tests/e2e/ort_reference.js, onnxruntime-node from bench/node_modules), and prints, per quantized tensor, the
largest difference in steps (|q_tessera - q_ort|, integers), and for each float output its largest difference in
units of the scale of the DequantizeLinear that produced it (when one did). The goal of issue 15: every quantized
element within one step, every float output within one step of its last quantized tensor's scale.
"""
import argparse
import glob
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import helper, numpy_helper

here = os.path.dirname(os.path.abspath(__file__))
repo = os.path.dirname(os.path.dirname(here))


from convert import _load_tensor as load  # noqa: E402  (beside this script)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("inputs")
    ap.add_argument("--tessera", default=os.path.join(repo, "build", "bin", "tessera"))
    ap.add_argument("--backends", default=None)
    ap.add_argument("--placement", default=None, help="passed to tessera run (priority: every node a backend claims)")
    ap.add_argument("--shape", action="append", default=[], help="passed to tessera run (NAME=D0,D1,..; repeatable)")
    ap.add_argument("--opt", default="disabled", choices=["disabled", "all"])
    ap.add_argument("--each", action="store_true", help="print every quantized tensor's largest difference, in order")
    ap.add_argument("--keep-fusions", action="store_true",
                    help="leave out the Convs' quantized results that an Add reads (Conv -> Q -> DQ -> Add), so that an "
                         "engine folding the convolution and the Add into one step still does (an exposed tensor is "
                         "computed apart)")
    a = ap.parse_args(argv)
    m = onnx.load(a.model)
    g = m.graph
    inits = {i.name: i for i in g.initializer}
    outputs = [o.name for o in g.output]
    # QDQ models' QuantizeLinear outputs, dynamically quantized models' DynamicQuantizeLinear outputs (each with its
    # own scale, computed at run time: a step there is one of that tensor's scale on each side).
    quantized = [n.output[0] for n in g.node
                 if n.op_type in ("QuantizeLinear", "DynamicQuantizeLinear") and n.output[0] not in outputs]
    if a.keep_fusions:
        readers, producer = {}, {}
        for n in g.node:
            for i in n.input:
                readers.setdefault(i, []).append(n)
            for o in n.output:
                producer[o] = n
        def folded(q):  # a Conv's quantized result read by an Add through its DequantizeLinear
            p = producer.get(producer[q].input[0])
            return p is not None and p.op_type == "Conv" and any(
                d.op_type == "DequantizeLinear" and any(r.op_type == "Add" for r in readers.get(d.output[0], []))
                for d in readers.get(q, []))
        quantized = [q for q in quantized if not folded(q)]
    for q in quantized:
        g.output.append(helper.make_empty_tensor_value_info(q))
    # The scale each float output was dequantized with, where a DequantizeLinear produced it.
    scale_of = {}
    for n in g.node:
        if n.op_type == "DequantizeLinear" and n.output[0] in outputs and n.input[1] in inits:
            scale_of[n.output[0]] = float(np.max(numpy_helper.to_array(inits[n.input[1]])))
    with tempfile.TemporaryDirectory() as work:
        probe = os.path.join(work, "probe.onnx")
        onnx.save(m, probe)
        cmd = [a.tessera, "run", probe, "--input-dir", a.inputs, "--output-dir", os.path.join(work, "ts"), "--no-tune"]
        if a.backends:
            cmd += ["--backends", a.backends]
        if a.placement:
            cmd += ["--placement", a.placement]
        for sh in a.shape:
            cmd += ["--shape", sh]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        env = dict(os.environ, NODE_PATH=os.path.join(repo, "bench", "node_modules"))
        cmd = ["node", os.path.join(repo, "tests", "e2e", "ort_reference.js"), probe, a.inputs, "--out",
               os.path.join(work, "ort"), "--allow-constant"]
        if a.opt == "all":
            cmd += ["--opt", "all"]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
        names = outputs + quantized
        worst_steps, worst_name, beyond = 0, "", 0
        for k, name in enumerate(names):
            got = load(os.path.join(work, "ts", "output_%d.pb" % k))
            want = load(os.path.join(work, "ort", "output_%d.pb" % k))
            if k < len(outputs):
                diff = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
                s = scale_of.get(name)
                print("output %-28s max abs %.4g%s" % (name, diff, " = %.2f steps of %.4g" % (diff / s, s) if s else ""))
                continue
            steps = int(np.max(np.abs(got.astype(np.int64) - want.astype(np.int64))))
            if a.each:
                print("  %-48s %d step(s), %d elements differ" % (name, steps, int(np.sum(got != want))))
            beyond += int(np.sum(np.abs(got.astype(np.int64) - want.astype(np.int64)) > 1))
            if steps > worst_steps:
                worst_steps, worst_name = steps, name
        print("quantized tensors: %d, largest difference %d step(s)%s; elements more than one step apart: %d"
              % (len(quantized), worst_steps, " (%s)" % worst_name if worst_name else "", beyond))


if __name__ == "__main__":
    main(sys.argv[1:])
