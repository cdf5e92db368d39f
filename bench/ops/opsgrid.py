"""The one parser and model builder of the op sweep's grid (bench/ops/grid.txt).

Input: grid lines `ID OP key=value ...`. Output, per point: an ONNX model (opset 17, IR 8) holding that op, its
weights as initializers drawn from a seed that depends only on the id (so adding points never changes another one),
its activations as graph inputs; plus what the report needs: the family the point is tabled under, a shape summary and
the GFLOP (2 x multiply-adds) where that is meaningful (Conv, ConvTranspose, MatMul, Gemm, LSTM, GRU).

Keys and defaults per op (every tensor float32; see the header of grid.txt):
    Conv, ConvTranspose   x oc k s=1 p=0 d=1 g=1 bias=1 op=0 (ConvTranspose output_padding)
    Resize                x mode=nearest coord=half_pixel nearest=round_prefer_floor, scale= or size=
    MaxPool, AveragePool  x k s=1 p=0 cip=0 ceil=0; GlobalAveragePool x
    MatMul                a b bconst=1
    Gemm                  a n transb=1 bias=1
    LSTM, GRU             t i h dir=forward
    Softmax, LayerNormalization   x axis=-1
    ReduceMean, ReduceSum, ReduceMax   x axes keep=1
    Transpose x perm; Concat xs axis; Slice x starts ends axes steps
    Gather                data idx axis=0 dconst=1 (idx=scalar: a 0-d index)
    Pad                   x pads mode=constant
    Add, Mul              a b bconst=0
    Sigmoid Tanh Exp Relu HardSwish Erf LeakyRelu Clip6 SiLU BNSiLU GeluErf HardSwishChain   x
"""

import math
import re
import zlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
FLOAT, INT64 = TensorProto.FLOAT, TensorProto.INT64

# Families in report order: (title, predicate on a point). The first that matches takes the point.
FAMILIES = [
    ("Conv 1-D", lambda p: p.op == "Conv" and len(p.shape("x")) == 3),
    ("Conv 2-D", lambda p: p.op == "Conv" and len(p.shape("x")) == 4),
    ("Conv 3-D", lambda p: p.op == "Conv" and len(p.shape("x")) == 5),
    ("ConvTranspose", lambda p: p.op == "ConvTranspose"),
    ("Resize", lambda p: p.op == "Resize"),
    ("Pooling", lambda p: p.op in ("MaxPool", "AveragePool", "GlobalAveragePool")),
    ("MatMul", lambda p: p.op == "MatMul"),
    ("Gemm", lambda p: p.op == "Gemm"),
    ("LSTM and GRU", lambda p: p.op in ("LSTM", "GRU")),
    ("Softmax and LayerNormalization", lambda p: p.op in ("Softmax", "LayerNormalization")),
    ("Reductions", lambda p: p.op.startswith("Reduce")),
    ("Data movement", lambda p: p.op in ("Transpose", "Concat", "Slice", "Gather", "Pad")),
    ("Elementwise", lambda p: True),
]
# Ops whose best Tessera backend is held to 0.8 x ORT (the BEST<0.8 flag).
COMPUTE_OPS = ("Conv", "ConvTranspose", "MatMul", "Gemm", "LSTM", "GRU")
UNARY = {"Sigmoid", "Tanh", "Exp", "Relu", "HardSwish", "Erf", "LeakyRelu"}


class GridError(Exception):
    pass


def _ints(v):
    return [int(t) for t in re.split(r"[x,]", v) if t != ""]


class Point:
    def __init__(self, pid, op, kv, line, lineno):
        self.id, self.op, self.kv, self.line, self.lineno = pid, op, kv, line, lineno

    def has(self, key):
        return key in self.kv

    def shape(self, key):
        return _ints(self.kv[key])

    def ints(self, key, default=None, n=None):
        """A per-dimension list; a single value is repeated n times."""
        if key not in self.kv:
            if default is None:
                raise GridError(f"{self.id}: missing {key}=")
            v = [default]
        else:
            v = _ints(self.kv[key])
        if n is not None and len(v) == 1:
            v = v * n
        if n is not None and len(v) != n:
            raise GridError(f"{self.id}: {key}= needs 1 or {n} values, has {len(v)}")
        return v

    def int(self, key, default=None):
        if key not in self.kv:
            if default is None:
                raise GridError(f"{self.id}: missing {key}=")
            return default
        return int(self.kv[key])

    def str(self, key, default):
        return self.kv.get(key, default)

    def family(self):
        return next(title for title, pred in FAMILIES if pred(self))

    def is_compute(self):
        return self.op in COMPUTE_OPS


def parse_grid(path):
    points, seen = [], set()
    with open(path) as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            toks = line.split()
            if len(toks) < 2:
                raise GridError(f"{path}:{lineno}: expected `ID OP key=value ...`")
            pid, op = toks[0], toks[1]
            if not re.fullmatch(r"[a-z0-9_]+", pid):
                raise GridError(f"{path}:{lineno}: id '{pid}' must be lower-case letters, digits and _")
            if pid in seen:
                raise GridError(f"{path}:{lineno}: duplicate id '{pid}'")
            seen.add(pid)
            kv = {}
            for t in toks[2:]:
                if "=" not in t:
                    raise GridError(f"{path}:{lineno}: '{t}' is not key=value")
                k, v = t.split("=", 1)
                kv[k] = v
            points.append(Point(pid, op, kv, " ".join(toks), lineno))
    return points


# --- building ---------------------------------------------------------------------------------------------------------

class _Builder:
    def __init__(self, point):
        self.p = point
        self.rng = np.random.default_rng(zlib.crc32(point.id.encode()))
        self.nodes, self.inputs, self.inits = [], [], []

    def input(self, name, shape, dtype=FLOAT):
        self.inputs.append(helper.make_tensor_value_info(name, dtype, shape))
        return name

    def const(self, name, array):
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(self, name, shape, fan_in):
        bound = 1.0 / math.sqrt(max(fan_in, 1))
        return self.const(name, self.rng.uniform(-bound, bound, size=shape).astype(np.float32))

    def node(self, op, ins, outs, **attrs):
        self.nodes.append(helper.make_node(op, ins, outs, name=f"{op}_{len(self.nodes)}", **attrs))
        return outs[0]

    def model(self, outputs):
        outs = [helper.make_tensor_value_info(o, FLOAT, None) for o in outputs]
        g = helper.make_graph(self.nodes, self.p.id, self.inputs, outs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="tessera-bench-ops",
                              producer_version="1")
        m.ir_version = IR_VERSION
        return m


def _conv(b, p, transpose):
    x = p.shape("x")
    nsp = len(x) - 2
    c, oc, g = x[1], p.int("oc"), p.int("g", 1)
    k, s, d = p.ints("k", n=nsp), p.ints("s", 1, nsp), p.ints("d", 1, nsp)
    pads = p.ints("p", 0, nsp)
    if c % g or oc % g:
        raise GridError(f"{p.id}: channels {c} -> {oc} not divisible by group {g}")
    attrs = dict(kernel_shape=k, strides=s, dilations=d, pads=pads + pads, group=g)
    if transpose:
        w = b.weight("W", [c, oc // g] + k, c // g * math.prod(k))
        if p.has("op"):
            attrs["output_padding"] = p.ints("op", n=nsp)
    else:
        w = b.weight("W", [oc, c // g] + k, c // g * math.prod(k))
    ins = [b.input("x", x), w]
    if p.int("bias", 1):
        ins.append(b.weight("B", [oc], c // g * math.prod(k)))
    return [b.node("ConvTranspose" if transpose else "Conv", ins, ["y"], **attrs)]


def _resize(b, p):
    x = p.shape("x")
    attrs = dict(mode=p.str("mode", "nearest"), coordinate_transformation_mode=p.str("coord", "half_pixel"))
    if attrs["mode"] == "nearest":
        attrs["nearest_mode"] = p.str("nearest", "round_prefer_floor")
    ins = [b.input("x", x), ""]
    if p.has("scale"):
        scales = [float(v) for v in p.kv["scale"].split(",")]
        ins.append(b.const("scales", np.array(scales, np.float32)))
    else:
        size = p.shape("size")
        ins += ["", b.const("sizes", np.array(x[: len(x) - len(size)] + size, np.int64))]
    return [b.node("Resize", ins, ["y"], **attrs)]


def _pool(b, p):
    x = p.shape("x")
    if p.op == "GlobalAveragePool":
        return [b.node("GlobalAveragePool", [b.input("x", x)], ["y"])]
    nsp = len(x) - 2
    pads = p.ints("p", 0, nsp)
    attrs = dict(kernel_shape=p.ints("k", n=nsp), strides=p.ints("s", 1, nsp), pads=pads + pads,
                 ceil_mode=p.int("ceil", 0))
    if p.op == "AveragePool":
        attrs["count_include_pad"] = p.int("cip", 0)
    return [b.node(p.op, [b.input("x", x)], ["y"], **attrs)]


def _matmul(b, p):
    lhs, bs = b.input("a", p.shape("a")), p.shape("b")
    rhs = b.weight("B", bs, bs[-2]) if p.int("bconst", 1) else b.input("b", bs)
    return [b.node("MatMul", [lhs, rhs], ["y"])]


def _gemm(b, p):
    m, k = p.shape("a")
    n, transb = p.int("n"), p.int("transb", 1)
    ins = [b.input("a", [m, k]), b.weight("B", [n, k] if transb else [k, n], k)]
    if p.int("bias", 1):
        ins.append(b.weight("C", [n], k))
    return [b.node("Gemm", ins, ["y"], transB=transb)]


def _rnn(b, p):
    t, i, h = p.int("t"), p.int("i"), p.int("h")
    direction = p.str("dir", "forward")
    dirs = 2 if direction == "bidirectional" else 1
    gates = 4 if p.op == "LSTM" else 3
    ins = [b.input("x", [t, 1, i]), b.weight("W", [dirs, gates * h, i], h), b.weight("R", [dirs, gates * h, h], h),
           b.weight("B", [dirs, 2 * gates * h], h)]
    attrs = dict(hidden_size=h, direction=direction)
    if p.op == "GRU":
        attrs["linear_before_reset"] = 1
    return [b.node(p.op, ins, ["y"], **attrs)]


def _norm(b, p):
    x = p.shape("x")
    axis = p.int("axis", -1)
    if p.op == "Softmax":
        return [b.node("Softmax", [b.input("x", x)], ["y"], axis=axis)]
    norm_shape = x[axis:]
    scale = b.const("scale", (1 + 0.1 * b.rng.standard_normal(norm_shape)).astype(np.float32))
    bias = b.const("bias", (0.1 * b.rng.standard_normal(norm_shape)).astype(np.float32))
    return [b.node("LayerNormalization", [b.input("x", x), scale, bias], ["y"], axis=axis, epsilon=1e-5)]


def _reduce(b, p):
    x, axes, keep = p.shape("x"), [int(v) for v in p.kv["axes"].split(",")], p.int("keep", 1)
    if p.op == "ReduceSum":  # axes became an input in opset 13; the others keep the attribute until 18
        return [b.node("ReduceSum", [b.input("x", x), b.const("axes", np.array(axes, np.int64))], ["y"],
                       keepdims=keep)]
    return [b.node(p.op, [b.input("x", x)], ["y"], axes=axes, keepdims=keep)]


def _data(b, p):
    if p.op == "Transpose":
        return [b.node("Transpose", [b.input("x", p.shape("x"))], ["y"], perm=p.ints("perm"))]
    if p.op == "Concat":
        shapes = [_ints(s) for s in p.kv["xs"].split(",")]
        ins = [b.input(f"x{j}", s) for j, s in enumerate(shapes)]
        return [b.node("Concat", ins, ["y"], axis=p.int("axis"))]
    if p.op == "Slice":
        arr = lambda k: b.const(k, np.array([int(v) for v in p.kv[k].split(",")], np.int64))  # noqa: E731
        return [b.node("Slice", [b.input("x", p.shape("x")), arr("starts"), arr("ends"), arr("axes"), arr("steps")],
                       ["y"])]
    if p.op == "Gather":
        data, axis = p.shape("data"), p.int("axis", 0)
        idx = [] if p.kv["idx"] == "scalar" else p.shape("idx")
        if p.int("dconst", 1):
            d = b.weight("table", data, 1)
            ins = [d, b.input("idx", idx, INT64)]
        else:
            vals = b.rng.integers(0, data[axis], size=idx).astype(np.int64)
            ins = [b.input("x", data), b.const("idx", vals)]
        return [b.node("Gather", ins, ["y"], axis=axis)]
    if p.op == "Pad":
        ins = [b.input("x", p.shape("x")), b.const("pads", np.array(p.ints("pads"), np.int64))]
        return [b.node("Pad", ins, ["y"], mode=p.str("mode", "constant"))]
    raise GridError(f"{p.id}: unknown op {p.op}")


def _elementwise(b, p):
    if p.op in ("Add", "Mul"):
        lhs, bs = b.input("a", p.shape("a")), p.shape("b")
        rhs = b.weight("b", bs, 1) if p.int("bconst", 0) else b.input("b", bs)
        return [b.node(p.op, [lhs, rhs], ["y"])]
    x = b.input("x", p.shape("x"))
    scalar = lambda name, v: b.const(name, np.array(v, np.float32))  # noqa: E731
    if p.op in UNARY:
        attrs = dict(alpha=0.01) if p.op == "LeakyRelu" else {}
        return [b.node(p.op, [x], ["y"], **attrs)]
    if p.op == "Clip6":
        return [b.node("Clip", [x, scalar("lo", 0.0), scalar("hi", 6.0)], ["y"])]
    if p.op == "SiLU":
        s = b.node("Sigmoid", [x], ["s"])
        return [b.node("Mul", [x, s], ["y"])]
    if p.op == "BNSiLU":
        c = p.shape("x")[1]
        bshape = [1, c] + [1] * (len(p.shape("x")) - 2)
        scale = b.const("scale", (1 + 0.1 * b.rng.standard_normal(bshape)).astype(np.float32))
        shift = b.const("shift", (0.1 * b.rng.standard_normal(bshape)).astype(np.float32))
        t = b.node("Add", [b.node("Mul", [x, scale], ["t0"]), shift], ["t1"])
        return [b.node("Mul", [t, b.node("Sigmoid", [t], ["t2"])], ["y"])]
    if p.op == "GeluErf":
        e = b.node("Erf", [b.node("Div", [x, scalar("sqrt2", math.sqrt(2.0))], ["t0"])], ["t1"])
        h = b.node("Mul", [x, b.node("Add", [e, scalar("one", 1.0)], ["t2"])], ["t3"])
        return [b.node("Mul", [h, scalar("half", 0.5)], ["y"])]
    if p.op == "HardSwishChain":
        r6 = b.node("Clip", [b.node("Add", [x, scalar("three", 3.0)], ["t0"]), scalar("lo", 0.0),
                             scalar("hi", 6.0)], ["t1"])
        return [b.node("Div", [b.node("Mul", [x, r6], ["t2"]), scalar("six", 6.0)], ["y"])]
    raise GridError(f"{p.id}: unknown op {p.op}")


def build(point):
    """The point's ONNX model, checked and with inferred output shapes."""
    b = _Builder(point)
    op = point.op
    if op in ("Conv", "ConvTranspose"):
        outs = _conv(b, point, op == "ConvTranspose")
    elif op == "Resize":
        outs = _resize(b, point)
    elif op in ("MaxPool", "AveragePool", "GlobalAveragePool"):
        outs = _pool(b, point)
    elif op == "MatMul":
        outs = _matmul(b, point)
    elif op == "Gemm":
        outs = _gemm(b, point)
    elif op in ("LSTM", "GRU"):
        outs = _rnn(b, point)
    elif op in ("Softmax", "LayerNormalization"):
        outs = _norm(b, point)
    elif op.startswith("Reduce"):
        outs = _reduce(b, point)
    elif op in ("Transpose", "Concat", "Slice", "Gather", "Pad"):
        outs = _data(b, point)
    else:
        outs = _elementwise(b, point)
    model = b.model(outs)
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    onnx.checker.check_model(model)
    return model


def _dims(vi):
    return [d.dim_value if d.HasField("dim_value") else -1 for d in vi.type.tensor_type.shape.dim]


def io_shapes(model):
    """(input shapes, output shapes) as lists of dim lists; -1 for an unknown dim."""
    ins = [_dims(v) for v in model.graph.input]
    outs = []
    known = {v.name: v for v in list(model.graph.value_info) + list(model.graph.output)}
    for o in model.graph.output:
        v = known.get(o.name, o)
        outs.append(_dims(v) if v.type.tensor_type.HasField("shape") else [])
    return ins, outs


def gflop(point, out_shapes):
    """2 x multiply-adds of the point's op, or None where the op is not counted."""
    p, op = point, point.op
    if op == "Conv":
        x, y = p.shape("x"), out_shapes[0]
        k = p.ints("k", n=len(x) - 2)
        return 2.0 * math.prod(y) * (x[1] // p.int("g", 1)) * math.prod(k) / 1e9
    if op == "ConvTranspose":
        x = p.shape("x")
        k = p.ints("k", n=len(x) - 2)
        return 2.0 * math.prod(x) * (p.int("oc") // p.int("g", 1)) * math.prod(k) / 1e9
    if op == "MatMul":
        y = out_shapes[0]
        return 2.0 * math.prod(y) * p.shape("a")[-1] / 1e9
    if op == "Gemm":
        m, k = p.shape("a")
        return 2.0 * m * k * p.int("n") / 1e9
    if op in ("LSTM", "GRU"):
        gates = 4 if op == "LSTM" else 3
        dirs = 2 if p.str("dir", "forward") == "bidirectional" else 1
        h = p.int("h")
        return 2.0 * dirs * p.int("t") * gates * h * (p.int("i") + h) / 1e9
    return None


def summary(point, in_shapes, out_shapes):
    """A short shape summary: activations in -> out, and the op's key parameters."""
    fmt = lambda s: "x".join(str(d) for d in s) if s else "scalar"  # noqa: E731
    p = point
    text = ", ".join(fmt(s) for s in in_shapes) + " -> " + ", ".join(fmt(s) for s in out_shapes)
    extra = []
    if p.op in ("Conv", "ConvTranspose", "MaxPool", "AveragePool"):
        for key, label in (("k", "k"), ("s", "s"), ("p", "p"), ("d", "d"), ("g", "g")):
            if p.has(key) and not (key in ("s", "d", "g") and set(p.ints(key)) == {1}) and \
                    not (key == "p" and set(p.ints(key)) == {0}):
                extra.append(label + p.kv[key])
    elif p.op == "MatMul":
        extra.append("const B" if p.int("bconst", 1) else "both inputs")
    elif p.op == "Gemm":
        extra.append("transB" if p.int("transb", 1) else "B")
        if p.int("bias", 1):
            extra.append("+bias")
    elif p.op in ("LSTM", "GRU"):
        text = f"T{p.int('t')} I{p.int('i')} H{p.int('h')}"
        extra.append("bidi" if p.str("dir", "forward") == "bidirectional" else "fwd")
    elif p.op == "Resize":
        extra.append(p.str("mode", "nearest"))
        extra.append(p.str("coord", "half_pixel"))
    elif p.op in ("Softmax", "LayerNormalization"):
        extra.append(f"axis {p.int('axis', -1)}")
    elif p.op.startswith("Reduce"):
        extra.append(f"axes {p.kv['axes']}")
    elif p.op == "Transpose":
        extra.append(f"perm {p.kv['perm']}")
    elif p.op == "Slice":
        extra.append(f"axes {p.kv['axes']} steps {p.kv['steps']}")
    elif p.op == "Gather":
        extra.append(f"axis {p.int('axis', 0)}")
        extra.append("const table" if p.int("dconst", 1) else "const indices")
    elif p.op == "Pad":
        extra.append(p.str("mode", "constant"))
    if p.op == "Gather" and p.int("dconst", 1):
        text = f"table {p.kv['data']}, " + text
    elif p.op == "Gemm":
        text = f"{p.kv['a']} x N{p.int('n')} -> " + fmt(out_shapes[0])
    elif p.op == "MatMul" and p.int("bconst", 1):
        text = f"{p.kv['a']} x {p.kv['b']} -> " + fmt(out_shapes[0])
    return text + (" (" + ", ".join(extra) + ")" if extra else "")
