#!/usr/bin/python3
"""Deterministic generator of the model zoo: models shaped like what real exporters write.

The models imitate trained networks Tessera is judged on (speech front ends, OCR, voice activity, keyword spotting,
detection, transformers) with random weights, and carry the exporters' habits: Shape/Gather/Unsqueeze/Concat chains
feeding Reshape, decomposed GELU / LayerNorm / HardSwish / SiLU, Constant nodes for scalars and shape vectors, torch's
padding arithmetic, an If on an input, and symbolic input dims that a user pins with --shape. Same method as
tests/e2e/gen_models.py (whose Builder this extends): one seeded numpy RandomState stream per model, float64 draws
rounded to float32, weights scaled so that activations stay O(1) and the outputs are finite and varied.

Usage (needs onnx + numpy: Debian's /usr/bin/python3):
    gen_zoo.py OUT_DIR [--models melspec,dbnet,...] [--check]   writes OUT_DIR/<name>.onnx
    gen_zoo.py --inputs OUT_DIR [--models ...] [--bench]         writes OUT_DIR/<name>/test_data_set_<k>/input_<i>.pb
    gen_zoo.py --list                                            lists the models
    gen_zoo.py --pins MODEL [--bench]                            prints MODEL's pins as `--shape NAME=D0,..` flags
                                                                 (test pins, or bench pins with --bench); exit 3
                                                                 when MODEL is not a zoo model
--check runs onnx.checker (full check, with shape inference) on every model it writes. Inputs are written at the
test pins of pins.txt (with --bench: at the bench pins, for checking a model at its deployment shapes). README.md
next to this file describes every model and the exporter habits it carries.

Models (name: imitates; inputs -> outputs; opset):
    melspec           Whisper/NeMo log-mel front end, STFT as Conv1d;   audio [1,N] -> log_mel [1,80,frames]; 17
    dbnet             PaddleOCR DBNet (MobileNetV3 det);  x [B,3,H,W] -> sigmoid_0.tmp_0 [B,1,H,W]; 14
    crnn              PaddleOCR CRNN rec, BiLSTM + CTC;   x [B,3,48,W] -> softmax_0.tmp_0 [B,W/4,97]; 13
    silero_vad        Silero VAD v5, whole body in If(sr == 16000); input [B,S], state [2,B,128], sr [] ->
                      output [B,1], stateN [2,B,128]; 16
    kws               keyword-spotting CNN;               input [B,1,76,32] -> output [B,12]; 13
    vit_b16           timm ViT-B/16 (86M parameters), decomposed LayerNorm; input [B,3,224,224] -> output [B,1000]; 13
    whisper_tiny_enc  openai Whisper tiny encoder, LayerNormalization; mel [B,80,F] -> audio_features [B,F/2,384]; 17
    yolo              ultralytics YOLOv8n, dynamic export; images [B,3,H,W] -> output0 [B,84,anchors]; 17
    unet              segmentation U-Net, ConvTranspose upsampling; image [B,3,H,W] -> mask [B,1,H,W]; 13
    conformer         NeMo/ESPnet Conformer encoder; audio_signal [B,T,256] -> outputs [B,T,256]; 17
    ecapa             SpeechBrain ECAPA-TDNN speaker embedder; feats [B,T,80] -> embedding [B,192]; 14
(and the dynamically quantized twins dbnet_dynq, yolo_dynq, crnn_dynq, conformer_dynq)
"""

import argparse
import math
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "e2e"))
import gen_models  # noqa: E402  (Builder, batchnorm, _atomic_write)
sys.path.insert(0, os.path.join(HERE, "..", "precision"))
import convert  # noqa: E402  (the dynamically quantized twins)

PRODUCER = "tessera-gen_zoo"
PRODUCER_VERSION = "1"
FLOAT, INT64 = TensorProto.FLOAT, TensorProto.INT64
INT64_MAX = 9223372036854775807
PINS_FILE = os.path.join(HERE, "pins.txt")


class ZooBuilder(gen_models.Builder):
    """gen_models.Builder plus If branches (a branch shares the model's weight stream and names) and the small
    constants and shape chains exporters write."""

    def __init__(self, name, seed=None, opset=13, parent=None):
        if parent is None:
            super().__init__(name, seed, opset)
            return
        self.name, self.opset = name, parent.opset
        self.rs, self.counts, self.init_names = parent.rs, parent.counts, parent.init_names
        self.nodes, self.inits, self.inputs, self.outputs = [], [], [], []

    def branch(self, name):
        """A builder for an If branch: its nodes and initializers go to the branch graph; outer values are captured
        by name (ONNX branches have no inputs)."""
        return ZooBuilder(name, parent=self)

    def graph(self, outputs):
        """The branch graph; outputs: [(value, elem_type, shape)]."""
        vis = [helper.make_tensor_value_info(v, e, s) for v, e, s in outputs]
        return helper.make_graph(self.nodes, self.name, [], vis, initializer=self.inits)

    def i64(self, v):
        return self.const(v, np.int64)

    def f32(self, v):
        return self.const(v, np.float32)

    def dim(self, x, axis):
        """x.size(axis) as torch.onnx writes it: Shape -> Gather(scalar Constant) -> Unsqueeze (a [1] tensor)."""
        g = self.node("Gather", [self.node("Shape", [x]), self.i64(axis)], axis=0)
        return self.node("Unsqueeze", [g, self.i64([0])])

    def model(self):
        m = super().model()
        m.producer_name, m.producer_version = PRODUCER, PRODUCER_VERSION
        m.ir_version = 7 if self.opset <= 13 else 8
        return m


# ---------------------------------------------------------------------------------------------------------------------
# Shared pieces
# ---------------------------------------------------------------------------------------------------------------------

def conv(b, x, name, cin, cout, k, stride=1, pad=None, group=1, bias=False, gain=2.0, dil=1, std=None, bias_mean=0.0):
    """Conv1d/2d (rank from k: an int means 2-D, a 1-tuple 1-D); same padding unless pad is given (one per dim)."""
    ks = tuple(k) if isinstance(k, (tuple, list)) else (k, k)
    nd = len(ks)
    ss = tuple(stride) if isinstance(stride, (tuple, list)) else (stride,) * nd
    ds = tuple(dil) if isinstance(dil, (tuple, list)) else (dil,) * nd
    ps = list(pad) if isinstance(pad, (tuple, list)) else \
        [(d * (kk - 1)) // 2 for kk, d in zip(ks, ds)] if pad is None else [pad] * nd
    fan_in = (cin // group) * int(np.prod(ks))
    w = b.normal(name + ".weight", (cout, cin // group) + ks, std if std is not None else np.sqrt(gain / fan_in))
    ins = [x, w]
    if bias:
        ins.append(b.normal(name + ".bias", (cout,), 0.05 if bias_mean == 0.0 else 1.0, mean=bias_mean))
    return b.node("Conv", ins, name=name, dilations=list(ds), group=group, kernel_shape=list(ks), pads=ps + ps,
                  strides=list(ss))


def gelu_erf(b, x):
    """torch's exact GELU as every exporter before opset 20 writes it: x * 0.5 * (1 + erf(x / sqrt(2)))."""
    e = b.node("Erf", [b.node("Div", [x, b.f32(1.4142135381698608)])])
    return b.node("Mul", [b.node("Mul", [x, b.node("Add", [e, b.f32(1.0)])]), b.f32(0.5)])


def layer_norm_decomposed(b, x, p, c, eps):
    """torch.nn.LayerNorm at opset < 17: ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add."""
    g = b.uniform(p + ".weight", (c,), 0.8, 1.2)
    beta = b.normal(p + ".bias", (c,), 0.05)
    mean = b.node("ReduceMean", [x], axes=[-1], keepdims=1)
    d = b.node("Sub", [x, mean])
    var = b.node("ReduceMean", [b.node("Pow", [d, b.f32(2.0)])], axes=[-1], keepdims=1)
    n = b.node("Div", [d, b.node("Sqrt", [b.node("Add", [var, b.f32(eps)])])])
    return b.node("Add", [b.node("Mul", [n, g]), beta])


def layer_norm_op(b, x, p, c, eps):
    g = b.uniform(p + ".weight", (c,), 0.8, 1.2)
    beta = b.normal(p + ".bias", (c,), 0.05)
    return b.node("LayerNormalization", [x, g, beta], name=p, axis=-1, epsilon=eps)


def linear(b, x, p, fin, fout, bias=True, scale=1.0):
    """nn.Linear on a rank > 2 tensor, as torch exports it: MatMul with the transposed weight, then Add."""
    w = b.normal(p + ".weight", (fin, fout), scale * np.sqrt(1.0 / fin))
    y = b.node("MatMul", [x, w])
    return b.node("Add", [b.normal(p + ".bias", (fout,), 0.02), y]) if bias else y


def torch_pads(b, rank, pad):
    """The pads input of F.pad(x, pad) as torch.onnx (opset 11+) writes it without constant folding
    (symbolic_opset11._prepare_onnx_paddings): the pair list is extended with zeros, reshaped to [-1, 2], flipped
    (Slice with step -1), transposed and flattened into ONNX's begins-then-ends order."""
    p = b.i64(pad)
    pad_len = b.node("Gather", [b.node("Shape", [p]), b.i64([0])], axis=0)
    ext = b.node("Sub", [b.node("Mul", [b.i64(rank), b.i64(2)]), pad_len])
    zeros = b.node("ConstantOfShape", [ext], value=numpy_helper.from_array(np.array([0], dtype=np.int64)))
    p = b.node("Concat", [b.node("Cast", [p], to=INT64), zeros], axis=0)
    p = b.node("Reshape", [p, b.i64([-1, 2])])
    p = b.node("Slice", [p, b.i64([-1]), b.i64([-INT64_MAX]), b.i64([0]), b.i64([-1])])
    p = b.node("Reshape", [b.node("Transpose", [p], perm=[1, 0]), b.i64([-1])])
    return b.node("Cast", [p], to=INT64)


def stft_basis(n_fft, window=True):
    """[2 * (n_fft/2 + 1), 1, n_fft] Conv1d weight: Hann-windowed cos rows, then -sin rows (the real and imaginary
    parts of torch.stft as a convolution, as Silero and the conv-STFT front ends store it)."""
    n = np.arange(n_fft)
    k = np.arange(n_fft // 2 + 1)[:, None]
    win = 0.5 - 0.5 * np.cos(2.0 * np.pi * n / n_fft) if window else np.ones(n_fft)  # periodic Hann
    ang = 2.0 * np.pi * k * n / n_fft
    basis = np.concatenate([win * np.cos(ang), -win * np.sin(ang)], axis=0)
    return basis[:, None, :].astype(np.float32)


def make_divisible(v, divisor=8, min_value=None):
    """PaddleOCR's / torchvision's channel rounding for MobileNetV3 widths."""
    min_value = min_value or divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


# ---------------------------------------------------------------------------------------------------------------------
# melspec: STFT-as-Conv1d log-mel front end (Whisper's log_mel_spectrogram with NeMo's pre-emphasis)
# ---------------------------------------------------------------------------------------------------------------------

def mel_filters(sr, n_fft, n_mels):
    """librosa.filters.mel(sr, n_fft, n_mels) (Slaney mel scale and area normalisation), as Whisper ships it."""
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0

    def hz_to_mel(f):
        f = np.asarray(f, dtype=np.float64)
        return np.where(f >= min_log_hz, min_log_mel + np.log(np.maximum(f, 1e-10) / min_log_hz) / logstep, f / f_sp)

    def mel_to_hz(m):
        return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), f_sp * m)

    fft_freqs = np.linspace(0, sr / 2, n_fft // 2 + 1)
    mel_f = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(sr / 2), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = mel_f[:, None] - fft_freqs[None, :]
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    weights = np.maximum(0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_f[2:n_mels + 2] - mel_f[:n_mels]))[:, None]
    return weights.astype(np.float32)


def build_melspec():
    b = ZooBuilder("melspec", seed=8001, opset=17)
    n_fft, hop, n_mels, sr = 400, 160, 80, 16000
    bins = n_fft // 2 + 1
    audio = b.add_input("audio", FLOAT, [1, "num_samples"])
    # NeMo pre-emphasis: cat(x[:, :1], x[:, 1:] - 0.97 * x[:, :-1]) -- Gather/Unsqueeze, Slice to INT64_MAX
    first = b.node("Unsqueeze", [b.node("Gather", [audio, b.i64(0)], axis=1), b.i64([1])])
    tail = b.node("Slice", [audio, b.i64([1]), b.i64([INT64_MAX]), b.i64([1]), b.i64([1])])
    head = b.node("Slice", [audio, b.i64([0]), b.i64([-1]), b.i64([1]), b.i64([1])])
    x = b.node("Concat", [first, b.node("Sub", [tail, b.node("Mul", [head, b.f32(0.97)])])], axis=1)
    # torch.stft(center=True): reflect padding by n_fft / 2 on a [1, 1, N] view, pads computed torch's way
    x = b.node("Unsqueeze", [x, b.i64([1])])
    x = b.node("Pad", [x, torch_pads(b, 3, [n_fft // 2, n_fft // 2])], mode="reflect")
    w = b.init("stft.forward_basis", stft_basis(n_fft))
    spec = b.node("Conv", [x, w], name="stft", dilations=[1], group=1, kernel_shape=[n_fft], pads=[0, 0],
                  strides=[hop])
    spec = b.node("Slice", [spec, b.i64([0]), b.i64([-1]), b.i64([2])])  # Whisper: stft[..., :-1]
    real = b.node("Slice", [spec, b.i64([0]), b.i64([bins]), b.i64([1])])
    imag = b.node("Slice", [spec, b.i64([bins]), b.i64([2 * bins]), b.i64([1])])
    power = b.node("Add", [b.node("Pow", [real, b.f32(2.0)]), b.node("Pow", [imag, b.f32(2.0)])])
    mel = b.node("MatMul", [b.init("mel_filters", mel_filters(sr, n_fft, n_mels)), power])
    log_spec = b.node("Div", [b.node("Log", [b.node("Clip", [mel, b.f32(1e-10)])]), b.f32(math.log(10.0))])
    floor = b.node("Sub", [b.node("ReduceMax", [log_spec], keepdims=0), b.f32(8.0)])
    log_spec = b.node("Max", [log_spec, floor])
    out = b.node("Div", [b.node("Add", [log_spec, b.f32(4.0)]), b.f32(4.0)])
    b.add_output(out, "log_mel", FLOAT, [1, n_mels, "num_frames"])
    return b.model()


# ---------------------------------------------------------------------------------------------------------------------
# MobileNetV3 pieces in PaddleOCR's flavour (conv + BN unfolded, SE with hardsigmoid slope 0.2)
# ---------------------------------------------------------------------------------------------------------------------

def hardswish(b, x, op):
    """HardSwish as the opset 14 op, or as paddle2onnx writes it for older opsets: x * HardSigmoid(x, 1/6, 0.5)."""
    if op:
        return b.node("HardSwish", [x])
    return b.node("Mul", [x, b.node("HardSigmoid", [x], alpha=0.1666666716337204, beta=0.5)])


def conv_bn_act(b, x, name, cin, cout, k, stride=1, group=1, act=None, hs_op=True, gamma=(0.8, 1.2)):
    kk = k if isinstance(k, (tuple, list)) else (k, k)
    y = conv(b, x, name, cin, cout, kk, stride=stride, group=group, gain=2.0 if act else 1.0)
    y = gen_models.batchnorm(b, y, name + "_bn", cout, gamma=gamma)
    if act == "relu":
        return b.node("Relu", [y])
    if act == "hardswish":
        return hardswish(b, y, hs_op)
    return y


def squeeze_excite(b, x, name, c, reduction=4):
    mid = make_divisible(c // reduction)
    s = b.node("GlobalAveragePool", [x])
    s = b.node("Relu", [conv(b, s, name + ".conv1", c, mid, 1, bias=True)])
    s = conv(b, s, name + ".conv2", mid, c, 1, bias=True, gain=1.0)
    s = b.node("HardSigmoid", [s], alpha=0.20000000298023224, beta=0.5)
    return b.node("Mul", [x, s])


def residual_unit(b, x, name, cin, mid, cout, k, stride, se, act, hs_op):
    """PaddleOCR ResidualUnit: expand 1x1, depthwise kxk (stride), optional SE, linear 1x1, identity add."""
    y = conv_bn_act(b, x, name + ".expand_conv", cin, mid, 1, act=act, hs_op=hs_op)
    y = conv_bn_act(b, y, name + ".bottleneck_conv", mid, mid, k, stride=stride, group=mid, act=act, hs_op=hs_op)
    if se:
        y = squeeze_excite(b, y, name + ".mid_se", mid)
    short = cin == cout and stride in (1, (1, 1))
    y = conv_bn_act(b, y, name + ".linear_conv", mid, cout, 1, gamma=(0.3, 0.6) if short else (0.8, 1.2))
    return b.node("Add", [x, y]) if short else y


# ---------------------------------------------------------------------------------------------------------------------
# dbnet: PaddleOCR det (MobileNetV3-large x0.5, DBFPN 96, DBHead), paddle2onnx style at opset 14
# ---------------------------------------------------------------------------------------------------------------------

def build_dbnet():
    b = ZooBuilder("dbnet", seed=8002, opset=14)
    x = b.add_input("x", FLOAT, ["p2o.DynamicDimension.0", 3, "p2o.DynamicDimension.1", "p2o.DynamicDimension.2"])
    scale = 0.5
    cfg = [  # k, exp, c, se, act, stride   (MobileNetV3-large)
        (3, 16, 16, False, "relu", 1), (3, 64, 24, False, "relu", 2), (3, 72, 24, False, "relu", 1),
        (5, 72, 40, True, "relu", 2), (5, 120, 40, True, "relu", 1), (5, 120, 40, True, "relu", 1),
        (3, 240, 80, False, "hardswish", 2), (3, 200, 80, False, "hardswish", 1), (3, 184, 80, False, "hardswish", 1),
        (3, 184, 80, False, "hardswish", 1), (3, 480, 112, True, "hardswish", 1), (3, 672, 112, True, "hardswish", 1),
        (5, 672, 160, True, "hardswish", 2), (5, 960, 160, True, "hardswish", 1), (5, 960, 160, True, "hardswish", 1),
    ]
    cin = make_divisible(16 * scale)
    y = conv_bn_act(b, x, "backbone.conv", 3, cin, 3, stride=2, act="hardswish")
    feats, feat_ch = [], []
    for i, (k, exp, c, se, act, s) in enumerate(cfg):
        if s == 2 and i > 1:  # the stage ends before each later stride-2 block (strides 4, 8, 16)
            feats.append(y)
            feat_ch.append(cin)
        mid, cout = make_divisible(scale * exp), make_divisible(scale * c)
        y = residual_unit(b, y, "backbone.stage.%d" % i, cin, mid, cout, k, s, se, act, True)
        cin = cout
    last = make_divisible(scale * 960)
    feats.append(conv_bn_act(b, y, "backbone.last_conv", cin, last, 1, act="hardswish"))
    feat_ch.append(last)

    # DBFPN: 1x1 laterals to 96, top-down nearest x2 (Resize with scales, paddle2onnx style) and Add
    oc = 96
    ins = [conv(b, f, "neck.in%d_conv" % (i + 2), c, oc, 1, gain=1.0) for i, (f, c) in enumerate(zip(feats, feat_ch))]
    roi = b.init("neck.resize_roi", np.zeros((0,), dtype=np.float32))  # an empty roi tensor, as exported

    def up_scales(t, s):
        return b.node("Resize", [t, roi, b.f32([1.0, 1.0, float(s), float(s)])], coordinate_transformation_mode=
                      "asymmetric", mode="nearest", nearest_mode="floor")

    def up_sizes(t, s):  # F.upsample(size=...) with the size computed from the input's shape
        shp = b.node("Shape", [t])
        nc = b.node("Slice", [shp, b.i64([0]), b.i64([2]), b.i64([0])])
        hw = b.node("Mul", [b.node("Slice", [shp, b.i64([2]), b.i64([4]), b.i64([0])]), b.i64([s, s])])
        sizes = b.node("Concat", [nc, hw], axis=0)
        return b.node("Resize", [t, roi, b.f32(np.zeros((0,), dtype=np.float32)), sizes],
                      coordinate_transformation_mode="asymmetric", mode="nearest", nearest_mode="floor")

    in2, in3, in4, in5 = ins
    out4 = b.node("Add", [in4, up_scales(in5, 2)])
    out3 = b.node("Add", [in3, up_scales(out4, 2)])
    out2 = b.node("Add", [in2, up_scales(out3, 2)])
    p5 = conv(b, in5, "neck.p5_conv", oc, oc // 4, 3, gain=1.0)
    p4 = conv(b, out4, "neck.p4_conv", oc, oc // 4, 3, gain=1.0)
    p3 = conv(b, out3, "neck.p3_conv", oc, oc // 4, 3, gain=1.0)
    p2 = conv(b, out2, "neck.p2_conv", oc, oc // 4, 3, gain=1.0)
    fuse = b.node("Concat", [up_sizes(p5, 8), up_sizes(p4, 4), up_scales(p3, 2), p2], axis=1)

    # DBHead (binarize branch): conv3x3 + BN + ReLU, ConvTranspose 2x2/2 + BN + ReLU, ConvTranspose 2x2/2, Sigmoid
    h = conv_bn_act(b, fuse, "head.binarize.conv1", oc, oc // 4, 3, act="relu")
    w1 = b.normal("head.binarize.conv2.weight", (oc // 4, oc // 4, 2, 2), np.sqrt(2.0 / (oc // 4)))
    h = b.node("ConvTranspose", [h, w1, b.normal("head.binarize.conv2.bias", (oc // 4,), 0.05)], name="deconv",
               dilations=[1, 1], group=1, kernel_shape=[2, 2], pads=[0, 0, 0, 0], strides=[2, 2])
    h = b.node("Relu", [gen_models.batchnorm(b, h, "head.binarize.conv_bn2", oc // 4)])
    w2 = b.normal("head.binarize.conv3.weight", (oc // 4, 1, 2, 2), np.sqrt(1.0 / (oc // 4)))
    h = b.node("ConvTranspose", [h, w2, b.normal("head.binarize.conv3.bias", (1,), 0.05)], name="deconv",
               dilations=[1, 1], group=1, kernel_shape=[2, 2], pads=[0, 0, 0, 0], strides=[2, 2])
    out = b.node("Sigmoid", [h])
    b.add_output(out, "sigmoid_0.tmp_0", FLOAT,
                 ["p2o.DynamicDimension.3", 1, "p2o.DynamicDimension.4", "p2o.DynamicDimension.5"])
    return b.model()


# ---------------------------------------------------------------------------------------------------------------------
# crnn: PaddleOCR rec (PP-OCRv2 style: MobileNetV3-small with (2,1) strides, Im2Seq, 2-layer BiLSTM, CTC head)
# ---------------------------------------------------------------------------------------------------------------------

def bilstm_layer(b, seq, p, c_in, hidden, batch):
    """One bidirectional nn.LSTM layer over a time-major [T, B, c_in] sequence as torch.onnx writes it: zero initial
    states sized from the run-time batch (ConstantOfShape(Concat([2], batch, [hidden]))), then Y [T, 2, B, H] ->
    [T, B, 2, H] -> Reshape [0, 0, -1] (0 copies the dim): [T, B, 2 * hidden]. Weights at twice torch's init bound:
    a trained network's gates are not all near 0.5."""
    bound = 2.0 / np.sqrt(hidden)
    w = b.uniform(p + ".weight_ih", (2, 4 * hidden, c_in), -bound, bound)
    r = b.uniform(p + ".weight_hh", (2, 4 * hidden, hidden), -bound, bound)
    bias = b.uniform(p + ".bias", (2, 8 * hidden), -bound, bound)
    shape = b.node("Concat", [b.i64([2]), batch, b.i64([hidden])], axis=0)
    zero = numpy_helper.from_array(np.array([0.0], dtype=np.float32))
    h0 = b.node("ConstantOfShape", [shape], value=zero)
    c0 = b.node("ConstantOfShape", [shape], value=zero)
    ys = b.node("LSTM", [seq, w, r, bias, "", h0, c0], name=p, n_out=3, direction="bidirectional",
                hidden_size=hidden)
    return b.node("Reshape", [b.node("Transpose", [ys[0]], perm=[0, 2, 1, 3]), b.i64([0, 0, -1])])


def build_crnn():
    b = ZooBuilder("crnn", seed=8003, opset=13)
    x = b.add_input("x", FLOAT, ["p2o.DynamicDimension.0", 3, 48, "p2o.DynamicDimension.1"])
    hs = False  # opset 13: HardSwish written as HardSigmoid(1/6, 0.5) * x
    cfg = [  # k, exp, c, se, act, stride   (MobileNetV3-small x0.5, height-only strides)
        (3, 16, 16, True, "relu", (2, 1)), (3, 72, 24, False, "relu", (2, 1)), (3, 88, 24, False, "relu", 1),
        (5, 96, 40, True, "hardswish", (2, 1)), (5, 240, 40, True, "hardswish", 1),
        (5, 240, 40, True, "hardswish", 1), (5, 120, 48, True, "hardswish", 1), (5, 144, 48, True, "hardswish", 1),
        (5, 288, 96, True, "hardswish", (2, 1)), (5, 576, 96, True, "hardswish", 1),
        (5, 576, 96, True, "hardswish", 1),
    ]
    scale = 0.5
    cin = make_divisible(16 * scale)
    y = conv_bn_act(b, x, "backbone.conv1", 3, cin, 3, stride=2, act="hardswish", hs_op=hs)
    for i, (k, exp, c, se, act, s) in enumerate(cfg):
        mid, cout = make_divisible(scale * exp), make_divisible(scale * c)
        y = residual_unit(b, y, "backbone.blocks.%d" % i, cin, mid, cout, k, s, se, act, hs)
        cin = cout
    c_last = make_divisible(scale * 576)
    y = conv_bn_act(b, y, "backbone.conv2", cin, c_last, 1, act="hardswish", hs_op=hs)
    y = b.node("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 0, 0])  # height 2 -> 1

    # Im2Seq: [B, C, 1, T] -> squeeze -> [T, B, C] (time-major, ONNX LSTM layout 0)
    seq = b.node("Transpose", [b.node("Squeeze", [y, b.i64([2])])], perm=[2, 0, 1])
    hidden = 48
    batch = b.dim(x, 0)
    c_in = c_last
    for layer in range(2):
        seq = bilstm_layer(b, seq, "neck.encoder.lstm.%d" % layer, c_in, hidden, batch)
        c_in = 2 * hidden

    # CTC head: batch-first, Linear to 97 classes (PaddleOCR en dictionary + blank + space), Softmax
    seq = b.node("Transpose", [seq], perm=[1, 0, 2])
    ncls = 97
    logits = b.node("Add", [b.node("MatMul", [seq, b.normal("head.fc.weight", (c_in, ncls), 8.0 / np.sqrt(c_in))]),
                            b.normal("head.fc.bias", (ncls,), 0.1)])
    out = b.node("Softmax", [logits], axis=2)
    b.add_output(out, "softmax_0.tmp_0", FLOAT, ["p2o.DynamicDimension.2", "p2o.DynamicDimension.3", ncls])
    return b.model()


# ---------------------------------------------------------------------------------------------------------------------
# silero_vad: Silero VAD v5 shape: If(sr == 16000) holding the 16 kHz model, else the 8 kHz model with a nested If on
# the chunk length. The 16 kHz branch keeps its weights as its own initializers and runs an ONNX LSTM; the 8 kHz branch
# captures the outer graph's initializers and runs an LSTMCell written out (Gemm, MatMul, Split, Sigmoid, Tanh).
# ---------------------------------------------------------------------------------------------------------------------

def build_silero_vad():
    b = ZooBuilder("silero_vad", seed=8004, opset=16)
    inp = b.add_input("input", FLOAT, ["batch", "samples"])
    state = b.add_input("state", FLOAT, [2, "batch", 128])
    sr = b.add_input("sr", INT64, [])
    H = 128

    def magnitude(g, x, n_fft, hop, basis, pad):
        """reflect pad right, STFT conv, split real / imag at half the channels (computed from the shape), |.|"""
        x = g.node("Unsqueeze", [x, g.i64([1])])
        x = g.node("Pad", [x, torch_pads(g, 3, [0, pad])], mode="reflect")
        spec = g.node("Conv", [x, basis], name="stft", dilations=[1], group=1, kernel_shape=[n_fft], pads=[0, 0],
                      strides=[hop])
        half = g.node("Div", [g.node("Gather", [g.node("Shape", [spec]), g.i64([1])], axis=0), g.i64(2)])
        real = g.node("Slice", [spec, g.i64([0]), half, g.i64([1])])
        imag = g.node("Slice", [spec, half, g.i64([INT64_MAX]), g.i64([1])])
        return g.node("Sqrt", [g.node("Add", [g.node("Pow", [real, g.f32(2.0)]), g.node("Pow", [imag, g.f32(2.0)])])])

    def encoder(g, x, p, cin):
        """4 x (Conv1d + ReLU): cin->128, 128->64 /2, 64->64 /2, 64->128 (SileroVadBlock reparametrised)."""
        for i, (ci, co, s) in enumerate([(cin, 128, 1), (128, 64, 2), (64, 64, 2), (64, H, 1)]):
            gain = 2.0 if i else 2.0 / 64.0  # the first layer sees STFT magnitudes of O(10)
            x = g.node("Relu", [conv(g, x, "%s.%d.reparam_conv" % (p, i), ci, co, (3,), stride=(s,), bias=True,
                                     gain=gain)])
        return x

    def decoder(g, h, p):
        """ReLU, Conv1d(128 -> 1, k1), Sigmoid, squeeze, mean over time -> [B, 1]"""
        y = g.node("Unsqueeze", [g.node("Relu", [h]), g.i64([-1])])
        y = g.node("Sigmoid", [conv(g, y, p + ".decoder.2", H, 1, (1,), bias=True, gain=32.0)])
        return g.node("ReduceMean", [g.node("Squeeze", [y, g.i64([1])])], axes=[1], keepdims=1)

    # then: 16 kHz (n_fft 256, hop 128, 129 bins), weights inside the branch, ONNX LSTM over one step
    t = b.branch("sr16k")
    x = magnitude(t, inp, 256, 128, t.init("_model.stft.forward_basis_buffer", stft_basis(256)), 64)
    x = encoder(t, x, "_model.encoder", 129)
    x = t.node("Squeeze", [x, t.i64([2])])  # one frame left: [B, 128]
    h0 = t.node("Unsqueeze", [t.node("Gather", [state, t.i64(0)], axis=0), t.i64([0])])
    c0 = t.node("Unsqueeze", [t.node("Gather", [state, t.i64(1)], axis=0), t.i64([0])])
    bound = 1.0 / np.sqrt(H)
    w = t.uniform("_model.decoder.rnn.weight_ih", (1, 4 * H, H), -bound, bound)
    r = t.uniform("_model.decoder.rnn.weight_hh", (1, 4 * H, H), -bound, bound)
    bias = t.uniform("_model.decoder.rnn.bias", (1, 8 * H), -bound, bound)
    _, hn, cn = t.node("LSTM", [t.node("Unsqueeze", [x, t.i64([0])]), w, r, bias, "", h0, c0], name="rnn", n_out=3,
                       hidden_size=H)
    new_state = t.node("Concat", [hn, cn], axis=0)
    prob = decoder(t, t.node("Squeeze", [hn, t.i64([0])]), "_model")
    then_g = t.graph([(prob, FLOAT, ["batch", 1]), (new_state, FLOAT, [2, "batch", H])])

    # else: 8 kHz, outer initializers captured; nested If on the chunk length picks the hop
    e = b.branch("sr8k")
    basis8 = b.init("_model_8k.stft.forward_basis_buffer", stft_basis(128))
    samples = e.node("Gather", [e.node("Shape", [inp]), e.i64(1)], axis=0)
    is256 = e.node("Equal", [samples, e.i64(256)])
    n256 = e.branch("chunk256")
    m256 = magnitude(n256, inp, 128, 64, basis8, 32)
    nother = e.branch("chunk_other")
    mother = magnitude(nother, inp, 128, 128, basis8, 64)
    mag = e.node("If", [is256], name="If_chunk", then_branch=n256.graph([(m256, FLOAT, [None, 65, None])]),
                 else_branch=nother.graph([(mother, FLOAT, [None, 65, None])]))
    x = encoder(e, mag, "_model_8k.encoder", 65)
    # e's initializers would land in the branch: move them to the outer graph (captured, like basis8)
    b.inits.extend(e.inits)
    e.inits = []
    x = e.node("ReduceMean", [x], axes=[2], keepdims=0)  # [B, 128], whatever number of frames is left
    h = e.node("Gather", [state, e.i64(0)], axis=0)
    c = e.node("Gather", [state, e.i64(1)], axis=0)
    w_ih = b.uniform("_model_8k.decoder.rnn.weight_ih", (4 * H, H), -bound, bound)
    w_hh = b.uniform("_model_8k.decoder.rnn.weight_hh_t", (H, 4 * H), -bound, bound)
    b_ih = b.uniform("_model_8k.decoder.rnn.bias_ih", (4 * H,), -bound, bound)
    b_hh = b.uniform("_model_8k.decoder.rnn.bias_hh", (4 * H,), -bound, bound)
    gates = e.node("Add", [e.node("Gemm", [x, w_ih, b_ih], alpha=1.0, beta=1.0, transB=1),
                           e.node("Add", [e.node("MatMul", [h, w_hh]), b_hh])])
    gi, gf, gg, go = e.node("Split", [gates, e.i64([H, H, H, H])], axis=1, n_out=4)
    c2 = e.node("Add", [e.node("Mul", [e.node("Sigmoid", [gf]), c]),
                        e.node("Mul", [e.node("Sigmoid", [gi]), e.node("Tanh", [gg])])])
    h2 = e.node("Mul", [e.node("Sigmoid", [go]), e.node("Tanh", [c2])])
    new_state8 = e.node("Concat", [e.node("Unsqueeze", [h2, e.i64([0])]), e.node("Unsqueeze", [c2, e.i64([0])])],
                        axis=0)
    prob8 = decoder(e, h2, "_model_8k")
    b.inits.extend(e.inits)
    e.inits = []
    else_g = e.graph([(prob8, FLOAT, ["batch", 1]), (new_state8, FLOAT, [2, "batch", H])])

    is16k = b.node("Equal", [sr, b.i64(16000)])
    out, new_state = b.node("If", [is16k], name="If_sr", n_out=2, then_branch=then_g, else_branch=else_g)
    b.add_output(out, "output", FLOAT, ["batch", 1])
    b.add_output(new_state, "stateN", FLOAT, [2, "batch", H])
    return b.model()


# ---------------------------------------------------------------------------------------------------------------------
# kws: keyword-spotting CNN on 76x32 log-mel patches (Conv+BN+ReLU, non-square kernels and strides, dilation,
# pooling, flatten through Shape/Gather/Concat/Reshape, Gemm, Softmax over 12 classes)
# ---------------------------------------------------------------------------------------------------------------------

def build_kws():
    b = ZooBuilder("kws", seed=8005, opset=13)
    x = b.add_input("input", FLOAT, ["batch_size", 1, 76, 32])

    def cbr(x, name, cin, cout, k, stride=1, pad=None, dil=1):
        y = conv(b, x, name, cin, cout, k, stride=stride, pad=pad, dil=dil)
        return b.node("Relu", [gen_models.batchnorm(b, y, name.replace("conv", "bn"), cout)])

    y = cbr(x, "conv1", 1, 32, 3)                                          # 76 x 32
    y = cbr(y, "conv2", 32, 32, (5, 3), stride=(2, 1), pad=(2, 1))         # 38 x 32
    y = b.node("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])         # 19 x 16
    y = cbr(y, "conv3", 32, 64, 3)
    y = cbr(y, "conv4", 64, 64, (1, 3), stride=(1, 2), pad=(0, 1))         # 19 x 8
    y = b.node("AveragePool", [y], kernel_shape=[3, 2], strides=[2, 2])     # 9 x 4
    y = cbr(y, "conv5", 64, 64, 3, pad=(2, 2), dil=2)
    flat = b.node("Reshape", [y, b.node("Concat", [b.dim(y, 0), b.i64([-1])], axis=0)])  # x.view(x.size(0), -1)
    w1 = b.normal("fc1.weight", (128, 64 * 9 * 4), np.sqrt(2.0 / (64 * 9 * 4)))
    h = b.node("Relu", [b.node("Gemm", [flat, w1, b.normal("fc1.bias", (128,), 0.05)], alpha=1.0, beta=1.0,
                               transB=1)])
    w2 = b.normal("fc2.weight", (12, 128), 1.5 / np.sqrt(128))
    logits = b.node("Gemm", [h, w2, b.normal("fc2.bias", (12,), 0.1)], alpha=1.0, beta=1.0, transB=1)
    b.add_output(b.node("Softmax", [logits], axis=1), "output", FLOAT, ["batch_size", 12])
    return b.model()


# ---------------------------------------------------------------------------------------------------------------------
# vit_b16: timm vit_base_patch16_224 as torch.onnx exports it at opset 13 (decomposed LayerNorm, erf GELU, qkv unbind
# as Split + Squeeze, cls token expand through torch's Where(Equal(size, -1)) chain)
# ---------------------------------------------------------------------------------------------------------------------

def build_vit_b16():
    b = ZooBuilder("vit_b16", seed=8006, opset=13)
    D, L, nh, mlp, P, ncls = 768, 12, 12, 3072, 16, 1000
    dh, n_tok = D // nh, (224 // P) ** 2 + 1
    x = b.add_input("input", FLOAT, ["batch_size", 3, 224, 224])
    y = conv(b, x, "patch_embed.proj", 3, D, P, stride=P, pad=0, bias=True, gain=1.0)
    # flatten(2): Reshape to Concat(Shape[0:2], [-1]); transpose(1, 2)
    shp = b.node("Slice", [b.node("Shape", [y]), b.i64([0]), b.i64([2]), b.i64([0])])
    y = b.node("Reshape", [y, b.node("Concat", [shp, b.i64([-1])], axis=0)])
    y = b.node("Transpose", [y], perm=[0, 2, 1])
    # cls_token.expand(B, -1, -1): torch.onnx turns the -1s into 1s with Where(Equal(size, -1), 1, size)
    size = b.node("Reshape", [b.node("Concat", [b.dim(x, 0), b.i64([-1]), b.i64([-1])], axis=0), b.i64([-1])])
    ones = b.node("ConstantOfShape", [b.node("Shape", [size])],
                  value=numpy_helper.from_array(np.array([1], dtype=np.int64)))
    size = b.node("Where", [b.node("Equal", [size, b.node("Mul", [ones, b.i64(-1)])]), ones, size])
    cls = b.node("Expand", [b.normal("cls_token", (1, 1, D), 0.02), size])
    y = b.node("Concat", [cls, y], axis=1)
    y = b.node("Add", [y, b.normal("pos_embed", (1, n_tok, D), 0.5)])
    res_scale = 0.25  # residual branches scaled down so that the stream stays O(1) over 12 blocks
    for i in range(L):
        p = "blocks.%d" % i
        h = layer_norm_decomposed(b, y, p + ".norm1", D, 1e-6)
        qkv = linear(b, h, p + ".attn.qkv", D, 3 * D)
        shape = b.node("Concat", [b.dim(h, 0), b.dim(h, 1), b.i64([3]), b.i64([nh]), b.i64([dh])], axis=0)
        qkv = b.node("Transpose", [b.node("Reshape", [qkv, shape])], perm=[2, 0, 3, 1, 4])
        q, k, v = (b.node("Squeeze", [t, b.i64([0])])
                   for t in b.node("Split", [qkv, b.i64([1, 1, 1])], axis=0, n_out=3))
        att = b.node("Mul", [b.node("MatMul", [q, b.node("Transpose", [k], perm=[0, 1, 3, 2])]), b.f32(dh ** -0.5)])
        att = b.node("Softmax", [att], axis=-1)
        o = b.node("Transpose", [b.node("MatMul", [att, v])], perm=[0, 2, 1, 3])
        o = b.node("Reshape", [o, b.node("Concat", [b.dim(h, 0), b.dim(h, 1), b.i64([D])], axis=0)])
        y = b.node("Add", [y, linear(b, o, p + ".attn.proj", D, D, scale=res_scale)])
        h = layer_norm_decomposed(b, y, p + ".norm2", D, 1e-6)
        h = gelu_erf(b, linear(b, h, p + ".mlp.fc1", D, mlp, scale=np.sqrt(2.0)))
        y = b.node("Add", [y, linear(b, h, p + ".mlp.fc2", mlp, D, scale=res_scale)])
    y = layer_norm_decomposed(b, y, "norm", D, 1e-6)
    cls_out = b.node("Gather", [y, b.i64(0)], axis=1)
    w = b.normal("head.weight", (ncls, D), 1.0 / np.sqrt(D))
    out = b.node("Gemm", [cls_out, w, b.normal("head.bias", (ncls,), 0.02)], alpha=1.0, beta=1.0, transB=1)
    b.add_output(out, "output", FLOAT, ["batch_size", ncls])
    return b.model()


# ---------------------------------------------------------------------------------------------------------------------
# whisper_tiny_enc: openai-whisper AudioEncoder (tiny: 384 wide, 6 heads, 4 layers) at opset 17 with
# LayerNormalization; the positional embedding is sliced to the run-time length (x + pos[: x.shape[1]])
# ---------------------------------------------------------------------------------------------------------------------

def sinusoids(length, channels, max_timescale=10000):
    inc = np.log(max_timescale) / (channels // 2 - 1)
    inv = np.exp(-inc * np.arange(channels // 2))
    t = np.arange(length)[:, None] * inv[None, :]
    return np.concatenate([np.sin(t), np.cos(t)], axis=1).astype(np.float32)


def build_whisper_tiny_enc():
    b = ZooBuilder("whisper_tiny_enc", seed=8007, opset=17)
    n_mels, D, nh, L, n_ctx = 80, 384, 6, 4, 1500
    dh = D // nh
    x = b.add_input("mel", FLOAT, ["batch_size", n_mels, "n_frames"])
    y = gelu_erf(b, conv(b, x, "conv1", n_mels, D, (3,), bias=True))
    y = gelu_erf(b, conv(b, y, "conv2", D, D, (3,), stride=(2,), bias=True))
    y = b.node("Transpose", [y], perm=[0, 2, 1])
    pos = b.init("positional_embedding", sinusoids(n_ctx, D))
    pos = b.node("Slice", [pos, b.i64([0]), b.dim(y, 1), b.i64([0])])
    y = b.node("Add", [y, pos])
    scale = float(dh) ** -0.25

    def heads(t, h, perm):
        shape = b.node("Concat", [b.dim(h, 0), b.dim(h, 1), b.i64([nh]), b.i64([-1])], axis=0)
        return b.node("Transpose", [b.node("Reshape", [t, shape])], perm=perm)

    for i in range(L):
        p = "blocks.%d" % i
        h = layer_norm_op(b, y, p + ".attn_ln", D, 1e-5)
        q = heads(linear(b, h, p + ".attn.query", D, D), h, [0, 2, 1, 3])
        k = heads(linear(b, h, p + ".attn.key", D, D, bias=False), h, [0, 2, 3, 1])
        v = heads(linear(b, h, p + ".attn.value", D, D), h, [0, 2, 1, 3])
        qk = b.node("MatMul", [b.node("Mul", [q, b.f32(scale)]), b.node("Mul", [k, b.f32(scale)])])
        w = b.node("Cast", [b.node("Softmax", [b.node("Cast", [qk], to=FLOAT)], axis=-1)], to=FLOAT)  # .float(), .to()
        o = b.node("Transpose", [b.node("MatMul", [w, v])], perm=[0, 2, 1, 3])
        o = b.node("Reshape", [o, b.node("Concat", [b.dim(o, 0), b.dim(o, 1), b.i64([-1])], axis=0)])
        y = b.node("Add", [y, linear(b, o, p + ".attn.out", D, D, scale=0.5)])
        h = layer_norm_op(b, y, p + ".mlp_ln", D, 1e-5)
        h = gelu_erf(b, linear(b, h, p + ".mlp.0", D, 4 * D, scale=np.sqrt(2.0)))
        y = b.node("Add", [y, linear(b, h, p + ".mlp.2", 4 * D, D, scale=0.5)])
    y = layer_norm_op(b, y, "ln_post", D, 1e-5)
    b.add_output(y, "audio_features", FLOAT, ["batch_size", "n_audio_ctx", D])
    return b.model()


# ---------------------------------------------------------------------------------------------------------------------
# yolo: ultralytics YOLOv8n exported with dynamic=True at opset 17. Conv+BN folded (ultralytics fuses before export),
# SiLU as Sigmoid*Mul, C2f with Split, SPPF, nearest Resize with scales, Detect head with DFL and anchors computed
# from the feature shapes (Range / Expand / ConstantOfShape), output [B, 84, anchors].
# ---------------------------------------------------------------------------------------------------------------------

def build_yolo():
    b = ZooBuilder("yolo", seed=8008, opset=17)
    x = b.add_input("images", FLOAT, ["batch", 3, "height", "width"])

    def cv(x, name, cin, cout, k=1, s=1, act=True, gain=2.0):
        y = conv(b, x, name + ".conv", cin, cout, k, stride=s, bias=True, gain=gain)
        return b.node("Mul", [y, b.node("Sigmoid", [y])]) if act else y

    def c2f(x, name, cin, cout, n, shortcut):
        c = cout // 2
        y0, y1 = b.node("Split", [cv(x, name + ".cv1", cin, 2 * c), b.i64([c, c])], axis=1, n_out=2)
        ys = [y0, y1]
        for i in range(n):
            t = cv(ys[-1], "%s.m.%d.cv1" % (name, i), c, c, 3)
            t = cv(t, "%s.m.%d.cv2" % (name, i), c, c, 3, gain=0.5 if shortcut else 2.0)
            ys.append(b.node("Add", [ys[-1], t]) if shortcut else t)
        return cv(b.node("Concat", ys, axis=1), name + ".cv2", (2 + n) * c, cout)

    def sppf(x, name, cin, cout):
        y = cv(x, name + ".cv1", cin, cin // 2)
        ys = [y]
        for _ in range(3):
            ys.append(b.node("MaxPool", [ys[-1]], ceil_mode=0, dilations=[1, 1], kernel_shape=[5, 5],
                             pads=[2, 2, 2, 2], strides=[1, 1]))
        return cv(b.node("Concat", ys, axis=1), name + ".cv2", 2 * cin, cout)

    def up(t):
        return b.node("Resize", [t, "", b.f32([1.0, 1.0, 2.0, 2.0])], coordinate_transformation_mode="asymmetric",
                      cubic_coeff_a=-0.75, mode="nearest", nearest_mode="floor")

    y = cv(x, "model.0", 3, 16, 3, 2)
    y = cv(y, "model.1", 16, 32, 3, 2)
    y = c2f(y, "model.2", 32, 32, 1, True)
    y = cv(y, "model.3", 32, 64, 3, 2)
    p3 = c2f(y, "model.4", 64, 64, 2, True)
    y = cv(p3, "model.5", 64, 128, 3, 2)
    p4 = c2f(y, "model.6", 128, 128, 2, True)
    y = cv(p4, "model.7", 128, 256, 3, 2)
    y = c2f(y, "model.8", 256, 256, 1, True)
    p5 = sppf(y, "model.9", 256, 256)
    h1 = c2f(b.node("Concat", [up(p5), p4], axis=1), "model.12", 384, 128, 1, False)
    o3 = c2f(b.node("Concat", [up(h1), p3], axis=1), "model.15", 192, 64, 1, False)
    o4 = c2f(b.node("Concat", [cv(o3, "model.16", 64, 64, 3, 2), h1], axis=1), "model.18", 192, 128, 1, False)
    o5 = c2f(b.node("Concat", [cv(o4, "model.19", 128, 128, 3, 2), p5], axis=1), "model.21", 384, 256, 1, False)

    nc, reg = 80, 16
    no = nc + 4 * reg
    c2, c3 = 64, 80
    levels, anchors, strides = [], [], []
    for i, (f, cin, stride) in enumerate([(o3, 64, 8), (o4, 128, 16), (o5, 256, 32)]):
        p = "model.22"
        box = cv(cv(f, "%s.cv2.%d.0" % (p, i), cin, c2, 3), "%s.cv2.%d.1" % (p, i), c2, c2, 3)
        box = conv(b, box, "%s.cv2.%d.2" % (p, i), c2, 4 * reg, 1, bias=True, gain=1.0)
        cls = cv(cv(f, "%s.cv3.%d.0" % (p, i), cin, c3, 3), "%s.cv3.%d.1" % (p, i), c3, c3, 3)
        # class logits start low, as ultralytics' bias_init leaves them: most scores near 0, a few high
        cls = conv(b, cls, "%s.cv3.%d.2" % (p, i), c3, nc, 1, bias=True, gain=1.0, bias_mean=-4.0)
        t = b.node("Concat", [box, cls], axis=1)
        levels.append(b.node("Reshape", [t, b.node("Concat", [b.dim(t, 0), b.i64([no]), b.i64([-1])], axis=0)]))
        # make_anchors: (arange(w) + 0.5, arange(h) + 0.5) meshgrid 'ij', stacked (x, y); stride column
        hh = b.node("Gather", [b.node("Shape", [t]), b.i64(2)], axis=0)
        ww = b.node("Gather", [b.node("Shape", [t]), b.i64(3)], axis=0)
        sx = b.node("Add", [b.node("Range", [b.f32(0.0), b.node("Cast", [ww], to=FLOAT), b.f32(1.0)]), b.f32(0.5)])
        sy = b.node("Add", [b.node("Range", [b.f32(0.0), b.node("Cast", [hh], to=FLOAT), b.f32(1.0)]), b.f32(0.5)])
        hw = b.node("Concat", [b.node("Unsqueeze", [hh, b.i64([0])]), b.node("Unsqueeze", [ww, b.i64([0])])], axis=0)
        gy = b.node("Expand", [b.node("Reshape", [sy, b.i64([-1, 1])]), hw])
        gx = b.node("Expand", [b.node("Reshape", [sx, b.i64([1, -1])]), hw])
        xy = b.node("Concat", [b.node("Unsqueeze", [gx, b.i64([-1])]), b.node("Unsqueeze", [gy, b.i64([-1])])],
                    axis=-1)
        anchors.append(b.node("Reshape", [xy, b.i64([-1, 2])]))
        n = b.node("Unsqueeze", [b.node("Mul", [hh, ww]), b.i64([0])])
        strides.append(b.node("ConstantOfShape", [b.node("Concat", [n, b.i64([1])], axis=0)],
                              value=numpy_helper.from_array(np.array([stride], dtype=np.float32))))
    anchor_points = b.node("Transpose", [b.node("Concat", anchors, axis=0)], perm=[1, 0])    # [2, A]
    stride_t = b.node("Transpose", [b.node("Concat", strides, axis=0)], perm=[1, 0])         # [1, A]
    xcat = b.node("Concat", levels, axis=2)
    box, cls = b.node("Split", [xcat, b.i64([4 * reg, nc])], axis=1, n_out=2)
    # DFL: view(b, 4, 16, a).transpose(2, 1).softmax(1) -> 1x1 conv with arange(16) -> view(b, 4, a)
    bshape = b.node("Concat", [b.dim(box, 0), b.i64([4]), b.i64([reg]), b.dim(box, 2)], axis=0)
    d = b.node("Softmax", [b.node("Transpose", [b.node("Reshape", [box, bshape])], perm=[0, 2, 1, 3])], axis=1)
    dfl_w = b.init("model.22.dfl.conv.weight", np.arange(reg, dtype=np.float32).reshape(1, reg, 1, 1))
    d = b.node("Conv", [d, dfl_w], name="model.22.dfl.conv", dilations=[1, 1], group=1, kernel_shape=[1, 1],
               pads=[0, 0, 0, 0], strides=[1, 1])
    d = b.node("Reshape", [d, b.node("Concat", [b.dim(box, 0), b.i64([4]), b.dim(box, 2)], axis=0)])
    # dist2bbox (xywh) * strides
    lt, rb = b.node("Split", [d, b.i64([2, 2])], axis=1, n_out=2)
    a = b.node("Unsqueeze", [anchor_points, b.i64([0])])
    x1y1 = b.node("Sub", [a, lt])
    x2y2 = b.node("Add", [a, rb])
    cxy = b.node("Div", [b.node("Add", [x1y1, x2y2]), b.f32(2.0)])
    wh = b.node("Sub", [x2y2, x1y1])
    dbox = b.node("Mul", [b.node("Concat", [cxy, wh], axis=1), stride_t])
    out = b.node("Concat", [dbox, b.node("Sigmoid", [cls])], axis=1)
    b.add_output(out, "output0", FLOAT, ["batch", 84, "anchors"])
    return b.model()


# ---------------------------------------------------------------------------------------------------------------------
# Inputs: deterministic, realistic ranges
# ---------------------------------------------------------------------------------------------------------------------

# ---------------------------------------------------------------------------------------------------------------------
# unet: a segmentation U-Net (milesial Pytorch-UNet style, widths 16..256) as torch.onnx writes it with dynamic H/W:
# double 3x3 Conv + BN + ReLU blocks, MaxPool 2x2, ConvTranspose 2x2/2 upsampling with a bias, skip Concat, a 1x1
# head and a Sigmoid mask.
# ---------------------------------------------------------------------------------------------------------------------

def build_unet():
    b = ZooBuilder("unet", seed=8012, opset=13)
    x = b.add_input("image", FLOAT, ["batch", 3, "height", "width"])

    def double_conv(x, name, cin, cout):
        for k, (ci, co) in enumerate(((cin, cout), (cout, cout))):
            c = conv(b, x, "%s.conv.%d" % (name, 3 * k), ci, co, 3)
            x = b.node("Relu", [gen_models.batchnorm(b, c, "%s.conv.%d" % (name, 3 * k + 1), co)])
        return x

    widths = [16, 32, 64, 128]
    skips, y, cin = [], x, 3
    for i, c in enumerate(widths):
        y = double_conv(y, "down%d" % i, cin, c)
        skips.append(y)
        y = b.node("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
        cin = c
    y = double_conv(y, "bottleneck", cin, 256)
    cin = 256
    for i, c in reversed(list(enumerate(widths))):
        w = b.normal("up%d.up.weight" % i, (cin, c, 2, 2), np.sqrt(1.0 / cin))
        y = b.node("ConvTranspose", [y, w, b.normal("up%d.up.bias" % i, (c,), 0.05)], kernel_shape=[2, 2],
                   strides=[2, 2])
        y = double_conv(b.node("Concat", [skips[i], y], axis=1), "up%d" % i, 2 * c, c)
        cin = c
    y = b.node("Sigmoid", [conv(b, y, "outc", 16, 1, 1, bias=True, gain=1.0)])
    b.add_output(y, "mask", FLOAT, ["batch", 1, "height", "width"])
    return b.model()


# ---------------------------------------------------------------------------------------------------------------------
# conformer: a NeMo/ESPnet Conformer encoder (d 256, 4 heads, 4 blocks) after its subsampling, exported at opset 17
# with a dynamic time axis: macaron feed-forwards with Swish (x * Sigmoid) and half-step residuals, self-attention with
# heads split by Reshape from Shape chains, the convolution module (pointwise Conv1d, GLU as Split + Sigmoid + Mul,
# depthwise Conv1d k 31, BatchNormalization, Swish, pointwise Conv1d) between Transposes, LayerNormalization.
# ---------------------------------------------------------------------------------------------------------------------

def build_conformer():
    b = ZooBuilder("conformer", seed=8013, opset=17)
    D, nh, L, kc = 256, 4, 4, 31
    dh = D // nh
    x = b.add_input("audio_signal", FLOAT, ["batch", "time", D])

    def swish(t):
        return b.node("Mul", [t, b.node("Sigmoid", [t])])

    def feed_forward(y, p):
        h = layer_norm_op(b, y, p + ".norm", D, 1e-5)
        h = swish(linear(b, h, p + ".linear1", D, 4 * D, scale=np.sqrt(2.0)))
        h = linear(b, h, p + ".linear2", 4 * D, D, scale=0.5)
        return b.node("Add", [y, b.node("Mul", [h, b.f32(0.5)])])

    def heads(t, like):
        shape = b.node("Concat", [b.dim(like, 0), b.i64([-1]), b.i64([nh]), b.i64([dh])], axis=0)
        return b.node("Transpose", [b.node("Reshape", [t, shape])], perm=[0, 2, 1, 3])

    y = x
    for i in range(L):
        p = "layers.%d" % i
        y = feed_forward(y, p + ".feed_forward1")
        h = layer_norm_op(b, y, p + ".norm_self_att", D, 1e-5)
        q = heads(linear(b, h, p + ".self_attn.linear_q", D, D), h)
        k = heads(linear(b, h, p + ".self_attn.linear_k", D, D), h)
        v = heads(linear(b, h, p + ".self_attn.linear_v", D, D), h)
        scores = b.node("Div", [b.node("MatMul", [q, b.node("Transpose", [k], perm=[0, 1, 3, 2])]),
                                b.f32(float(np.sqrt(dh)))])
        o = b.node("Transpose", [b.node("MatMul", [b.node("Softmax", [scores], axis=-1), v])], perm=[0, 2, 1, 3])
        o = b.node("Reshape", [o, b.node("Concat", [b.dim(h, 0), b.i64([-1]), b.i64([D])], axis=0)])
        y = b.node("Add", [y, linear(b, o, p + ".self_attn.linear_out", D, D, scale=0.5)])
        h = b.node("Transpose", [layer_norm_op(b, y, p + ".norm_conv", D, 1e-5)], perm=[0, 2, 1])
        h = conv(b, h, p + ".conv.pointwise_conv1", D, 2 * D, (1,), bias=True, gain=1.0)
        a, g = b.node("Split", [h, b.i64([D, D])], n_out=2, axis=1)
        h = b.node("Mul", [a, b.node("Sigmoid", [g])])
        h = conv(b, h, p + ".conv.depthwise_conv", D, D, (kc,), group=D, bias=True, gain=1.0)
        h = swish(gen_models.batchnorm(b, h, p + ".conv.batch_norm", D))
        h = conv(b, h, p + ".conv.pointwise_conv2", D, D, (1,), bias=True, gain=0.5)
        y = b.node("Add", [y, b.node("Transpose", [h], perm=[0, 2, 1])])
        y = feed_forward(y, p + ".feed_forward2")
        y = layer_norm_op(b, y, p + ".norm_out", D, 1e-5)
    b.add_output(y, "outputs", FLOAT, ["batch", "time", D])
    return b.model()


# ---------------------------------------------------------------------------------------------------------------------
# ecapa: a SpeechBrain ECAPA-TDNN speaker embedder (C 512, Res2Net scale 8), as torch.onnx writes it at opset 14 with
# a dynamic time axis: fbank features transposed to channels-first, Conv1d + ReLU + BatchNorm1d (unfolded: the norm
# follows the ReLU), three SE-Res2Net blocks (dilations 2, 3, 4) whose Res2Net splits are Slices and whose SE squeeze
# is a ReduceMean over time, multi-layer feature aggregation (Concat + 1x1), attentive statistics pooling with global
# context (mean and std over time Tiled back along it, Tanh attention, Softmax over time, weighted mean and std from
# ReduceSum), BatchNorm1d over [B, 3072, 1], a 1x1 Conv1d to the 192-dim embedding, Squeeze.
# ---------------------------------------------------------------------------------------------------------------------

def build_ecapa():
    b = ZooBuilder("ecapa", seed=8014, opset=14)
    C, S, A = 512, 8, 128
    feats = b.add_input("feats", FLOAT, ["batch", "time", 80])

    def norm(x, name, c, mean, var):
        """BatchNorm1d whose running statistics are those of what it normalises (trained ones are), not random."""
        scale = b.uniform(name + ".weight", (c,), 0.8, 1.2)
        shift = b.normal(name + ".bias", (c,), 0.1)
        rm = b.uniform(name + ".running_mean", (c,), mean[0], mean[1])
        rv = b.uniform(name + ".running_var", (c,), var[0], var[1])
        return b.node("BatchNormalization", [x, scale, shift, rm, rv], name=name, epsilon=1e-5, momentum=0.9)

    def tdnn(x, name, cin, cout, k=1, dil=1, sigma=1.414):
        # The ReLU of a convolution whose outputs have standard deviation sigma (He initialisation of unit-variance
        # inputs: sqrt 2) has mean 0.399 sigma and variance 0.341 sigma^2: the statistics the norm was trained on.
        y = b.node("Relu", [conv(b, x, name + ".conv", cin, cout, (k,), dil=dil, bias=True, gain=2.0)])
        return norm(y, name + ".norm", cout, (0.35 * sigma, 0.45 * sigma), (0.30 * sigma ** 2, 0.38 * sigma ** 2))

    x = tdnn(b.node("Transpose", [feats], perm=[0, 2, 1]), "blocks.0", 80, C, k=5)
    outs = []
    for i, dil in enumerate((2, 3, 4), start=1):
        p = "blocks.%d" % i
        h = tdnn(x, p + ".tdnn1", C, C)
        w = C // S
        parts = [b.node("Slice", [h, b.i64([k * w]), b.i64([(k + 1) * w]), b.i64([1])]) for k in range(S)]
        ys, prev = [parts[0]], None
        for k in range(1, S):
            prev = tdnn(parts[k] if prev is None else b.node("Add", [parts[k], prev]), p + ".res2net_block.%d" % k,
                        w, w, k=3, dil=dil, sigma=1.414 if prev is None else 2.0)
            ys.append(prev)
        h = tdnn(b.node("Concat", ys, axis=1), p + ".tdnn2", C, C)
        s = b.node("ReduceMean", [h], axes=[2], keepdims=1)
        s = b.node("Relu", [conv(b, s, p + ".se_block.conv1", C, A, (1,), bias=True)])
        s = b.node("Sigmoid", [conv(b, s, p + ".se_block.conv2", A, C, (1,), bias=True, gain=1.0)])
        x = b.node("Add", [b.node("Mul", [h, s]), x])
        outs.append(x)
    x = tdnn(b.node("Concat", outs, axis=1), "mfa", 3 * C, 3 * C, sigma=2.5)
    mean = b.node("ReduceMean", [x], axes=[2], keepdims=1)
    var = b.node("ReduceMean", [b.node("Pow", [b.node("Sub", [x, mean]), b.f32(2.0)])], axes=[2], keepdims=1)
    std = b.node("Sqrt", [b.node("Clip", [var, b.f32(1e-12)])])
    reps = b.node("Concat", [b.i64([1, 1]), b.dim(x, 2)], axis=0)
    ctx = b.node("Concat", [x, b.node("Tile", [mean, reps]), b.node("Tile", [std, reps])], axis=1)
    a = b.node("Tanh", [tdnn(ctx, "asp.tdnn", 9 * C, A)])
    w = b.node("Softmax", [conv(b, a, "asp.conv", A, 3 * C, (1,), bias=True, gain=1.0)], axis=2)
    mu = b.node("ReduceSum", [b.node("Mul", [x, w]), b.i64([2])], keepdims=1)
    sq = b.node("ReduceSum", [b.node("Mul", [b.node("Mul", [x, x]), w]), b.i64([2])], keepdims=1)
    sg = b.node("Sqrt", [b.node("Clip", [b.node("Sub", [sq, b.node("Mul", [mu, mu])]), b.f32(1e-12)])])
    pooled = b.node("Concat", [mu, sg], axis=1)
    pooled = norm(pooled, "asp_bn", 6 * C, (0.3, 0.7), (0.3, 0.6))
    # The embedding is a sum of 3072 terms of either sign, so elements near 0 carry absolute rounding errors of about
    # 1e-4 at unit scale (ONNX Runtime's own optimised and plain runs differed by 2.8x the e2e tolerance there):
    # weights scaled down so that the embedding is O(0.05) and those errors stay under the tolerance's atol.
    emb = conv(b, pooled, "fc", 6 * C, 192, (1,), bias=True, gain=4e-4)
    b.add_output(b.node("Squeeze", [emb, b.i64([2])]), "embedding", FLOAT, ["batch", 192])
    return b.model()


def speech_like(rs, n, sr, peak=0.6):
    """A voiced sound: harmonics of a wavering ~140 Hz pitch under a syllable-rate envelope, plus a little noise."""
    t = np.arange(n) / sr
    f0 = 140.0 + 15.0 * np.sin(2 * np.pi * 3.0 * t + rs.uniform(0, 6.28))
    phase = 2 * np.pi * np.cumsum(f0) / sr
    y = sum(rs.uniform(0.3, 1.0) / k * np.sin(k * phase + rs.uniform(0, 6.28)) for k in range(1, 12))
    env = 0.55 + 0.45 * np.sin(2 * np.pi * 4.0 * t + rs.uniform(0, 6.28))
    y = y * env + 0.02 * rs.standard_normal(n)
    return (peak * y / np.max(np.abs(y))).astype(np.float32)


def image_like(rs, shape):
    """A page-like picture in [0, 1]: smooth shading, dark stroke-like rectangles, sensor noise."""
    n, c, h, w = shape
    yy, xx = np.meshgrid(np.linspace(0, 1, h), np.linspace(0, 1, w), indexing="ij")
    img = np.empty(shape)
    for ch in range(c):
        img[0, ch] = 0.75 + 0.15 * np.sin(2 * np.pi * (rs.uniform(0.5, 2) * xx + rs.uniform(0.5, 2) * yy))
    for _ in range(max(4, h * w // 400)):
        y0, x0 = rs.randint(0, h), rs.randint(0, w)
        img[0, :, y0:y0 + rs.randint(2, max(3, h // 8)), x0:x0 + rs.randint(2, max(3, w // 8))] = rs.uniform(0, 0.3)
    img += 0.03 * rs.standard_normal(shape)
    return np.clip(img, 0, 1)


def _normalise(img, mean, std):
    m = np.array(mean).reshape(1, -1, 1, 1)
    s = np.array(std).reshape(1, -1, 1, 1)
    return ((img - m) / s).astype(np.float32)


def inputs_melspec(pins):
    return [[("audio", speech_like(np.random.RandomState(9001), pins["audio"][1], 16000)[None, :])]]


def inputs_dbnet(pins):
    img = image_like(np.random.RandomState(9002), tuple(pins["x"]))
    return [[("x", _normalise(img, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]))]]


def inputs_crnn(pins):
    img = image_like(np.random.RandomState(9003), tuple(pins["x"]))
    return [[("x", _normalise(img, [0.5] * 3, [0.5] * 3))]]


def inputs_silero_vad(pins):
    """set 0: a 16 kHz chunk (the then branch); set 1: 8 kHz with a chunk that is not 256 long (else, nested else)."""
    rs = np.random.RandomState(9004)
    sets = []
    for sr in (16000, 8000):
        audio = speech_like(rs, pins["input"][1], sr, peak=0.5)[None, :]
        state = rs.uniform(-0.5, 0.5, size=tuple(pins["state"])).astype(np.float32)
        sets.append([("input", audio), ("state", state), ("sr", np.array(sr, dtype=np.int64))])
    return sets


def inputs_kws(pins):
    return [[("input", np.random.RandomState(9005).standard_normal(size=tuple(pins["input"])).astype(np.float32))]]


def inputs_vit_b16(pins):
    img = image_like(np.random.RandomState(9006), tuple(pins["input"]))
    return [[("input", _normalise(img, [0.5] * 3, [0.5] * 3))]]


def inputs_whisper_tiny_enc(pins):
    """Whisper-range log-mel ((log10 + 4) / 4, in about [-0.8, 1.5]): a smooth spectral envelope over time + noise."""
    rs = np.random.RandomState(9007)
    _, m, f = pins["mel"]
    env = np.sin(np.linspace(0, 3 * np.pi, m))[:, None] * np.sin(np.linspace(0, 20 * np.pi, f))[None, :]
    mel = 0.3 + 0.5 * env + 0.25 * rs.standard_normal((m, f))
    return [[("mel", np.clip(mel, -0.8, 1.5)[None].astype(np.float32))]]


def inputs_yolo(pins):
    return [[("images", image_like(np.random.RandomState(9008), tuple(pins["images"])).astype(np.float32))]]


def inputs_unet(pins):
    img = image_like(np.random.RandomState(9012), tuple(pins["image"]))
    return [[("image", _normalise(img, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]))]]


def inputs_conformer(pins):
    """Subsampled speech features: smooth in time and over channels, O(1), plus noise."""
    rs = np.random.RandomState(9013)
    _, t, d = pins["audio_signal"]
    env = np.sin(np.linspace(0, 6 * np.pi, t))[:, None] * np.cos(np.linspace(0, 9 * np.pi, d))[None, :]
    return [[("audio_signal", (env + 0.5 * rs.standard_normal((t, d)))[None].astype(np.float32))]]


def inputs_ecapa(pins):
    """Log-mel filterbank frames after mean normalisation (SpeechBrain's InputNormalization): smooth in time and
    frequency, plus noise."""
    rs = np.random.RandomState(9014)
    _, t, f = pins["feats"]
    env = np.sin(np.linspace(0, 8 * np.pi, t))[:, None] * np.cos(np.linspace(0, 5 * np.pi, f))[None, :]
    return [[("feats", (env + 0.5 * rs.standard_normal((t, f)))[None].astype(np.float32))]]


# ---------------------------------------------------------------------------------------------------------------------
# Registry, pins, CLI
# ---------------------------------------------------------------------------------------------------------------------

MODELS = {
    "melspec": (build_melspec, inputs_melspec),
    "dbnet": (build_dbnet, inputs_dbnet),
    "crnn": (build_crnn, inputs_crnn),
    "silero_vad": (build_silero_vad, inputs_silero_vad),
    "kws": (build_kws, inputs_kws),
    "vit_b16": (build_vit_b16, inputs_vit_b16),
    "whisper_tiny_enc": (build_whisper_tiny_enc, inputs_whisper_tiny_enc),
    "yolo": (build_yolo, inputs_yolo),
    # Dynamically quantized twins, as ONNX Runtime's quantize_dynamic writes them (bench/precision/convert.py): every
    # activation is requantized, so a last-bit difference from ONNX Runtime in the float ops between the integer convs
    # grows into whole quantization steps; their references hold Tessera to ONNX Runtime's bits.
    "dbnet_dynq": (lambda: convert.dynamic(build_dbnet(), "int8", False), inputs_dbnet),
    "yolo_dynq": (lambda: convert.dynamic(build_yolo(), "uint8", False), inputs_yolo),
    # Its LSTM becomes com.microsoft DynamicQuantizeLSTM, as quantize_dynamic writes one.
    "crnn_dynq": (lambda: convert.dynamic(build_crnn(), "int8", False), inputs_crnn),
    "unet": (build_unet, inputs_unet),
    "conformer": (build_conformer, inputs_conformer),
    # Every LayerNorm and attention Softmax output requantized: holds those two to ONNX Runtime's bits.
    "conformer_dynq": (lambda: convert.dynamic(build_conformer(), "int8", False), inputs_conformer),
    "ecapa": (build_ecapa, inputs_ecapa),
}
TEST_MODELS = list(MODELS)


def read_pins(path=PINS_FILE):
    """{model: {"test": {input: [dims]}, "bench": {...}}} from pins.txt."""
    def parse(field):
        if field == "-":
            return {}
        out = {}
        for item in field.split(";"):
            name, dims = item.split("=", 1)
            out[name] = [int(d) for d in dims.split(",")]
        return out

    pins = {}
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            model, test, bench = line.split()
            pins[model] = {"test": parse(test), "bench": parse(bench)}
    return pins


def model_inputs(name, use="test"):
    """The data sets of a model: [[(input name, array), ...], ...], at the test (or bench) pins."""
    return MODELS[name][1](read_pins()[name][use])


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir", nargs="?")
    ap.add_argument("--models", default=",".join(TEST_MODELS), help="comma-separated list (default: all)")
    ap.add_argument("--inputs", action="store_true", help="write test inputs instead of models")
    ap.add_argument("--check", action="store_true", help="run the ONNX checker (with shape inference) on each model")
    ap.add_argument("--list", action="store_true", help="list the models and exit")
    ap.add_argument("--pins", metavar="MODEL", help="print MODEL's --shape flags (exit 3: not a zoo model)")
    ap.add_argument("--bench", action="store_true",
                    help="with --pins or --inputs: the benchmark pins instead of the test pins")
    args = ap.parse_args(argv)
    if args.list:
        print("\n".join(MODELS))
        return 0
    if args.pins is not None:
        pins = read_pins()
        if args.pins not in MODELS or args.pins not in pins:
            return 3
        use = pins[args.pins]["bench" if args.bench else "test"]
        print(" ".join("--shape %s=%s" % (n, ",".join(map(str, d))) for n, d in use.items()))
        return 0
    if not args.out_dir:
        ap.error("OUT_DIR is required")
    names = [n for n in args.models.split(",") if n]
    for n in names:
        if n not in MODELS:
            ap.error("unknown model '%s' (known: %s)" % (n, ", ".join(MODELS)))
    os.makedirs(args.out_dir, exist_ok=True)
    for n in names:
        if args.inputs:
            for k, data_set in enumerate(model_inputs(n, "bench" if args.bench else "test")):
                d = os.path.join(args.out_dir, n, "test_data_set_%d" % k)
                os.makedirs(d, exist_ok=True)
                for i, (iname, arr) in enumerate(data_set):
                    gen_models._atomic_write(os.path.join(d, "input_%d.pb" % i),
                                             numpy_helper.from_array(arr, iname).SerializeToString())
            continue
        m = MODELS[n][0]()
        if args.check:
            onnx.checker.check_model(m, full_check=True)
        gen_models._atomic_write(os.path.join(args.out_dir, n + ".onnx"), m.SerializeToString())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
