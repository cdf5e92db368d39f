#!/usr/bin/python3
"""Copies the ONNX node test cases that use an op the cuda plugin lowers into OUT_DIR (the GPU machine's onnx package
ships no test data, so scripts/device_pack.sh carries these). The op list is read from backends/cuda/cuda_lower.cc's
tables, so a new op there is carried without an edit here.

Usage: pick_node_cases.py OUT_DIR [CASES_DIR]   (default CASES_DIR: Debian's libonnx-testdata node suite)
"""
import os
import re
import shutil
import sys

import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def plugin_ops():
    text = open(os.path.join(ROOT, "backends/cuda/cuda_lower.cc")).read()
    ops = set()
    for table in re.findall(r"kOps = \{(.*?)\};", text, flags=re.S):
        ops |= set(re.findall(r'"([A-Z][A-Za-z]+)"', table))
    return ops


def main(argv):
    out = argv[0]
    cases = argv[1] if len(argv) > 1 else "/usr/share/libonnx-testdata/data/node"
    ops = plugin_ops()
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    kept = 0
    for name in sorted(os.listdir(cases)):
        model = os.path.join(cases, name, "model.onnx")
        if not os.path.exists(model):
            continue
        try:
            m = onnx.load(model)
        except Exception:
            continue
        if any(n.op_type in ops for n in m.graph.node):
            shutil.copytree(os.path.join(cases, name), os.path.join(out, name))
            kept += 1
    print(f"{kept} node cases use one of the plugin's {len(ops)} ops -> {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
