// Shared by Tessera's engine plugins (backends/dnnl, backends/xnnpack): the
// pieces every plugin needs around its engine and that have nothing to do with
// it. Like the plugins, it uses only include/tessera/backend.h and the ONNX
// protobuf classes, never Tessera's own library.
//
//   Failure / fail / guarded   exceptions inside, status codes at the ABI
//   ModelView                  a parsed region model: values with types and
//                              static shapes, initializers, nodes, consumers,
//                              attribute access
//   BlobWriter / BlobReader    bounds-checked little-endian blob encoding
//   MachineFigures             the machine a plugin prices its regions on
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/backend.h"

namespace tessera_plugin {

// ---- errors --------------------------------------------------------------

struct Failure {
  tessera_status_t status;
  std::string message;
};

[[noreturn]] void fail(tessera_status_t status, std::string message);

// Copies a one-line message into the ABI's buffer.
void write_msg(char* msg, size_t cap, std::string text);

// Runs fn(); turns a Failure or any exception into a status and a message.
template <class Fn>
tessera_status_t guarded(char* msg, size_t cap, Fn&& fn) {
  try {
    fn();
    return TESSERA_OK;
  } catch (const Failure& f) {
    write_msg(msg, cap, f.message);
    return f.status;
  } catch (const std::bad_alloc&) {
    write_msg(msg, cap, "out of memory");
    return TESSERA_ERROR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    write_msg(msg, cap, std::string("internal error: ") + e.what());
    return TESSERA_ERROR_INTERNAL;
  } catch (...) {
    write_msg(msg, cap, "internal error");
    return TESSERA_ERROR_INTERNAL;
  }
}

// ---- a parsed model -------------------------------------------------------

// Product of `dims` (1 for a scalar; 0 with any dim 0; saturated, never wrapped, past int64) and "[1,3,224,224]".
int64_t numel(const std::vector<int64_t>& dims);
std::string dims_str(const std::vector<int64_t>& dims);

struct ValueType {
  int32_t dtype = 0;             // TESSERA_DTYPE_* / TensorProto.DataType; 0 unknown
  bool ranked = false;
  std::vector<int64_t> dims;     // -1 for a dim that is not a number
  std::string symbol;            // the first symbolic dim's name, if any
  bool is_static() const;        // ranked and every dim known
  int64_t numel() const;         // product of dims (static only)
  std::string str() const;       // "float32[1,3,224,224]"
};

const char* dtype_name(int32_t dtype);
size_t dtype_size(int32_t dtype);

class ModelView {
 public:
  // Parses a serialized ModelProto; fails with TESSERA_ERROR_INVALID_ARGUMENT.
  explicit ModelView(const void* data, size_t size);

  const onnx::GraphProto& graph() const { return model_.graph(); }
  int num_nodes() const { return model_.graph().node_size(); }
  const onnx::NodeProto& node(int i) const { return model_.graph().node(i); }
  int64_t opset() const { return opset_; }

  // Type of a value (graph input/output, value_info, or initializer); an
  // unknown name gives a default (dtype 0, unranked) type.
  const ValueType& type(const std::string& name) const;
  // The initializer of that name, or null.
  const onnx::TensorProto* initializer(const std::string& name) const;
  bool is_initializer(const std::string& name) const { return initializer(name) != nullptr; }
  bool is_graph_output(const std::string& name) const;
  // Indices of nodes reading `name`.
  const std::vector<int>& consumers(const std::string& name) const;

  // The value of the model's metadata_props entry `key`, or "" (the host's "tessera.backend_options" on models
  // given to estimates: the options compile would get).
  std::string metadata(const std::string& key) const;

  std::vector<std::string> input_names() const;   // graph inputs that are not initializers, in order
  std::vector<std::string> output_names() const;

 private:
  onnx::ModelProto model_;
  int64_t opset_ = 0;
  std::map<std::string, ValueType> types_;
  std::map<std::string, const onnx::TensorProto*> inits_;
  std::map<std::string, std::vector<int>> consumers_;
};

// Attribute access on a node, with the ONNX default when absent.
int64_t attr_int(const onnx::NodeProto& n, const std::string& name, int64_t def);
float attr_float(const onnx::NodeProto& n, const std::string& name, float def);
std::string attr_string(const onnx::NodeProto& n, const std::string& name, const std::string& def);
std::vector<int64_t> attr_ints(const onnx::NodeProto& n, const std::string& name, std::vector<int64_t> def = {});
std::vector<float> attr_floats(const onnx::NodeProto& n, const std::string& name);
bool has_attr(const onnx::NodeProto& n, const std::string& name);

// "node 'conv1' (Conv)" for messages.
std::string describe(const onnx::NodeProto& n);

// Reads an initializer's data as float32/int64 values (raw_data or typed
// fields); fails with a message naming it when its type is not convertible.
std::vector<float> initializer_floats(const onnx::TensorProto& t);
// Per node of `m`: whether a node of one of the op types `targets` reads its
// result, at any distance (through any nodes after it).
std::vector<bool> reaches_op(const ModelView& m, const std::vector<std::string>& targets);

std::vector<int64_t> initializer_ints(const onnx::TensorProto& t);

// ---- blobs ---------------------------------------------------------------

class BlobWriter {
 public:
  void u32(uint32_t v) { put(&v, 4); }
  void i32(int32_t v) { put(&v, 4); }
  void i64(int64_t v) { put(&v, 8); }
  void f32(float v) { put(&v, 4); }
  void str(const std::string& s);
  void bytes(const void* p, size_t n) { put(p, n); }
  const std::string& data() const { return buf_; }
  // Copies into a malloc'd tessera_buffer_t (released by free_buffer below).
  void release_to(tessera_buffer_t* out) const;

 private:
  void put(const void* p, size_t n) { buf_.append(static_cast<const char*>(p), n); }
  std::string buf_;
};

// Every read checks bounds; running past the end fails with
// TESSERA_ERROR_INCOMPATIBLE_BLOB ("blob truncated").
class BlobReader {
 public:
  BlobReader(const void* data, size_t size) : p_(static_cast<const char*>(data)), n_(size) {}
  uint32_t u32();
  int32_t i32();
  int64_t i64();
  float f32();
  std::string str(size_t max_len = 1 << 20);
  void bytes(void* out, size_t n);
  bool at_end() const { return pos_ == n_; }
  // An int64 that must lie in [lo, hi].
  int64_t i64_in(int64_t lo, int64_t hi, const char* what);

 private:
  void take(void* out, size_t n);
  const char* p_;
  size_t n_, pos_ = 0;
};

// ---- pricing --------------------------------------------------------------

// The machine a plugin prices its regions on, in flops and bytes per
// microsecond: the host's measurements (estimate_region's tessera_machine_t,
// read as far as its struct_size goes), or, for a host of ABI minor revision
// 0 (estimate_cost), nominal figures. A plugin's own knowledge (which share of
// the peak its kernels reach, what it fuses, its slow paths) multiplies these;
// no absolute speed is a constant of the plugin.
struct MachineFigures {
  int threads = 1;
  double flops_per_us = 1.15e5;  // fp32 FMA peak of one thread
  double bytes_per_us = 1.6e4;   // streaming bandwidth with `threads` threads
  double launch_us = 3.0;        // one run() of a trivial engine of this backend
  double wake_us = 8.0;          // waking a sleeping thread
  int vector_floats = 16;        // floats per vector register: 16 with AVX-512, else 8
  double cycles_per_us = 3.0e3;  // core clock

  static MachineFigures From(const tessera_machine_t* m);
  static MachineFigures Nominal(int threads);
};

// free_buffer for buffers filled by BlobWriter::release_to.
void free_buffer(tessera_buffer_t* b);

// Checks the run descriptors against the expected types (count, dtype,
// dims, size) and fails with TESSERA_ERROR_INVALID_ARGUMENT naming the first
// mismatch.
void check_descriptors(const tessera_tensor_t* t, size_t n, const std::vector<ValueType>& want, const char* what);

}  // namespace tessera_plugin
