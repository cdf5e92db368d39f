"""Shared bits of the GPU check's helpers: running commands under a deadline, logging, reading tensors."""

import json
import os
import subprocess
import sys
import time

import numpy as np


def log(msg):
    print(msg, flush=True)


class Deadline:
    """Seconds left until an absolute time (epoch seconds); None means no deadline."""

    def __init__(self, at):
        self.at = at

    def left(self):
        return float("inf") if self.at is None else self.at - time.time()


def sh(cmd, timeout, deadline=None, env=None, quiet=False):
    """Runs cmd (a list) with a timeout clipped to the deadline. Returns (rc, output, seconds); rc 124 on timeout,
    125 when there was no time left to start it, -N when killed by signal N."""
    if deadline is not None:
        timeout = min(timeout, deadline.left() - 2)
    if timeout < 1:
        return 125, "not run: out of time", 0.0
    t0 = time.time()
    if not quiet:
        log("  $ " + " ".join(cmd))
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout, env=env)
        out = p.stdout.decode("utf-8", "replace")
        rc = p.returncode
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode("utf-8", "replace") + "\n[timed out after %.0f s]" % timeout
        rc = 124
    return rc, out, time.time() - t0


def last_line(text):
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def read_tensor(path):
    from onnx import TensorProto, numpy_helper
    t = TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return np.array(numpy_helper.to_array(t))


def write_tensor(path, arr, name):
    from onnx import numpy_helper
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(np.ascontiguousarray(arr), name).SerializeToString())


def compare(out, ref):
    """(max_abs, max_rel, ok) with rtol 1e-3 and atol 1e-3 * max(1, max|ref|); max_rel is |d| / max(|ref|, atol)."""
    out = np.asarray(out)
    ref = np.asarray(ref)
    if out.shape != ref.shape:
        return float("inf"), float("inf"), False
    if ref.size == 0:
        return 0.0, 0.0, True
    if ref.dtype.kind not in "fc":
        ok = bool(np.array_equal(out, ref))
        return (0.0, 0.0, True) if ok else (float("inf"), float("inf"), False)
    out = out.astype(np.float64)
    ref = ref.astype(np.float64)
    atol = 1e-3 * max(1.0, float(np.max(np.abs(ref))))
    d = np.abs(out - ref)
    ok = bool(np.all(np.isfinite(out))) and bool(np.all(d <= atol + 1e-3 * np.abs(ref)))
    if not np.all(np.isfinite(d)):
        return float("inf"), float("inf"), False
    return float(np.max(d)), float(np.max(d / np.maximum(np.abs(ref), atol))), ok


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def parse_json_line(text):
    """The last line of text that parses as a JSON object, else None."""
    for ln in reversed(text.strip().splitlines()):
        ln = ln.strip()
        if ln.startswith("{"):
            try:
                return json.loads(ln)
            except ValueError:
                continue
    return None


def parse_json_doc(text):
    """A JSON document printed possibly after other lines (tessera partition --json)."""
    i = text.find("{")
    while i >= 0:
        try:
            return json.loads(text[i:])
        except ValueError:
            i = text.find("\n{", i + 1)
            i = i + 1 if i >= 0 else -1
    return None


PY = sys.executable
