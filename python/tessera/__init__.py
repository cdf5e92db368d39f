"""Tessera: an inference compiler for ONNX models that places each region on the backend that runs it best.

    import numpy as np, tessera
    s = tessera.InferenceSession("model.onnx", backends=["dnnl", "native"], threads=2)
    x = np.zeros(s.get_inputs()[0].shape, dtype=np.float32)
    y, = s.run(None, {s.get_inputs()[0].name: x})

The module is a thin layer over Tessera's C API (libtessera.so, include/tessera/tessera.h).
"""


class Error(RuntimeError):
    """A Tessera failure, with the one-line message the command line prints."""


class InvalidArgument(Error, ValueError):
    """A bad argument: a wrong dtype or shape, a missing or unknown input, a bad option."""


from . import _tessera  # noqa: E402

_tessera._set_errors(Error, InvalidArgument)

__version__ = _tessera.version()
InferenceSession = _tessera.InferenceSession
NodeArg = _tessera.NodeArg
available_backends = _tessera.available_backends


def compile(model, out_path, backends=None, shapes=None, tune=False, threads=None, precision=None):
    """Compiles an ONNX model (a path or bytes) into the artifact `out_path`, as `tessera compile` does.
    precision: "fp32" (default), "bf16" or "fp16", as --precision."""
    return _tessera.compile(model, out_path, backends, shapes, tune, threads, precision)


def partition(model, backends=None, shapes=None, tune=False, threads=None, placement=None, precision=None):
    """The placement report of `tessera partition --json` for an ONNX model at a path, as a dict; below fp32 its
    "accuracy" lists every output's max abs/rel error and cosine against fp32."""
    import json
    return json.loads(_tessera.partition(model, backends, shapes, tune, threads, placement, precision))


def inspect(path):
    """What an artifact holds, as `tessera inspect --json` prints it, as a dict."""
    import json
    return json.loads(_tessera.inspect(path))


__all__ = ["Error", "InvalidArgument", "InferenceSession", "NodeArg", "available_backends", "compile", "partition",
           "inspect", "__version__"]
