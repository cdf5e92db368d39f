#!/usr/bin/python3
"""Small models for the cases that once broke compilers built around external engines, each written as an ONNX
backend test case (model.onnx + test_data_set_0 with inputs and numpy-computed expected outputs):

    empty             no nodes: the graph output is the graph input
    const_output      one output is a constant (an initializer), the other computed
    input_passthrough a graph input that is also a graph output and feeds other nodes
    all_external      every node runs on the example backend (one region, no native code)
    no_external       nothing the example backend claims: every node stays native
    shared_constant   one weight read by two example regions separated by a native op (stored once)
    if_body           an If whose branches hold example-backend regions (placement recurses into bodies)
    conv_stack        Conv+Relu, Conv+Relu, MaxPool, 1x1 Conv, GlobalAveragePool: a CNN an engine plugin (oneDNN,
                      XNNPACK) runs whole, with no native code at all

    make_edge_models.py OUT_DIR
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


def write_case(root, name, graph, inputs, outputs, opset=17):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="tessera-tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    d = os.path.join(root, name)
    ds = os.path.join(d, "test_data_set_0")
    os.makedirs(ds, exist_ok=True)
    onnx.save(model, os.path.join(d, "model.onnx"))
    for i, (n, a) in enumerate(inputs):
        open(os.path.join(ds, "input_%d.pb" % i), "wb").write(numpy_helper.from_array(a, n).SerializeToString())
    for i, (n, a) in enumerate(outputs):
        open(os.path.join(ds, "output_%d.pb" % i), "wb").write(numpy_helper.from_array(a, n).SerializeToString())


def vi(name, shape):
    return helper.make_tensor_value_info(name, F, shape)


def conv2d(x, w, b, pad):
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = h + 2 * pad - kh + 1, wd + 2 * pad - kw + 1
    y = np.zeros((n, o, oh, ow), dtype=np.float64)
    for i in range(kh):
        for j in range(kw):
            y += np.einsum("nchw,oc->nohw", xp[:, :, i:i + oh, j:j + ow], w[:, :, i, j])
    return (y + b.reshape(1, o, 1, 1)).astype(np.float32)


def sigmoid(a):
    return 1.0 / (1.0 + np.exp(-a))


def main(root):
    rng = np.random.default_rng(2026)
    x = rng.standard_normal((2, 3)).astype(np.float32)

    g = helper.make_graph([], "empty", [vi("x", [2, 3])], [vi("x", [2, 3])])
    write_case(root, "empty", g, [("x", x)], [("x", x)])

    c = rng.standard_normal((4,)).astype(np.float32)
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "const_output", [vi("x", [2, 3])],
                          [vi("y", [2, 3]), vi("c", [4])], initializer=[numpy_helper.from_array(c, "c")])
    write_case(root, "const_output", g, [("x", x)], [("y", np.maximum(x, 0)), ("c", c)])

    nodes = [helper.make_node("Mul", ["x", "x"], ["sq"], name="square"),
             helper.make_node("Sigmoid", ["sq"], ["s"], name="sig"),
             helper.make_node("Add", ["s", "x"], ["z"], name="add")]
    g = helper.make_graph(nodes, "input_passthrough", [vi("x", [2, 3])], [vi("x", [2, 3]), vi("z", [2, 3])])
    write_case(root, "input_passthrough", g, [("x", x)], [("x", x), ("z", sigmoid(x * x) + x)])

    w = rng.standard_normal((3, 5)).astype(np.float32)
    b = rng.standard_normal((5,)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
             helper.make_node("Add", ["m", "b"], ["a"], name="bias"),
             helper.make_node("Tanh", ["a"], ["t"], name="tanh"),
             helper.make_node("Mul", ["t", "t"], ["y"], name="sq")]
    g = helper.make_graph(nodes, "all_external", [vi("x", [2, 3])], [vi("y", [2, 5])],
                          initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    t = np.tanh(x @ w + b)
    write_case(root, "all_external", g, [("x", x)], [("y", t * t)])

    nodes = [helper.make_node("Transpose", ["x"], ["xt"], name="tr", perm=[1, 0]),
             helper.make_node("Softmax", ["xt"], ["y"], name="softmax", axis=1)]
    g = helper.make_graph(nodes, "no_external", [vi("x", [2, 3])], [vi("y", [3, 2])])
    xt = x.T
    e = np.exp(xt - xt.max(axis=1, keepdims=True))
    write_case(root, "no_external", g, [("x", x)], [("y", (e / e.sum(axis=1, keepdims=True)).astype(np.float32))])

    ws = rng.standard_normal((3, 3)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m1"], name="mm1"),
             helper.make_node("Relu", ["m1"], ["r1"], name="relu1"),
             helper.make_node("Softmax", ["r1"], ["s"], name="softmax", axis=1),
             helper.make_node("MatMul", ["s", "w"], ["m2"], name="mm2"),
             helper.make_node("Relu", ["m2"], ["y"], name="relu2")]
    g = helper.make_graph(nodes, "shared_constant", [vi("x", [2, 3])], [vi("y", [2, 3])],
                          initializer=[numpy_helper.from_array(ws, "w")])
    r1 = np.maximum(x @ ws, 0)
    e = np.exp(r1 - r1.max(axis=1, keepdims=True))
    s = e / e.sum(axis=1, keepdims=True)
    write_case(root, "shared_constant", g, [("x", x)], [("y", np.maximum(s @ ws, 0).astype(np.float32))])

    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["tr"], name="then_relu"),
                                helper.make_node("Add", ["tr", "x"], ["then_out"], name="then_add")],
                               "then_branch", [], [vi("then_out", [2, 3])])
    else_g = helper.make_graph([helper.make_node("Sigmoid", ["x"], ["es"], name="else_sig"),
                                helper.make_node("Mul", ["es", "x"], ["else_out"], name="else_mul")],
                               "else_branch", [], [vi("else_out", [2, 3])])
    nodes = [helper.make_node("If", ["cond"], ["y"], name="branch", then_branch=then_g, else_branch=else_g)]
    g = helper.make_graph(nodes, "if_body", [helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
                                             vi("x", [2, 3])], [vi("y", [2, 3])])
    write_case(root, "if_body", g, [("cond", np.array(True)), ("x", x)], [("y", np.maximum(x, 0) + x)])
    write_case(root, "if_body_else", g, [("cond", np.array(False)), ("x", x)], [("y", sigmoid(x) * x)])

    img = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    w1 = (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)
    b1 = rng.standard_normal((8,)).astype(np.float32)
    w2 = (rng.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32)
    b2 = rng.standard_normal((8,)).astype(np.float32)
    w3 = (rng.standard_normal((4, 8, 1, 1)) * 0.3).astype(np.float32)
    b3 = rng.standard_normal((4,)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["img", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("MaxPool", ["r2"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p", "w3", "b3"], ["c3"], name="conv3"),
             helper.make_node("GlobalAveragePool", ["c3"], ["y"], name="gap")]
    g = helper.make_graph(nodes, "conv_stack", [vi("img", [1, 3, 8, 8])], [vi("y", [1, 4, 1, 1])],
                          initializer=[numpy_helper.from_array(a, n) for n, a in
                                       [("w1", w1), ("b1", b1), ("w2", w2), ("b2", b2), ("w3", w3), ("b3", b3)]])
    r1 = np.maximum(conv2d(img, w1, b1, 1), 0)
    r2 = np.maximum(conv2d(r1, w2, b2, 1), 0)
    p = r2.reshape(1, 8, 4, 2, 4, 2).max(axis=(3, 5))
    c3 = conv2d(p, w3, b3, 0)
    write_case(root, "conv_stack", g, [("img", img)], [("y", c3.mean(axis=(2, 3), keepdims=True))])


if __name__ == "__main__":
    main(sys.argv[1])
