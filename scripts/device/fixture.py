#!/usr/bin/env python3
"""A tiny artifact holding a cuda engine, for a test fixture: MatMul + Add + Relu on [4,16] x [16,8].

    fixture.py --tessera BIN --work DIR --out OUTDIR [--backend cuda]

Writes OUTDIR/cuda_engine.onnx and, compiled with every node on the backend (--placement priority
--min-region-nodes 1), OUTDIR/cuda_engine.tsr; checks with `tessera inspect` that it holds an engine of the backend
and with `tessera run` that it computes relu(x @ w + b). Prints one line: OK or FAIL with the reason.
"""

import argparse
import os
import re
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import compare, last_line, log, read_tensor, sh, write_tensor  # noqa: E402


def build(path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rs = np.random.RandomState(7)
    w = (rs.standard_normal((16, 8)) * 0.25).astype(np.float32)
    b = (rs.standard_normal((8,)) * 0.1).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["xw"], name="matmul"),
         helper.make_node("Add", ["xw", "b"], ["xwb"], name="add"),
         helper.make_node("Relu", ["xwb"], ["y"], name="relu")],
        "cuda_engine_fixture",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, producer_name="tessera-device_check", opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 7
    onnx.checker.check_model(m)
    with open(path, "wb") as f:
        f.write(m.SerializeToString())
    return w, b


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--backend", default="cuda")
    args = ap.parse_args(argv)
    os.makedirs(args.work, exist_ok=True)
    model = os.path.join(args.work, "cuda_engine.onnx")
    tsr = os.path.join(args.work, "cuda_engine.tsr")
    w, b = build(model)
    shutil.copy(model, os.path.join(args.out, "cuda_engine.onnx"))
    rc, out, secs = sh([args.tessera, "compile", model, "-o", tsr, "--backends", args.backend + ",native",
                        "--placement", "priority", "--min-region-nodes", "1", "--no-tune"], timeout=90)
    log("  " + out.strip().replace("\n", "\n  "))
    if rc != 0:
        log("fixture: FAIL: compile rc %d: %s" % (rc, last_line(out)))
        return 1
    rc, info, _ = sh([args.tessera, "inspect", tsr], timeout=30)
    log("  " + info.strip().replace("\n", "\n  "))
    if rc != 0 or not re.search(r"region \d+ \(%s\)" % re.escape(args.backend), info):
        log("fixture: FAIL: `tessera inspect` shows no %s engine (rc %d)" % (args.backend, rc))
        return 1
    ind, outd = os.path.join(args.work, "fixture_in"), os.path.join(args.work, "fixture_out")
    os.makedirs(ind, exist_ok=True)
    os.makedirs(outd, exist_ok=True)
    x = np.random.RandomState(8).standard_normal((4, 16)).astype(np.float32)
    write_tensor(os.path.join(ind, "input_0.pb"), x, "x")
    rc, out, _ = sh([args.tessera, "run", tsr, "--input-dir", ind, "--output-dir", outd], timeout=60)
    if rc != 0:
        log("fixture: FAIL: run rc %d: %s" % (rc, last_line(out)))
        return 1
    y = read_tensor(os.path.join(outd, "output_0.pb"))
    mabs, _, ok = compare(y, np.maximum(x.astype(np.float64) @ w + b, 0))
    shutil.copy(tsr, os.path.join(args.out, "cuda_engine.tsr"))
    log("fixture: %s: cuda_engine.tsr %d bytes, max abs error %.3g" % ("OK" if ok else "FAIL (wrong result)",
                                                                       os.path.getsize(tsr), mabs))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
