#!/usr/bin/python3
"""Probes of three audio nets not in the zoo, shaped as their exporters write them (random weights):

  audio_probes.py OUT_DIR      writes OUT_DIR/denoiser.onnx, dscnn.onnx, gru_kws.onnx, hifigan.onnx and istftnet.onnx

denoiser  a Demucs-style speech enhancer (facebookresearch/denoiser, torch.onnx at opset 13): the waveform is divided by
          its standard deviation, five encoder levels of Conv1d(k=8, s=4) + ReLU + Conv1d(1x1, 2C) + GLU (Split,
          Sigmoid, Mul), a two-layer causal LSTM of 768 over the bottleneck (batch_first through Transposes), five
          decoder levels that add the encoder's output cut to their length (Slice to Shape) and run Conv1d(1x1, 2C) +
          GLU + ConvTranspose1d(k=8, s=4) [+ ReLU]; input [1, 1, samples].
dscnn     the DS-CNN keyword spotter (ARM's ML-KWS, a Keras model through tf2onnx at opset 13): NHWC MFCC input
          [batch, 49, 10, 1], a Transpose to NCHW, Conv 10x4 / 2 to 64 channels with explicit asymmetric Pad (Keras
          'same'), BatchNorm folded to Mul + Add, four depthwise-separable blocks, ReduceMean over H and W, MatMul +
          Add, Softmax.
gru_kws   a GRU wake-word detector (torch.onnx at opset 13): log-mel frames [batch, frames, 40], Conv1d 40 -> 64 k=3
          through Transposes, two GRU layers of 128 (linear_before_reset=1, zero states from the run-time batch),
          Linear(1) + Sigmoid on every frame.
hifigan   a HiFi-GAN V2-style vocoder (the decoder of VITS/Piper voices, torch.onnx at opset 15, weight norm folded
          into the weights as export folds it): mel [1, 80, frames], Conv1d k=7 to 128 channels, four upsampling
          stages of LeakyReLU(0.1) + ConvTranspose1d (k=16/8, 16/8, 4/2, 4/2, padding (k - s) / 2), each followed by
          the mean of three ResBlock1s (k=3, 7, 11; dilations 1, 3, 5 with LeakyReLU between the convolutions),
          LeakyReLU(0.01), Conv1d k=7 to one channel, Tanh; 256 samples per frame.
istftnet  an iSTFTNet-style decoder with Snake activations and style-conditioned AdaIN (as in StyleTTS2 / Kokoro,
          torch.onnx at opset 17): features [1, 256, frames] and a style vector [1, 128]; frames past a run-time length
          masked (Range < length, Where); AdaIN1d (InstanceNorm, then * (1 + gamma) + beta from Linear(style));
          Snake x + 1/(alpha + 1e-9) * sin(alpha x)^2; two upsamplings (ConvTranspose1d k=20/10, k=12/6) with
          dilated Snake resblocks; a head of magnitude exp() and phase sin(), cos(); the inverse STFT as a
          ConvTranspose1d over a windowed basis (n_fft 16, hop 4), trimmed by Slice; 240 samples per frame.
"""
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "zoo"))
from gen_zoo import ZooBuilder, conv, stft_basis, FLOAT  # noqa: E402


def glu(b, x, c):
    """F.glu(x, dim=1) as torch.onnx writes it: Split in two halves, the first times Sigmoid of the second."""
    a, g = b.node("Split", [x, b.i64([c, c])], n_out=2, axis=1)
    return b.node("Mul", [a, b.node("Sigmoid", [g])])


def conv_transpose1d(b, x, name, cin, cout, k, stride):
    fan_in = cin * k
    w = b.normal(name + ".weight", (cin, cout, k), np.sqrt(1.0 / fan_in))
    bias = b.normal(name + ".bias", (cout,), 0.05)
    return b.node("ConvTranspose", [x, w, bias], name=name, kernel_shape=[k], strides=[stride], pads=[0, 0],
                  dilations=[1], group=1)


def lstm_layer(b, seq, p, c_in, hidden, batch):
    """A unidirectional nn.LSTM layer over a time-major [T, B, c_in] sequence with zero states sized from the
    run-time batch; Y [T, 1, B, H] squeezed to [T, B, H]."""
    bound = 1.0 / np.sqrt(hidden)
    w = b.uniform(p + ".weight_ih", (1, 4 * hidden, c_in), -bound, bound)
    r = b.uniform(p + ".weight_hh", (1, 4 * hidden, hidden), -bound, bound)
    bias = b.uniform(p + ".bias", (1, 8 * hidden), -bound, bound)
    shape = b.node("Concat", [b.i64([1]), batch, b.i64([hidden])], axis=0)
    zero = numpy_helper.from_array(np.array([0.0], dtype=np.float32))
    h0 = b.node("ConstantOfShape", [shape], value=zero)
    c0 = b.node("ConstantOfShape", [shape], value=zero)
    ys = b.node("LSTM", [seq, w, r, bias, "", h0, c0], name=p, n_out=3, hidden_size=hidden)
    return b.node("Squeeze", [ys[0], b.i64([1])])


def build_denoiser(hidden=48, depth=5, k=8, s=4):
    b = ZooBuilder("denoiser", seed=9300, opset=13)
    x = b.add_input("noisy", FLOAT, [1, 1, "samples"])
    mono = b.node("ReduceMean", [x], axes=[1], keepdims=1)
    std = b.node("Sqrt", [b.node("ReduceMean", [b.node("Pow", [b.node("Sub", [mono, b.node("ReduceMean", [mono], axes=[-1], keepdims=1)]), b.f32(2.0)])], axes=[-1], keepdims=1)])
    std = b.node("Add", [std, b.f32(1e-3)])
    y = b.node("Div", [x, std])
    skips, chans = [], []
    cin, c = 1, hidden
    for i in range(depth):
        y = b.node("Relu", [conv(b, y, "encoder.%d.0" % i, cin, c, (k,), stride=(s,), pad=(0,), bias=True)])
        y = glu(b, conv(b, y, "encoder.%d.2" % i, c, 2 * c, (1,), pad=(0,), bias=True, gain=1.0), c)
        skips.append(y)
        chans.append((cin, c))
        cin, c = c, 2 * c
    batch = b.dim(y, 0)
    seq = b.node("Transpose", [y], perm=[2, 0, 1])  # [T, B, C]
    for layer in range(2):
        seq = lstm_layer(b, seq, "lstm.lstm.l%d" % layer, cin, cin, batch)
    y = b.node("Transpose", [seq], perm=[1, 2, 0])  # [B, C, T]
    for i in reversed(range(depth)):
        ci, co = chans[i]
        skip = skips[i]
        length = b.node("Gather", [b.node("Shape", [y]), b.i64([2])], axis=0)
        skip = b.node("Slice", [skip, b.i64([0]), length, b.i64([2])])
        y = b.node("Add", [y, skip])
        y = glu(b, conv(b, y, "decoder.%d.0" % i, co, 2 * co, (1,), pad=(0,), bias=True, gain=1.0), co)
        y = conv_transpose1d(b, y, "decoder.%d.2" % i, co, ci, k, s)
        if i > 0:
            y = b.node("Relu", [y])
    y = b.node("Mul", [y, std])
    b.add_output(y, "enhanced", FLOAT, [1, 1, "out_samples"])
    return b.model()


def keras_same_pads(size, k, s):
    """Keras/TF 'same' padding along one axis: total = max((ceil(size / s) - 1) * s + k - size, 0), the odd unit
    at the end; tf2onnx writes it as an explicit Pad when the input size is known."""
    out = -(-size // s)
    total = max((out - 1) * s + k - size, 0)
    return total // 2, total - total // 2


def build_dscnn(filters=64, blocks=4):
    b = ZooBuilder("dscnn", seed=9400, opset=13)
    x = b.add_input("input_1", FLOAT, ["unk__0", 49, 10, 1])
    y = b.node("Transpose", [x], perm=[0, 3, 1, 2])  # tf2onnx's NHWC -> NCHW
    ph, pw = keras_same_pads(49, 10, 2), keras_same_pads(10, 4, 2)
    y = b.node("Pad", [y, b.i64([0, 0, ph[0], pw[0], 0, 0, ph[1], pw[1]])], mode="constant")

    def bn_relu(t, name, c):  # BatchNorm folded by tf2onnx into Mul + Add
        t = b.node("Mul", [t, b.uniform(name + "/mul", (1, c, 1, 1), 0.8, 1.2)])
        return b.node("Relu", [b.node("Add", [t, b.normal(name + "/add", (1, c, 1, 1), 0.05)])])

    y = bn_relu(conv(b, y, "conv_1", 1, filters, (10, 4), stride=(2, 2), pad=(0, 0), bias=True), "bn_1", filters)
    for i in range(blocks):
        y = bn_relu(conv(b, y, "dw_%d" % i, filters, filters, 3, group=filters, bias=True), "dw_bn_%d" % i, filters)
        y = bn_relu(conv(b, y, "pw_%d" % i, filters, filters, 1, pad=0, bias=True), "pw_bn_%d" % i, filters)
    y = b.node("ReduceMean", [y], axes=[2, 3], keepdims=0)  # [B, 64]
    w = b.normal("dense/kernel", (filters, 12), np.sqrt(1.0 / filters))
    y = b.node("Softmax", [b.node("Add", [b.node("MatMul", [y, w]), b.normal("dense/bias", (12,), 0.05)])], axis=-1)
    b.add_output(y, "dense", FLOAT, ["unk__1", 12])
    return b.model()


def gru_layer(b, seq, p, c_in, hidden, batch):
    bound = 1.0 / np.sqrt(hidden)
    w = b.uniform(p + ".weight_ih", (1, 3 * hidden, c_in), -2 * bound, 2 * bound)
    r = b.uniform(p + ".weight_hh", (1, 3 * hidden, hidden), -2 * bound, 2 * bound)
    bias = b.uniform(p + ".bias", (1, 6 * hidden), -bound, bound)
    shape = b.node("Concat", [b.i64([1]), batch, b.i64([hidden])], axis=0)
    zero = numpy_helper.from_array(np.array([0.0], dtype=np.float32))
    h0 = b.node("ConstantOfShape", [shape], value=zero)
    ys = b.node("GRU", [seq, w, r, bias, "", h0], name=p, n_out=2, hidden_size=hidden, linear_before_reset=1)
    return b.node("Squeeze", [ys[0], b.i64([1])])


def build_gru_kws(mels=40, hidden=128):
    b = ZooBuilder("gru_kws", seed=9500, opset=13)
    x = b.add_input("mel", FLOAT, ["batch", "frames", mels])
    y = b.node("Relu", [conv(b, b.node("Transpose", [x], perm=[0, 2, 1]), "conv", mels, 64, (3,), bias=True)])
    batch = b.dim(x, 0)
    seq = b.node("Transpose", [y], perm=[2, 0, 1])  # [T, B, 64]
    c_in = 64
    for layer in range(2):
        seq = gru_layer(b, seq, "gru.l%d" % layer, c_in, hidden, batch)
        c_in = hidden
    y = b.node("Transpose", [seq], perm=[1, 0, 2])
    w = b.normal("head.weight", (hidden, 1), np.sqrt(1.0 / hidden))
    y = b.node("Sigmoid", [b.node("Add", [b.node("MatMul", [y, w]), b.normal("head.bias", (1,), 0.05)])])
    b.add_output(y, "prob", FLOAT, ["batch", "frames", 1])
    return b.model()


def build_hifigan(mels=80, ch=128, rates=(8, 8, 2, 2), kernels=(16, 16, 4, 4), rb_k=(3, 7, 11), rb_d=(1, 3, 5)):
    b = ZooBuilder("hifigan", seed=9600, opset=15)
    x = b.add_input("input", FLOAT, [1, mels, "frames"])
    y = conv(b, x, "dec.conv_pre", mels, ch, (7,), bias=True, gain=1.0)
    c = ch
    for i, (u, k) in enumerate(zip(rates, kernels)):
        y = b.node("LeakyRelu", [y], alpha=0.1)
        w = b.normal("dec.ups.%d.weight" % i, (c, c // 2, k), np.sqrt(1.0 / (c * k / u)))
        y = b.node("ConvTranspose", [y, w, b.normal("dec.ups.%d.bias" % i, (c // 2,), 0.05)], kernel_shape=[k],
                   strides=[u], pads=[(k - u) // 2, (k - u) // 2], dilations=[1], group=1)
        c //= 2
        xs = None
        for j, kr in enumerate(rb_k):
            z = y
            for m, d in enumerate(rb_d):
                p = "dec.resblocks.%d" % (i * len(rb_k) + j)
                t = b.node("LeakyRelu", [z], alpha=0.1)
                t = conv(b, t, p + ".convs1.%d" % m, c, c, (kr,), dil=(d,), bias=True, gain=0.5)
                t = b.node("LeakyRelu", [t], alpha=0.1)
                t = conv(b, t, p + ".convs2.%d" % m, c, c, (kr,), bias=True, gain=0.5)
                z = b.node("Add", [t, z])
            xs = z if xs is None else b.node("Add", [xs, z])
        y = b.node("Div", [xs, b.f32(float(len(rb_k)))])
    y = b.node("LeakyRelu", [y], alpha=0.01)
    y = b.node("Tanh", [conv(b, y, "dec.conv_post", c, 1, (7,), bias=True, gain=1.0)])
    b.add_output(y, "output", FLOAT, [1, 1, "samples"])
    return b.model()


def snake(b, x, name, c):
    """Snake: x + 1 / (alpha + 1e-9) * sin(alpha * x)^2, alpha [1, C, 1] (exported as written, no fused op)."""
    a = b.uniform(name + ".alpha", (1, c, 1), 0.5, 1.5)
    s2 = b.node("Pow", [b.node("Sin", [b.node("Mul", [x, a])]), b.f32(2.0)])
    return b.node("Add", [x, b.node("Mul", [b.node("Reciprocal", [b.node("Add", [a, b.f32(1e-9)])]), s2])])


def adain(b, x, s, name, c, style):
    n = b.node("InstanceNormalization", [x, b.f32([1.0] * c), b.f32([0.0] * c)], epsilon=1e-5)
    h = b.node("Add", [b.node("MatMul", [s, b.normal(name + ".fc.weight", (style, 2 * c), 0.3 / np.sqrt(style))]),
                       b.normal(name + ".fc.bias", (2 * c,), 0.05)])
    h = b.node("Unsqueeze", [h, b.i64([2])])  # [1, 2C, 1]
    gamma, beta = b.node("Split", [h, b.i64([c, c])], n_out=2, axis=1)
    return b.node("Add", [b.node("Mul", [n, b.node("Add", [gamma, b.f32(1.0)])]), beta])


def build_istftnet(ch=256, style=128, n_fft=16, hop=4):
    b = ZooBuilder("istftnet", seed=9700, opset=17)
    x = b.add_input("features", FLOAT, [1, ch, "frames"])
    s = b.add_input("style", FLOAT, [1, style])
    length = b.add_input("length", onnx.TensorProto.INT64, [1])
    # frames at or past `length` are zeroed: Range(0, T) < length, as a length-masked decoder exports it
    t = b.node("Squeeze", [b.node("Gather", [b.node("Shape", [x]), b.i64([2])], axis=0), b.i64([0])])
    pos = b.node("Range", [b.i64(0), t, b.i64(1)])
    mask = b.node("Unsqueeze", [b.node("Less", [pos, length]), b.i64([0, 1])])
    y = b.node("Where", [mask, x, b.f32(0.0)])
    c = ch
    for i, (k, u) in enumerate(((20, 10), (12, 6))):
        y = snake(b, adain(b, y, s, "ups.%d.norm" % i, c, style), "ups.%d.snake" % i, c)
        w = b.normal("ups.%d.weight" % i, (c, c // 2, k), np.sqrt(1.0 / (c * k / u)))
        y = b.node("ConvTranspose", [y, w, b.normal("ups.%d.bias" % i, (c // 2,), 0.05)], kernel_shape=[k],
                   strides=[u], pads=[(k - u) // 2, (k - u) // 2])
        c //= 2
        for j, d in enumerate((1, 3)):
            p = "ups.%d.res.%d" % (i, j)
            z = snake(b, adain(b, y, s, p + ".n1", c, style), p + ".s1", c)
            z = conv(b, z, p + ".c1", c, c, (7,), dil=(d,), bias=True, gain=0.5)
            z = snake(b, adain(b, z, s, p + ".n2", c, style), p + ".s2", c)
            z = conv(b, z, p + ".c2", c, c, (7,), bias=True, gain=0.5)
            y = b.node("Add", [y, z])
    bins = n_fft // 2 + 1
    y = b.node("LeakyRelu", [y], alpha=0.01)
    head = conv(b, y, "conv_post", c, 2 * bins, (7,), bias=True, gain=0.5)
    mag_l, phase = b.node("Split", [head, b.i64([bins, bins])], n_out=2, axis=1)
    mag = b.node("Exp", [b.node("Clip", [mag_l, b.f32(-10.0), b.f32(4.0)])])
    ph = b.node("Mul", [b.node("Sin", [phase]), b.f32(np.pi)])
    re = b.node("Mul", [mag, b.node("Cos", [ph])])
    im = b.node("Mul", [mag, b.node("Sin", [ph])])
    spec = b.node("Concat", [re, im], axis=1)  # [1, 2 * bins, T']
    basis = stft_basis(n_fft)[:, :, :]  # [2 * bins, 1, n_fft]: the inverse is its transpose, windowed
    w = b.init("istft.basis", (basis / n_fft).astype(np.float32))
    wav = b.node("ConvTranspose", [spec, w], kernel_shape=[n_fft], strides=[hop])
    tlen = b.node("Gather", [b.node("Shape", [wav]), b.i64([2])], axis=0)
    wav = b.node("Slice", [wav, b.i64([n_fft // 2]), b.node("Sub", [tlen, b.i64([n_fft // 2])]), b.i64([2])])
    b.add_output(b.node("Tanh", [wav]), "audio", FLOAT, [1, 1, "samples"])
    return b.model()


if __name__ == "__main__":
    os.makedirs(sys.argv[1], exist_ok=True)
    for name, build in (("denoiser", build_denoiser), ("dscnn", build_dscnn), ("gru_kws", build_gru_kws),
                        ("hifigan", build_hifigan), ("istftnet", build_istftnet)):
        m = build()
        onnx.checker.check_model(m)
        path = os.path.join(sys.argv[1], name + ".onnx")
        onnx.save(m, path)
        print("wrote", path, len(m.graph.node), "nodes")
