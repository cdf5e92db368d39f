#!/usr/bin/env python3
"""Fails when a file under src/ includes a header of a layer it must not depend on.

The layers and what each may include (besides itself), as the CMake targets of the top-level CMakeLists.txt link them
and docs/architecture.md draws them. A wrong include would still compile (every target sees all of src/), so this
check is what keeps the dependencies pointing one way. Usage: check_layers.py SRC_DIR
"""
import os
import re
import sys

ALLOWED = {
    "util": set(),
    "ir": {"util"},
    "ops": {"util", "ir"},
    "onnx": {"util", "ir", "ops"},
    "passes": {"util", "ir", "ops"},
    "artifact": {"util", "ir", "ops", "onnx"},
    "backends": {"util", "ir", "ops", "onnx", "artifact"},
    "partition": {"util", "ir", "ops", "onnx", "artifact", "backends"},
    "runtime": {"util", "ir", "ops", "passes", "artifact", "backends"},
    "backends/native": {"util", "ir", "ops", "onnx", "passes", "artifact", "backends", "runtime"},
    "api": {"util", "ir", "ops", "onnx", "passes", "artifact", "backends", "backends/native", "partition", "runtime"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(rel):
    """The layer of a path relative to src/ ("ops/kernels/gemm.h" -> "ops")."""
    if rel.startswith("backends/native/"):
        return "backends/native"
    return rel.split("/", 1)[0]


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..", "src")
    bad = []
    files = 0
    for root, _, names in os.walk(src):
        for name in names:
            if not name.endswith((".h", ".cc", ".inc")):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, src)
            layer = layer_of(rel)
            if layer not in ALLOWED:
                bad.append(f"{rel}: folder '{layer}' is in no layer (add it to tests/layering/check_layers.py)")
                continue
            files += 1
            with open(path, encoding="utf-8") as f:
                for n, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m or "/" not in m.group(1) or m.group(1).startswith("tessera/"):
                        continue
                    target = layer_of(m.group(1))
                    if target not in ALLOWED:
                        continue  # a header outside src/ (onnx/onnx_pb.h is <>, but be lenient)
                    if target != layer and target not in ALLOWED[layer]:
                        bad.append(f"{rel}:{n}: layer '{layer}' includes '{m.group(1)}' of layer '{target}'")
    for b in bad:
        print("layering: " + b)
    print(f"layering: {files} files, {len(bad)} wrong includes")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
