// The Python module tessera._tessera, over Tessera's C API only
// (include/tessera/tessera.h, libtessera.so). Inputs that are C-contiguous
// numpy arrays are handed to Tessera without a copy; outputs are numpy arrays
// over the values Tessera returns (no copy either); the GIL is released while
// a model runs, so threads can run one session at once.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tessera/tessera.h"

namespace py = pybind11;

namespace {

// tessera.Error and tessera.InvalidArgument, set by the package's __init__.
py::object g_error, g_invalid;

[[noreturn]] void raise(tessera_error_t* e) {
  const tessera_code_t code = tessera_error_code(e);
  const std::string msg = tessera_error_message(e);
  tessera_error_release(e);
  py::object cls = code == TESSERA_CODE_INVALID_ARGUMENT ? g_invalid : g_error;
  if (!cls) throw std::runtime_error(msg);
  PyErr_SetString(cls.ptr(), msg.c_str());
  throw py::error_already_set();
}

void check(tessera_error_t* e) {
  if (e) raise(e);
}

[[noreturn]] void raise_invalid(const std::string& msg) {
  if (!g_invalid) throw py::value_error(msg);
  PyErr_SetString(g_invalid.ptr(), msg.c_str());
  throw py::error_already_set();
}

// A process-wide environment for the module's sessions.
tessera_env_t* env() {
  static tessera_env_t* e = [] {
    tessera_env_t* p = nullptr;
    check(tessera_env_create(&p));
    return p;
  }();
  return e;
}

struct OptionsHolder {
  tessera_session_options_t* o = nullptr;
  OptionsHolder() { check(tessera_session_options_create(&o)); }
  ~OptionsHolder() { tessera_session_options_release(o); }
};

// backends: None or a list of names; shapes: None or {name: [ints]}.
void fill_options(OptionsHolder& h, const py::object& backends, const py::object& shapes, bool tune,
                  const py::object& threads, const py::object& placement, const py::object& precision = py::none()) {
  if (!backends.is_none()) {
    std::string list;
    for (const auto& b : backends) list += (list.empty() ? "" : ",") + py::cast<std::string>(b);
    check(tessera_session_options_set_backends(h.o, list.c_str()));
  }
  if (!shapes.is_none()) {
    for (const auto& kv : py::cast<py::dict>(shapes)) {
      const std::string name = py::cast<std::string>(kv.first);
      std::vector<int64_t> dims = py::cast<std::vector<int64_t>>(kv.second);
      check(tessera_session_options_set_shape(h.o, name.c_str(), dims.data(), dims.size()));
    }
  }
  if (tune) check(tessera_session_options_set_tune(h.o, TESSERA_TUNE_FULL));
  if (!threads.is_none()) check(tessera_session_options_set_threads(h.o, py::cast<int>(threads)));
  if (!placement.is_none()) {
    check(tessera_session_options_set_placement(h.o, py::cast<std::string>(placement).c_str()));
  }
  if (!precision.is_none()) {
    check(tessera_session_options_set_precision(h.o, py::cast<std::string>(precision).c_str()));
  }
}

// Each Tessera dtype with its numpy name (none for bfloat16) and ONNX
// Runtime's type string.
struct DtypeNames {
  int32_t dtype;
  const char* numpy;
  const char* ort;
};
constexpr DtypeNames kDtypes[] = {
    {TESSERA_DTYPE_FLOAT32, "float32", "tensor(float)"},   {TESSERA_DTYPE_UINT8, "uint8", "tensor(uint8)"},
    {TESSERA_DTYPE_INT8, "int8", "tensor(int8)"},          {TESSERA_DTYPE_UINT16, "uint16", "tensor(uint16)"},
    {TESSERA_DTYPE_INT16, "int16", "tensor(int16)"},       {TESSERA_DTYPE_INT32, "int32", "tensor(int32)"},
    {TESSERA_DTYPE_INT64, "int64", "tensor(int64)"},       {TESSERA_DTYPE_BOOL, "bool", "tensor(bool)"},
    {TESSERA_DTYPE_FLOAT16, "float16", "tensor(float16)"}, {TESSERA_DTYPE_FLOAT64, "float64", "tensor(double)"},
    {TESSERA_DTYPE_UINT32, "uint32", "tensor(uint32)"},    {TESSERA_DTYPE_UINT64, "uint64", "tensor(uint64)"},
    {TESSERA_DTYPE_BFLOAT16, nullptr, "tensor(bfloat16)"},
};

std::string type_string(int32_t dtype) {
  for (const auto& d : kDtypes) {
    if (d.dtype == dtype) return d.ort;
  }
  return "tensor(undefined)";
}

// The Tessera dtype of a numpy dtype in native byte order; 0 for any other
// (bfloat16 has no numpy dtype; a byte-swapped array would be read wrong).
int32_t tessera_dtype(const py::dtype& t) {
  for (const auto& d : kDtypes) {
    if (d.numpy && t.equal(py::dtype(d.numpy))) return d.dtype;
  }
  return 0;
}

py::dtype numpy_dtype(int32_t dtype) {
  for (const auto& d : kDtypes) {
    if (d.dtype == dtype && d.numpy) return py::dtype(d.numpy);
  }
  raise_invalid("an output of dtype " + std::to_string(dtype) + " has no numpy equivalent");
}

// A str or os.PathLike as a path.
std::string model_path(const py::object& model) {
  return py::cast<std::string>(py::module_::import("os").attr("fspath")(model));
}

// ONNX Runtime's NodeArg: name, shape (ints, str for symbolic dims, None for unknown), type.
struct NodeArg {
  std::string name;
  py::object shape;
  std::string type;
};

NodeArg node_arg(const tessera_io_info_t& info) {
  NodeArg a;
  a.name = info.name;
  a.type = type_string(info.dtype);
  if (info.rank < 0) {
    a.shape = py::none();
  } else {
    py::list shape;
    for (int32_t i = 0; i < info.rank; ++i) {
      if (info.dims[i] >= 0)
        shape.append(info.dims[i]);
      else if (info.dim_names[i] && *info.dim_names[i])
        shape.append(std::string(info.dim_names[i]));
      else
        shape.append(py::none());
    }
    a.shape = shape;
  }
  return a;
}

class Session {
 public:
  Session(const py::object& model, const py::object& backends, const py::object& threads, const py::object& shapes) {
    OptionsHolder h;
    fill_options(h, backends, shapes, false, threads, py::none());
    if (py::isinstance<py::bytes>(model) || py::isinstance<py::bytearray>(model)) {
      const std::string bytes = py::isinstance<py::bytes>(model) ? std::string(py::cast<py::bytes>(model))
                                                                 : std::string(py::cast<py::bytearray>(model));
      tessera_error_t* e = nullptr;
      {
        py::gil_scoped_release nogil;
        e = tessera_session_create_from_buffer(env(), bytes.data(), bytes.size(), h.o, &s_);
      }
      check(e);  // with the GIL: raising sets a Python exception
    } else {
      const std::string path = model_path(model);
      tessera_error_t* e = nullptr;
      {
        py::gil_scoped_release nogil;
        e = tessera_session_create(env(), path.c_str(), h.o, &s_);
      }
      check(e);
    }
    size_t n = 0;
    check(tessera_session_input_count(s_, &n));
    for (size_t i = 0; i < n; ++i) {
      tessera_io_info_t info{};
      check(tessera_session_input_info(s_, i, &info));
      inputs_.push_back(node_arg(info));
    }
    check(tessera_session_output_count(s_, &n));
    for (size_t i = 0; i < n; ++i) {
      tessera_io_info_t info{};
      check(tessera_session_output_info(s_, i, &info));
      outputs_.push_back(node_arg(info));
    }
  }
  ~Session() { tessera_session_release(s_); }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const std::vector<NodeArg>& inputs() const { return inputs_; }
  const std::vector<NodeArg>& outputs() const { return outputs_; }

  py::list run(const py::object& output_names, const py::dict& feeds) {
    // Inputs: C-contiguous arrays are wrapped in place; others are made contiguous first.
    std::vector<py::array> arrays;
    std::vector<std::string> names;
    std::vector<tessera_value_t*> values;
    struct Release {
      std::vector<tessera_value_t*>* v;
      ~Release() {
        for (auto* x : *v) tessera_value_release(x);
      }
    } release_inputs{&values};
    for (const auto& kv : feeds) {
      names.push_back(py::cast<std::string>(kv.first));
      py::array a = py::array::ensure(kv.second, py::array::c_style);
      if (!a) raise_invalid("input '" + names.back() + "' is not an array");
      const int32_t dt = tessera_dtype(a.dtype());
      if (dt == 0) raise_invalid("input '" + names.back() + "' has a dtype Tessera does not take");
      std::vector<int64_t> dims(a.shape(), a.shape() + a.ndim());
      tessera_value_t* v = nullptr;
      // Inputs are only read: a read-only array is fine.
      check(tessera_value_wrap(dt, dims.data(), dims.size(), const_cast<void*>(a.data()),
                               static_cast<size_t>(a.nbytes()), &v));
      values.push_back(v);
      arrays.push_back(std::move(a));  // keeps the memory alive during the run
    }
    std::vector<std::string> onames;
    if (!output_names.is_none()) {
      for (const auto& n : output_names) onames.push_back(py::cast<std::string>(n));
    }
    std::vector<const char*> cnames, conames;
    for (const auto& n : names) cnames.push_back(n.c_str());
    for (const auto& n : onames) conames.push_back(n.c_str());
    std::vector<const tessera_value_t*> cvalues(values.begin(), values.end());
    const size_t n_out = output_names.is_none() ? outputs_.size() : onames.size();
    std::vector<tessera_value_t*> outs(n_out, nullptr);
    tessera_error_t* e = nullptr;
    {
      py::gil_scoped_release nogil;
      e = tessera_session_run(s_, nullptr, cnames.data(), cvalues.data(), cvalues.size(),
                              output_names.is_none() ? nullptr : conames.data(), outs.data(), outs.size());
    }
    check(e);
    py::list result;
    for (size_t i = 0; i < outs.size(); ++i) {
      tessera_value_t* v = outs[i];
      py::capsule owner(v, [](void* p) { tessera_value_release(static_cast<tessera_value_t*>(p)); });
      const int64_t* d = tessera_value_dims(v);
      std::vector<py::ssize_t> shape(d, d + tessera_value_rank(v));
      result.append(py::array(numpy_dtype(tessera_value_dtype(v)), shape, tessera_value_data(v), owner));
      outs[i] = nullptr;
    }
    return result;
  }

 private:
  tessera_session_t* s_ = nullptr;
  std::vector<NodeArg> inputs_, outputs_;
};

void compile(const py::object& model, const py::object& out_path, const py::object& backends, const py::object& shapes,
             bool tune, const py::object& threads, const py::object& precision) {
  OptionsHolder h;
  fill_options(h, backends, shapes, tune, threads, py::none(), precision);
  const std::string out = model_path(out_path);
  if (py::isinstance<py::bytes>(model)) {
    const std::string bytes = py::cast<py::bytes>(model);
    char* art = nullptr;
    size_t size = 0;
    tessera_error_t* e = nullptr;
    {
      py::gil_scoped_release nogil;
      e = tessera_compile_buffer(env(), bytes.data(), bytes.size(), h.o, &art, &size);
    }
    check(e);
    std::ofstream f(out, std::ios::binary);
    f.write(art, static_cast<std::streamsize>(size));
    tessera_string_free(art);
    if (!f.good()) throw py::value_error("cannot write '" + out + "'");
    return;
  }
  const std::string path = model_path(model);
  tessera_error_t* e = nullptr;
  {
    py::gil_scoped_release nogil;
    e = tessera_compile(env(), path.c_str(), h.o, out.c_str());
  }
  check(e);
}

std::string take(char* s) {
  std::string r = s ? s : "";
  tessera_string_free(s);
  return r;
}

std::string partition(const py::object& model, const py::object& backends, const py::object& shapes, bool tune,
                      const py::object& threads, const py::object& placement, const py::object& precision) {
  OptionsHolder h;
  fill_options(h, backends, shapes, tune, threads, placement, precision);
  const std::string path = model_path(model);
  char* json = nullptr;
  tessera_error_t* e = nullptr;
  {
    py::gil_scoped_release nogil;
    e = tessera_partition_report(env(), path.c_str(), h.o, &json);
  }
  check(e);
  return take(json);
}

}  // namespace

PYBIND11_MODULE(_tessera, m) {
  m.doc() = "Tessera's C API for Python (use the tessera package)";
  m.def("_set_errors", [](py::object error, py::object invalid) {
    g_error = std::move(error);
    g_invalid = std::move(invalid);
  });
  m.def("version", [] { return std::string(tessera_version_string()); });
  m.def("available_backends", [] {
    char* s = nullptr;
    check(tessera_available_backends(env(), &s));
    const std::string list = take(s);
    py::list r;
    size_t p = 0;
    while (p <= list.size() && !list.empty()) {
      const size_t c = list.find(',', p);
      r.append(list.substr(p, c == std::string::npos ? std::string::npos : c - p));
      if (c == std::string::npos) break;
      p = c + 1;
    }
    return r;
  });
  py::class_<NodeArg>(m, "NodeArg")
      .def_readonly("name", &NodeArg::name)
      .def_readonly("shape", &NodeArg::shape)
      .def_readonly("type", &NodeArg::type)
      .def("__repr__", [](const NodeArg& a) {
        return "NodeArg(name='" + a.name + "', type='" + a.type + "', shape=" + py::str(a.shape).cast<std::string>() +
               ")";
      });
  py::class_<Session>(m, "InferenceSession")
      .def(py::init<const py::object&, const py::object&, const py::object&, const py::object&>(),
           py::arg("path_or_bytes"), py::arg("backends") = py::none(), py::arg("threads") = py::none(),
           py::arg("shapes") = py::none())
      .def("get_inputs", &Session::inputs)
      .def("get_outputs", &Session::outputs)
      .def("run", &Session::run, py::arg("output_names"), py::arg("input_feed"));
  m.def("compile", &compile);
  m.def("partition", &partition);
  m.def("inspect", [](const py::object& path) {
    char* json = nullptr;
    check(tessera_inspect_artifact(model_path(path).c_str(), &json));
    return take(json);
  });
}
