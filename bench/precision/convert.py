#!/usr/bin/python3
"""Rewrites an fp32 ONNX model the way the usual converters do, for reduced-precision tests and benchmarks:

  convert.py fp16 IN.onnx OUT.onnx [--keep-io-types]
      stores every float tensor in float16, as ONNX Runtime's float16 converter (onnxconverter_common) does: float
      initializers, Constant values, graph inputs/outputs and value_info become float16, Cast(to=FLOAT) becomes
      Cast(to=FLOAT16), and the ops that converter keeps in float32 (Resize, Range, TopK, Min, Max, CumSum, ...) get a
      Cast to float32 on each float input and a Cast back to float16 on each output. --keep-io-types leaves the graph
      inputs and outputs float32 behind Casts named graph_input_cast_<i> / graph_output_cast_<i>.
  convert.py probe IN.onnx OUT.onnx [--op-types T,..]
      folds BatchNormalization into the Conv before it (as ONNX Runtime's quantization pre-processing does) and adds
      the float activations static quantization calibrates (every float input and output of a node of the op types
      quantized) to the graph outputs, after the model's own; run it on calibration inputs
      (`tessera run OUT.onnx --input-dir D --output-dir R`) and give the R directories to qdq.
  convert.py qdq IN.onnx OUT.onnx --calibration R [R ...] [--op-types T,..]
      static QDQ quantization as ONNX Runtime's quantize_static(QuantFormat.QDQ, per_channel=True) writes it, with
      MinMax ranges from the probe runs (opset >= 13): by default the op types it quantizes when given none
      (ORT_STATIC_OPS: products, Relu/Clip removed behind them, residual Adds, pools, data movement, Softmax, ...);
      --op-types Conv,MatMul,Gemm quantizes only the products. Activations uint8 asymmetric (--activation-type int8,
      --activation-symmetric as quantize_static's QInt8 / ActivationSymmetric), weights int8 symmetric
      (per channel for the products), int32 biases, each behind a DequantizeLinear (see qdq()).
  convert.py dynamic IN.onnx OUT.onnx [--weight-type int8|uint8] [--per-channel]
      quantizes every Conv and every MatMul with a constant weight the way ONNX Runtime's quantize_dynamic does:
      DynamicQuantizeLinear on the activation, ConvInteger/MatMulInteger on the quantized weight, Cast to float, Mul by
      the product of the two scales, then the bias (Reshape + Add for Conv). int8 weights are symmetric over
      [-127, 127] (zero point 0), uint8 weights asymmetric over [0, 255] with the range widened to hold 0. An LSTM
      with constant weights (layout 0) becomes com.microsoft DynamicQuantizeLSTM, as quantize_dynamic writes it:
      int8 symmetric weights transposed to [directions, input, 4 * hidden] and [directions, hidden, 4 * hidden],
      one scale per direction, or per gate row with --per-channel.

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


def _inputs_read(nodes):
    """The names the nodes read, their subgraphs' nodes (If/Loop/Scan bodies) included."""
    names = set()
    for n in nodes:
        names.update(n.input)
        for a in n.attribute:
            for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                names.update(_inputs_read(g.node))
    return names


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


def _dynamic_lstm(n, inits, names, new_inits, per_channel):
    """An LSTM as quantize_dynamic rewrites it (DynamicQuantizeLSTM), or the node itself when it does not apply."""
    attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
    if attrs.get("layout", 0) != 0 or not all(len(n.input) > i and n.input[i] in inits and
                                              inits[n.input[i]].data_type == FLOAT for i in (1, 2)):
        return n
    quantized = []
    for i in (1, 2):
        w = numpy_helper.to_array(inits[n.input[i]])  # [D, 4H, K]
        d, rows, k = w.shape
        q, scale, zp = _quantize_weight(w.reshape(d * rows, k), "int8", True, 0)
        if not per_channel:  # one scale per direction: the range of the direction's whole matrix
            q, scale, zp = zip(*(_quantize_weight(w[j], "int8", False, 0) for j in range(d)))
            q = np.stack(q)
        base = n.input[i] + "_quantized"
        names_i = [_unique(names, base), _unique(names, n.input[i] + "_scale"), _unique(names, n.input[i] + "_zero_point")]
        shape = (d, rows) if per_channel else (d,)
        new_inits += [numpy_helper.from_array(np.ascontiguousarray(q.reshape(d, rows, k).transpose(0, 2, 1)), names_i[0]),
                      numpy_helper.from_array(np.array(scale, np.float32).reshape(shape), names_i[1]),
                      numpy_helper.from_array(np.array(zp, np.int8).reshape(shape), names_i[2])]
        quantized.append(names_i)
    inputs = [n.input[0], quantized[0][0], quantized[1][0]] + [n.input[i] if len(n.input) > i else "" for i in range(3, 8)]
    inputs += [quantized[0][1], quantized[0][2], quantized[1][1], quantized[1][2]]
    attrs.pop("layout", None)
    return helper.make_node("DynamicQuantizeLSTM", inputs, list(n.output), name=_unique(names, (n.name or n.output[0]) + "_quant"),
                            domain="com.microsoft", **attrs)


def dynamic(model, weight_type, per_channel):
    g = model.graph
    names = _all_names(g)
    inits = {i.name: i for i in g.initializer}
    new_nodes, new_inits = [], []
    quantized_acts = {}  # activation name -> (q, scale, zp): one DynamicQuantizeLinear per activation
    for n in g.node:
        if n.op_type == "LSTM":
            new_nodes.append(_dynamic_lstm(n, inits, names, new_inits, per_channel))
            continue
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
    used = _inputs_read(new_nodes)
    kept = [i for i in g.initializer if i.name in used]
    del g.initializer[:]
    g.initializer.extend(kept + new_inits)
    del g.node[:]
    g.node.extend(new_nodes)
    for op in model.opset_import:
        if op.domain in ("", "ai.onnx") and op.version < 11:
            op.version = 11
    if any(n.domain == "com.microsoft" for n in new_nodes) and not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model


# The op types ONNX Runtime's quantize_static quantizes when none are named (its QLinear and QDQ registries), as far
# as this writer knows them; the others it leaves in float.
ORT_STATIC_OPS = ("Conv", "ConvTranspose", "MatMul", "Gemm", "Relu", "Clip", "Add", "Mul", "Concat", "GlobalAveragePool",
                  "Softmax", "Sigmoid", "LeakyRelu", "MaxPool", "AveragePool", "Reshape", "Transpose", "Squeeze",
                  "Unsqueeze", "Slice", "Resize")
_PRODUCTS = ("Conv", "ConvTranspose", "MatMul", "Gemm")
# Ops whose quantized output takes its first input's scale and zero point (ONNX Runtime's "direct 8-bit" ops, max
# pooling and Resize), quantized only where that input is.
_SAME_AS_INPUT = ("MaxPool", "AveragePool", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Slice", "Resize")
# Ops whose float inputs and outputs are all quantized, each with its own calibrated range.
_ALL_IO = ("Add", "Mul", "Concat", "GlobalAveragePool", "Softmax", "Sigmoid", "LeakyRelu")


def _quantizable(n, inits):
    """Conv/ConvTranspose with a constant weight, MatMul with a constant 2-D B, Gemm with a constant B (transB any)."""
    if n.op_type not in _PRODUCTS or len(n.input) < 2 or n.input[1] not in inits:
        return False
    if inits[n.input[1]].data_type != FLOAT:
        return False
    if n.op_type == "MatMul" and len(inits[n.input[1]].dims) != 2:
        return False
    if n.op_type == "Gemm":
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        if attrs.get("transA", 0) or attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0:
            return False
    return True


def probe(model, op_types):
    """The model with the float activations static quantization may calibrate (every float input and output, not a
    constant, of a node of op_types) added to the graph outputs, after the model's own, in a fixed order; returns
    (model, {name: graph output index})."""
    g = model.graph
    types = _value_types(model)
    inits = {i.name for i in g.initializer}
    index = {o.name: k for k, o in enumerate(g.output)}  # name -> its graph output index
    for n in g.node:
        if n.op_type not in op_types:
            continue
        for x in list(n.input) + list(n.output):
            if x and x not in index and x not in inits and types.get(x) == FLOAT:
                index[x] = len(g.output)
                g.output.append(helper.make_empty_tensor_value_info(x))
    return model, index


def _activation_params(lo, hi, act_type="uint8", symmetric=False):
    """Scale and zero point over [min(lo, 0), max(hi, 0)] as ONNX Runtime's MinMax calibration computes them: uint8
    or int8 (-128..127; symmetric: -127..127 about zero point 0)."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if symmetric:
        lo, hi = -max(-lo, hi), max(-lo, hi)
    qmin, qmax = (0, 255) if act_type == "uint8" else ((-127, 127) if symmetric else (-128, 127))
    scale = np.float32((hi - lo) / (qmax - qmin)) if hi > lo else np.float32(1.0)
    dt = np.uint8 if act_type == "uint8" else np.int8
    zp = dt(np.clip(np.rint(qmin - lo / scale), qmin, qmax))
    return scale, zp


def fold_batch_norms(model):
    """Folds each inference BatchNormalization that is the only reader of a Conv with constant weights into that
    Conv, as ONNX Runtime's quantization pre-processing (and its optimizer) does before quantizing."""
    g = model.graph
    inits = {i.name: i for i in g.initializer}
    readers = {}
    for n in g.node:
        for x in n.input:
            readers[x] = readers.get(x, 0) + 1
    outputs = {o.name for o in g.output}
    producer = {o: n for n in g.node for o in n.output}
    names = _all_names(g)
    kept = []
    for n in g.node:
        conv = producer.get(n.input[0]) if n.op_type == "BatchNormalization" and n.input else None
        if (conv is None or conv.op_type != "Conv" or readers.get(conv.output[0]) != 1 or conv.output[0] in outputs
                or conv.input[1] not in inits or any(x not in inits for x in n.input[1:5])
                or any(n.output[1:])):
            kept.append(n)
            continue
        eps = next((helper.get_attribute_value(a) for a in n.attribute if a.name == "epsilon"), 1e-5)
        gamma, beta, mean, var = (numpy_helper.to_array(inits[x]).astype(np.float64) for x in n.input[1:5])
        w = numpy_helper.to_array(inits[conv.input[1]]).astype(np.float64)
        has_b = len(conv.input) > 2 and conv.input[2]
        b = numpy_helper.to_array(inits[conv.input[2]]).astype(np.float64) if has_b else np.zeros(w.shape[0])
        k = gamma / np.sqrt(var + eps)
        wn, bname = _unique(names, conv.input[1] + "_bn_folded"), _unique(names, (conv.name or "conv") + "_bias_bn_folded")
        for t in (numpy_helper.from_array((w * k.reshape(-1, *([1] * (w.ndim - 1)))).astype(np.float32), wn),
                  numpy_helper.from_array(((b - mean) * k + beta).astype(np.float32), bname)):
            g.initializer.append(t)
            inits[t.name] = t
        x = conv.input[0]
        del conv.input[:]
        conv.input.extend([x, wn, bname])
        conv.output[0] = n.output[0]
    del g.node[:]
    g.node.extend(kept)
    used = _inputs_read(g.node)
    live = [i for i in g.initializer if i.name in used]
    del g.initializer[:]
    g.initializer.extend(live)
    return model


def qdq(model, ranges, op_types, act_type="uint8", act_symmetric=False):
    """Static QDQ quantization as ONNX Runtime's quantize_static(QuantFormat.QDQ, per_channel=True) writes it, for the
    nodes of op_types: activations uint8 asymmetric (or act_type int8, act_symmetric) with the calibrated ranges,
    weights int8 symmetric (per output
    channel for Conv/MatMul/Gemm, per tensor elsewhere), biases int32 at scale x_scale * w_scale, each behind a
    DequantizeLinear. Nodes are taken in graph order, as its quantizer does:
      - Conv/ConvTranspose/Gemm with a constant weight, MatMul: the inputs and the output are quantized;
      - Relu/Clip whose input is quantized: removed where that input has no other reader and is not a graph input or
        output (its producer's output takes its name and range; saturation does the clamping) and activations are
        asymmetric, else both quantized;
      - MaxPool, AveragePool, Reshape, Transpose, Squeeze, Unsqueeze, Slice, Resize whose first input is quantized:
        the output is, with the input's scale and zero point;
      - Add, Mul, Concat, GlobalAveragePool, Softmax, Sigmoid, LeakyRelu with only float operands: every input and
        the output are quantized (a constant operand as a weight).
    A quantized value gets one QuantizeLinear -> DequantizeLinear pair right after its producer (graph inputs: first),
    which every reader reads."""
    g = model.graph
    names = _all_names(g)
    inits = {i.name: i for i in g.initializer}
    types = _value_types(model)
    graph_io = {v.name for v in g.input} | {v.name for v in g.output}
    readers = {}
    for n in g.node:
        for x in n.input:
            readers[x] = readers.get(x, 0) + 1

    def is_float(x):
        return x in inits and inits[x].data_type == FLOAT or types.get(x) == FLOAT

    # Pass 1, in graph order: which activations are quantized (value -> its own range, or the value whose scale and
    # zero point it shares), which Relu/Clip nodes go.
    quantized, removed = {}, set()

    def mark(x):
        if x and x not in inits and x not in quantized and x in ranges:
            quantized[x] = x

    nodes = list(g.node)
    for i, n in enumerate(nodes):
        if n.op_type not in op_types:
            continue
        if n.op_type in _PRODUCTS:
            if _quantizable(n, inits):
                mark(n.input[0])
                mark(n.output[0])
            elif n.op_type == "MatMul" and all(is_float(x) and x not in inits for x in n.input):
                for x in list(n.input) + [n.output[0]]:
                    mark(x)
        elif n.op_type in ("Relu", "Clip"):
            x, y = n.input[0], n.output[0]
            if x not in quantized:
                continue
            if not act_symmetric and y in ranges and readers.get(x) == 1 and x not in graph_io and y not in graph_io:
                del quantized[x]
                producer = next(p for p in nodes[:i] if x in p.output)
                producer.output[list(producer.output).index(x)] = y
                removed.add(i)
            mark(y)
        elif n.op_type in _SAME_AS_INPUT:
            if n.input[0] in quantized:
                quantized[n.output[0]] = n.input[0]
        elif n.op_type in _ALL_IO:
            if all(is_float(x) for x in n.input if x) and all(x in ranges or x in inits for x in n.input if x):
                for x in list(n.input) + [n.output[0]]:
                    mark(x)
    nodes = [n for i, n in enumerate(nodes) if i not in removed]

    def params(x):
        while quantized[x] != x:
            x = quantized[x]
        return _activation_params(*ranges[x], act_type, act_symmetric)

    new_inits, pairs = [], {}  # pairs: value -> (Q, DQ) nodes; the DQ writes the value's name (a graph input's: x_dq)
    reader_name = {}  # graph input -> the name its readers read
    for x in quantized:
        scale, zp = params(x)
        xs, xz = _unique(names, x + "_scale"), _unique(names, x + "_zero_point")
        xq = _unique(names, x + "_QuantizeLinear_Output")
        new_inits.extend([numpy_helper.from_array(np.array(scale, np.float32), xs),
                          numpy_helper.from_array(np.array(zp), xz)])
        if x in {v.name for v in g.input}:
            src, dst = x, _unique(names, x + "_DequantizeLinear_Output")
            reader_name[x] = dst
        else:
            src, dst = _unique(names, x + "_float"), x
        pairs[x] = (src, [helper.make_node("QuantizeLinear", [src, xs, xz], [xq], name=_unique(names, x + "_QuantizeLinear")),
                          helper.make_node("DequantizeLinear", [xq, xs, xz], [dst], name=_unique(names, x + "_DequantizeLinear"))])

    def dequantized_weight(w_name, q, wscale, wzero, axis):
        wq, ws, wz = (_unique(names, w_name + s) for s in ("_quantized", "_scale", "_zero_point"))
        wd = _unique(names, w_name + "_DequantizeLinear_Output")
        new_inits.extend([numpy_helper.from_array(q, wq), numpy_helper.from_array(wscale, ws),
                          numpy_helper.from_array(wzero, wz)])
        kw = {"axis": axis} if axis is not None else {}
        return wd, helper.make_node("DequantizeLinear", [wq, ws, wz], [wd], name=_unique(names, wq + "_DequantizeLinear"), **kw)

    by_src = {src: x for x, (src, _) in pairs.items()}
    rewritten = []
    for n in nodes:
        inputs = [reader_name.get(x, x) for x in n.input]
        dq_nodes = []
        if n.op_type in op_types and n.op_type in _PRODUCTS and _quantizable(n, inits) and n.input[0] in quantized:
            attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
            w = numpy_helper.to_array(inits[n.input[1]])
            # The output channel axis of the stored weight: Conv's 0, ConvTranspose's 1, MatMul's last, Gemm's 0
            # with transB else last.
            axis = {"Conv": 0, "ConvTranspose": 1}.get(n.op_type, 0 if attrs.get("transB", 0) else w.ndim - 1)
            if n.op_type == "ConvTranspose" and attrs.get("group", 1) != 1:
                axis = None
            q, wscale, wzero = _quantize_weight(w, "int8", axis is not None, axis if axis is not None else 0)
            inputs[1], node = dequantized_weight(n.input[1], q, wscale, wzero, axis)
            dq_nodes.append(node)
            if len(n.input) > 2 and n.input[2] in inits:
                xscale, _ = params(n.input[0])
                bscale = (np.float32(xscale) * wscale).astype(np.float32)
                b = numpy_helper.to_array(inits[n.input[2]])
                bq = np.rint(b / bscale.reshape(b.shape) if b.size == bscale.size else b / bscale).astype(np.int32)
                inputs[2], node = dequantized_weight(n.input[2], bq, bscale, np.zeros(bscale.shape, np.int32),
                                                     0 if bscale.ndim else None)
                dq_nodes.append(node)
        elif n.op_type in op_types and n.op_type in _ALL_IO and n.output[0] in quantized:
            for j, x in enumerate(n.input):
                if x in inits:
                    q, wscale, wzero = _quantize_weight(numpy_helper.to_array(inits[x]), "int8", False, 0)
                    inputs[j], node = dequantized_weight(x, q, wscale, wzero, None)
                    dq_nodes.append(node)
        del n.input[:]
        n.input.extend(inputs)
        for j, y in enumerate(n.output):
            if y in pairs:
                n.output[j] = pairs[y][0]
        rewritten.extend(dq_nodes + [n])
        rewritten.extend(node for y in n.output if y in by_src for node in pairs[by_src[y]][1])
    head = [node for x in quantized if x in reader_name for node in pairs[x][1]]
    ordered = head + rewritten
    used = _inputs_read(ordered)
    kept = [i for i in g.initializer if i.name in used]
    del g.initializer[:]
    g.initializer.extend(kept + [i for i in new_inits if i.name in used])
    del g.node[:]
    g.node.extend(ordered)
    for op in model.opset_import:
        if op.domain in ("", "ai.onnx") and op.version < 13:
            op.version = 13
    return model


def _load_tensor(path):
    t = TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


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
    pr = sub.add_parser("probe")
    pr.add_argument("src")
    pr.add_argument("dst")
    q = sub.add_parser("qdq")
    q.add_argument("src")
    q.add_argument("dst")
    for sp in (pr, q):
        sp.add_argument("--op-types", help="comma-separated op types to quantize (default: quantize_static's)")
    q.add_argument("--activation-type", choices=["uint8", "int8"], default="uint8")
    q.add_argument("--activation-symmetric", action="store_true")
    q.add_argument("--calibration", nargs="+", required=True,
                   help="output directories of runs of the probe model (output_<i>.pb, graph output order)")
    a = ap.parse_args(argv)
    op_types = set(a.op_types.split(",")) if getattr(a, "op_types", None) else set(ORT_STATIC_OPS)
    model = onnx.load(a.src)
    if a.cmd == "fp16":
        model = to_fp16(model, a.keep_io_types)
    elif a.cmd == "dynamic":
        model = dynamic(model, a.weight_type, a.per_channel)
    elif a.cmd == "probe":
        model, _ = probe(fold_batch_norms(model), op_types)
    else:
        model = fold_batch_norms(model)
        _, probed = probe(fold_batch_norms(onnx.load(a.src)), op_types)
        ranges = {}
        for d in a.calibration:
            for name, k in probed.items():
                v = _load_tensor("%s/output_%d.pb" % (d, k))
                if v.size == 0:  # an empty tensor (a Resize's unused scales) has no range and is not quantized
                    continue
                lo, hi = float(v.min()), float(v.max())
                old = ranges.get(name, (lo, hi))
                ranges[name] = (min(lo, old[0]), max(hi, old[1]))
        model = qdq(model, ranges, op_types, a.activation_type, a.activation_symmetric)
    model.producer_name = "tessera-bench-precision"
    onnx.save(model, a.dst)


if __name__ == "__main__":
    main(sys.argv[1:])
