#!/usr/bin/python3
"""Rewrites an fp32 ONNX model the way the usual converters do, for reduced-precision tests and benchmarks:

  convert.py fp16 IN.onnx OUT.onnx [--keep-io-types]
      stores every float tensor in float16, as ONNX Runtime's float16 converter (onnxconverter_common) does: float
      initializers, Constant values, graph inputs/outputs and value_info become float16, Cast(to=FLOAT) becomes
      Cast(to=FLOAT16), and the ops that converter keeps in float32 (Resize, Range, TopK, Min, Max, CumSum, ...) get a
      Cast to float32 on each float input and a Cast back to float16 on each output. --keep-io-types leaves the graph
      inputs and outputs float32 behind Casts named graph_input_cast_<i> / graph_output_cast_<i>.
  convert.py dynamic IN.onnx OUT.onnx [--weight-type int8|uint8] [--per-channel]
      quantizes every Conv and every MatMul with a constant weight the way ONNX Runtime's quantize_dynamic does:
      DynamicQuantizeLinear on the activation, ConvInteger/MatMulInteger on the quantized weight, Cast to float, Mul by
      the product of the two scales, then the bias (Reshape + Add for Conv). int8 weights are symmetric over
      [-127, 127] (zero point 0), uint8 weights asymmetric over [0, 255] with the range widened to hold 0.

Only /usr/bin/python3 with Debian's python3-onnx and python3-numpy is needed. The rewritten model keeps the original's
opset (raised to 11 where DynamicQuantizeLinear needs it).
"""
import argparse
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FLOAT, FLOAT16 = TensorProto.FLOAT, TensorProto.FLOAT16

# The ops onnxconverter_common's float16 converter leaves in float32 (its DEFAULT_OP_BLOCK_LIST, less the ML-domain
# ops no network here uses).
FP16_BLOCKED = {"Resize", "Upsample", "Range", "TopK", "Min", "Max", "CumSum", "NonMaxSuppression", "RoiAlign",
                "RandomUniformLike"}


def _unique(names, prefix):
    i = 0
    while "%s_%d" % (prefix, i) in names:
        i += 1
    name = "%s_%d" % (prefix, i)
    names.add(name)
    return name


def _all_names(graph):
    names = {i.name for i in graph.initializer} | {i.name for i in graph.input} | {o.name for o in graph.output}
    for n in graph.node:
        names.update(n.input)
        names.update(n.output)
        names.add(n.name)
    return names


def _rename(nodes, old, new):
    """Every use of value `old` as a node input or output becomes `new`."""
    for n in nodes:
        for vals in (n.input, n.output):
            for j, x in enumerate(vals):
                if x == old:
                    vals[j] = new


def _value_types(model):
    """Element type of every value ONNX shape inference can type (graph inputs, initializers, node outputs)."""
    inferred = onnx.shape_inference.infer_shapes(model).graph
    types = {v.name: v.type.tensor_type.elem_type
             for v in list(inferred.input) + list(inferred.output) + list(inferred.value_info)}
    types.update({i.name: i.data_type for i in inferred.initializer})
    return types


def to_fp16(model, keep_io_types):
    g = model.graph
    names = _all_names(g)
    types = _value_types(model)  # before any change: float values are the ones that become float16
    for init in g.initializer:
        if init.data_type == FLOAT:
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float16), init.name))
    blocked_inputs = set()
    new_nodes = []
    for n in g.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value" and a.t.data_type == FLOAT:
                    a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float16), a.t.name))
        elif n.op_type == "ConstantOfShape":
            for a in n.attribute:
                if a.name == "value" and a.t.data_type == FLOAT:
                    a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float16), a.t.name))
        elif n.op_type == "Cast":
            for a in n.attribute:
                if a.name == "to" and a.i == FLOAT:
                    a.i = FLOAT16
        if n.op_type in FP16_BLOCKED:
            # float16 values into the node are cast up, its float outputs cast back down. Float initializers read
            # only by blocked nodes (Resize scales) go back to float32.
            for i, x in enumerate(n.input):
                if not x or types.get(x) != FLOAT:  # sizes, roi of another type, indices: left as they are
                    continue
                init = next((t for t in g.initializer if t.name == x), None)
                if init is not None:
                    if init.data_type == FLOAT16:
                        blocked_inputs.add(x)
                    continue
                c = _unique(names, n.name + "_input_cast")
                new_nodes.append(helper.make_node("Cast", [x], [c], name=c + "_node", to=FLOAT))
                n.input[i] = c
            new_nodes.append(n)
            for i, y in enumerate(n.output):
                if types.get(y) != FLOAT:
                    continue
                c = _unique(names, n.name + "_output_cast")
                n.output[i] = c
                new_nodes.append(helper.make_node("Cast", [c], [y], name=c + "_node", to=FLOAT16))
            continue
        new_nodes.append(n)
    for init in g.initializer:
        if init.name in blocked_inputs:
            users = [n for n in new_nodes if init.name in n.input]
            if all(u.op_type in FP16_BLOCKED for u in users):
                init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float32), init.name))
    for v in g.value_info:
        if v.type.tensor_type.elem_type == FLOAT:
            v.type.tensor_type.elem_type = FLOAT16
    head, tail = [], []
    for i, v in enumerate(g.input):
        if v.type.tensor_type.elem_type != FLOAT:
            continue
        if keep_io_types:
            c = "graph_input_cast_%d" % i
            names.add(c)
            _rename(new_nodes, v.name, c)
            head.append(helper.make_node("Cast", [v.name], [c], name=c + "_node", to=FLOAT16))
        else:
            v.type.tensor_type.elem_type = FLOAT16
    for i, v in enumerate(g.output):
        if v.type.tensor_type.elem_type != FLOAT:
            continue
        if keep_io_types:
            c = "graph_output_cast_%d" % i
            names.add(c)
            _rename(new_nodes, v.name, c)
            tail.append(helper.make_node("Cast", [c], [v.name], name=c + "_node", to=FLOAT))
        else:
            v.type.tensor_type.elem_type = FLOAT16
    del g.node[:]
    g.node.extend(head + new_nodes + tail)
    return model


def _quantize_weight(w, weight_type, per_channel, axis):
    """(quantized array, scale array, zero-point array) as ONNX Runtime's quantizer computes them."""
    if per_channel:
        moved = np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)
        rmin, rmax = moved.min(axis=1), moved.max(axis=1)
    else:
        rmin, rmax = np.array([w.min()]), np.array([w.max()])
    rmin, rmax = np.minimum(rmin, 0), np.maximum(rmax, 0)
    if weight_type == "int8":
        absmax = np.maximum(np.abs(rmin), np.abs(rmax))
        scale = (absmax * 2 / 254).astype(np.float32)
        scale[scale == 0] = 1
        zp = np.zeros_like(scale, dtype=np.int8)
        qmin, qmax, qdt = -127, 127, np.int8
    else:
        scale = ((rmax - rmin) / 255).astype(np.float32)
        scale[scale == 0] = 1
        zp = np.clip(np.rint(-rmin / scale), 0, 255).astype(np.uint8)
        qmin, qmax, qdt = 0, 255, np.uint8
    shape = [1] * w.ndim
    shape[axis] = -1
    s = scale.reshape(shape) if per_channel else scale[0]
    z = zp.astype(np.int32).reshape(shape) if per_channel else int(zp[0])
    q = np.clip(np.rint(w / s) + z, qmin, qmax).astype(qdt)
    if not per_channel:
        return q, scale.reshape(()), zp.reshape(())
    return q, scale, zp


def dynamic(model, weight_type, per_channel):
    g = model.graph
    names = _all_names(g)
    inits = {i.name: i for i in g.initializer}
    new_nodes, new_inits = [], []
    quantized_acts = {}  # activation name -> (q, scale, zp): one DynamicQuantizeLinear per activation
    for n in g.node:
        is_conv = n.op_type == "Conv"
        is_matmul = n.op_type == "MatMul" and len(n.input) == 2 and n.input[1] in inits
        if not (is_conv or is_matmul) or n.input[1] not in inits or inits[n.input[1]].data_type != FLOAT:
            new_nodes.append(n)
            continue
        w = numpy_helper.to_array(inits[n.input[1]])
        axis = 0 if is_conv else w.ndim - 1
        if is_matmul and per_channel:
            axis = w.ndim - 1
        q, scale, zp = _quantize_weight(w, weight_type, per_channel, axis)
        base = n.name or n.output[0]
        wq = _unique(names, base + "_W_quantized")
        ws = _unique(names, base + "_W_scale")
        wz = _unique(names, base + "_W_zero_point")
        new_inits += [numpy_helper.from_array(q, wq), numpy_helper.from_array(scale, ws),
                      numpy_helper.from_array(zp, wz)]
        x = n.input[0]
        if x not in quantized_acts:
            xq, xs, xz = (_unique(names, x + s) for s in ("_quantized", "_scale", "_zero_point"))
            new_nodes.append(helper.make_node("DynamicQuantizeLinear", [x], [xq, xs, xz],
                                              name=_unique(names, x + "_QuantizeLinear")))
            quantized_acts[x] = (xq, xs, xz)
        xq, xs, xz = quantized_acts[x]
        acc = _unique(names, base + "_output_quantized")
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute} if is_conv else {}
        new_nodes.append(helper.make_node("ConvInteger" if is_conv else "MatMulInteger", [xq, wq, xz, wz], [acc],
                                          name=_unique(names, base + "_quant"), **attrs))
        cast = _unique(names, base + "_output_quantized_cast_output")
        new_nodes.append(helper.make_node("Cast", [acc], [cast], name=cast + "_node", to=FLOAT))
        scales = _unique(names, base + "_scales_mul:0")
        if per_channel and is_conv:
            ws_r = _unique(names, ws + "_reshaped")
            new_inits.append(numpy_helper.from_array(scale.reshape(-1, *([1] * (w.ndim - 2))), ws_r))
            ws = ws_r
        new_nodes.append(helper.make_node("Mul", [xs, ws], [scales], name=_unique(names, base + "_scales_mul")))
        has_bias = is_conv and len(n.input) > 2 and n.input[2]
        out = _unique(names, base + "_output_scale_mul") if has_bias else n.output[0]
        new_nodes.append(helper.make_node("Mul", [cast, scales], [out], name=_unique(names, base + "_output_scale_mul_node")))
        if has_bias:
            shape = _unique(names, base + "_bias_reshape_shape")
            new_inits.append(numpy_helper.from_array(np.array([1, -1] + [1] * (w.ndim - 2), dtype=np.int64), shape))
            rb = _unique(names, base + "_bias_reshape_output")
            new_nodes.append(helper.make_node("Reshape", [n.input[2], shape], [rb], name=_unique(names, base + "_bias_reshape")))
            new_nodes.append(helper.make_node("Add", [out, rb], [n.output[0]], name=_unique(names, base + "_bias_add")))
    used = {x for n in new_nodes for x in n.input}
    kept = [i for i in g.initializer if i.name in used]
    del g.initializer[:]
    g.initializer.extend(kept + new_inits)
    del g.node[:]
    g.node.extend(new_nodes)
    for op in model.opset_import:
        if op.domain in ("", "ai.onnx") and op.version < 11:
            op.version = 11
    return model


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fp16")
    f.add_argument("src")
    f.add_argument("dst")
    f.add_argument("--keep-io-types", action="store_true")
    d = sub.add_parser("dynamic")
    d.add_argument("src")
    d.add_argument("dst")
    d.add_argument("--weight-type", choices=["int8", "uint8"], default="int8")
    d.add_argument("--per-channel", action="store_true")
    a = ap.parse_args(argv)
    model = onnx.load(a.src)
    if a.cmd == "fp16":
        model = to_fp16(model, a.keep_io_types)
    else:
        model = dynamic(model, a.weight_type, a.per_channel)
    model.producer_name = "tessera-bench-precision"
    onnx.save(model, a.dst)


if __name__ == "__main__":
    main(sys.argv[1:])
