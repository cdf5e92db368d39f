#!/usr/bin/python3
"""Probe of a pyannote segmentation-3.0-style speaker segmentation net, shaped as torch.onnx exports it at opset 13
(random weights; the sinc filterbank constant-folded into the first Conv1d's weights, as export folds it):

  speech_probes.py OUT.onnx

SincNet (InstanceNorm1d of the waveform, Conv1d 1->80 k=251 stride 10, Abs, MaxPool1d 3, InstanceNorm1d, LeakyReLU,
then two Conv1d k=5 60 channels), a 4-layer bidirectional LSTM (hidden 128, batch_first through Transposes, zero
states sized from the run-time batch), Linear 256->128->128 with LeakyReLU, Linear(7), LogSoftmax; input [batch, 1,
samples]. Not in the zoo (no checked-in references).
"""
import os
import sys

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "zoo"))
from gen_zoo import ZooBuilder, bilstm_layer, conv, FLOAT  # noqa: E402


def inorm(b, x, name, c):
    return b.node("InstanceNormalization", [x, b.uniform(name + ".weight", (c,), 0.8, 1.2), b.normal(name + ".bias", (c,), 0.05)], epsilon=1e-5)

def build():
    b = ZooBuilder("pyannote", seed=9200, opset=13)
    x = b.add_input("input_values", FLOAT, ["batch", 1, "samples"])
    y = inorm(b, x, "sincnet.wav_norm1d", 1)
    y = b.node("Abs", [conv(b, y, "sincnet.conv1d.0", 1, 80, (251,), stride=(10,), pad=(0,), std=0.05)])
    chans = [80, 60, 60]
    for i in range(3):
        if i > 0:
            y = conv(b, y, "sincnet.conv1d.%d" % i, chans[i - 1], chans[i], (5,), pad=(0,), bias=True)
        y = b.node("MaxPool", [y], kernel_shape=[3], strides=[3])
        y = b.node("LeakyRelu", [inorm(b, y, "sincnet.norm1d.%d" % i, chans[i])], alpha=0.01)
    seq = b.node("Transpose", [y], perm=[2, 0, 1])  # [T, B, 60]
    H, c_in = 128, 60
    batch = b.dim(x, 0)
    for layer in range(4):
        seq = bilstm_layer(b, seq, "lstm.%d" % layer, c_in, H, batch)
        c_in = 2 * H
    y = b.node("Transpose", [seq], perm=[1, 0, 2])  # [B, T, 256]
    for i, (fi, fo) in enumerate(((256, 128), (128, 128))):
        w = b.normal("linear.%d.weight" % i, (fi, fo), np.sqrt(2.0 / fi))
        y = b.node("LeakyRelu", [b.node("Add", [b.node("MatMul", [y, w]), b.normal("linear.%d.bias" % i, (fo,), 0.05)])], alpha=0.01)
    w = b.normal("classifier.weight", (128, 7), np.sqrt(1.0 / 128))
    y = b.node("LogSoftmax", [b.node("Add", [b.node("MatMul", [y, w]), b.normal("classifier.bias", (7,), 0.05)])], axis=-1)
    b.add_output(y, "logits", FLOAT, ["batch", "frames", 7])
    return b.model()

if __name__ == "__main__":
    m = build()
    onnx.checker.check_model(m)
    onnx.save(m, sys.argv[1])
    print("wrote", sys.argv[1], len(m.graph.node), "nodes")
