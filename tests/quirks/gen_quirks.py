#!/usr/bin/env python3
"""The quirk corpus: small models written the way exporters and converters write them, and the operator changes of
default-domain opsets 18-21, each checked against ONNX Runtime.

    gen_quirks.py OUT_DIR [CASE ...]      writes OUT_DIR/CASE/model.onnx and OUT_DIR/CASE/test_data_set_0/input_<i>.pb

Debian's onnx (1.12) knows no schema past opset 17, so the models are built with onnx.helper and never passed to
onnx.checker; ONNX Runtime is the oracle (tests/quirks/make_quirks.sh writes the expected outputs with it). Every case
is deterministic (fixed seeds). A case is one function below, named after what it exercises.

Cases named ort_all_* hold ONNX Runtime's outputs at its default optimisation level ('all', with its fusions), and
run_quirks.sh checks them to the bit on the native backend: they pin down rewrites that make Tessera round as ONNX
Runtime does.
"""
import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

CASES = {}

# The IR version each opset needs (ONNX's versioning table).
IR_OF_OPSET = {13: 7, 17: 8, 18: 8, 19: 9, 20: 9, 21: 10}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def rand(shape, seed, lo=-1.0, hi=1.0, dtype=np.float32):
    return np.random.RandomState(seed).uniform(lo, hi, size=shape).astype(dtype)


def vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def const(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def model(nodes, inputs, outputs, opset, inits=(), value_info=(), opsets=(), functions=()):
    graph = helper.make_graph(nodes, "quirk", inputs, outputs, initializer=list(inits), value_info=list(value_info))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)] + list(opsets),
                          producer_name="tessera-quirks")
    m.ir_version = IR_OF_OPSET.get(opset, 8)
    if functions:
        m.functions.extend(functions)
    return m


# ---- what exporters and converters write ---------------------------------------------------------------------

@case
def unsorted_nodes():
    """ONNX Runtime's float16 converter appends an input's Cast after the node that reads it."""
    nodes = [
        helper.make_node("Relu", ["x_cast"], ["r"], name="relu"),
        helper.make_node("Mul", ["r", "w"], ["y"], name="mul"),
        helper.make_node("Cast", ["x"], ["x_cast"], name="graph_input_cast_0", to=TensorProto.FLOAT),
    ]
    return (model(nodes, [vi("x", TensorProto.DOUBLE, [2, 8])], [vi("y", TensorProto.FLOAT, [2, 8])], 13,
                  inits=[const("w", rand([8], 1))]),
            [("x", rand([2, 8], 2, dtype=np.float64))])


@case
def empty_types_in_if_branches():
    """PyTorch writes value_info entries with an empty TypeProto inside If branches, and leaves branch outputs
    untyped."""
    def branch(name, op):
        out = helper.ValueInfoProto()
        out.name = name + "_out"
        out.type.SetInParent()  # present and empty
        inner = helper.ValueInfoProto()
        inner.name = name + "_t"
        inner.type.SetInParent()
        return helper.make_graph([helper.make_node(op, ["x"], [name + "_t"]),
                                  helper.make_node("Identity", [name + "_t"], [name + "_out"])],
                                 name, [], [out], value_info=[inner])
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["c"]),
        helper.make_node("If", ["c"], ["y"], then_branch=branch("then", "Relu"), else_branch=branch("else", "Neg")),
    ]
    return (model(nodes, [vi("x", TensorProto.FLOAT, [3, 4])], [vi("y", TensorProto.FLOAT, [3, 4])], 13,
                  inits=[const("zero", np.float32(-100.0))]),
            [("x", rand([3, 4], 3))])


@case
def duplicate_and_partial_value_info():
    nodes = [helper.make_node("Sigmoid", ["x"], ["t"]), helper.make_node("Add", ["t", "x"], ["y"])]
    partial = vi("t", TensorProto.FLOAT, None)  # a type without a shape
    return (model(nodes, [vi("x", TensorProto.FLOAT, [2, 3])], [vi("y", TensorProto.FLOAT, [2, 3])], 13,
                  value_info=[partial, vi("t", TensorProto.FLOAT, [2, 3]), vi("t", TensorProto.FLOAT, ["a", 3])]),
            [("x", rand([2, 3], 4))])


@case
def unused_opset_imports():
    nodes = [helper.make_node("Tanh", ["x"], ["y"])]
    return (model(nodes, [vi("x", TensorProto.FLOAT, [5])], [vi("y", TensorProto.FLOAT, [5])], 17,
                  opsets=[helper.make_opsetid("ai.onnx.ml", 3), helper.make_opsetid("com.microsoft", 1),
                          helper.make_opsetid("org.pytorch.aten", 1)]),
            [("x", rand([5], 5))])


@case
def local_function():
    """PyTorch's newer exporter writes model-local functions (FunctionProto), here one with an attribute
    reference and a default."""
    fn = helper.make_function(
        "pkg.custom", "ScaledGelu", ["X", "S"], ["Y"],
        [helper.make_node("Mul", ["X", "S"], ["xs"]),
         helper.make_node("Constant", [], ["half"], value=const("half", np.float32(0.5))),
         helper.make_node("Mul", ["xs", "half"], ["h"]),
         helper.make_node("Tanh", ["h"], ["t"]),
         helper.make_node("Add", ["t", "xs"], ["Y"])],
        [helper.make_opsetid("", 17)])
    nodes = [helper.make_node("ScaledGelu", ["x", "s"], ["a"], domain="pkg.custom"),
             helper.make_node("ScaledGelu", ["a", "s"], ["y"], domain="pkg.custom")]
    return (model(nodes, [vi("x", TensorProto.FLOAT, [2, 6])], [vi("y", TensorProto.FLOAT, [2, 6])], 17,
                  inits=[const("s", rand([6], 6, 0.5, 1.5))], opsets=[helper.make_opsetid("pkg.custom", 1)],
                  functions=[fn]),
            [("x", rand([2, 6], 7))])


# ---- com.microsoft ops of ONNX Runtime's transformer optimizer --------------------------------------------------

MS = [helper.make_opsetid("com.microsoft", 1)]


@case
def ms_gelu_family():
    nodes = [helper.make_node("Gelu", ["x"], ["g"], domain="com.microsoft"),
             helper.make_node("FastGelu", ["x", "bias"], ["f"], domain="com.microsoft"),
             helper.make_node("FastGelu", ["x"], ["f0"], domain="com.microsoft"),
             helper.make_node("BiasGelu", ["x", "bias"], ["b"], domain="com.microsoft"),
             helper.make_node("QuickGelu", ["x"], ["q"], domain="com.microsoft", alpha=1.5)]
    return (model(nodes, [vi("x", TensorProto.FLOAT, [2, 3, 8])],
                  [vi(n, TensorProto.FLOAT, None) for n in ("g", "f", "f0", "b", "q")], 17,
                  inits=[const("bias", rand([8], 40))], opsets=MS),
            [("x", rand([2, 3, 8], 41, -3, 3))])


@case
def ms_skip_layer_normalization():
    nodes = [helper.make_node("SkipLayerNormalization", ["x", "skip", "gamma", "beta", "bias"],
                              ["y", "mean", "inv_std", "sum"], domain="com.microsoft", epsilon=1e-5),
             helper.make_node("SkipLayerNormalization", ["x", "skip", "gamma"], ["z"], domain="com.microsoft",
                              epsilon=1e-5)]
    return (model(nodes, [vi("x", TensorProto.FLOAT, [2, 4, 16]), vi("skip", TensorProto.FLOAT, [2, 4, 16])],
                  [vi("y", TensorProto.FLOAT, None), vi("sum", TensorProto.FLOAT, None),
                   vi("z", TensorProto.FLOAT, None)], 17,
                  inits=[const("gamma", rand([16], 42, 0.5, 1.5)), const("beta", rand([16], 43)),
                         const("bias", rand([16], 44))], opsets=MS),
            [("x", rand([2, 4, 16], 45)), ("skip", rand([2, 4, 16], 46))])


@case
def ms_fused_matmul():
    nodes = [helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain="com.microsoft", alpha=0.125, transB=1),
             helper.make_node("FusedMatMul", ["at", "b"], ["z"], domain="com.microsoft", transA=1, transB=1)]
    return (model(nodes, [vi("a", TensorProto.FLOAT, [2, 3, 5, 4]), vi("b", TensorProto.FLOAT, [2, 3, 6, 4]),
                          vi("at", TensorProto.FLOAT, [2, 3, 4, 5])],
                  [vi("y", TensorProto.FLOAT, None), vi("z", TensorProto.FLOAT, None)], 17, opsets=MS),
            [("a", rand([2, 3, 5, 4], 47)), ("b", rand([2, 3, 6, 4], 48)), ("at", rand([2, 3, 4, 5], 49))])


def qrand(shape, seed, dtype=np.uint8):
    info = np.iinfo(dtype)
    return np.random.RandomState(seed).randint(info.min, info.max + 1, size=shape).astype(dtype)


def qparams(prefix, scale, zp, dtype=np.uint8):
    """A scale and zero point initializer pair, named PREFIX_scale / PREFIX_zp."""
    return [const(prefix + "_scale", np.array(scale, np.float32)), const(prefix + "_zp", np.array(zp, dtype))]


@case
def ms_qlinear_elementwise():
    """ONNX Runtime's QOperator format: com.microsoft QLinearAdd / QLinearMul (broadcast too), QLinearSigmoid and
    QLinearLeakyRelu, uint8 and int8."""
    q = lambda p: [p + "_scale", p + "_zp"]
    nodes = [helper.make_node("QLinearAdd", ["a"] + q("a") + ["b"] + q("b") + q("c"), ["add"], domain="com.microsoft"),
             helper.make_node("QLinearMul", ["a"] + q("a") + ["row"] + q("b") + q("c"), ["mul"], domain="com.microsoft"),
             helper.make_node("QLinearSigmoid", ["a"] + q("a") + q("s"), ["sig"], domain="com.microsoft"),
             helper.make_node("QLinearLeakyRelu", ["i"] + q("i") + q("l"), ["leaky"], domain="com.microsoft",
                              alpha=0.1),
             helper.make_node("QLinearAdd", ["i"] + q("i") + ["i"] + q("i") + q("l"), ["add8"], domain="com.microsoft")]
    inits = (qparams("a", 0.05, 120) + qparams("b", 0.03, 90) + qparams("c", 0.07, 110) + qparams("s", 1 / 255, 0) +
             qparams("i", 0.02, -5, np.int8) + qparams("l", 0.015, 10, np.int8))
    return (model(nodes, [vi("a", TensorProto.UINT8, [2, 3, 8]), vi("b", TensorProto.UINT8, [2, 3, 8]),
                          vi("row", TensorProto.UINT8, [8]), vi("i", TensorProto.INT8, [4, 16])],
                  [vi("add", TensorProto.UINT8, None), vi("mul", TensorProto.UINT8, None),
                   vi("sig", TensorProto.UINT8, None), vi("leaky", TensorProto.INT8, None),
                   vi("add8", TensorProto.INT8, None)], 13, inits=inits, opsets=MS),
            [("a", qrand([2, 3, 8], 50)), ("b", qrand([2, 3, 8], 51)), ("row", qrand([8], 52)),
             ("i", qrand([4, 16], 53, np.int8))])


@case
def ms_qlinear_pool_concat_softmax():
    """QLinearGlobalAveragePool, QLinearAveragePool, QLinearConcat and QLinearSoftmax (as Softmax-13 and as
    Softmax-11, which coerces its input to 2-D at the axis)."""
    q = lambda p: [p + "_scale", p + "_zp"]
    nodes = [helper.make_node("QLinearGlobalAveragePool", ["x"] + q("x") + q("g"), ["gap"], domain="com.microsoft",
                              channels_last=0),
             helper.make_node("QLinearAveragePool", ["x"] + q("x") + q("g"), ["pool"], domain="com.microsoft",
                              kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=0),
             helper.make_node("QLinearConcat", q("g") + ["x"] + q("x") + ["y"] + q("y"), ["cat"],
                              domain="com.microsoft", axis=1),
             helper.make_node("QLinearSoftmax", ["x"] + q("x") + q("s"), ["soft13"], domain="com.microsoft",
                              axis=-1, opset=13),
             helper.make_node("QLinearSoftmax", ["x"] + q("x") + q("s"), ["soft11"], domain="com.microsoft",
                              axis=2, opset=11)]
    inits = qparams("x", 0.04, 100) + qparams("y", 0.06, 128) + qparams("g", 0.05, 120) + qparams("s", 1 / 256, 0)
    return (model(nodes, [vi("x", TensorProto.UINT8, [1, 4, 7, 9]), vi("y", TensorProto.UINT8, [1, 2, 7, 9])],
                  [vi("gap", TensorProto.UINT8, None), vi("pool", TensorProto.UINT8, None),
                   vi("cat", TensorProto.UINT8, None), vi("soft13", TensorProto.UINT8, None),
                   vi("soft11", TensorProto.UINT8, None)], 13, inits=inits, opsets=MS),
            [("x", qrand([1, 4, 7, 9], 54)), ("y", qrand([1, 2, 7, 9], 55))])


@case
def ms_qgemm_and_dynamic_matmul():
    """QGemm (int8 weights per output channel, int32 bias, quantized and float outputs), DynamicQuantizeMatMul and
    MatMulIntegerToFloat, as ONNX Runtime's quantizers and optimizer write them."""
    q = lambda p: [p + "_scale", p + "_zp"]
    w = qrand([6, 10], 56, np.int8)  # [N, K], transB = 1
    nodes = [helper.make_node("QGemm", ["a"] + q("a") + ["w", "w_scale", "w_zp", "bias"] + q("y"), ["gemm_q"],
                              domain="com.microsoft", transB=1),
             helper.make_node("QGemm", ["a"] + q("a") + ["w", "w_scale", "w_zp", "bias"], ["gemm_f"],
                              domain="com.microsoft", transB=1, alpha=0.5),
             helper.make_node("DynamicQuantizeMatMul", ["f", "wm", "wm_scale", "wm_zp", "fbias"], ["dqmm"],
                              domain="com.microsoft"),
             helper.make_node("MatMulIntegerToFloat", ["a", "wm", "a_scale", "wm_scale", "a_zp", "wm_zp"], ["mmf"],
                              domain="com.microsoft")]
    inits = (qparams("a", 0.05, 120) + qparams("y", 0.1, 100) +
             [const("w", w), const("w_scale", rand([6], 57, 0.005, 0.02)), const("w_zp", np.zeros([6], np.int8)),
              const("bias", np.random.RandomState(58).randint(-2000, 2000, size=[6]).astype(np.int32)),
              const("wm", qrand([10, 5], 59, np.int8)), const("wm_scale", np.array(0.01, np.float32)),
              const("wm_zp", np.array(0, np.int8)), const("fbias", rand([5], 60))])
    return (model(nodes, [vi("a", TensorProto.UINT8, [3, 10]), vi("f", TensorProto.FLOAT, [2, 3, 10])],
                  [vi("gemm_q", TensorProto.UINT8, None), vi("gemm_f", TensorProto.FLOAT, None),
                   vi("dqmm", TensorProto.FLOAT, None), vi("mmf", TensorProto.FLOAT, None)], 13, inits=inits,
                  opsets=MS),
            [("a", qrand([3, 10], 61)), ("f", rand([2, 3, 10], 62, -2, 2))])



@case
def ms_dynamic_quantize_lstm():
    """DynamicQuantizeLSTM as ONNX Runtime's quantize_dynamic writes an LSTM: weights quantized and transposed to
    [directions, input, 4 * hidden] and [directions, hidden, 4 * hidden], the input and the hidden state quantized at
    run time. A forward LSTM with int8 weights, per-channel scales, bias and initial states; a bidirectional one with
    uint8 weights, a scale and zero point per direction, and nothing optional."""
    T, B, I, H = 7, 2, 10, 8
    wa, ra = qrand([1, I, 4 * H], 63, np.int8), qrand([1, H, 4 * H], 64, np.int8)
    T2, B2, I2, H2 = 5, 3, 6, 4
    wb, rb = qrand([2, I2, 4 * H2], 65), qrand([2, H2, 4 * H2], 66)
    inputs_a = ["xa", "wa", "ra", "ba", "", "ha", "ca", "", "wa_scale", "wa_zp", "ra_scale", "ra_zp"]
    inputs_b = ["xb", "wb", "rb", "", "", "", "", "", "wb_scale", "wb_zp", "rb_scale", "rb_zp"]
    # The same bidirectional LSTM over sequences of 5, 2 and 4 steps: ONNX Runtime quantizes an ended sequence's H
    # as zeros.
    inputs_c = ["xb", "wb", "rb", "", "lens"] + inputs_b[5:]
    nodes = [helper.make_node("DynamicQuantizeLSTM", inputs_a, ["ya", "ya_h", "ya_c"], domain="com.microsoft",
                              hidden_size=H),
             helper.make_node("DynamicQuantizeLSTM", inputs_b, ["yb"], domain="com.microsoft", hidden_size=H2,
                              direction="bidirectional"),
             helper.make_node("DynamicQuantizeLSTM", inputs_c, ["yc", "yc_h"], domain="com.microsoft", hidden_size=H2,
                              direction="bidirectional")]
    inits = [const("wa", wa), const("ra", ra), const("ba", rand([1, 8 * H], 67, -0.5, 0.5)),
             const("wa_scale", rand([1, 4 * H], 68, 0.002, 0.01)), const("wa_zp", np.zeros([1, 4 * H], np.int8)),
             const("ra_scale", rand([1, 4 * H], 69, 0.002, 0.01)), const("ra_zp", np.zeros([1, 4 * H], np.int8)),
             const("wb", wb), const("rb", rb), const("wb_scale", np.array([0.004, 0.006], np.float32)),
             const("wb_zp", np.array([128, 120], np.uint8)), const("rb_scale", np.array([0.005, 0.003], np.float32)),
             const("rb_zp", np.array([126, 131], np.uint8)), const("lens", np.array([5, 2, 4], np.int32))]
    return (model(nodes, [vi("xa", TensorProto.FLOAT, [T, B, I]), vi("ha", TensorProto.FLOAT, [1, B, H]),
                          vi("ca", TensorProto.FLOAT, [1, B, H]), vi("xb", TensorProto.FLOAT, [T2, B2, I2])],
                  [vi("ya", TensorProto.FLOAT, None), vi("ya_h", TensorProto.FLOAT, None),
                   vi("ya_c", TensorProto.FLOAT, None), vi("yb", TensorProto.FLOAT, None),
                   vi("yc", TensorProto.FLOAT, None), vi("yc_h", TensorProto.FLOAT, None)], 13, inits=inits,
                  opsets=MS),
            [("xa", rand([T, B, I], 70, -3, 2)), ("ha", rand([1, B, H], 71)), ("ca", rand([1, B, H], 72)),
             ("xb", rand([T2, B2, I2], 73, -1, 4))])

# ---- opset 18 ---------------------------------------------------------------------------------------------------

@case
def opset18_reduce_axes_as_input():
    nodes = [helper.make_node("ReduceMean", ["x", "axes"], ["m"], keepdims=1),
             helper.make_node("ReduceMax", ["x", "axes2"], ["mx"], keepdims=0),
             helper.make_node("ReduceL2", ["x"], ["l2"], keepdims=0),
             helper.make_node("ReduceLogSumExp", ["x", "axes"], ["lse"], keepdims=1),
             helper.make_node("ReduceSumSquare", ["x", "empty"], ["same"], keepdims=1, noop_with_empty_axes=1),
             helper.make_node("Sub", ["x", "m"], ["y0"]),
             helper.make_node("Add", ["y0", "lse"], ["y"])]
    return (model(nodes, [vi("x", TensorProto.FLOAT, [2, 3, 4])],
                  [vi("y", TensorProto.FLOAT, [2, 3, 4]), vi("mx", TensorProto.FLOAT, [3]),
                   vi("l2", TensorProto.FLOAT, []), vi("same", TensorProto.FLOAT, [2, 3, 4])], 18,
                  inits=[const("axes", np.array([-1], np.int64)), const("axes2", np.array([0, 2], np.int64)),
                         const("empty", np.array([], np.int64))]),
            [("x", rand([2, 3, 4], 8))])


@case
def opset18_split_num_outputs():
    nodes = [helper.make_node("Split", ["x"], ["a", "b", "c"], axis=1, num_outputs=3)]
    return (model(nodes, [vi("x", TensorProto.FLOAT, [2, 7])],
                  [vi("a", TensorProto.FLOAT, None), vi("b", TensorProto.FLOAT, None),
                   vi("c", TensorProto.FLOAT, None)], 18),
            [("x", rand([2, 7], 9))])


@case
def opset18_pad_axes():
    nodes = [helper.make_node("Pad", ["x", "pads", "value", "axes"], ["y"], mode="constant"),
             helper.make_node("Pad", ["x", "pads", "", "axes"], ["z"], mode="reflect")]
    return (model(nodes, [vi("x", TensorProto.FLOAT, [2, 3, 5])],
                  [vi("y", TensorProto.FLOAT, None), vi("z", TensorProto.FLOAT, None)], 18,
                  inits=[const("pads", np.array([1, 2, 0, 1], np.int64)), const("value", np.float32(0.25)),
                         const("axes", np.array([-1, 1], np.int64))]),
            [("x", rand([2, 3, 5], 10))])


@case
def opset18_resize_axes_and_aspect():
    nodes = [helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear", axes=[2, 3],
                              keep_aspect_ratio_policy="not_larger"),
             helper.make_node("Resize", ["x", "", "", "sizes2"], ["z"], mode="nearest", axes=[3, 2],
                              keep_aspect_ratio_policy="not_smaller")]
    return (model(nodes, [vi("x", TensorProto.FLOAT, [1, 2, 6, 8])],
                  [vi("y", TensorProto.FLOAT, None), vi("z", TensorProto.FLOAT, None)], 18,
                  inits=[const("sizes", np.array([9, 10], np.int64)), const("sizes2", np.array([5, 4], np.int64))]),
            [("x", rand([1, 2, 6, 8], 11))])


@case
def opset18_resize_antialias():
    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear", antialias=1),
             helper.make_node("Resize", ["x", "", "scales"], ["z"], mode="cubic", antialias=1)]
    return (model(nodes, [vi("x", TensorProto.FLOAT, [1, 1, 12, 16])],
                  [vi("y", TensorProto.FLOAT, None), vi("z", TensorProto.FLOAT, None)], 18,
                  inits=[const("scales", np.array([1, 1, 0.5, 0.375], np.float32))]),
            [("x", rand([1, 1, 12, 16], 12))])


@case
def opset18_scatter_max_min():
    idx = np.array([[1, 0, 2], [0, 2, 1]], np.int64)
    nd_idx = np.array([[0, 1], [1, 2], [0, 1]], np.int64)
    nodes = [helper.make_node("ScatterElements", ["x", "idx", "u"], ["y"], axis=1, reduction="max"),
             helper.make_node("ScatterElements", ["x", "idx", "u"], ["z"], axis=1, reduction="min"),
             helper.make_node("ScatterND", ["x", "nd_idx", "nd_u"], ["w"], reduction="max")]
    return (model(nodes, [vi("x", TensorProto.FLOAT, [2, 3]), vi("u", TensorProto.FLOAT, [2, 3]),
                          vi("nd_u", TensorProto.FLOAT, [3])],
                  [vi("y", TensorProto.FLOAT, None), vi("z", TensorProto.FLOAT, None),
                   vi("w", TensorProto.FLOAT, None)], 18,
                  inits=[const("idx", idx), const("nd_idx", nd_idx)]),
            [("x", rand([2, 3], 13)), ("u", rand([2, 3], 14)), ("nd_u", rand([3], 15))])


@case
def opset18_lppool_ceil_mode():
    nodes = [helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], p=2, ceil_mode=1)]
    return (model(nodes, [vi("x", TensorProto.FLOAT, [1, 2, 8, 8])], [vi("y", TensorProto.FLOAT, None)], 18),
            [("x", rand([1, 2, 8, 8], 16))])


@case
def opset18_group_normalization():
    nodes = [helper.make_node("GroupNormalization", ["x", "scale", "bias"], ["y"], num_groups=2, epsilon=1e-5)]
    return (model(nodes, [vi("x", TensorProto.FLOAT, [2, 4, 3, 5])], [vi("y", TensorProto.FLOAT, None)], 18,
                  inits=[const("scale", rand([2], 17, 0.5, 1.5)), const("bias", rand([2], 18))]),
            [("x", rand([2, 4, 3, 5], 19))])


@case
def opset21_group_normalization():
    nodes = [helper.make_node("GroupNormalization", ["x", "scale", "bias"], ["y"], num_groups=2, epsilon=1e-5)]
    return (model(nodes, [vi("x", TensorProto.FLOAT, [2, 4, 3, 5])], [vi("y", TensorProto.FLOAT, None)], 21,
                  inits=[const("scale", rand([4], 20, 0.5, 1.5)), const("bias", rand([4], 21))]),
            [("x", rand([2, 4, 3, 5], 22))])


@case
def opset18_bitwise():
    a = np.random.RandomState(23).randint(-100, 100, size=[3, 4]).astype(np.int32)
    b = np.random.RandomState(24).randint(-100, 100, size=[4]).astype(np.int32)
    nodes = [helper.make_node("BitwiseAnd", ["a", "b"], ["and"]), helper.make_node("BitwiseOr", ["a", "b"], ["or"]),
             helper.make_node("BitwiseXor", ["a", "b"], ["xor"]), helper.make_node("BitwiseNot", ["a"], ["not"])]
    return (model(nodes, [vi("a", TensorProto.INT32, [3, 4]), vi("b", TensorProto.INT32, [4])],
                  [vi(n, TensorProto.INT32, None) for n in ("and", "or", "xor", "not")], 18),
            [("a", a), ("b", b)])


@case
def opset18_mish():
    nodes = [helper.make_node("Mish", ["x"], ["y"])]
    return (model(nodes, [vi("x", TensorProto.FLOAT, [4, 8])], [vi("y", TensorProto.FLOAT, None)], 18),
            [("x", rand([4, 8], 25, -6, 6))])


@case
def opset18_col2im():
    nodes = [helper.make_node("Col2Im", ["x", "image_shape", "block_shape"], ["y"], strides=[1, 2], pads=[0, 1, 1, 0])]
    # input: N x (C * prod(block)) x L, with L the number of blocks: H 5, W 6, block 2x3, stride (1,2), pads (0,1,1,0)
    # blocks along H: (5 + 0 + 1 - 2) / 1 + 1 = 5; along W: (6 + 1 + 0 - 3) / 2 + 1 = 3; L = 15
    return (model(nodes, [vi("x", TensorProto.FLOAT, [1, 2 * 6, 15])], [vi("y", TensorProto.FLOAT, None)], 18,
                  inits=[const("image_shape", np.array([5, 6], np.int64)),
                         const("block_shape", np.array([2, 3], np.int64))]),
            [("x", rand([1, 12, 15], 26))])


@case
def opset18_center_crop_pad():
    nodes = [helper.make_node("CenterCropPad", ["x", "shape"], ["y"], axes=[0, 2]),
             helper.make_node("CenterCropPad", ["x", "shape2"], ["z"])]
    return (model(nodes, [vi("x", TensorProto.FLOAT, [5, 3, 4])],
                  [vi("y", TensorProto.FLOAT, None), vi("z", TensorProto.FLOAT, None)], 18,
                  inits=[const("shape", np.array([3, 7], np.int64)), const("shape2", np.array([6, 2, 3], np.int64))]),
            [("x", rand([5, 3, 4], 27))])


# ---- opsets 19-21 ---------------------------------------------------------------------------------------------

@case
def opset19_average_pool_dilations():
    nodes = [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], dilations=[2, 2], strides=[1, 1],
                              pads=[1, 1, 1, 1], count_include_pad=0)]
    return (model(nodes, [vi("x", TensorProto.FLOAT, [1, 2, 7, 7])], [vi("y", TensorProto.FLOAT, None)], 19),
            [("x", rand([1, 2, 7, 7], 28))])


@case
def opset19_pad_wrap():
    nodes = [helper.make_node("Pad", ["x", "pads"], ["y"], mode="wrap")]
    return (model(nodes, [vi("x", TensorProto.FLOAT, [3, 4])], [vi("y", TensorProto.FLOAT, None)], 19,
                  inits=[const("pads", np.array([1, 2, 2, 1], np.int64))]),
            [("x", rand([3, 4], 29))])


@case
def opset20_gelu():
    nodes = [helper.make_node("Gelu", ["x"], ["y"]), helper.make_node("Gelu", ["x"], ["z"], approximate="tanh")]
    return (model(nodes, [vi("x", TensorProto.FLOAT, [3, 16])],
                  [vi("y", TensorProto.FLOAT, None), vi("z", TensorProto.FLOAT, None)], 20),
            [("x", rand([3, 16], 30, -4, 4))])


@case
def opset20_reduce_max_bool():
    nodes = [helper.make_node("ReduceMax", ["x", "axes"], ["y"], keepdims=0),
             helper.make_node("ReduceMin", ["x", "axes"], ["z"], keepdims=1)]
    x = np.random.RandomState(31).randint(0, 2, size=[3, 5]).astype(bool)
    x[1, :] = True  # a row whose minimum is true
    return (model(nodes, [vi("x", TensorProto.BOOL, [3, 5])],
                  [vi("y", TensorProto.BOOL, None), vi("z", TensorProto.BOOL, None)], 20,
                  inits=[const("axes", np.array([1], np.int64))]),
            [("x", x)])


@case
def opset20_grid_sample():
    nodes = [helper.make_node("GridSample", ["x", "grid"], ["y"], mode="linear", padding_mode="border",
                              align_corners=0),
             helper.make_node("GridSample", ["x", "grid"], ["z"], mode="cubic", padding_mode="zeros",
                              align_corners=1)]
    return (model(nodes, [vi("x", TensorProto.FLOAT, [1, 2, 5, 6]), vi("grid", TensorProto.FLOAT, [1, 3, 4, 2])],
                  [vi("y", TensorProto.FLOAT, None), vi("z", TensorProto.FLOAT, None)], 20),
            [("x", rand([1, 2, 5, 6], 32)), ("grid", rand([1, 3, 4, 2], 33, -1.1, 1.1))])


@case
def opset20_affine_grid():
    nodes = [helper.make_node("AffineGrid", ["theta", "size"], ["g"], align_corners=0),
             helper.make_node("AffineGrid", ["theta", "size"], ["h"], align_corners=1)]
    return (model(nodes, [vi("theta", TensorProto.FLOAT, [2, 2, 3])],
                  [vi("g", TensorProto.FLOAT, None), vi("h", TensorProto.FLOAT, None)], 20,
                  inits=[const("size", np.array([2, 3, 4, 5], np.int64))]),
            [("theta", rand([2, 2, 3], 34))])


@case
def opset20_dft_axis_input():
    nodes = [helper.make_node("DFT", ["x", "", "axis"], ["y"], onesided=0, inverse=0)]
    return (model(nodes, [vi("x", TensorProto.FLOAT, [2, 8, 1])], [vi("y", TensorProto.FLOAT, None)], 20,
                  inits=[const("axis", np.array(1, np.int64))]),
            [("x", rand([2, 8, 1], 35))])


@case
def opset21_dequantize_blocked():
    q = np.random.RandomState(36).randint(-128, 127, size=[4, 6]).astype(np.int8)
    nodes = [helper.make_node("DequantizeLinear", ["q", "scale", "zp"], ["y"], axis=1, block_size=3)]
    return (model(nodes, [vi("q", TensorProto.INT8, [4, 6])], [vi("y", TensorProto.FLOAT, None)], 21,
                  inits=[const("scale", rand([4, 2], 37, 0.01, 0.1)),
                         const("zp", np.random.RandomState(38).randint(-5, 5, size=[4, 2]).astype(np.int8))]),
            [("q", q)])


@case
def opset21_quantize_output_dtype():
    nodes = [helper.make_node("QuantizeLinear", ["x", "scale"], ["y"], output_dtype=TensorProto.UINT8),
             helper.make_node("QuantizeLinear", ["x", "scale3", "zp"], ["z"], axis=0),
             helper.make_node("QuantizeLinear", ["x", "block_scale", "block_zp"], ["w"], axis=1, block_size=2)]
    return (model(nodes, [vi("x", TensorProto.FLOAT, [3, 4])],
                  [vi("y", TensorProto.UINT8, None), vi("z", TensorProto.INT8, None),
                   vi("w", TensorProto.INT8, None)], 21,
                  inits=[const("scale", np.float32(0.02)), const("scale3", np.array([0.01, 0.02, 0.03], np.float32)),
                         const("zp", np.array([1, -2, 3], np.int8)), const("block_scale", rand([3, 2], 50, 0.01, 0.05)),
                         const("block_zp", np.array([[0, 1], [-1, 2], [3, -3]], np.int8))]),
            [("x", rand([3, 4], 39))])


# ---- ONNX Runtime's fusions, to the bit ---------------------------------------------------------------------------

def _torch_layer_norm(prefix, x, c, seed, dup_sub=False):
    """torch.nn.LayerNorm as torch.onnx writes it before opset 17 (older PyTorch writes x - mean twice)."""
    nodes = [helper.make_node("ReduceMean", [x], [prefix + "mean"], axes=[-1]),
             helper.make_node("Sub", [x, prefix + "mean"], [prefix + "d"])]
    num = prefix + "d"
    if dup_sub:
        nodes.append(helper.make_node("Sub", [x, prefix + "mean"], [prefix + "d2"]))
        num = prefix + "d2"
    nodes += [helper.make_node("Pow", [prefix + "d", "two"], [prefix + "sq"]),
              helper.make_node("ReduceMean", [prefix + "sq"], [prefix + "var"], axes=[-1]),
              helper.make_node("Add", [prefix + "var", "eps"], [prefix + "ve"]),
              helper.make_node("Sqrt", [prefix + "ve"], [prefix + "sd"]),
              helper.make_node("Div", [num, prefix + "sd"], [prefix + "n"]),
              helper.make_node("Mul", [prefix + "n", prefix + "w"], [prefix + "m"]),
              helper.make_node("Add", [prefix + "m", prefix + "b"], [prefix + "y"])]
    inits = [const(prefix + "w", rand([c], seed, 0.5, 1.5)), const(prefix + "b", rand([c], seed + 1, -0.2, 0.2))]
    return nodes, inits


def _erf_gelu(prefix, x, half_first=False):
    """torch's exact GELU as exporters write it before opset 20."""
    nodes = [helper.make_node("Div", [x, "sqrt2"], [prefix + "s"]),
             helper.make_node("Erf", [prefix + "s"], [prefix + "e"]),
             helper.make_node("Add", [prefix + "e", "one"], [prefix + "e1"])]
    if half_first:
        nodes += [helper.make_node("Mul", [x, "half"], [prefix + "xh"]),
                  helper.make_node("Mul", [prefix + "xh", prefix + "e1"], [prefix + "y"])]
    else:
        nodes += [helper.make_node("Mul", [x, prefix + "e1"], [prefix + "m"]),
                  helper.make_node("Mul", [prefix + "m", "half"], [prefix + "y"])]
    return nodes


@case
def ort_all_decomposed_layernorm_gelu():
    """A transformer block's LayerNorms and GELUs as torch.onnx writes them at opset 14: ONNX Runtime fuses them into
    LayerNormalization, Gelu and BiasGelu, whose arithmetic differs from the ops they replace in the last bits."""
    c = 96
    ln1, i1 = _torch_layer_norm("ln1_", "x", c, 60)
    ln2, i2 = _torch_layer_norm("ln2_", "h", c, 62, dup_sub=True)
    nodes = ln1 + _erf_gelu("g1_", "ln1_y") + [helper.make_node("Add", ["g1_y", "bias"], ["h"])] + ln2
    nodes += [helper.make_node("Add", ["ln2_y", "bias2"], ["hb"])] + _erf_gelu("g2_", "hb", half_first=True)
    # x * (1 / sqrt 2): not fused by ONNX Runtime, so its Erf op runs alone.
    nodes += [helper.make_node("Mul", ["ln2_y", "rsqrt2"], ["t"]), helper.make_node("Erf", ["t"], ["te"]),
              helper.make_node("Add", ["te", "one"], ["te1"]), helper.make_node("Mul", ["ln2_y", "te1"], ["tm"]),
              helper.make_node("Mul", ["tm", "half"], ["z"])]
    inits = i1 + i2 + [const("two", np.array(2.0, np.float32)), const("eps", np.array(1e-5, np.float32)),
                       const("sqrt2", np.array(1.4142135381698608, np.float32)),
                       const("rsqrt2", np.array(0.7071067690849304, np.float32)),
                       const("one", np.array(1.0, np.float32)), const("half", np.array(0.5, np.float32)),
                       const("bias", rand([c], 64, -0.5, 0.5)), const("bias2", rand([c], 65, -0.5, 0.5))]
    x = rand([2, 37, c], 66, -3, 3) * rand([2, 37, 1], 67, 0.2, 4) + rand([2, 37, 1], 68, -2, 2)
    return (model(nodes, [vi("x", TensorProto.FLOAT, [2, 37, c])],
                  [vi("ln1_y", TensorProto.FLOAT, None), vi("g2_y", TensorProto.FLOAT, None),
                   vi("z", TensorProto.FLOAT, None)], 14, inits=inits),
            [("x", x.astype(np.float32))])


@case
def ort_all_optimized_model_opset14():
    """A model as ONNX Runtime's optimizer saves it (optimized_model_filepath, onnxruntime.transformers): its fused
    LayerNormalization stays in the default domain at the model's opset 14, three opsets before ONNX added the op,
    beside com.microsoft Gelu and BiasGelu."""
    c = 64
    nodes = [helper.make_node("LayerNormalization", ["x", "w", "b"], ["n"], axis=-1, epsilon=1e-5),
             helper.make_node("BiasGelu", ["n", "bias"], ["g"], domain="com.microsoft"),
             helper.make_node("Gelu", ["n"], ["y"], domain="com.microsoft"),
             helper.make_node("LayerNormalization", ["g", "w"], ["z"], axis=-1, epsilon=1e-6)]
    inits = [const("w", rand([c], 70, 0.5, 1.5)), const("b", rand([c], 71, -0.2, 0.2)),
             const("bias", rand([c], 72, -0.5, 0.5))]
    x = rand([3, 11, c], 73, -3, 3) * rand([3, 11, 1], 74, 0.2, 4)
    return (model(nodes, [vi("x", TensorProto.FLOAT, [3, 11, c])],
                  [vi("y", TensorProto.FLOAT, None), vi("z", TensorProto.FLOAT, None)], 14, inits=inits,
                  opsets=[helper.make_opsetid("com.microsoft", 1)]),
            [("x", x.astype(np.float32))])


@case
def ort_all_eigen_order_sums():
    """Float sums as ONNX Runtime's kernels take them (Eigen's SSE reduction: packets from each row's first 16-byte
    boundary, two accumulators, the ends one by one): ReduceSum and ReduceMean over trailing axes of rows that start
    off a boundary, and InstanceNormalization (GroupNorm as torch.onnx writes it before opset 18) over such rows."""
    nodes = [helper.make_node("ReduceSum", ["x", "axes"], ["s"], keepdims=1),
             helper.make_node("ReduceMean", ["x"], ["m"], axes=[2, 3], keepdims=0),
             helper.make_node("Reshape", ["x", "shape"], ["g"]),
             helper.make_node("InstanceNormalization", ["g", "scale", "bias"], ["n"], epsilon=1e-5)]
    rs = np.random.RandomState(80)
    x = (rs.randn(2, 6, 5, 37) * np.exp(rs.randn(2, 6, 5, 37) * 2) + 50 * rs.randn(2, 6, 1, 1)).astype(np.float32)
    return (model(nodes, [vi("x", TensorProto.FLOAT, [2, 6, 5, 37])],
                  [vi("s", TensorProto.FLOAT, None), vi("m", TensorProto.FLOAT, None), vi("n", TensorProto.FLOAT, None)],
                  13, inits=[const("axes", np.array([-1], np.int64)), const("shape", np.array([2, 3, -1], np.int64)),
                             const("scale", rand([3], 81, 0.5, 1.5)), const("bias", rand([3], 82, -0.5, 0.5))]),
            [("x", x)])


@case
def ort_all_matmul_scales():
    """Attention scores as exporters scale them: q * s (or q / c) and k * s, each through a Transpose of its own, and
    the product times a factor. ONNX Runtime folds the factors into FusedMatMul's alpha (level 'all'): the unscaled product
    times their product, which rounds otherwise than scaling the operands."""
    nodes = [helper.make_node("Mul", ["q", "s"], ["qs"]), helper.make_node("Mul", ["k", "s2"], ["ks"]),
             helper.make_node("Transpose", ["ks"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["qs", "kt"], ["m"]), helper.make_node("Mul", ["m", "s3"], ["y"]),
             helper.make_node("Div", ["q", "c"], ["qd"]),
             helper.make_node("Transpose", ["ks"], ["kt2"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["qd", "kt2"], ["z"])]
    inits = [const("s", np.array(64 ** -0.25, np.float32)), const("s2", np.array([0.7], np.float32)),
             const("s3", np.array(1.3, np.float32)), const("c", np.array(3.0, np.float32))]
    return (model(nodes, [vi("q", TensorProto.FLOAT, [2, 3, 40, 64]), vi("k", TensorProto.FLOAT, [2, 3, 40, 64])],
                  [vi("y", TensorProto.FLOAT, None), vi("z", TensorProto.FLOAT, None)], 14, inits=inits),
            [("q", rand([2, 3, 40, 64], 90, -2, 2)), ("k", rand([2, 3, 40, 64], 91, -2, 2))])


@case
def ort_all_dynq_transformer_block():
    """A pre-LN transformer block as torch.onnx writes it at opset 14 (decomposed LayerNorms, q and k scaled by
    d^-0.25 after their Transposes, erf GELU), dynamically quantized as ONNX Runtime's quantize_dynamic writes it
    (DynamicQuantizeLinear, MatMulInteger with int8 weights, Cast, Mul by the scales). Every float op between the
    quantizations must round as ONNX Runtime's level 'all' computes it, or whole steps move."""
    d, heads, ff, t = 64, 2, 128, 24  # d^-0.25 of the 32-wide heads is not a power of two
    dh = d // heads
    rs = np.random.RandomState(95)
    nodes, inits = [], [const("two", np.array(2.0, np.float32)), const("eps", np.array(1e-5, np.float32)),
                        const("sqrt2", np.array(1.4142135381698608, np.float32)),
                        const("one", np.array(1.0, np.float32)), const("half", np.array(0.5, np.float32)),
                        const("qk_scale", np.array(dh ** -0.25, np.float32)),
                        const("heads_shape", np.array([1, t, heads, dh], np.int64)),
                        const("model_shape", np.array([1, t, d], np.int64))]

    def linear(name, x, fin, fout):
        w = (rs.randn(fin, fout) / np.sqrt(fin)).astype(np.float32)
        scale = np.float32(np.abs(w).max() / 127.0)
        wq = np.clip(np.round(w / scale), -127, 127).astype(np.int8)
        inits.extend([const(name + "_wq", wq), const(name + "_ws", np.array(scale, np.float32)),
                      const(name + "_wz", np.array(0, np.int8)), const(name + "_b", rand([fout], 96 + fin + fout, -0.1, 0.1))])
        nodes.extend([helper.make_node("DynamicQuantizeLinear", [x], [name + "_xq", name + "_xs", name + "_xz"]),
                      helper.make_node("MatMulInteger", [name + "_xq", name + "_wq", name + "_xz", name + "_wz"],
                                       [name + "_acc"]),
                      helper.make_node("Cast", [name + "_acc"], [name + "_accf"], to=TensorProto.FLOAT),
                      helper.make_node("Mul", [name + "_xs", name + "_ws"], [name + "_s"]),
                      helper.make_node("Mul", [name + "_accf", name + "_s"], [name + "_mm"]),
                      helper.make_node("Add", [name + "_b", name + "_mm"], [name + "_y"])])
        return name + "_y"

    def heads_of(x, name, perm):
        nodes.extend([helper.make_node("Reshape", [x, "heads_shape"], [name + "_r"]),
                      helper.make_node("Transpose", [name + "_r"], [name + "_t"], perm=perm)])
        return name + "_t"

    ln1, i1 = _torch_layer_norm("ln1_", "x", d, 97)
    nodes.extend(ln1)
    inits.extend(i1)
    q = heads_of(linear("q", "ln1_y", d, d), "qh", [0, 2, 1, 3])
    k = heads_of(linear("k", "ln1_y", d, d), "kh", [0, 2, 3, 1])
    v = heads_of(linear("v", "ln1_y", d, d), "vh", [0, 2, 1, 3])
    nodes.extend([helper.make_node("Mul", [q, "qk_scale"], ["qs"]), helper.make_node("Mul", [k, "qk_scale"], ["ks"]),
                  helper.make_node("MatMul", ["qs", "ks"], ["scores"]),
                  helper.make_node("Softmax", ["scores"], ["probs"], axis=-1),
                  helper.make_node("MatMul", ["probs", v], ["ctx"]),
                  helper.make_node("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
                  helper.make_node("Reshape", ["ctx_t", "model_shape"], ["ctx_r"])])
    nodes.append(helper.make_node("Add", ["x", linear("o", "ctx_r", d, d)], ["x1"]))
    ln2, i2 = _torch_layer_norm("ln2_", "x1", d, 98)
    nodes.extend(ln2)
    inits.extend(i2)
    nodes.extend(_erf_gelu("g_", linear("fc1", "ln2_y", d, ff)))
    nodes.append(helper.make_node("Add", ["x1", linear("fc2", "g_y", ff, d)], ["y"]))
    x = (rs.randn(1, t, d) * 1.5).astype(np.float32)
    # The float results between the quantizations are outputs too: a last-bit difference there is caught even where
    # it moves no step of this small block.
    outs = [vi("y", TensorProto.FLOAT, [1, t, d])] + [vi(n, TensorProto.FLOAT, None) for n in ("ln1_y", "scores", "g_y")]
    return (model(nodes, [vi("x", TensorProto.FLOAT, [1, t, d])], outs, 14, inits=inits), [("x", x)])


@case
def ort_all_qdq_add():
    """Residual adds of a QDQ model (DequantizeLinear of both operands, Add, QuantizeLinear; uint8, int8, and a Relu
    before a QuantizeLinear at its type's minimum), over all 65536 operand pairs. ONNX Runtime's level 'all' runs them
    as com.microsoft QLinearAdd, whose arithmetic moves a step at some pairs from dequantize, add, quantize."""
    nodes, inits, inputs, outputs, data = [], [], [], [], []
    rs = np.random.RandomState(120)
    for k, (t8, relu) in enumerate(((np.uint8, False), (np.int8, False), (np.uint8, True), (np.int8, True))):
        lo = -128 if t8 is np.int8 else 0
        tp = TensorProto.INT8 if t8 is np.int8 else TensorProto.UINT8
        sa, sb, sy = (np.float32(rs.uniform(0.004, 0.08)) for _ in range(3))
        za, zb = (int(v) + lo for v in rs.randint(0, 256, 2))
        zy = lo if relu else int(rs.randint(0, 256)) + lo
        p = "a%d_" % k
        inits += [const(p + "sa", np.array(sa)), const(p + "sb", np.array(sb)), const(p + "sy", np.array(sy)),
                  const(p + "za", np.array(za, t8)), const(p + "zb", np.array(zb, t8)), const(p + "zy", np.array(zy, t8))]
        nodes += [helper.make_node("DequantizeLinear", [p + "x", p + "sa", p + "za"], [p + "dx"]),
                  helper.make_node("DequantizeLinear", [p + "x2", p + "sb", p + "zb"], [p + "dx2"]),
                  helper.make_node("Add", [p + "dx", p + "dx2"], [p + "s"])]
        if relu:
            nodes.append(helper.make_node("Relu", [p + "s"], [p + "r"]))
        nodes.append(helper.make_node("QuantizeLinear", [p + ("r" if relu else "s"), p + "sy", p + "zy"], [p + "y"]))
        inputs += [vi(p + "x", tp, [65536]), vi(p + "x2", tp, [65536])]
        outputs.append(vi(p + "y", tp, None))
        data += [(p + "x", (np.repeat(np.arange(256), 256) + lo).astype(t8)),
                 (p + "x2", (np.tile(np.arange(256), 256) + lo).astype(t8))]
    return model(nodes, inputs, outputs, 13, inits=inits), data


@case
def ort_all_qdq_mul():
    """Products of a QDQ model (DequantizeLinear of both operands, Mul, QuantizeLinear; uint8 and int8), over all 65536
    operand pairs. ONNX Runtime's level 'all' runs them as com.microsoft QLinearMul, whose arithmetic (the debiased
    operands' integer product times s_a * s_b / s_y, plus z_y) moves a step at some pairs from dequantize, multiply,
    quantize."""
    nodes, inits, inputs, outputs, data = [], [], [], [], []
    # Scales and zero points at which the two arithmetics differ (247 and some pairs of 65536), and a calibrated-like set.
    for k, (t8, sa, sb, sy, za, zb, zy) in enumerate(((np.uint8, 0.03, 0.05, 0.04, 120, 90, 10),
                                                      (np.int8, 0.02, 0.03, 0.05, 3, -7, 0),
                                                      (np.uint8, 0.0187, 1 / 255.0, 0.0093, 131, 0, 17))):
        lo = -128 if t8 is np.int8 else 0
        tp = TensorProto.INT8 if t8 is np.int8 else TensorProto.UINT8
        sa, sb, sy = np.float32(sa), np.float32(sb), np.float32(sy)
        p = "m%d_" % k
        inits += [const(p + "sa", np.array(sa)), const(p + "sb", np.array(sb)), const(p + "sy", np.array(sy)),
                  const(p + "za", np.array(za, t8)), const(p + "zb", np.array(zb, t8)), const(p + "zy", np.array(zy, t8))]
        nodes += [helper.make_node("DequantizeLinear", [p + "x", p + "sa", p + "za"], [p + "dx"]),
                  helper.make_node("DequantizeLinear", [p + "x2", p + "sb", p + "zb"], [p + "dx2"]),
                  helper.make_node("Mul", [p + "dx", p + "dx2"], [p + "s"]),
                  helper.make_node("QuantizeLinear", [p + "s", p + "sy", p + "zy"], [p + "y"])]
        inputs += [vi(p + "x", tp, [65536]), vi(p + "x2", tp, [65536])]
        outputs.append(vi(p + "y", tp, None))
        data += [(p + "x", (np.repeat(np.arange(256), 256) + lo).astype(t8)),
                 (p + "x2", (np.tile(np.arange(256), 256) + lo).astype(t8))]
    return model(nodes, inputs, outputs, 13, inits=inits), data


@case
def ort_all_qdq_softmax():
    """Softmax between a DequantizeLinear and a QuantizeLinear (uint8 at 1/255, int8 at an odd scale, uint8 along axis
    1). ONNX Runtime's level 'all' fuses each into com.microsoft QLinearSoftmax, whose kernel (a table of exps from
    the row's maximum, a float sum, times floor(1 / y_scale)) is a step off dequantize, softmax, quantize at up to a
    sixth of the elements."""
    nodes, inits, inputs, outputs, data = [], [], [], [], []
    rs = np.random.RandomState(130)
    for k, (t8, ys, yz, axis) in enumerate(((np.uint8, 1 / 255.0, 0, -1), (np.int8, 0.0071, -20, -1),
                                            (np.uint8, 1 / 255.0, 0, 1))):
        lo = -128 if t8 is np.int8 else 0
        tp = TensorProto.INT8 if t8 is np.int8 else TensorProto.UINT8
        p = "s%d_" % k
        inits += [const(p + "xs", np.array(0.043, np.float32)), const(p + "xz", np.array(rs.randint(0, 256) + lo, t8)),
                  const(p + "ys", np.array(ys, np.float32)), const(p + "yz", np.array(yz, t8))]
        nodes += [helper.make_node("DequantizeLinear", [p + "x", p + "xs", p + "xz"], [p + "d"]),
                  helper.make_node("Softmax", [p + "d"], [p + "s"], axis=axis),
                  helper.make_node("QuantizeLinear", [p + "s", p + "ys", p + "yz"], [p + "y"])]
        inputs.append(vi(p + "x", tp, [4, 6, 37]))
        outputs.append(vi(p + "y", tp, None))
        data.append((p + "x", (rs.randint(0, 256, size=[4, 6, 37]) + lo).astype(t8)))
    return model(nodes, inputs, outputs, 13, inits=inits), data


@case
def ort_all_qdq_average_pool():
    """AveragePool between a DequantizeLinear and a QuantizeLinear (uint8 3x3 with pads, int8 3x3 stride 2 with
    ceil_mode and count_include_pad). ONNX Runtime's level 'all' fuses each into com.microsoft QLinearAveragePool,
    which quantizes y / y_scale + y_zero_point: a step off dequantize, pool, quantize at some elements."""
    nodes, inits, inputs, outputs, data = [], [], [], [], []
    rs = np.random.RandomState(140)
    for k, (t8, attrs) in enumerate(((np.uint8, dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
                                     (np.int8, dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2],
                                                    ceil_mode=1, count_include_pad=1)))):
        lo = -128 if t8 is np.int8 else 0
        tp = TensorProto.INT8 if t8 is np.int8 else TensorProto.UINT8
        p = "p%d_" % k
        inits += [const(p + "xs", np.array(0.021, np.float32)), const(p + "xz", np.array(rs.randint(0, 256) + lo, t8)),
                  const(p + "ys", np.array(0.011, np.float32)), const(p + "yz", np.array(rs.randint(0, 256) + lo, t8))]
        nodes += [helper.make_node("DequantizeLinear", [p + "x", p + "xs", p + "xz"], [p + "d"]),
                  helper.make_node("AveragePool", [p + "d"], [p + "a"], **attrs),
                  helper.make_node("QuantizeLinear", [p + "a", p + "ys", p + "yz"], [p + "y"])]
        inputs.append(vi(p + "x", tp, [1, 64, 16, 16]))
        outputs.append(vi(p + "y", tp, None))
        data.append((p + "x", (rs.randint(0, 256, size=[1, 64, 16, 16]) + lo).astype(t8)))
    return model(nodes, inputs, outputs, 13, inits=inits), data


@case
def ort_all_bilinear_resize():
    """Bilinear Resize of [N, C, H, W] over H and W, as segmentation and detection heads upsample: half_pixel by 2
    and to given sizes (scales that are no power of two), align_corners to sizes, asymmetric by 1.5, a quantized one
    between a DequantizeLinear and a QuantizeLinear of one scale. ONNX Runtime interpolates in 2-D with float coordinates and
    weights; separable passes round otherwise, in the last bits and, once quantized, by a step."""
    nodes = [helper.make_node("Resize", ["x", "", "s2"], ["y0"], mode="linear"),
             helper.make_node("Resize", ["x", "", "", "sizes"], ["y1"], mode="linear",
                              coordinate_transformation_mode="align_corners"),
             helper.make_node("Resize", ["x", "", "s15"], ["y2"], mode="linear",
                              coordinate_transformation_mode="asymmetric"),
             helper.make_node("DequantizeLinear", ["q", "qs", "qz"], ["dq"]),
             helper.make_node("Resize", ["dq", "", "s2"], ["r3"], mode="linear"),
             helper.make_node("QuantizeLinear", ["r3", "qs", "qz"], ["y3"]),
             helper.make_node("Resize", ["x", "", "", "sizes2"], ["y4"], mode="linear")]
    inits = [const("s2", np.array([1, 1, 2, 2], np.float32)), const("s15", np.array([1, 1, 1.5, 1.5], np.float32)),
             const("sizes", np.array([2, 8, 37, 45], np.int64)), const("sizes2", np.array([2, 8, 26, 41], np.int64)),
             const("qs", np.array(0.021, np.float32)),
             const("qz", np.array(117, np.uint8))]
    q = np.random.RandomState(151).randint(0, 256, size=[1, 16, 20, 24]).astype(np.uint8)
    return (model(nodes, [vi("x", TensorProto.FLOAT, [2, 8, 15, 17]), vi("q", TensorProto.UINT8, [1, 16, 20, 24])],
                  [vi("y0", TensorProto.FLOAT, None), vi("y1", TensorProto.FLOAT, None),
                   vi("y2", TensorProto.FLOAT, None), vi("y3", TensorProto.UINT8, None),
                   vi("y4", TensorProto.FLOAT, None)], 13, inits=inits),
            [("x", rand([2, 8, 15, 17], 150, -3, 3)), ("q", q)])


@case
def ort_all_qdq_activation_matmul():
    """A MatMul of two dequantized uint8 activations, quantized (attention scores of a QDQ transformer). ONNX
    Runtime's level 'all' runs it as QLinearMatMul, an exact integer product rounded once; the float MatMul of the
    dequantized values rounds at every add, and here moves one element by a step."""
    rng = np.random.default_rng(43)
    kk = 64
    az, bz, yz = (int(rng.integers(0, 256)) for _ in range(3))
    inits = [const("as", np.array(0.031, np.float32)), const("az", np.array(az, np.uint8)),
             const("bs", np.array(0.027, np.float32)), const("bz", np.array(bz, np.uint8)),
             const("ys", np.array(0.9 * np.sqrt(kk) / 8, np.float32)), const("yz", np.array(yz, np.uint8))]
    nodes = [helper.make_node("DequantizeLinear", ["a", "as", "az"], ["da"]),
             helper.make_node("DequantizeLinear", ["b", "bs", "bz"], ["db"]),
             helper.make_node("MatMul", ["da", "db"], ["m"]),
             helper.make_node("QuantizeLinear", ["m", "ys", "yz"], ["y"])]
    a = rng.integers(0, 256, size=[1, 4, 48, kk]).astype(np.uint8)
    b = rng.integers(0, 256, size=[1, 4, kk, 48]).astype(np.uint8)
    return (model(nodes, [vi("a", TensorProto.UINT8, [1, 4, 48, kk]), vi("b", TensorProto.UINT8, [1, 4, kk, 48])],
                  [vi("y", TensorProto.UINT8, None)], 13, inits=inits), [("a", a), ("b", b)])


def write(out, name):
    m, inputs = CASES[name]()
    d = os.path.join(out, name)
    data = os.path.join(d, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(m.SerializeToString())
    for i, (n, a) in enumerate(inputs):
        with open(os.path.join(data, "input_%d.pb" % i), "wb") as f:
            f.write(numpy_helper.from_array(a, n).SerializeToString())


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    names = argv[2:] or sorted(CASES)
    for n in names:
        if n not in CASES:
            sys.exit("gen_quirks: no case '%s' (cases: %s)" % (n, ", ".join(sorted(CASES))))
        write(argv[1], n)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
