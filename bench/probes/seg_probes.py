#!/usr/bin/python3
"""Probes of segmentation nets no one here trained, shaped as PyTorch exports them at opset 13 (random weights):

  seg_probes.py OUT_DIR      writes OUT_DIR/deeplab.onnx and OUT_DIR/u2netp.onnx

- deeplab: DeepLabV3-style (MobileNetV2 at output stride 16, dilated depthwise convolutions, ASPP at rates 6/12/18
  with image pooling, bilinear Resize to the input size from a Shape chain);
- u2netp: U^2-Net-style (RSU blocks, dilation 2, ceil-mode pools, bilinear Resizes to the skips' sizes, two sigmoid
  outputs).

Not in the zoo (no checked-in references): run them against ONNX Runtime with tests/e2e/ort_reference.js and
bench/ort_bench.js, and their reduced-precision twins with bench/precision/convert.py and qdq_check.py (the
twenty-fifth and twenty-sixth sessions' figures in bench/RESULTS.md).
"""
import os
import sys

import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "zoo"))
from gen_zoo import ZooBuilder, conv, FLOAT  # noqa: E402
import gen_models  # noqa: E402


def cbr(b, x, name, cin, cout, k, stride=1, group=1, dil=1, act="Relu"):
    y = conv(b, x, name, cin, cout, k, stride=stride, group=group, dil=dil, pad=None if dil == 1 else (dil * (k // 2),) * 2)
    y = gen_models.batchnorm(b, y, name + ".bn", cout)
    if act == "Relu6":
        return b.node("Clip", [y, b.f32(0.0), b.f32(6.0)])
    if act:
        return b.node(act, [y])
    return y

def interp(b, x, like):
    # F.interpolate(x, size=like.shape[-2:], mode='bilinear', align_corners=False) as torch exports at opset 13
    sh = b.node("Shape", [like])
    hw = b.node("Slice", [sh, b.i64([2]), b.i64([4]), b.i64([0])])
    nc = b.node("Slice", [b.node("Shape", [x]), b.i64([0]), b.i64([2]), b.i64([0])])
    sizes = b.node("Concat", [nc, hw], axis=0)
    return b.node("Resize", [x, "", "", sizes], mode="linear", coordinate_transformation_mode="pytorch_half_pixel")

def build_deeplab():
    b = ZooBuilder("deeplab", seed=9101, opset=13)
    x = b.add_input("input", FLOAT, ["batch", 3, "height", "width"])
    y = cbr(b, x, "stem", 3, 32, 3, stride=2, act="Relu6")
    cin = 32
    # (t, c, n, s, dil) MobileNetV2 with output stride 16 (last stages dilated)
    cfg = [(1, 16, 1, 1, 1), (6, 24, 2, 2, 1), (6, 32, 3, 2, 1), (6, 64, 4, 2, 1), (6, 96, 3, 1, 1), (6, 160, 3, 1, 2), (6, 320, 1, 1, 2)]
    i = 0
    for t, c, n, s, d in cfg:
        for j in range(n):
            stride = s if j == 0 else 1
            mid = cin * t
            h = y
            if t != 1:
                h = cbr(b, h, "b%d.exp" % i, cin, mid, 1, act="Relu6")
            h = cbr(b, h, "b%d.dw" % i, mid, mid, 3, stride=stride, group=mid, dil=d, act="Relu6")
            h = cbr(b, h, "b%d.proj" % i, mid, c, 1, act=None)
            if stride == 1 and cin == c:
                h = b.node("Add", [y, h])
            y, cin = h, c
            i += 1
    feat = y
    branches = [cbr(b, feat, "aspp.0", cin, 256, 1)]
    for r, rate in enumerate((6, 12, 18)):
        branches.append(cbr(b, feat, "aspp.%d" % (r + 1), cin, 256, 3, dil=rate))
    gp = b.node("GlobalAveragePool", [feat])
    gp = cbr(b, gp, "aspp.pool", cin, 256, 1)
    branches.append(interp(b, gp, feat))
    y = b.node("Concat", branches, axis=1)
    y = cbr(b, y, "aspp.project", 5 * 256, 256, 1)
    y = cbr(b, y, "head.0", 256, 256, 3)
    y = conv(b, y, "head.cls", 256, 21, 1, bias=True, gain=1.0)
    y = interp(b, y, x)
    b.add_output(y, "out", FLOAT, ["batch", 21, "height", "width"])
    return b.model()

def rsu(b, x, name, cin, mid, cout, depth):
    hx = cbr(b, x, name + ".in", cin, cout, 3)
    hs = [cbr(b, hx, name + ".c1", cout, mid, 3)]
    h = hs[0]
    for k in range(2, depth):
        h = b.node("MaxPool", [h], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)
        h = cbr(b, h, name + ".c%d" % k, mid, mid, 3)
        hs.append(h)
    h = cbr(b, h, name + ".c%dd" % depth, mid, mid, 3, dil=2)
    for k in range(depth - 1, 0, -1):
        cat = b.node("Concat", [h, hs[k - 1]], axis=1)
        h = cbr(b, cat, name + ".d%d" % k, 2 * mid, mid if k > 1 else cout, 3)
        if k > 1:
            h = interp(b, h, hs[k - 2])
    return b.node("Add", [h, hx])

def build_u2netp():
    b = ZooBuilder("u2netp", seed=9102, opset=13)
    x = b.add_input("input", FLOAT, ["batch", 3, "height", "width"])
    e1 = rsu(b, x, "s1", 3, 16, 64, 7)
    h = b.node("MaxPool", [e1], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)
    e2 = rsu(b, h, "s2", 64, 16, 64, 6)
    h = b.node("MaxPool", [e2], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)
    e3 = rsu(b, h, "s3", 64, 16, 64, 5)
    h = interp(b, e3, e2)
    d2 = rsu(b, b.node("Concat", [h, e2], axis=1), "d2", 128, 16, 64, 6)
    h = interp(b, d2, e1)
    d1 = rsu(b, b.node("Concat", [h, e1], axis=1), "d1", 128, 16, 64, 7)
    s1 = conv(b, d1, "side1", 64, 1, 3, bias=True, gain=1.0)
    s2 = interp(b, conv(b, d2, "side2", 64, 1, 3, bias=True, gain=1.0), s1)
    f = conv(b, b.node("Concat", [s1, s2], axis=1), "outconv", 2, 1, 1, bias=True, gain=1.0)
    b.add_output(b.node("Sigmoid", [f]), "d0", FLOAT, ["batch", 1, "height", "width"])
    b.add_output(b.node("Sigmoid", [s1]), "d1", FLOAT, ["batch", 1, "height", "width"])
    return b.model()

if __name__ == "__main__":
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, fn in (("deeplab", build_deeplab), ("u2netp", build_u2netp)):
        m = fn()
        onnx.checker.check_model(m, full_check=True)
        onnx.save(m, os.path.join(out, name + ".onnx"))
        print("wrote", name)
