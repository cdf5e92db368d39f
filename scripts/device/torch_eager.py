#!/usr/bin/env python3
"""PyTorch eager baseline for the GPU check: runs an ONNX model node by node with torch ops on CUDA.

The model's own weights (initializers, Constant nodes) become CUDA tensors once, at load; a run then takes host
(numpy) inputs, copies them to the device, executes every node in graph order with one eager torch call (or a few),
and copies the outputs back to the host: the same work `tessera run`/`tessera bench` do for a host caller. float32
throughout, TF32 off, cudnn.benchmark on. Shape arithmetic (Shape, int64 Constants and initializers, what is computed
from them) stays on the host, as a torch module's Python code would keep it.

torch is imported lazily, so the ONNX side (which ops a model uses, whether each has a handler) runs anywhere:

    torch_eager.py --list-ops MODEL.onnx...          lists each model's ops; exit 1 if one has no handler
    torch_eager.py MODEL.onnx --input-dir D [--ref-dir R] [--runs 50] [--warmup 10] [--json FILE]
        D holds input_<i>.pb (graph input order); R holds ref_<i>.npy (e.g. onnxruntime's outputs): the outputs are
        compared with them (rtol 1e-3, atol 1e-3 * max(1, max|ref|)) before timing; prints one JSON line:
        {"model", "median_ms", "min_ms", "runs", "check": "PASS"|"FAIL"|"none", "max_abs", "max_rel", ...}
"""

import argparse
import json
import os
import sys
import time
import warnings

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import compare  # noqa: E402

HANDLERS = {}

_torch = None
_F = None


def _lazy_torch():
    global _torch, _F
    if _torch is None:
        import torch
        import torch.nn.functional as F
        _torch, _F = torch, F
    return _torch, _F


def handler(*ops):
    def deco(fn):
        for op in ops:
            HANDLERS[op] = fn
        return fn
    return deco


def attrs_of(node):
    out = {}
    for a in node.attribute:
        out[a.name] = onnx.helper.get_attribute_value(a)
    return out


# --------------------------------------------------------------------------------------------------------------------
# helpers (called with torch loaded)

def _onnx_to_torch_dtype(t):
    torch, _ = _lazy_torch()
    m = {
        onnx.TensorProto.FLOAT: torch.float32, onnx.TensorProto.DOUBLE: torch.float64,
        onnx.TensorProto.FLOAT16: torch.float16, onnx.TensorProto.BFLOAT16: torch.bfloat16,
        onnx.TensorProto.INT64: torch.int64, onnx.TensorProto.INT32: torch.int32, onnx.TensorProto.INT16: torch.int16,
        onnx.TensorProto.INT8: torch.int8, onnx.TensorProto.UINT8: torch.uint8, onnx.TensorProto.BOOL: torch.bool,
    }
    if t not in m:
        raise NotImplementedError("Cast to ONNX dtype %d" % t)
    return m[t]


def _same_device(*xs):
    """Moves host tensors next to the first device tensor among xs (shape values meeting data)."""
    dev = None
    for x in xs:
        if x is not None and x.device.type != "cpu":
            dev = x.device
            break
    if dev is None:
        return xs
    return tuple(x.to(dev) if x is not None and x.device != dev else x for x in xs)


def _ints(t):
    """A small int tensor (shape, axes, pads) as a Python list (free for host tensors)."""
    return [int(v) for v in t.reshape(-1).tolist()]


def _s(v):
    """A string attribute (onnx gives bytes)."""
    return v.decode() if isinstance(v, bytes) else v


def _norm_axis(a, rank):
    return a + rank if a < 0 else a


def _opt_input(ins, i):
    return ins[i] if len(ins) > i else None


# --------------------------------------------------------------------------------------------------------------------
# elementwise

def _binary(fn):
    def run(g, node, ins, at):
        a, b = _same_device(ins[0], ins[1])
        return [fn(a, b)]
    return run


def _div(a, b):
    torch, _ = _lazy_torch()
    if not a.is_floating_point() and not b.is_floating_point():
        return torch.div(a, b, rounding_mode="trunc")
    return a / b


for _op, _fn in {"Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mul": lambda a, b: a * b, "Div": _div,
                 "Pow": lambda a, b: a.pow(b), "Equal": lambda a, b: a == b, "Less": lambda a, b: a < b,
                 "Greater": lambda a, b: a > b, "LessOrEqual": lambda a, b: a <= b,
                 "GreaterOrEqual": lambda a, b: a >= b, "And": lambda a, b: a & b, "Or": lambda a, b: a | b,
                 "Mod": lambda a, b: a.remainder(b)}.items():
    HANDLERS[_op] = _binary(_fn)


def _unary(fn):
    def run(g, node, ins, at):
        return [fn(ins[0], at)]
    return run


def _u(name):
    return lambda x, at: getattr(_lazy_torch()[0], name)(x)


for _op, _fn in {
        "Relu": lambda x, at: _lazy_torch()[1].relu(x),
        "Sigmoid": _u("sigmoid"), "Tanh": _u("tanh"), "Erf": _u("erf"), "Sqrt": _u("sqrt"), "Exp": _u("exp"),
        "Log": _u("log"), "Neg": _u("neg"), "Abs": _u("abs"), "Reciprocal": _u("reciprocal"), "Floor": _u("floor"),
        "Ceil": _u("ceil"), "Sin": _u("sin"), "Cos": _u("cos"), "Sign": _u("sign"), "Round": _u("round"),
        "Not": _u("logical_not"),
        "LeakyRelu": lambda x, at: _lazy_torch()[1].leaky_relu(x, at.get("alpha", 0.01)),
        "ThresholdedRelu": lambda x, at: _lazy_torch()[1].threshold(x, float(at.get("alpha", 1.0)), 0.0),
        "Elu": lambda x, at: _lazy_torch()[1].elu(x, at.get("alpha", 1.0)),
        "Selu": lambda x, at: at.get("gamma", 1.0507009873554805) * _lazy_torch()[0].where(
            x > 0, x, at.get("alpha", 1.6732632423543772) * (_lazy_torch()[0].exp(x) - 1)),
        "Softplus": lambda x, at: _lazy_torch()[1].softplus(x),
        "Softsign": lambda x, at: x / (1 + x.abs()),
        "HardSigmoid": lambda x, at: (x * at.get("alpha", 0.2) + at.get("beta", 0.5)).clamp(0, 1),
        "HardSwish": lambda x, at: _lazy_torch()[1].hardswish(x),
        "Gelu": lambda x, at: _lazy_torch()[1].gelu(x, approximate=_s(at.get("approximate", "none"))),
        "Mish": lambda x, at: _lazy_torch()[1].mish(x),
}.items():
    HANDLERS[_op] = _unary(_fn)


@handler("Identity", "Dropout")
def _identity(g, node, ins, at):
    outs = [ins[0]]
    if len(node.output) > 1 and node.output[1]:
        torch, _ = _lazy_torch()
        outs.append(torch.ones_like(ins[0], dtype=torch.bool))
    return outs


@handler("Clip")
def _clip(g, node, ins, at):
    torch, _ = _lazy_torch()
    x = ins[0]
    if g.opset < 11:
        return [x.clamp(at.get("min", -3.4028234663852886e38), at.get("max", 3.4028234663852886e38))]
    lo = g.scalar(node.input[1]) if len(node.input) > 1 and node.input[1] else None
    hi = g.scalar(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    if lo is None and _opt_input(ins, 1) is not None:
        x = torch.maximum(*_same_device(x, ins[1]))
    if hi is None and _opt_input(ins, 2) is not None:
        x = torch.minimum(*_same_device(x, ins[2]))
    if lo is not None or hi is not None:
        x = x.clamp(lo, hi)
    return [x]


@handler("Max", "Min", "Sum", "Mean")
def _variadic(g, node, ins, at):
    torch, _ = _lazy_torch()
    xs = _same_device(*ins)
    acc = xs[0]
    for x in xs[1:]:
        if node.op_type == "Max":
            acc = torch.maximum(acc, x)
        elif node.op_type == "Min":
            acc = torch.minimum(acc, x)
        else:
            acc = acc + x
    if node.op_type == "Mean":
        acc = acc / len(xs)
    return [acc]


@handler("PRelu")
def _prelu(g, node, ins, at):
    torch, _ = _lazy_torch()
    x, s = _same_device(ins[0], ins[1])
    return [torch.where(x < 0, x * s, x)]


@handler("Where")
def _where(g, node, ins, at):
    torch, _ = _lazy_torch()
    c, a, b = _same_device(*ins)
    return [torch.where(c, a, b)]


@handler("Cast")
def _cast(g, node, ins, at):
    return [ins[0].to(_onnx_to_torch_dtype(at["to"]))]


# --------------------------------------------------------------------------------------------------------------------
# linear algebra, convolution, pooling, normalization

@handler("MatMul")
def _matmul(g, node, ins, at):
    torch, _ = _lazy_torch()
    return [torch.matmul(*_same_device(ins[0], ins[1]))]


@handler("Gemm")
def _gemm(g, node, ins, at):
    torch, _ = _lazy_torch()
    a, b = ins[0], ins[1]
    if at.get("transA", 0):
        a = a.t()
    if at.get("transB", 0):
        b = b.t()
    alpha, beta = at.get("alpha", 1.0), at.get("beta", 1.0)
    c = _opt_input(ins, 2)
    if c is None:
        y = torch.matmul(a, b)
        return [y * alpha if alpha != 1.0 else y]
    return [torch.addmm(c, a, b, beta=beta, alpha=alpha)]


def _spatial_pads(at, x_shape, kernel, strides, dilations):
    """ONNX pads [b1, b2, .., e1, e2, ..] for the spatial dims, auto_pad resolved."""
    n = len(kernel)
    auto = _s(at.get("auto_pad", "NOTSET"))
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * (2 * n)
        for i in range(n):
            size = x_shape[2 + i]
            out = -(-size // strides[i])
            total = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - size)
            small, big = total // 2, total - total // 2
            pads[i], pads[i + n] = (small, big) if auto == "SAME_UPPER" else (big, small)
        return pads
    if auto == "VALID":
        return [0] * (2 * n)
    return list(at.get("pads", [0] * (2 * n)))


def _pad_input(x, pads, value=0.0):
    """Applies asymmetric ONNX pads with F.pad (whose order is last dim first)."""
    _, F = _lazy_torch()
    n = len(pads) // 2
    fp = []
    for i in reversed(range(n)):
        fp += [pads[i], pads[i + n]]
    return F.pad(x, fp, value=value)


@handler("Conv")
def _conv(g, node, ins, at):
    _, F = _lazy_torch()
    x, w = ins[0], ins[1]
    b = _opt_input(ins, 2)
    n = w.dim() - 2
    kernel = list(at.get("kernel_shape", w.shape[2:]))
    strides = list(at.get("strides", [1] * n))
    dil = list(at.get("dilations", [1] * n))
    pads = _spatial_pads(at, x.shape, kernel, strides, dil)
    if pads[:n] == pads[n:]:
        padding = pads[:n]
    else:
        x = _pad_input(x, pads)
        padding = [0] * n
    fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[n]
    return [fn(x, w, b, stride=strides, padding=padding, dilation=dil, groups=at.get("group", 1))]


@handler("ConvTranspose")
def _conv_transpose(g, node, ins, at):
    _, F = _lazy_torch()
    x, w = ins[0], ins[1]
    b = _opt_input(ins, 2)
    n = w.dim() - 2
    strides = list(at.get("strides", [1] * n))
    dil = list(at.get("dilations", [1] * n))
    out_pad = list(at.get("output_padding", [0] * n))
    pads = list(at.get("pads", [0] * (2 * n)))
    if "output_shape" in at or _s(at.get("auto_pad", "NOTSET")) != "NOTSET":
        raise NotImplementedError("ConvTranspose with output_shape/auto_pad")
    fn = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[n]
    sym = [min(pads[i], pads[i + n]) for i in range(n)]
    y = fn(x, w, b, stride=strides, padding=sym, output_padding=out_pad, groups=at.get("group", 1), dilation=dil)
    if any(pads[i] != pads[i + n] for i in range(n)):
        sl = [slice(None), slice(None)]
        for i in range(n):
            extra_b, extra_e = pads[i] - sym[i], pads[i + n] - sym[i]
            sl.append(slice(extra_b, y.shape[2 + i] - extra_e))
        y = y[tuple(sl)]
    return [y]


@handler("BatchNormalization")
def _batchnorm(g, node, ins, at):
    _, F = _lazy_torch()
    x, scale, bias, mean, var = ins[:5]
    return [F.batch_norm(x, mean, var, scale, bias, training=False, eps=at.get("epsilon", 1e-5))]


@handler("InstanceNormalization")
def _instancenorm(g, node, ins, at):
    _, F = _lazy_torch()
    return [F.instance_norm(ins[0], weight=ins[1], bias=ins[2], eps=at.get("epsilon", 1e-5))]


@handler("LayerNormalization")
def _layernorm(g, node, ins, at):
    _, F = _lazy_torch()
    x = ins[0]
    axis = _norm_axis(at.get("axis", -1), x.dim())
    shape = tuple(x.shape[axis:])
    scale = ins[1].expand(shape) if tuple(ins[1].shape) != shape else ins[1]
    bias = _opt_input(ins, 2)
    if bias is not None and tuple(bias.shape) != shape:
        bias = bias.expand(shape)
    return [F.layer_norm(x, shape, scale, bias, eps=at.get("epsilon", 1e-5))]


def _pool(g, node, ins, at, kind):
    torch, F = _lazy_torch()
    x = ins[0]
    kernel = list(at["kernel_shape"])
    n = len(kernel)
    strides = list(at.get("strides", [1] * n))
    dil = list(at.get("dilations", [1] * n))
    pads = _spatial_pads(at, x.shape, kernel, strides, dil)
    ceil = bool(at.get("ceil_mode", 0))
    if kind == "max":
        if pads[:n] != pads[n:] or any(pads[i] > kernel[i] // 2 for i in range(n)):
            x = _pad_input(x, pads, value=float("-inf"))
            padding = [0] * n
        else:
            padding = pads[:n]
        fn = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[n]
        return [fn(x, kernel, strides, padding, dil, ceil_mode=ceil)]
    include = bool(at.get("count_include_pad", 0))
    if pads[:n] != pads[n:] or any(pads[i] > kernel[i] // 2 for i in range(n)):
        if not include:
            raise NotImplementedError("AveragePool with asymmetric pads excluding the pad")
        x = _pad_input(x, pads)
        padding = [0] * n
    else:
        padding = pads[:n]
    fn = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[n]
    return [fn(x, kernel, strides, padding, ceil_mode=ceil, count_include_pad=include)]


@handler("MaxPool")
def _maxpool(g, node, ins, at):
    if len(node.output) > 1 and node.output[1]:
        raise NotImplementedError("MaxPool Indices output")
    return _pool(g, node, ins, at, "max")


@handler("AveragePool")
def _avgpool(g, node, ins, at):
    return _pool(g, node, ins, at, "avg")


@handler("GlobalAveragePool")
def _gap(g, node, ins, at):
    x = ins[0]
    return [x.mean(dim=tuple(range(2, x.dim())), keepdim=True)]


@handler("GlobalMaxPool")
def _gmp(g, node, ins, at):
    x = ins[0]
    return [x.amax(dim=tuple(range(2, x.dim())), keepdim=True)]


@handler("Softmax", "LogSoftmax")
def _softmax(g, node, ins, at):
    torch, _ = _lazy_torch()
    x = ins[0]
    fn = torch.softmax if node.op_type == "Softmax" else torch.log_softmax
    if g.opset >= 13:
        return [fn(x, _norm_axis(at.get("axis", -1), x.dim()))]
    axis = _norm_axis(at.get("axis", 1), x.dim())
    shape = x.shape
    return [fn(x.reshape(int(np.prod(shape[:axis], dtype=np.int64)), -1), 1).reshape(shape)]


def _reduce_axes(g, node, ins, at, since_input):
    if g.opset >= since_input:
        a = _opt_input(ins, 1)
        return None if a is None else _ints(a)
    return list(at["axes"]) if "axes" in at else None


@handler("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd")
def _reduce(g, node, ins, at):
    torch, _ = _lazy_torch()
    x = ins[0]
    axes = _reduce_axes(g, node, ins, at, 13 if node.op_type == "ReduceSum" else 18)
    keep = bool(at.get("keepdims", 1))
    if not axes:
        if at.get("noop_with_empty_axes", 0):
            return [x]
        axes = list(range(x.dim()))
    axes = tuple(_norm_axis(a, x.dim()) for a in axes)
    if node.op_type == "ReduceMean":
        return [x.mean(dim=axes, keepdim=keep)]
    if node.op_type == "ReduceSum":
        return [x.sum(dim=axes, keepdim=keep)]
    if node.op_type == "ReduceMax":
        return [x.amax(dim=axes, keepdim=keep)]
    if node.op_type == "ReduceMin":
        return [x.amin(dim=axes, keepdim=keep)]
    y = x
    for a in sorted(axes, reverse=True):
        y = y.prod(dim=a, keepdim=keep)
    return [y]


# --------------------------------------------------------------------------------------------------------------------
# shapes and data movement

@handler("Shape")
def _shape(g, node, ins, at):
    torch, _ = _lazy_torch()
    dims = list(ins[0].shape)
    start, end = at.get("start", 0), at.get("end", None)
    return [torch.tensor(dims[start:end], dtype=torch.int64)]  # a host tensor: shape arithmetic stays on the host


@handler("Size")
def _size(g, node, ins, at):
    torch, _ = _lazy_torch()
    return [torch.tensor(ins[0].numel(), dtype=torch.int64)]


@handler("Flatten")
def _flatten(g, node, ins, at):
    x = ins[0]
    axis = _norm_axis(at.get("axis", 1), x.dim())
    return [x.reshape(int(np.prod(x.shape[:axis], dtype=np.int64)), -1)]


@handler("Reshape")
def _reshape(g, node, ins, at):
    x = ins[0]
    shape = _ints(ins[1])
    if not at.get("allowzero", 0):
        shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return [x.reshape(shape)]


@handler("Transpose")
def _transpose(g, node, ins, at):
    x = ins[0]
    perm = list(at.get("perm", list(reversed(range(x.dim())))))
    return [x.permute(perm)]


def _axes_arg(g, node, ins, at):
    if g.opset >= 13:
        a = _opt_input(ins, 1)
        return None if a is None else _ints(a)
    return list(at["axes"]) if "axes" in at else None


@handler("Unsqueeze")
def _unsqueeze(g, node, ins, at):
    x = ins[0]
    axes = _axes_arg(g, node, ins, at)
    rank = x.dim() + len(axes)
    for a in sorted(_norm_axis(a, rank) for a in axes):
        x = x.unsqueeze(a)
    return [x]


@handler("Squeeze")
def _squeeze(g, node, ins, at):
    x = ins[0]
    axes = _axes_arg(g, node, ins, at)
    if axes is None:
        return [x.squeeze()]
    for a in sorted((_norm_axis(a, x.dim()) for a in axes), reverse=True):
        x = x.squeeze(a)
    return [x]


@handler("Concat")
def _concat(g, node, ins, at):
    torch, _ = _lazy_torch()
    xs = _same_device(*[t for t in ins if t is not None])
    return [torch.cat(xs, dim=_norm_axis(at["axis"], xs[0].dim()))]


@handler("Split")
def _split(g, node, ins, at):
    torch, _ = _lazy_torch()
    x = ins[0]
    axis = _norm_axis(at.get("axis", 0), x.dim())
    if g.opset >= 13:
        split = _opt_input(ins, 1)
        split = None if split is None else _ints(split)
    else:
        split = list(at["split"]) if "split" in at else None
    n = len(node.output)
    if split is None:
        size = x.shape[axis]
        if "num_outputs" in at:
            n = at["num_outputs"]
        chunk = -(-size // n)
        split = [min(chunk, size - i * chunk) for i in range(n)]
    return list(torch.split(x, split, dim=axis))


@handler("Slice")
def _slice(g, node, ins, at):
    torch, _ = _lazy_torch()
    x = ins[0]
    if g.opset >= 10:
        starts, ends = _ints(ins[1]), _ints(ins[2])
        axes = _ints(ins[3]) if _opt_input(ins, 3) is not None else list(range(len(starts)))
        steps = _ints(ins[4]) if _opt_input(ins, 4) is not None else [1] * len(starts)
    else:
        starts, ends = list(at["starts"]), list(at["ends"])
        axes = list(at.get("axes", range(len(starts))))
        steps = [1] * len(starts)
    sl = [slice(None)] * x.dim()
    flips = []
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = _norm_axis(a, x.dim())
        d = x.shape[a]
        if st > 0:
            s = min(max(s + d if s < 0 else s, 0), d)
            e = min(max(e + d if e < 0 else e, 0), d)
            sl[a] = slice(s, max(s, e), st)
        else:
            s = min(max(s + d if s < 0 else s, -1), d - 1)
            e = min(max(e + d if e < 0 else e, -1), d - 1)
            idx = list(range(s, e, st))
            flips.append((a, idx))
    y = x[tuple(sl)]
    for a, idx in flips:
        y = torch.index_select(y, a, torch.tensor(idx, dtype=torch.int64, device=y.device))
    return [y]


@handler("Gather")
def _gather(g, node, ins, at):
    torch, _ = _lazy_torch()
    data, idx = ins[0], ins[1]
    axis = _norm_axis(at.get("axis", 0), data.dim())
    d = data.shape[axis]
    if idx.dim() == 0 and idx.device.type == "cpu":  # a host scalar index: a view, no copy
        i = int(idx)
        return [data.select(axis, i + d if i < 0 else i)]
    if idx.device.type == "cpu":  # negative indices fixed on the host; device indices are taken as they are
        idx = torch.where(idx < 0, idx + d, idx)
    if idx.device != data.device:
        idx = idx.to(data.device)
    out = torch.index_select(data, axis, idx.reshape(-1))
    return [out.reshape(tuple(data.shape[:axis]) + tuple(idx.shape) + tuple(data.shape[axis + 1:]))]


@handler("Expand")
def _expand(g, node, ins, at):
    torch, _ = _lazy_torch()
    x = ins[0]
    shape = torch.broadcast_shapes(tuple(x.shape), tuple(_ints(ins[1])))
    return [x.expand(shape)]


@handler("Tile")
def _tile(g, node, ins, at):
    return [ins[0].repeat(_ints(ins[1]))]


@handler("ConstantOfShape")
def _constant_of_shape(g, node, ins, at):
    torch, _ = _lazy_torch()
    shape = _ints(ins[0])
    if "value" in at:
        v = numpy_helper.to_array(at["value"]).reshape(-1)
        return [torch.full(shape, v[0].item(), dtype=g.torch_dtype_of_np(v.dtype), device=g.device)]
    return [torch.zeros(shape, dtype=torch.float32, device=g.device)]


@handler("Range")
def _range(g, node, ins, at):
    torch, _ = _lazy_torch()
    s, l, d = (t.item() for t in ins[:3])
    return [torch.arange(s, l, d, dtype=ins[0].dtype, device=ins[0].device)]


@handler("Constant")
def _constant(g, node, ins, at):
    return [g.constant_value(node)]


# --------------------------------------------------------------------------------------------------------------------
# the graph

def list_ops(model):
    """The op types of a model (main graph), in first-seen order, with their counts."""
    counts = {}
    for n in model.graph.node:
        counts[n.op_type] = counts.get(n.op_type, 0) + 1
    return counts


class TorchGraph:
    def __init__(self, model_path, device="cuda"):
        torch, _ = _lazy_torch()
        self.model = onnx.load(model_path)
        g = self.model.graph
        self.opset = next((o.version for o in self.model.opset_import if o.domain in ("", "ai.onnx")), 13)
        missing = [op for op in list_ops(self.model) if op not in HANDLERS]
        if missing:
            raise NotImplementedError("no torch handler for: " + ", ".join(missing))
        self.device = torch.device(device)
        self.values = {}
        self.scalars = {}
        for init in g.initializer:
            self._keep(init.name, numpy_helper.to_array(init))
        self.nodes = []
        for n in g.node:
            if n.op_type == "Constant":  # evaluated once, like an initializer
                self._keep(n.output[0], self._constant_np(n))
                continue
            self.nodes.append((HANDLERS[n.op_type], n, attrs_of(n)))
        init_names = {i.name for i in g.initializer}
        self.inputs = [i.name for i in g.input if i.name not in init_names]
        self.outputs = [o.name for o in g.output]

    @staticmethod
    def torch_dtype_of_np(dt):
        torch, _ = _lazy_torch()
        return torch.from_numpy(np.zeros(0, dtype=dt)).dtype

    def _keep(self, name, arr):
        torch, _ = _lazy_torch()
        arr = np.array(arr, order="C")  # a contiguous copy that keeps 0-d arrays 0-d (ascontiguousarray does not)
        if arr.size == 1 and arr.dtype.kind in "fiu":
            self.scalars[name] = arr.reshape(-1)[0].item()
        t = torch.from_numpy(arr)
        # Shape-like int64 values stay on the host; data (floats, large tables) goes to the device.
        on_host = arr.dtype.kind in "iub" and arr.size <= 64
        self.values[name] = t if on_host else t.to(self.device)

    def _constant_np(self, n):
        at = attrs_of(n)
        if "value" in at:
            return numpy_helper.to_array(at["value"])
        if "value_float" in at:
            return np.array(at["value_float"], dtype=np.float32)
        if "value_floats" in at:
            return np.array(at["value_floats"], dtype=np.float32)
        if "value_int" in at:
            return np.array(at["value_int"], dtype=np.int64)
        if "value_ints" in at:
            return np.array(at["value_ints"], dtype=np.int64)
        raise NotImplementedError("Constant with attributes %s" % list(at))

    def constant_value(self, node):
        return self.values[node.output[0]]

    def scalar(self, name):
        return self.scalars.get(name)

    def run(self, feeds, sync_outputs=True):
        """feeds: numpy arrays in graph input order; returns numpy outputs (host)."""
        torch, _ = _lazy_torch()
        env = dict(self.values)
        for name, arr in zip(self.inputs, feeds):
            env[name] = torch.from_numpy(arr).to(self.device)  # read_inputs gives writable arrays
        with torch.no_grad():
            for fn, n, at in self.nodes:
                ins = [env[i] if i else None for i in n.input]
                outs = fn(self, n, ins, at)
                for name, v in zip(n.output, outs):
                    if name:
                        env[name] = v
        return [env[o].cpu().numpy() for o in self.outputs]


def read_inputs(input_dir, n):
    arrs = []
    for i in range(n):
        t = onnx.TensorProto()
        with open(os.path.join(input_dir, "input_%d.pb" % i), "rb") as f:
            t.ParseFromString(f.read())
        arrs.append(np.array(numpy_helper.to_array(t)))  # writable, contiguous
    return arrs


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--list-ops", action="store_true", help="list each model's ops and whether each has a handler")
    ap.add_argument("--input-dir")
    ap.add_argument("--ref-dir", help="ref_<i>.npy to check the outputs against")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--json", help="also write the result JSON to this file")
    ap.add_argument("--device", default="cuda", help="torch device (default cuda; cpu to test this script)")
    args = ap.parse_args(argv)
    if args.list_ops:
        bad = 0
        for path in args.models:
            m = onnx.load(path, load_external_data=False)
            counts = list_ops(m)
            missing = [op for op in counts if op not in HANDLERS]
            bad += len(missing)
            print("%s: %s%s" % (os.path.basename(path), " ".join("%s=%d" % kv for kv in counts.items()),
                                "  MISSING: " + " ".join(missing) if missing else "  (all handled)"))
        return 1 if bad else 0
    if len(args.models) != 1 or not args.input_dir:
        ap.error("timing takes one MODEL and --input-dir")
    torch, _ = _lazy_torch()
    tf32 = "off (allow_tf32 = False)"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
    except Exception:  # noqa: BLE001 - a torch that only has the newer switches
        torch.backends.cuda.matmul.fp32_precision = "ieee"
        torch.backends.cudnn.conv.fp32_precision = "ieee"
        tf32 = "off (fp32_precision = ieee)"
    torch.backends.cudnn.benchmark = True
    cuda = args.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    res = {"model": os.path.basename(args.models[0]), "torch": torch.__version__, "tf32": tf32,
           "device": torch.cuda.get_device_name(0) if cuda else args.device}
    t0 = time.time()
    g = TorchGraph(args.models[0], device=args.device)
    feeds = read_inputs(args.input_dir, len(g.inputs))
    outs = g.run(feeds)
    sync()
    res["load_s"] = round(time.time() - t0, 3)
    res["check"] = "none"
    if args.ref_dir:
        worst_abs, worst_rel, all_ok = 0.0, 0.0, True
        for i, o in enumerate(outs):
            ref = np.load(os.path.join(args.ref_dir, "ref_%d.npy" % i))
            a, r, ok = compare(o, ref)
            worst_abs, worst_rel, all_ok = max(worst_abs, a), max(worst_rel, r), all_ok and ok
        res.update(check="PASS" if all_ok else "FAIL", max_abs=worst_abs, max_rel=worst_rel)
    for _ in range(args.warmup):
        g.run(feeds)
    times = []
    for _ in range(args.runs):
        sync()
        t = time.perf_counter()
        g.run(feeds)
        sync()
        times.append((time.perf_counter() - t) * 1e3)
    times.sort()
    res.update(median_ms=float(np.median(times)), min_ms=times[0], runs=args.runs, warmup=args.warmup)
    line = json.dumps(res)
    print(line)
    if args.json:
        with open(args.json, "w") as f:
            f.write(line + "\n")
    return 0 if res["check"] != "FAIL" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
