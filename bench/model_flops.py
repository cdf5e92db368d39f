#!/usr/bin/env python3
"""FLOPs of an ONNX model's dense compute: Conv, ConvTranspose, Gemm and MatMul, counted as 2 * multiply-accumulates.

Input: one or more .onnx files (an optional --dim NAME=VALUE binds a symbolic input dimension, --shape INPUT=D0,D1,..
binds the symbolic dims of one input as `tessera --shape` does; unknown ones become 1).
Output: one JSON object per model on stdout,
    {"model": PATH, "flops": N, "gflops": N/1e9, "by_op": {"Conv": N, ...}, "nodes": K, "unknown": [node names]}
Method: onnx.shape_inference (data propagation on) gives every tensor's shape; where it cannot (exported graphs that
compute Reshape targets from Shape ops), a small shape-only numpy evaluator runs the graph on zero-filled inputs
(integer inputs 0: valid token ids and masks) and the shapes are read off its tensors. Each node's MACs follow:
    Conv           N * Cout * prod(out spatial) * (Cin / group) * prod(kernel)
    ConvTranspose  N * Cin * prod(in spatial) * (Cout / group) * prod(kernel)   (every input pixel scatters a kernel)
    Gemm           M * N * K (from A and B after transA / transB)
    MatMul         prod(batch dims of the output) * M * N * K (numpy broadcasting, 1-D operands promoted)
Nodes inside subgraphs (If / Loop) are not counted; a node whose shapes stay unknown is listed under "unknown" and
contributes 0. Elementwise ops, normalisation and softmax are left out on purpose: they are memory-bound and would
make "% of peak" mean something other than how well the dense kernels use the FMA units.
"""
import argparse
import json
import sys

import numpy as np
import onnx
from onnx import numpy_helper, shape_inference


def _shapes(model, dims):
    """name -> list of ints (None for an unknown dim) for every tensor whose shape inference knows the rank."""
    for inp in model.graph.input:
        for d in inp.type.tensor_type.shape.dim:
            if d.HasField("dim_param"):
                v = dims.get(d.dim_param, 1)
                d.ClearField("dim_param")
                d.dim_value = v
    try:
        inferred = shape_inference.infer_shapes(model, data_prop=True)
    except Exception as e:  # a model onnx cannot infer still gets the shapes it declares
        print("model_flops: shape inference failed (%s); using declared shapes only" % e, file=sys.stderr)
        inferred = model
    out = {}
    g = inferred.graph
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        t = vi.type.tensor_type
        if not t.HasField("shape"):
            continue
        out[vi.name] = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
    for init in g.initializer:
        out[init.name] = list(init.dims)
    return out


# Shape-only evaluation for graphs onnx.shape_inference cannot follow. Every tensor is a real numpy array so that the
# integer shape arithmetic (Shape -> Gather -> Concat -> Reshape) comes out right, but float values do not matter:
# the dense ops return zeros of the right shape and the unary float ops pass their input through, which keeps a
# BERT-base run to a fraction of a second.
def _np_dtype(elem_type):
    return onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[elem_type]  # onnx.helper.tensor_dtype_to_np_dtype needs onnx >= 1.13


def _np_slice(x, starts, ends, axes=None, steps=None):
    axes = list(range(len(starts))) if axes is None else [int(a) % x.ndim for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    idx = [slice(None)] * x.ndim
    for a, b, e, st in zip(axes, starts, ends, steps):
        idx[a] = slice(int(b), int(min(max(e, -(2**62)), 2**62)), int(st))
    return x[tuple(idx)]


def _matmul_shape(a, b):
    a2 = (1,) + a.shape if a.ndim == 1 else a.shape
    b2 = b.shape + (1,) if b.ndim == 1 else b.shape
    out = np.broadcast_shapes(a2[:-2], b2[:-2]) + (a2[-2], b2[-1])
    if a.ndim == 1:
        out = out[:-2] + out[-1:]
    if b.ndim == 1:
        out = out[:-1]
    return np.zeros(out, dtype=a.dtype)


def _window_shape(op, at, x):
    """Output of a Conv / ConvTranspose / pooling node from its attributes (explicit pads; auto_pad is not handled)."""
    xs = x[0].shape
    k = list(at["kernel_shape"]) if "kernel_shape" in at else list(x[1].shape[2:])
    nd = len(k)
    st, dil = at.get("strides", [1] * nd), at.get("dilations", [1] * nd)
    pads = at.get("pads", [0] * 2 * nd)
    if op == "ConvTranspose":
        outp = at.get("output_padding", [0] * nd)
        sp = [st[i] * (xs[2 + i] - 1) + outp[i] + (k[i] - 1) * dil[i] + 1 - pads[i] - pads[i + nd] for i in range(nd)]
        c = x[1].shape[1] * at.get("group", 1)
    else:
        rnd = np.ceil if at.get("ceil_mode", 0) else np.floor
        sp = [int(rnd((xs[2 + i] + pads[i] + pads[i + nd] - dil[i] * (k[i] - 1) - 1) / st[i])) + 1 for i in range(nd)]
        c = x[1].shape[0] if op == "Conv" else xs[1]
    return np.zeros((xs[0], c) + tuple(sp), dtype=x[0].dtype)


def _eval_node(node, x):
    op, at = node.op_type, {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    unary = ("Relu", "Sigmoid", "Tanh", "Erf", "Sqrt", "Neg", "Exp", "Log", "Abs", "Softmax", "Identity", "Dropout",
             "Clip", "LeakyRelu", "HardSigmoid", "HardSwish", "Gelu", "BatchNormalization", "LayerNormalization",
             "Reciprocal")
    binary = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": lambda a, b: a * b, "Pow": np.multiply,
              "Equal": np.equal, "Less": np.less, "Greater": np.greater, "And": np.logical_and, "Max": np.maximum,
              "Min": np.minimum}
    if op in unary:
        return [x[0]]
    if op in binary:
        return [binary[op](x[0], x[1])]
    if op == "Constant":
        return [numpy_helper.to_array(at["value"])]
    if op == "Shape":
        return [np.array(x[0].shape, dtype=np.int64)]
    if op == "Gather":
        return [np.take(x[0], x[1].astype(np.int64), axis=at.get("axis", 0))]
    if op == "Unsqueeze":
        axes = at["axes"] if "axes" in at else list(x[1])
        y = x[0]
        for a in sorted(int(a) % (y.ndim + len(axes)) for a in axes):
            y = np.expand_dims(y, a)
        return [y]
    if op == "Squeeze":
        axes = at.get("axes", list(x[1]) if len(x) > 1 else None)
        return [np.squeeze(x[0], axis=None if axes is None else tuple(int(a) for a in axes))]
    if op == "Concat":
        return [np.concatenate(x, axis=at["axis"])]
    if op == "Slice":
        return [_np_slice(x[0], x[1], x[2], x[3] if len(x) > 3 else None, x[4] if len(x) > 4 else None)]
    if op == "Expand":
        shape = np.broadcast_shapes(x[0].shape, tuple(int(d) for d in x[1]))
        return [np.broadcast_to(x[0], shape)]
    if op == "Cast":
        return [x[0].astype(_np_dtype(at["to"]))]
    if op == "Reshape":
        shape = [int(d) for d in x[1]]
        shape = [x[0].shape[i] if d == 0 else d for i, d in enumerate(shape)]
        return [x[0].reshape(shape)]
    if op == "Transpose":
        return [np.transpose(x[0], at.get("perm"))]
    if op == "Flatten":
        a = at.get("axis", 1) % max(x[0].ndim, 1)
        return [x[0].reshape(int(np.prod(x[0].shape[:a])), -1)]
    if op in ("ReduceMean", "ReduceSum", "ReduceMax"):
        axes = at.get("axes", list(x[1]) if len(x) > 1 else None)
        axes = None if axes is None else tuple(int(a) for a in axes)
        return [np.mean(x[0], axis=axes, keepdims=bool(at.get("keepdims", 1)))]
    if op == "Where":
        return [np.where(x[0], x[1], x[2])]
    if op == "ConstantOfShape":  # the value matters: torch's expand() compares it with -1 (Where(Equal(..)))
        v = numpy_helper.to_array(at["value"]).reshape(-1) if "value" in at else np.zeros(1, dtype=np.float32)
        return [np.full([int(d) for d in x[0]], v[0], dtype=v.dtype)]
    if op == "Range":
        return [np.arange(x[0], x[1], x[2])]
    if op == "MatMul":
        return [_matmul_shape(x[0], x[1])]
    if op in ("Conv", "ConvTranspose", "MaxPool", "AveragePool"):
        return [_window_shape(op, at, x)]
    if op == "GlobalAveragePool":
        return [np.zeros(x[0].shape[:2] + (1,) * (x[0].ndim - 2), dtype=x[0].dtype)]
    if op == "Pad":
        p = [int(v) for v in x[1]]
        n = x[0].ndim
        return [np.zeros([d + p[i] + p[i + n] for i, d in enumerate(x[0].shape)], dtype=x[0].dtype)]
    if op == "Resize":
        if len(x) > 3 and x[3].size:
            shape = [int(d) for d in x[3]]
        else:
            shape = [int(np.floor(d * s)) for d, s in zip(x[0].shape, x[2])]
        return [np.zeros(shape, dtype=x[0].dtype)]
    if op == "Split":
        axis = at.get("axis", 0) % x[0].ndim
        n = len(node.output)
        split = list(x[1]) if len(x) > 1 else at.get("split") or [x[0].shape[axis] // n] * n
        return np.split(x[0], np.cumsum([int(v) for v in split])[:-1], axis=axis)
    if op == "LSTM":  # Y [T, dirs, B, H], Y_h and Y_c [dirs, B, H]
        t, bsz, hid = x[0].shape[0], x[0].shape[1], at["hidden_size"]
        dirs = 2 if at.get("direction", b"forward") in (b"bidirectional", "bidirectional") else 1
        return [np.zeros((t, dirs, bsz, hid), np.float32)] + [np.zeros((dirs, bsz, hid), np.float32)] * 2
    if op == "Gemm":
        a = x[0].T if at.get("transA", 0) else x[0]
        b = x[1].T if at.get("transB", 0) else x[1]
        return [np.zeros((a.shape[0], b.shape[1]), dtype=a.dtype)]
    raise NotImplementedError("no shape evaluation for %s" % op)


def _run_shapes(model, dims):
    """name -> shape of every tensor reached by evaluating the graph on zero-filled inputs (stops at the first op the
    evaluator does not know: later tensors stay unknown)."""
    vals = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for inp in model.graph.input:
        if inp.name in vals:
            continue
        t = inp.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else dims.get(d.dim_param, 1) for d in t.shape.dim]
        vals[inp.name] = np.zeros(shape, dtype=_np_dtype(t.elem_type))
    for node in model.graph.node:
        try:
            outs = _eval_node(node, [vals[i] for i in node.input if i])
        except Exception as e:
            print("model_flops: shape evaluation stops at %s (%s)" % (node.name or node.op_type, e), file=sys.stderr)
            break
        vals.update(zip(node.output, outs))
    return {n: list(v.shape) for n, v in vals.items()}


def _known(*shapes):
    return all(s is not None and all(d is not None for d in s) for s in shapes)


def _attr(node, name, default):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def node_macs(node, shapes):
    """MACs of one node, or None when its shapes are unknown; 0 for ops that are not counted."""
    get = lambda i: shapes.get(node.input[i]) if len(node.input) > i and node.input[i] else None
    if node.op_type == "Conv":
        x, w, y = get(0), get(1), shapes.get(node.output[0])
        if not _known(x, w, y):
            return None
        group = _attr(node, "group", 1)
        return y[0] * y[1] * int(np.prod(y[2:])) * (x[1] // group) * int(np.prod(w[2:]))
    if node.op_type == "ConvTranspose":
        x, w = get(0), get(1)
        if not _known(x, w):
            return None
        # W is [Cin, Cout / group, k...], so group needs no separate factor
        return x[0] * x[1] * int(np.prod(x[2:])) * w[1] * int(np.prod(w[2:]))
    if node.op_type == "Gemm":
        a, b = get(0), get(1)
        if not _known(a, b):
            return None
        m, k = (a[1], a[0]) if _attr(node, "transA", 0) else (a[0], a[1])
        n = b[0] if _attr(node, "transB", 0) else b[1]
        return m * n * k
    if node.op_type == "MatMul":
        a, b = get(0), get(1)
        if not _known(a, b):
            return None
        a2 = [1] + a if len(a) == 1 else a
        b2 = b + [1] if len(b) == 1 else b
        batch = np.broadcast_shapes(tuple(a2[:-2]), tuple(b2[:-2]))
        return int(np.prod(batch)) * a2[-2] * b2[-1] * a2[-1]
    return 0


def model_flops(path, dims, input_shapes=None):
    model = onnx.load(path)
    dims = dict(dims)
    for inp in model.graph.input:  # --shape INPUT=D0,..: each symbolic dim of INPUT takes the pinned value
        pin = (input_shapes or {}).get(inp.name)
        for d, v in zip(inp.type.tensor_type.shape.dim, pin or []):
            if d.HasField("dim_param"):
                dims[d.dim_param] = v
    shapes = _shapes(model, dims)
    dense = [n for n in model.graph.node if n.op_type in ("Conv", "ConvTranspose", "Gemm", "MatMul")]
    if any(node_macs(n, shapes) is None for n in dense):
        try:
            for name, shape in _run_shapes(model, dims).items():
                shapes.setdefault(name, shape)
                if not _known(shapes[name]):
                    shapes[name] = shape
        except Exception as e:  # keep what shape inference found; the rest is reported under "unknown"
            print("model_flops: shape evaluation failed (%s)" % e, file=sys.stderr)
    by_op, unknown, counted = {}, [], 0
    for node in model.graph.node:
        if node.op_type not in ("Conv", "ConvTranspose", "Gemm", "MatMul"):
            continue
        macs = node_macs(node, shapes)
        if macs is None:
            unknown.append(node.name or node.output[0])
            continue
        by_op[node.op_type] = by_op.get(node.op_type, 0) + 2 * int(macs)
        counted += 1
    total = sum(by_op.values())
    return {"model": path, "flops": total, "gflops": round(total / 1e9, 4), "by_op": by_op, "nodes": counted,
            "unknown": unknown}


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+", help=".onnx files")
    ap.add_argument("--dim", action="append", default=[], metavar="NAME=VALUE", help="bind a symbolic dimension")
    ap.add_argument("--shape", action="append", default=[], metavar="INPUT=D0,D1,..",
                    help="bind the symbolic dims of one input")
    args = ap.parse_args(argv)
    dims, input_shapes = {}, {}
    for s in args.shape:
        name, _, value = s.partition("=")
        if not name or not all(v.isdigit() for v in value.split(",")):
            ap.error("--shape expects INPUT=D0,D1,..")
        input_shapes[name] = [int(v) for v in value.split(",")]
    for d in args.dim:
        name, _, value = d.partition("=")
        if not value.isdigit():
            ap.error("--dim expects NAME=VALUE")
        dims[name] = int(value)
    for path in args.models:
        print(json.dumps(model_flops(path, dims, input_shapes)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
