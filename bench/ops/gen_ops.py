#!/usr/bin/python3
"""Writes the op sweep's models: one ONNX file per grid point (bench/ops/grid.txt), with a sidecar of facts the
report needs.

Usage (needs onnx + numpy: Debian's /usr/bin/python3):
    gen_ops.py OUT_DIR [--grid FILE] [--filter REGEX]

For every point whose id matches REGEX (re.search; default: all), writes OUT_DIR/ID.onnx and OUT_DIR/ID.meta.json
({"id", "op", "family", "line", "summary", "gflop", "inputs", "outputs"}) unless both are there and the sidecar holds
the same grid line (the builder is deterministic, so an unchanged line means an unchanged model). Prints the matching
ids, one a line, in grid order, on stdout; progress and errors go to stderr. Exit 1 when a point cannot be built (the
others are still written), 2 on a bad grid or usage.
"""

import argparse
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import opsgrid  # noqa: E402


def _write_atomic(path, data):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--grid", default=os.path.join(HERE, "grid.txt"))
    ap.add_argument("--filter", default="")
    a = ap.parse_args()
    try:
        points = opsgrid.parse_grid(a.grid)
        pattern = re.compile(a.filter)
    except (opsgrid.GridError, re.error) as e:
        print(f"gen_ops: {e}", file=sys.stderr)
        return 2
    os.makedirs(a.out_dir, exist_ok=True)
    failed = 0
    for p in points:
        if not pattern.search(p.id):
            continue
        onnx_path = os.path.join(a.out_dir, p.id + ".onnx")
        meta_path = os.path.join(a.out_dir, p.id + ".meta.json")
        try:
            with open(meta_path) as f:
                if json.load(f).get("line") == p.line and os.path.getsize(onnx_path) > 0:
                    print(p.id, flush=True)
                    continue
        except (OSError, ValueError):
            pass
        try:
            model = opsgrid.build(p)
            ins, outs = opsgrid.io_shapes(model)
            meta = {"id": p.id, "op": p.op, "family": p.family(), "line": p.line,
                    "summary": opsgrid.summary(p, ins, outs), "gflop": opsgrid.gflop(p, outs),
                    "inputs": ins, "outputs": outs}
        except Exception as e:  # noqa: BLE001  (report the point and go on with the others)
            print(f"gen_ops: {p.id}: cannot build: {type(e).__name__}: {e}", file=sys.stderr)
            failed += 1
            continue
        _write_atomic(onnx_path, model.SerializeToString())
        _write_atomic(meta_path, (json.dumps(meta, indent=1) + "\n").encode())
        print(f"gen_ops: wrote {onnx_path}", file=sys.stderr)
        print(p.id, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
