// Shared by the C and C++ API tests: where the generated models and ONNX
// Runtime's reference outputs are (tests/api/run_api_tests.sh sets the
// environment), and reading the reference TensorProto files with the ONNX
// library. The tests use nothing of Tessera but its public headers.
#pragma once

#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace apitest {

inline std::string env_dir(const char* var) {
  const char* v = std::getenv(var);
  if (!v || !*v) throw std::runtime_error(std::string(var) + " is not set (run through tests/api/run_api_tests.sh)");
  return v;
}

inline std::string model_path(const std::string& model) {
  return env_dir("TESSERA_API_MODELS") + "/" + model + ".onnx";
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// A reference tensor: dtype (TESSERA_DTYPE_*), dims and raw little-endian bytes.
struct RefTensor {
  int32_t dtype = 0;
  std::vector<int64_t> dims;
  std::string bytes;
  size_t count() const {
    size_t n = 1;
    for (int64_t d : dims) n *= static_cast<size_t>(d);
    return n;
  }
  const float* floats() const { return reinterpret_cast<const float*>(bytes.data()); }
};

// The path of input_<i>.pb / output_<i>.pb of the model's reference test_data_set_0.
inline std::string reference_path(const std::string& model, const std::string& file) {
  return env_dir("TESSERA_API_REFERENCE") + "/" + model + "/test_data_set_0/" + file;
}

// input_<i>.pb / output_<i>.pb of the model's reference test_data_set_0.
inline RefTensor reference(const std::string& model, const std::string& file) {
  onnx::TensorProto t;
  const std::string bytes = read_bytes(reference_path(model, file));
  if (!t.ParseFromString(bytes)) throw std::runtime_error("cannot parse " + file);
  RefTensor r;
  r.dtype = t.data_type();
  r.dims.assign(t.dims().begin(), t.dims().end());
  if (t.has_raw_data()) {
    r.bytes = t.raw_data();
  } else if (t.data_type() == onnx::TensorProto::FLOAT) {
    r.bytes.assign(reinterpret_cast<const char*>(t.float_data().data()), t.float_data_size() * sizeof(float));
  } else if (t.data_type() == onnx::TensorProto::INT64) {
    r.bytes.assign(reinterpret_cast<const char*>(t.int64_data().data()), t.int64_data_size() * sizeof(int64_t));
  } else {
    throw std::runtime_error(file + ": unexpected dtype");
  }
  return r;
}

// Max |a - b| / (atol + rtol |b|) over the elements; <= 1 means close.
inline double worst_ratio(const float* a, const float* b, size_t n, double rtol = 1e-4, double atol = 1e-5) {
  double worst = 0;
  for (size_t i = 0; i < n; ++i) {
    const double r = std::abs(static_cast<double>(a[i]) - b[i]) / (atol + rtol * std::abs(static_cast<double>(b[i])));
    if (!(r <= worst)) worst = r;  // NaN propagates as a failure
  }
  return worst;
}

}  // namespace apitest
