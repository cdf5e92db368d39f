#!/usr/bin/python3
"""Writes the bad models and bad input sets that malformed_test.sh feeds to the tessera CLI.

    make_malformed.py OUT_DIR

OUT_DIR/models/<case>.onnx   mlp.onnx and bert_tiny.onnx (valid), then broken models; every broken one is broken by
                             construction, or (cuts, garbage) confirmed invalid here (protobuf parse error or
                             onnx.checker failure), so a cut that happens to leave a valid model is dropped instead of
                             becoming a false test.
OUT_DIR/inputs/<case>/       input_<i>.pb sets for mlp (input "input" float [1,256]) and bert_tiny: good ones and bad
                             ones (wrong shape, rank, dtype, missing, unreadable).
Everything is deterministic (fixed seeds).
"""

import os
import sys
import warnings

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_models  # noqa: E402


def invalid(data):
    """True when `data` is not a valid model: it fails to parse or fails the checker (with shape inference)."""
    m = onnx.ModelProto()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m.ParseFromString(data)
        onnx.checker.check_model(m, full_check=True)
    except Exception:  # DecodeError, ValidationError, InferenceError, RuntimeWarning-as-error...
        return True
    return False


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def main(out):
    models = os.path.join(out, "models")
    inputs = os.path.join(out, "inputs")
    mlp = gen_models.build_model("mlp")
    mlp_bytes = mlp.SerializeToString()
    write(os.path.join(models, "mlp.onnx"), mlp_bytes)
    write(os.path.join(models, "bert_tiny.onnx"), gen_models.build_model("bert_tiny").SerializeToString())

    bad = {}
    n = len(mlp_bytes)
    for cut in sorted({1, 3, 17, 100, 1000, n // 4, n // 2, 3 * n // 4, n - 100, n - 20, n - 1}):
        bad["truncated_at_%d" % cut] = mlp_bytes[:cut]
    rs = np.random.RandomState(7)
    bad["garbage_random"] = rs.randint(0, 256, size=4096).astype(np.uint8).tobytes()
    bad["garbage_text"] = b"this is not an onnx model\n" * 10
    bad["empty"] = b""

    def mutated(fn):
        m = onnx.ModelProto()
        m.CopyFrom(mlp)
        fn(m)
        return m.SerializeToString()

    def init(m, name):
        return next(t for t in m.graph.initializer if t.name == name)

    def undefined_input(m):
        m.graph.node[1].input[0] = "no_such_value"

    def raw_too_short(m):
        t = init(m, "fc1.weight")
        t.raw_data = t.raw_data[:100]

    def negative_dim(m):
        init(m, "fc2.bias").dims[0] = -1

    def huge_dims(m):
        t = init(m, "fc3.weight")
        del t.dims[:]
        t.dims.extend([1 << 40, 1 << 40])

    # Declared shapes whose element count overflows 64 bits (they once ran and returned an empty tensor).
    def huge_input_2_40(m):
        dims = m.graph.input[0].type.tensor_type.shape.dim
        del dims[:]
        for d in (1 << 40, 1 << 40):
            dims.add().dim_value = d

    def huge_input_2_62(m):
        dims = m.graph.input[0].type.tensor_type.shape.dim
        del dims[:]
        for d in (1 << 62, 4):
            dims.add().dim_value = d

    # A node without the inputs its op requires (kernels and engines index inputs by position).
    def node_without_inputs(m):
        del m.graph.node[0].input[:]

    def undefined_dtype(m):
        init(m, "fc3.bias").data_type = TensorProto.UNDEFINED

    def no_graph(m):
        m.ClearField("graph")

    def dangling_output(m):
        m.graph.output[0].name = "not_produced"

    for name, data in bad.items():
        if invalid(data):
            write(os.path.join(models, "bad_%s.onnx" % name), data)
        else:
            print("make_malformed: %s parses as a valid model, dropped" % name)

    # Broken by construction (onnx 1.12's checker does not see all of these: raw_data size, dangling graph outputs).
    for fn in (undefined_input, raw_too_short, negative_dim, huge_dims, huge_input_2_40, huge_input_2_62,
               node_without_inputs, undefined_dtype, no_graph, dangling_output):
        write(os.path.join(models, "bad_%s.onnx" % fn.__name__), mutated(fn))
    # An Expand to [2^31, 2^31, 2^31]: 2^93 elements.
    expand = helper.make_model(helper.make_graph(
        [helper.make_node("Constant", [], ["shape"], value=numpy_helper.from_array(
            np.array([1 << 31] * 3, np.int64), "shape")),
         helper.make_node("Expand", ["x", "shape"], ["y"])],
        "huge_expand", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]), opset_imports=[helper.make_opsetid("", 13)])
    write(os.path.join(models, "bad_huge_expand.onnx"), expand.SerializeToString())
    # Ops of Tessera's own fusions and ONNX Runtime's contrib ops with fewer inputs than their kernels index (x as the
    # MLP's input, so that `run` with its inputs reaches the kernel).
    for domain, op in (("ai.tessera", "FusedMatMul"), ("ai.tessera", "FusedConvMaxPool"), ("com.microsoft", "FusedConv")):
        attrs = {"pool_kernel": [2, 2]} if op == "FusedConvMaxPool" else {}
        one_input = helper.make_model(helper.make_graph(
            [helper.make_node(op, ["x"], ["y"], domain=domain, **attrs)], "one_input",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]),
            opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(domain, 1)])
        write(os.path.join(models, "bad_%s_with_one_input.onnx" % op), one_input.SerializeToString())

    def tensor_set(case, tensors):
        d = os.path.join(inputs, case)
        os.makedirs(d, exist_ok=True)
        for i, t in enumerate(tensors):
            write(os.path.join(d, "input_%d.pb" % i), t if isinstance(t, bytes) else t.SerializeToString())

    x = gen_models.model_inputs("mlp")[0][1]
    good = numpy_helper.from_array(x, "input")
    tensor_set("mlp_good", [good])
    tensor_set("mlp_wrong_shape", [numpy_helper.from_array(x[:, :255].copy(), "input")])
    tensor_set("mlp_wrong_batch", [numpy_helper.from_array(np.concatenate([x, x]), "input")])
    tensor_set("mlp_wrong_rank", [numpy_helper.from_array(x.reshape(256), "input")])
    tensor_set("mlp_wrong_dtype_double", [numpy_helper.from_array(x.astype(np.float64), "input")])
    tensor_set("mlp_wrong_dtype_int64", [numpy_helper.from_array(x.astype(np.int64), "input")])
    tensor_set("mlp_missing_input", [])
    tensor_set("mlp_garbage_tensor", [rs.randint(0, 256, size=1024).astype(np.uint8).tobytes()])
    tensor_set("mlp_truncated_tensor", [good.SerializeToString()[:500]])
    short = onnx.TensorProto()
    short.CopyFrom(good)
    short.raw_data = short.raw_data[:100]
    tensor_set("mlp_raw_too_short", [short])
    bert = gen_models.model_inputs("bert_tiny")
    tensor_set("bert_good", [numpy_helper.from_array(a, n) for n, a in bert])
    tensor_set("bert_missing_second_input", [numpy_helper.from_array(bert[0][1], bert[0][0])])
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_malformed.py OUT_DIR")
    sys.exit(main(sys.argv[1]))
