"""The Python package (python/tessera) as a notebook or a server would use it, against ONNX Runtime's reference
outputs of the generated e2e models. Run by tests/python/run_python_tests.sh (CTest python_tests)."""
import os
import threading

import numpy as np
import onnx
import onnx.numpy_helper
import pytest

import tessera

MODELS = os.environ["TESSERA_API_MODELS"]
REFERENCE = os.environ["TESSERA_API_REFERENCE"]


def model(name):
    return os.path.join(MODELS, name + ".onnx")


def ref(name, kind, i):
    t = onnx.TensorProto()
    with open(os.path.join(REFERENCE, name, "test_data_set_0", f"{kind}_{i}.pb"), "rb") as f:
        t.ParseFromString(f.read())
    return onnx.numpy_helper.to_array(t)


def close(got, want):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_version_and_backends():
    assert tessera.__version__.count(".") == 2
    backends = tessera.available_backends()
    assert backends[-1] == "native"


def test_session_describes_inputs_like_onnx_runtime_and_matches_it():
    s = tessera.InferenceSession(model("bert_tiny"), backends=["native"], threads=2)
    ins = s.get_inputs()
    assert [i.name for i in ins] == ["input_ids", "attention_mask"]
    assert ins[0].type == "tensor(int64)"
    assert ins[0].shape == [1, 128]
    assert [o.name for o in s.get_outputs()] == ["last_hidden_state", "pooler_output"]
    assert s.get_outputs()[1].type == "tensor(float)"
    feeds = {"input_ids": ref("bert_tiny", "input", 0), "attention_mask": ref("bert_tiny", "input", 1)}
    out = s.run(None, feeds)
    assert isinstance(out, list) and len(out) == 2
    close(out[0], ref("bert_tiny", "output", 0))
    close(out[1], ref("bert_tiny", "output", 1))
    # Requested outputs, in the requested order.
    pooled, hidden = s.run(["pooler_output", "last_hidden_state"], feeds)
    close(pooled, ref("bert_tiny", "output", 1))
    close(hidden, ref("bert_tiny", "output", 0))


def test_symbolic_dims_are_named_and_shapes_pin_them():
    # The generated mlp has a static input; pin a shape on an input that exists and see it in get_inputs.
    s = tessera.InferenceSession(model("mlp"), shapes={"input": [1, 256]}, backends=["native"])
    assert s.get_inputs()[0].shape == [1, 256]


def test_bytes_artifacts_and_reports():
    x = ref("mlp", "input", 0)
    want = ref("mlp", "output", 0)
    with open(model("mlp"), "rb") as f:
        onnx_bytes = f.read()
    s = tessera.InferenceSession(onnx_bytes)
    close(s.run(None, {"input": x})[0], want)
    tsr = os.path.join(MODELS, f"py_mlp_{os.getpid()}.tsr")
    tessera.compile(model("mlp"), tsr)
    try:
        close(tessera.InferenceSession(tsr).run(None, {"input": x})[0], want)
        with open(tsr, "rb") as f:
            close(tessera.InferenceSession(f.read()).run(None, {"input": x})[0], want)
        info = tessera.inspect(tsr)
        assert "sections" in info
    finally:
        os.remove(tsr)
    report = tessera.partition(model("mlp"))
    assert "regions" in report


def test_non_contiguous_inputs_and_threads():
    s = tessera.InferenceSession(model("mlp"), backends=["native"])
    x = ref("mlp", "input", 0)
    want = ref("mlp", "output", 0)
    wide = np.zeros((1, 512), dtype=np.float32)
    wide[:, ::2] = x
    close(s.run(None, {"input": wide[:, ::2]})[0], want)  # a strided view is made contiguous first
    results = []

    def worker():
        for _ in range(50):
            results.append(s.run(None, {"input": x})[0])

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 200
    for r in results:
        np.testing.assert_array_equal(r, results[0])


def test_errors_carry_the_message_and_bad_arguments_are_value_errors():
    with pytest.raises(tessera.Error, match="does not exist"):
        tessera.InferenceSession("/nonexistent/model.onnx")
    with pytest.raises(tessera.Error):
        tessera.InferenceSession(b"definitely not a model")
    s = tessera.InferenceSession(model("mlp"), backends=["native"])
    x = ref("mlp", "input", 0)
    with pytest.raises(tessera.InvalidArgument, match="input"):
        s.run(None, {"input": x.astype(np.float64)})
    with pytest.raises(ValueError):
        s.run(None, {"input": x.reshape(2, 128)})
    with pytest.raises(tessera.InvalidArgument, match="dtype"):
        s.run(None, {"input": x.astype(">f4")})  # byte-swapped: refused, never read as native floats
    with pytest.raises(ValueError, match="missing"):
        s.run(None, {})
    with pytest.raises(ValueError, match="nope"):
        s.run(None, {"input": x, "nope": x})
    with pytest.raises(ValueError, match="nope"):
        s.run(["nope"], {"input": x})
    assert issubclass(tessera.InvalidArgument, RuntimeError)


def test_precision_bf16_reports_its_accuracy_or_is_refused():
    with pytest.raises(tessera.InvalidArgument, match="int4"):
        tessera.partition(model("mlp"), precision="int4")
    has_bf16 = "avx512_bf16" in open("/proc/cpuinfo").read() and os.environ.get("TESSERA_ISA") != "avx2"
    if not has_bf16:
        with pytest.raises(tessera.Error, match="BF16"):
            tessera.partition(model("mlp"), precision="bf16")
        return
    if "dnnl" not in tessera.available_backends():
        pytest.skip("no dnnl plugin")
    report = tessera.partition(model("mlp"), backends=["dnnl", "native"], placement="priority", precision="bf16")
    assert report["precision"] == "bf16"
    [acc] = report["accuracy"]
    assert acc["output"] == "output" and acc["cosine"] >= 0.999 and acc["max_abs"] > 0

