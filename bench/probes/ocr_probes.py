#!/usr/bin/python3
"""Probe of a PP-OCRv3-style text recogniser, shaped as paddle2onnx writes it at opset 14 (random weights):

  ocr_probes.py OUT.onnx

MobileNetV1Enhance x0.5 (depthwise separable blocks, HardSwish, SE), an SVTR neck (two attention blocks whose
q, k, v come from Gathers of one packed projection, decomposed LayerNorms, Swish), and a CTC head of 6625 classes;
input [batch, 3, 48, width] with both dims symbolic. Not in the zoo (no checked-in references): compare with ONNX
Runtime through tests/e2e/ort_reference.js and bench/ort_bench.js.
"""
import os
import sys

import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "zoo"))
from gen_zoo import ZooBuilder, conv, conv_bn_act, squeeze_excite, layer_norm_decomposed, linear, FLOAT  # noqa: E402
import gen_models  # noqa: E402


def swish(b, x):
    return b.node("Mul", [x, b.node("Sigmoid", [x])])

def dws(b, x, name, cin, cout, k, stride, se):
    y = conv_bn_act(b, x, name + ".dw", cin, cin, k, stride=stride, group=cin, act="hardswish", hs_op=True)
    if se:
        y = squeeze_excite(b, y, name + ".se", cin)
    return conv_bn_act(b, y, name + ".pw", cin, cout, 1, act="hardswish", hs_op=True)

def gen_models_bn(b, x, name, c):
    return gen_models.batchnorm(b, x, name, c)


def build(ncls=6625):
    b = ZooBuilder("svtr", seed=9100, opset=14)
    x = b.add_input("x", FLOAT, ["p2o.DynamicDimension.0", 3, 48, "p2o.DynamicDimension.1"])
    y = conv_bn_act(b, x, "conv1", 3, 16, 3, stride=2, act="hardswish", hs_op=True)
    cfg = [(16, 32, 3, 1, False), (32, 64, 3, (2, 1), False), (64, 64, 3, 1, False), (64, 128, 3, (2, 1), False),
           (128, 128, 3, 1, False), (128, 256, 3, (2, 1), False)] + [(256, 256, 5, 1, False)] * 5 + \
          [(256, 512, 5, (2, 1), True), (512, 512, 5, 1, True)]
    for i, (ci, co, k, s, se) in enumerate(cfg):
        y = dws(b, y, "block%d" % i, ci, co, k, s, se)
    y = b.node("AveragePool", [y], kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 0, 0])  # [B, 512, 1, W/4]
    h = y
    # SVTR neck
    z = swish(b, gen_models_bn(b, conv(b, y, "neck.conv1", 512, 64, 3), "neck.conv1_bn", 64))
    z = swish(b, gen_models_bn(b, conv(b, z, "neck.conv2", 64, 120, 1), "neck.conv2_bn", 120))
    shp = b.node("Shape", [z])
    t = b.node("Reshape", [b.node("Transpose", [z], perm=[0, 2, 3, 1]), b.i64([0, -1, 120])])  # [B, HW, 120]
    for d in range(2):
        p = "neck.svtr.%d" % d
        n1 = layer_norm_decomposed(b, t, p + ".norm1", 120, 1e-5)
        qkv = linear(b, n1, p + ".qkv", 120, 360)
        qkv = b.node("Transpose", [b.node("Reshape", [qkv, b.i64([0, -1, 3, 8, 15])])], perm=[2, 0, 3, 1, 4])
        q = b.node("Gather", [qkv, b.i64(0)], axis=0)
        k = b.node("Gather", [qkv, b.i64(1)], axis=0)
        v = b.node("Gather", [qkv, b.i64(2)], axis=0)
        att = b.node("MatMul", [b.node("Mul", [q, b.f32(15 ** -0.5)]), b.node("Transpose", [k], perm=[0, 1, 3, 2])])
        att = b.node("Softmax", [att], axis=-1)
        o = b.node("Transpose", [b.node("MatMul", [att, v])], perm=[0, 2, 1, 3])
        o = linear(b, b.node("Reshape", [o, b.i64([0, -1, 120])]), p + ".proj", 120, 120)
        t = b.node("Add", [t, o])
        n2 = layer_norm_decomposed(b, t, p + ".norm2", 120, 1e-5)
        m = linear(b, swish(b, linear(b, n2, p + ".fc1", 120, 240)), p + ".fc2", 240, 120)
        t = b.node("Add", [t, m])
    t = layer_norm_decomposed(b, t, "neck.norm", 120, 1e-6)
    # back to [B, 120, 1, W'] from the conv's shape
    hw = b.node("Concat", [b.node("Slice", [shp, b.i64([0]), b.i64([1])]), b.i64([1]), b.node("Slice", [shp, b.i64([3]), b.i64([4])]), b.i64([120])], axis=0)
    z = b.node("Transpose", [b.node("Reshape", [t, hw])], perm=[0, 3, 1, 2])
    z = swish(b, gen_models_bn(b, conv(b, z, "neck.conv3", 120, 512, 1), "neck.conv3_bn", 512))
    z = b.node("Concat", [h, z], axis=1)
    z = swish(b, gen_models_bn(b, conv(b, z, "neck.conv4", 1024, 64, 3), "neck.conv4_bn", 64))
    z = swish(b, gen_models_bn(b, conv(b, z, "neck.conv1x1", 64, 64, 1), "neck.conv1x1_bn", 64))
    seq = b.node("Transpose", [b.node("Squeeze", [z, b.i64([2])])], perm=[0, 2, 1])  # [B, W', 64]
    logits = linear(b, seq, "head.fc", 64, ncls, scale=4.0)
    out = b.node("Softmax", [logits], axis=2)
    b.add_output(out, "softmax_0.tmp_0", FLOAT, ["p2o.DynamicDimension.2", "p2o.DynamicDimension.3", ncls])
    return b.model()

if __name__ == "__main__":
    m = build()
    onnx.checker.check_model(m)
    onnx.save(m, sys.argv[1])
    print("wrote", sys.argv[1], len(m.graph.node), "nodes")
