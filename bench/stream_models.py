#!/usr/bin/env python3
"""Models whose input size changes from one request to the next, for bench/shape_streams.py.

  stream_models.py OUT_DIR

writes (random weights, He-scaled so activations stay in range; a fixed seed):
  crnn.onnx      a CRNN-style text-line recogniser: x float [1, 3, 48, W] -> per-column class scores [1, W/4, 96]
                 (conv/pool stack that folds the height away, then a per-column classifier and Softmax)
  detector.onnx  a single-scale detector: x float [1, 3, H, W] -> [1, 21, H/16, W/16] (stride-2 conv backbone,
                 1x1 head, Sigmoid)
Both declare their varying dims symbolic ("W", "H"), as exporters do.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class Builder:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.n = [], [], 0

    def name(self, base):
        self.n += 1
        return f"{base}_{self.n}"

    def conv(self, x, cin, cout, k, stride=(1, 1), pad=None, relu=True):
        kh, kw = k
        pad = pad if pad is not None else [kh // 2, kw // 2, kh // 2, kw // 2]
        w = self.rng.normal(0, np.sqrt(2.0 / (cin * kh * kw)), (cout, cin, kh, kw)).astype(np.float32)
        b = self.rng.normal(0, 0.05, cout).astype(np.float32)
        wn, bn, y = self.name("w"), self.name("b"), self.name("conv")
        self.inits += [numpy_helper.from_array(w, wn), numpy_helper.from_array(b, bn)]
        self.nodes.append(helper.make_node("Conv", [x, wn, bn], [y], kernel_shape=list(k), strides=list(stride),
                                           pads=pad))
        if not relu:
            return y
        r = self.name("relu")
        self.nodes.append(helper.make_node("Relu", [y], [r]))
        return r

    def pool(self, x, k, s):
        y = self.name("pool")
        self.nodes.append(helper.make_node("MaxPool", [x], [y], kernel_shape=list(k), strides=list(s)))
        return y

    def const(self, arr, base):
        n = self.name(base)
        self.inits.append(numpy_helper.from_array(arr, n))
        return n

    def model(self, name, inputs, outputs):
        g = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        m.ir_version = 8
        return m


def crnn():
    b = Builder(11)
    x = b.conv("x", 3, 32, (3, 3))
    x = b.pool(x, (2, 2), (2, 2))            # 24 x W/2
    x = b.conv(x, 32, 64, (3, 3))
    x = b.pool(x, (2, 2), (2, 2))            # 12 x W/4
    x = b.conv(x, 64, 128, (3, 3))
    x = b.conv(x, 128, 128, (3, 3))
    x = b.pool(x, (2, 1), (2, 1))            # 6 x W/4
    x = b.conv(x, 128, 256, (3, 3))
    x = b.pool(x, (2, 1), (2, 1))            # 3 x W/4
    x = b.conv(x, 256, 256, (3, 1), pad=[0, 0, 0, 0])  # 1 x W/4
    axes = b.const(np.array([2], np.int64), "axes")
    sq = b.name("squeeze")
    b.nodes.append(helper.make_node("Squeeze", [x, axes], [sq]))
    t = b.name("cols")
    b.nodes.append(helper.make_node("Transpose", [sq], [t], perm=[0, 2, 1]))  # [1, W/4, 256]
    w = b.const(b.rng.normal(0, np.sqrt(1.0 / 256), (256, 96)).astype(np.float32), "fc_w")
    bias = b.const(b.rng.normal(0, 0.05, 96).astype(np.float32), "fc_b")
    mm, add = b.name("fc"), b.name("fc_add")
    b.nodes += [helper.make_node("MatMul", [t, w], [mm]), helper.make_node("Add", [mm, bias], [add]),
                helper.make_node("Softmax", [add], ["y"], axis=-1)]
    return b.model("crnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 48, "W"])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "T", 96])])


def detector():
    b = Builder(12)
    x = b.conv("x", 3, 16, (3, 3), (2, 2))
    x = b.conv(x, 16, 32, (3, 3), (2, 2))
    x = b.conv(x, 32, 64, (3, 3), (2, 2))
    x = b.conv(x, 64, 64, (3, 3))
    x = b.conv(x, 64, 128, (3, 3), (2, 2))
    h = b.conv(x, 128, 21, (1, 1), relu=False)
    b.nodes.append(helper.make_node("Sigmoid", [h], ["y"]))
    return b.model("detector", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "H", "W"])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 21, "h", "w"])])


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, fn in (("crnn", crnn), ("detector", detector)):
        m = fn()
        onnx.checker.check_model(m)
        onnx.save(m, os.path.join(out, name + ".onnx"))


if __name__ == "__main__":
    main()
