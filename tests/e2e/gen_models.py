#!/usr/bin/python3
"""Deterministic generator of the end-to-end test and benchmark models.

Builds float32 ONNX models with the topologies of well-known networks and random weights, without downloading
anything, so any machine produces byte-for-byte the same models (numpy's legacy RandomState stream is frozen; weights
are drawn in float64 and rounded to float32, no libm functions are involved). The weights are scaled (He for
conv+ReLU stacks, 1/sqrt(fan_in) for linear layers, BatchNorm statistics in sane ranges, smaller gammas at the end of
residual branches) so that activations stay O(1) through the whole network and the outputs are finite and varied.

Usage (needs onnx + numpy: Debian's /usr/bin/python3):
    gen_models.py OUT_DIR [--models resnet50,mlp,...]            writes OUT_DIR/<name>.onnx
    gen_models.py --inputs OUT_DIR [--models ...]                  writes OUT_DIR/<name>/test_data_set_0/input_<i>.pb
    gen_models.py --list                                           lists the models
Options: --check runs onnx.checker (full check with shape inference) on every model it writes;
         --symbolic-dims gives BERT inputs the symbolic dims [batch, sequence] instead of [1, 128];
         --batch N gives the image models (resnet50, mobilenet_v2, squeezenet) input [N,3,224,224] and output
         [N,1000], written as <name>_bN.onnx (inputs: <name>_bN/..., image 0 is the batch-1 input); the weights
         are the same. The default, 1, writes exactly the models and inputs described above.

Models (opset 13, ir_version 7 unless stated):
    resnet50       torchvision ResNet-50 v1.5, input "input" [1,3,224,224], output "output" [1,1000]
    mobilenet_v2   torchvision MobileNetV2 (width 1.0), same input/output
    squeezenet     torchvision SqueezeNet 1.1 (alias squeezenet1.1 / squeezenet1_1), same input/output
    bert_tiny      BERT encoder as a PyTorch (HuggingFace BertModel) export at opset 13 produces it: hidden 128,
                   2 layers, 4 heads, intermediate 512, vocab 1000, seq 128; inputs input_ids, attention_mask
                   (int64 [1,128]); outputs last_hidden_state [1,128,128], pooler_output [1,128]. LayerNorm is the
                   decomposed ReduceMean/Sub/Pow/Sqrt/Div form (LayerNormalization only exists from opset 17).
    bert_tiny_ln   the same at opset 17 (ir_version 8) with LayerNormalization nodes
    bert_base      hidden 768, 12 layers, 12 heads, intermediate 3072, vocab 30522, seq 128 (benchmarks only)
    bert_base_ln   bert_base at opset 17 with LayerNormalization nodes (benchmarks only)
    mlp            256 -> 512 -> 256 -> 10: Gemm+Relu, MatMul+Add+Relu, Gemm; input "input" [1,256]
"""

import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

PRODUCER = "tessera-gen_models"
PRODUCER_VERSION = "1"
IMAGE_MODELS = ["resnet50", "mobilenet_v2", "squeezenet"]
BATCH = 1  # image models' batch (--batch)
TEST_MODELS = ["resnet50", "mobilenet_v2", "squeezenet", "bert_tiny", "bert_tiny_ln", "mlp"]


class Builder:
    """Accumulates nodes and initializers; draws weights from one seeded stream in a fixed order."""

    def __init__(self, name, seed, opset=13):
        self.name = name
        self.opset = opset
        self.rs = np.random.RandomState(seed)
        self.nodes = []
        self.inits = []
        self.init_names = set()
        self.inputs = []
        self.outputs = []
        self.counts = {}

    # -- naming ----------------------------------------------------------------------------------------------------
    def fresh(self, prefix):
        n = self.counts.get(prefix, 0)
        self.counts[prefix] = n + 1
        return prefix if n == 0 else "%s_%d" % (prefix, n)

    # -- initializers ----------------------------------------------------------------------------------------------
    def init(self, name, array):
        assert name not in self.init_names, name
        self.init_names.add(name)
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def normal(self, name, shape, std, mean=0.0):
        a = self.rs.standard_normal(size=shape) * std + mean
        return self.init(name, a.astype(np.float32))

    def uniform(self, name, shape, lo, hi):
        return self.init(name, self.rs.uniform(lo, hi, size=shape).astype(np.float32))

    def const(self, value, dtype, prefix="Constant"):
        """A Constant node, as exporters emit for scalars and small shape vectors."""
        out = self.fresh(prefix)
        t = numpy_helper.from_array(np.array(value, dtype=dtype), out + "_value")
        self.nodes.append(helper.make_node("Constant", [], [out], name=out + "_node", value=t))
        return out

    # -- nodes -----------------------------------------------------------------------------------------------------
    def node(self, op, inputs, name=None, n_out=1, **attrs):
        base = self.fresh(name or op)
        outs = [base if n_out == 1 else "%s_out%d" % (base, i) for i in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=base + "_node", **attrs))
        return outs[0] if n_out == 1 else outs

    def add_input(self, name, elem_type, shape):
        self.inputs.append(helper.make_tensor_value_info(name, elem_type, shape))
        return name

    def add_output(self, value, name, elem_type, shape):
        """Renames the producer's output of `value` to the graph output name."""
        for n in self.nodes:
            for i, o in enumerate(n.output):
                if o == value:
                    n.output[i] = name
            for i, x in enumerate(n.input):
                if x == value:
                    n.input[i] = name
        self.outputs.append(helper.make_tensor_value_info(name, elem_type, shape))
        return name

    def model(self):
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs, initializer=self.inits)
        m = helper.make_model(graph, producer_name=PRODUCER, producer_version=PRODUCER_VERSION,
                              opset_imports=[helper.make_opsetid("", self.opset)])
        m.ir_version = 7 if self.opset <= 13 else 8
        return m


# ---------------------------------------------------------------------------------------------------------------------
# CNN building blocks
# ---------------------------------------------------------------------------------------------------------------------

def conv(b, x, name, cin, cout, k, stride=1, pad=0, group=1, bias=False, gain=2.0):
    fan_in = (cin // group) * k * k
    w = b.normal(name + ".weight", (cout, cin // group, k, k), np.sqrt(gain / fan_in))
    ins = [x, w]
    if bias:
        ins.append(b.normal(name + ".bias", (cout,), 0.05))
    return b.node("Conv", ins, name=name, kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4,
                  group=group, dilations=[1, 1])


def batchnorm(b, x, name, c, gamma=(0.8, 1.2)):
    scale = b.uniform(name + ".weight", (c,), gamma[0], gamma[1])
    shift = b.normal(name + ".bias", (c,), 0.1)
    mean = b.normal(name + ".running_mean", (c,), 0.1)
    var = b.uniform(name + ".running_var", (c,), 0.5, 1.5)
    return b.node("BatchNormalization", [x, scale, shift, mean, var], name=name, epsilon=1e-5, momentum=0.9)


def classifier_head(b, x, cin, ncls=1000, name="fc"):
    x = b.node("GlobalAveragePool", [x])
    x = b.node("Flatten", [x], axis=1)
    w = b.normal(name + ".weight", (ncls, cin), np.sqrt(1.0 / cin))
    bias = b.normal(name + ".bias", (ncls,), 0.05)
    return b.node("Gemm", [x, w, bias], name=name, alpha=1.0, beta=1.0, transB=1)


def image_input(b):
    return b.add_input("input", TensorProto.FLOAT, [BATCH, 3, 224, 224])


# ---------------------------------------------------------------------------------------------------------------------
# ResNet-50 v1.5 (stride 2 in the 3x3 conv of the first bottleneck of a stage)
# ---------------------------------------------------------------------------------------------------------------------

def build_resnet50():
    b = Builder("resnet50", seed=50)
    x = image_input(b)
    x = conv(b, x, "conv1", 3, 64, 7, stride=2, pad=3)
    x = batchnorm(b, x, "bn1", 64)
    x = b.node("Relu", [x])
    x = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    inplanes = 64
    for li, (planes, blocks, stride) in enumerate(zip([64, 128, 256, 512], [3, 4, 6, 3], [1, 2, 2, 2])):
        for bi in range(blocks):
            s = stride if bi == 0 else 1
            p = "layer%d.%d" % (li + 1, bi)
            identity = x
            y = conv(b, x, p + ".conv1", inplanes, planes, 1)
            y = b.node("Relu", [batchnorm(b, y, p + ".bn1", planes)])
            y = conv(b, y, p + ".conv2", planes, planes, 3, stride=s, pad=1)
            y = b.node("Relu", [batchnorm(b, y, p + ".bn2", planes)])
            y = conv(b, y, p + ".conv3", planes, planes * 4, 1, gain=1.0)
            y = batchnorm(b, y, p + ".bn3", planes * 4, gamma=(0.2, 0.4))
            if s != 1 or inplanes != planes * 4:
                identity = conv(b, x, p + ".downsample.0", inplanes, planes * 4, 1, stride=s, gain=1.0)
                identity = batchnorm(b, identity, p + ".downsample.1", planes * 4)
            x = b.node("Relu", [b.node("Add", [y, identity])])
            inplanes = planes * 4
    x = classifier_head(b, x, 2048)
    b.add_output(x, "output", TensorProto.FLOAT, [BATCH, 1000])
    return b.model()


# ---------------------------------------------------------------------------------------------------------------------
# MobileNetV2 (width 1.0); ReLU6 is Clip with min/max inputs (shared scalar initializers, as torch exports them)
# ---------------------------------------------------------------------------------------------------------------------

def build_mobilenet_v2():
    b = Builder("mobilenet_v2", seed=2)
    lo = b.init("relu6_min", np.array(0.0, dtype=np.float32))
    hi = b.init("relu6_max", np.array(6.0, dtype=np.float32))

    def conv_bn(x, name, cin, cout, k, stride=1, group=1, relu6=True, gamma=(0.8, 1.2)):
        y = conv(b, x, name + ".0", cin, cout, k, stride=stride, pad=(k - 1) // 2, group=group,
                 gain=2.0 if relu6 else 1.0)
        y = batchnorm(b, y, name + ".1", cout, gamma=gamma)
        return b.node("Clip", [y, lo, hi]) if relu6 else y

    x = image_input(b)
    x = conv_bn(x, "features.0", 3, 32, 3, stride=2)
    cin = 32
    idx = 1
    settings = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                (6, 320, 1, 1)]
    for t, c, n, s in settings:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            p = "features.%d.conv" % idx
            y = x
            j = 0
            if t != 1:
                y = conv_bn(y, "%s.%d" % (p, j), cin, hidden, 1)
                j += 1
            y = conv_bn(y, "%s.%d" % (p, j), hidden, hidden, 3, stride=stride, group=hidden)
            j += 1
            residual = stride == 1 and cin == c
            y = conv_bn(y, "%s.%d" % (p, j), hidden, c, 1, relu6=False, gamma=(0.3, 0.6) if residual else (0.8, 1.2))
            x = b.node("Add", [x, y]) if residual else y
            cin = c
            idx += 1
    x = conv_bn(x, "features.18", cin, 1280, 1)
    x = classifier_head(b, x, 1280, name="classifier.1")
    b.add_output(x, "output", TensorProto.FLOAT, [BATCH, 1000])
    return b.model()


# ---------------------------------------------------------------------------------------------------------------------
# SqueezeNet 1.1
# ---------------------------------------------------------------------------------------------------------------------

def build_squeezenet():
    b = Builder("squeezenet1_1", seed=11)

    def relu_conv(x, name, cin, cout, k, stride=1, pad=0):
        return b.node("Relu", [conv(b, x, name, cin, cout, k, stride=stride, pad=pad, bias=True)])

    def fire(x, name, cin, squeeze, e1, e3):
        s = relu_conv(x, name + ".squeeze", cin, squeeze, 1)
        a = relu_conv(s, name + ".expand1x1", squeeze, e1, 1)
        c = relu_conv(s, name + ".expand3x3", squeeze, e3, 3, pad=1)
        return b.node("Concat", [a, c], axis=1)

    def maxpool(x):
        return b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)

    x = image_input(b)
    x = relu_conv(x, "features.0", 3, 64, 3, stride=2)
    x = maxpool(x)
    x = fire(x, "features.3", 64, 16, 64, 64)
    x = fire(x, "features.4", 128, 16, 64, 64)
    x = maxpool(x)
    x = fire(x, "features.6", 128, 32, 128, 128)
    x = fire(x, "features.7", 256, 32, 128, 128)
    x = maxpool(x)
    x = fire(x, "features.9", 256, 48, 192, 192)
    x = fire(x, "features.10", 384, 48, 192, 192)
    x = fire(x, "features.11", 384, 64, 256, 256)
    x = fire(x, "features.12", 512, 64, 256, 256)
    x = b.node("Dropout", [x])
    x = relu_conv(x, "classifier.1", 512, 1000, 1)
    x = b.node("GlobalAveragePool", [x])
    x = b.node("Flatten", [x], axis=1)
    b.add_output(x, "output", TensorProto.FLOAT, [BATCH, 1000])
    return b.model()


# ---------------------------------------------------------------------------------------------------------------------
# BERT encoder, shaped like torch.onnx.export(BertModel) output: shape arithmetic through Shape/Gather/Unsqueeze/Concat,
# the extended attention mask from attention_mask, decomposed erf GELU, and LayerNorm either decomposed (opset 13) or
# as LayerNormalization (opset 17).
# ---------------------------------------------------------------------------------------------------------------------

BERT_CONFIGS = {
    "bert_tiny": dict(hidden=128, layers=2, heads=4, inter=512, vocab=1000, seq=128, max_pos=512, seed=128),
    "bert_base": dict(hidden=768, layers=12, heads=12, inter=3072, vocab=30522, seq=128, max_pos=512, seed=768),
}


def build_bert(name, fused_ln=False, symbolic=False):
    cfg = BERT_CONFIGS[name.replace("_ln", "")]
    H, L, nh, I, V, S, P = (cfg[k] for k in ("hidden", "layers", "heads", "inter", "vocab", "seq", "max_pos"))
    dh = H // nh
    b = Builder(name, seed=cfg["seed"], opset=17 if fused_ln else 13)
    batch, seq = ("batch", "sequence") if symbolic else (1, S)
    ids = b.add_input("input_ids", TensorProto.INT64, [batch, seq])
    mask = b.add_input("attention_mask", TensorProto.INT64, [batch, seq])

    def i64(v):
        return b.const(v, np.int64)

    def f32(v):
        return b.const(v, np.float32)

    def layer_norm(x, p):
        g = b.uniform(p + ".weight", (H,), 0.8, 1.2)
        beta = b.normal(p + ".bias", (H,), 0.1)
        if fused_ln:
            return b.node("LayerNormalization", [x, g, beta], name=p, axis=-1, epsilon=1e-12)
        mean = b.node("ReduceMean", [x], axes=[-1], keepdims=1)
        d = b.node("Sub", [x, mean])
        var = b.node("ReduceMean", [b.node("Pow", [d, f32(2.0)])], axes=[-1], keepdims=1)
        n = b.node("Div", [d, b.node("Sqrt", [b.node("Add", [var, f32(1e-12)])])])
        return b.node("Add", [b.node("Mul", [n, g]), beta])

    def linear(x, p, fin, fout):
        w = b.normal(p + ".weight", (fin, fout), np.sqrt(1.0 / fin))  # stored transposed, as exporters do for MatMul
        bias = b.normal(p + ".bias", (fout,), 0.02)
        return b.node("Add", [bias, b.node("MatMul", [x, w])])

    def dim(x, axis):
        """Unsqueezed dim `axis` of x, computed at run time: Shape -> Gather -> Unsqueeze."""
        g = b.node("Gather", [b.node("Shape", [x]), i64(axis)], axis=0)
        return b.node("Unsqueeze", [g, i64([0])])

    # Embeddings: word + position (sliced from a buffer) + token type (zeros buffer sliced and expanded).
    word = b.normal("embeddings.word_embeddings.weight", (V, H), 1.0)
    pos = b.normal("embeddings.position_embeddings.weight", (P, H), 0.5)
    tok = b.normal("embeddings.token_type_embeddings.weight", (2, H), 0.5)
    pos_ids = b.init("embeddings.position_ids", np.arange(P, dtype=np.int64).reshape(1, P))
    tt_ids = b.init("embeddings.token_type_ids", np.zeros((1, P), dtype=np.int64))
    batch_dim = dim(ids, 0)
    seq_dim = dim(ids, 1)
    pos_sl = b.node("Slice", [pos_ids, i64([0]), seq_dim, i64([1]), i64([1])])
    tt_sl = b.node("Slice", [tt_ids, i64([0]), seq_dim, i64([1]), i64([1])])
    tt = b.node("Expand", [tt_sl, b.node("Concat", [batch_dim, seq_dim], axis=0)])
    e = b.node("Add", [b.node("Gather", [word, ids], axis=0), b.node("Gather", [tok, tt], axis=0)])
    e = b.node("Add", [e, b.node("Gather", [pos, pos_sl], axis=0)])
    x = layer_norm(e, "embeddings.LayerNorm")

    # Extended attention mask: (1 - mask[:, None, None, :].float()) * -10000
    m = b.node("Unsqueeze", [b.node("Unsqueeze", [mask, i64([1])]), i64([2])])
    m = b.node("Cast", [m], to=TensorProto.FLOAT)
    m = b.node("Mul", [b.node("Sub", [f32(1.0), m]), f32(-10000.0)])

    for li in range(L):
        p = "encoder.layer.%d" % li

        def heads(t):
            shape = b.node("Concat", [dim(t, 0), dim(t, 1), i64([nh]), i64([dh])], axis=0)
            return b.node("Transpose", [b.node("Reshape", [t, shape])], perm=[0, 2, 1, 3])

        q = heads(linear(x, p + ".attention.self.query", H, H))
        k = heads(linear(x, p + ".attention.self.key", H, H))
        v = heads(linear(x, p + ".attention.self.value", H, H))
        kt = b.node("Transpose", [k], perm=[0, 1, 3, 2])
        scores = b.node("Div", [b.node("MatMul", [q, kt]), f32(np.sqrt(dh))])
        probs = b.node("Softmax", [b.node("Add", [scores, m])], axis=-1)
        ctx = b.node("Transpose", [b.node("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        ctx = b.node("Reshape", [ctx, b.node("Concat", [dim(ctx, 0), dim(ctx, 1), i64([H])], axis=0)])
        a = linear(ctx, p + ".attention.output.dense", H, H)
        x = layer_norm(b.node("Add", [a, x]), p + ".attention.output.LayerNorm")
        h = linear(x, p + ".intermediate.dense", H, I)
        gelu = b.node("Add", [b.node("Erf", [b.node("Div", [h, f32(1.4142135381698608)])]), f32(1.0)])
        h = b.node("Mul", [b.node("Mul", [h, gelu]), f32(0.5)])
        o = linear(h, p + ".output.dense", I, H)
        x = layer_norm(b.node("Add", [o, x]), p + ".output.LayerNorm")

    last = b.add_output(x, "last_hidden_state", TensorProto.FLOAT, [batch, seq, H])
    first = b.node("Gather", [last, i64(0)], axis=1)
    wp = b.normal("pooler.dense.weight", (H, H), np.sqrt(1.0 / H))
    bp = b.normal("pooler.dense.bias", (H,), 0.02)
    pooled = b.node("Tanh", [b.node("Gemm", [first, wp, bp], alpha=1.0, beta=1.0, transB=1)])
    b.add_output(pooled, "pooler_output", TensorProto.FLOAT, [batch, H])
    return b.model()


# ---------------------------------------------------------------------------------------------------------------------
# MLP
# ---------------------------------------------------------------------------------------------------------------------

def build_mlp():
    b = Builder("mlp", seed=256)
    x = b.add_input("input", TensorProto.FLOAT, [1, 256])
    w1 = b.normal("fc1.weight", (512, 256), np.sqrt(2.0 / 256))
    b1 = b.normal("fc1.bias", (512,), 0.05)
    x = b.node("Relu", [b.node("Gemm", [x, w1, b1], transB=1)])
    w2 = b.normal("fc2.weight", (512, 256), np.sqrt(2.0 / 512))
    b2 = b.normal("fc2.bias", (256,), 0.05)
    x = b.node("Relu", [b.node("Add", [b.node("MatMul", [x, w2]), b2])])
    w3 = b.normal("fc3.weight", (256, 10), np.sqrt(1.0 / 256))
    b3 = b.normal("fc3.bias", (10,), 0.05)
    x = b.node("Gemm", [x, w3, b3])
    b.add_output(x, "output", TensorProto.FLOAT, [1, 10])
    return b.model()


# ---------------------------------------------------------------------------------------------------------------------
# Registry, inputs, CLI
# ---------------------------------------------------------------------------------------------------------------------

ALIASES = {"squeezenet1.1": "squeezenet", "squeezenet1_1": "squeezenet"}


def _image_inputs(seed):
    rs = np.random.RandomState(seed)
    return [("input", rs.standard_normal(size=(BATCH, 3, 224, 224)).astype(np.float32))]


def _bert_inputs(name):
    cfg = BERT_CONFIGS[name.replace("_ln", "")]
    rs = np.random.RandomState(1000 + cfg["seed"])
    seq, valid = cfg["seq"], cfg["seq"] - 28  # the last 28 positions are padding, masked out
    ids = rs.randint(1, cfg["vocab"], size=(1, seq)).astype(np.int64)
    ids[:, valid:] = 0
    mask = np.zeros((1, seq), dtype=np.int64)
    mask[:, :valid] = 1
    return [("input_ids", ids), ("attention_mask", mask)]


MODELS = {
    "resnet50": (build_resnet50, lambda: _image_inputs(5050)),
    "mobilenet_v2": (build_mobilenet_v2, lambda: _image_inputs(5002)),
    "squeezenet": (build_squeezenet, lambda: _image_inputs(5011)),
    "bert_tiny": (lambda **kw: build_bert("bert_tiny", **kw), lambda: _bert_inputs("bert_tiny")),
    "bert_tiny_ln": (lambda **kw: build_bert("bert_tiny_ln", fused_ln=True, **kw), lambda: _bert_inputs("bert_tiny")),
    "bert_base": (lambda **kw: build_bert("bert_base", **kw), lambda: _bert_inputs("bert_base")),
    "bert_base_ln": (lambda **kw: build_bert("bert_base_ln", fused_ln=True, **kw), lambda: _bert_inputs("bert_base")),
    "mlp": (build_mlp, lambda: [("input", np.random.RandomState(5256).standard_normal(size=(1, 256))
                                 .astype(np.float32))]),
}


def build_model(name, symbolic_dims=False):
    fn = MODELS[name][0]
    return fn(symbolic=symbolic_dims) if name.startswith("bert") else fn()


def model_inputs(name):
    return MODELS[name][1]()


def _atomic_write(path, data):
    tmp = "%s.tmp%d" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir", nargs="?")
    ap.add_argument("--models", default=",".join(TEST_MODELS),
                    help="comma-separated list (default: the test set %s)" % ",".join(TEST_MODELS))
    ap.add_argument("--inputs", action="store_true", help="write test inputs instead of models")
    ap.add_argument("--check", action="store_true", help="run the ONNX checker (with shape inference) on each model")
    ap.add_argument("--symbolic-dims", action="store_true", help="BERT inputs get symbolic [batch, sequence] dims")
    ap.add_argument("--list", action="store_true", help="list the models and exit")
    ap.add_argument("--batch", type=int, default=1,
                    help="batch of the image models (%s), written as NAME_bN (default 1)" % ",".join(IMAGE_MODELS))
    args = ap.parse_args(argv)
    if args.list:
        print("\n".join(MODELS))
        return 0
    if not args.out_dir:
        ap.error("OUT_DIR is required")
    names = [ALIASES.get(n, n) for n in args.models.split(",") if n]
    for n in names:
        if n not in MODELS:
            ap.error("unknown model '%s' (known: %s)" % (n, ", ".join(MODELS)))
        if args.batch != 1 and n not in IMAGE_MODELS:
            ap.error("--batch applies to the image models only (%s), not '%s'" % (", ".join(IMAGE_MODELS), n))
    if args.batch < 1:
        ap.error("--batch must be >= 1")
    global BATCH
    BATCH = args.batch
    suffix = "" if BATCH == 1 else "_b%d" % BATCH
    os.makedirs(args.out_dir, exist_ok=True)
    for n in names:
        if args.inputs:
            d = os.path.join(args.out_dir, n + suffix, "test_data_set_0")
            os.makedirs(d, exist_ok=True)
            for i, (iname, arr) in enumerate(model_inputs(n)):
                _atomic_write(os.path.join(d, "input_%d.pb" % i),
                              numpy_helper.from_array(arr, iname).SerializeToString())
            continue
        m = build_model(n, symbolic_dims=args.symbolic_dims)
        if args.check:
            onnx.checker.check_model(m, full_check=True)
        _atomic_write(os.path.join(args.out_dir, n + suffix + ".onnx"), m.SerializeToString())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
