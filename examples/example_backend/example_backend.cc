// The example Tessera backend: a complete plugin, small enough to read in ten
// minutes and to copy when wiring in a real engine (docs/backends.md walks
// through it section by section).
//
// It runs float32 regions with static shapes made of Relu, Sigmoid, Tanh, Exp,
// Neg, Abs, Add, Sub, Mul, Div (numpy broadcasting), MatMul (2-D right
// operand) and Gemm, with plain loops. A real plugin keeps the same skeleton
// and replaces section 5 by calls into its engine.
//
//   1. Errors        one exception type inside, status codes at the boundary
//   2. Program       what compile produces: values with shapes, ops with operand
//                    indices, the region's inputs/outputs; one shape check
//                    shared by capability, compile and load
//   3. Lowering      ONNX node -> op, or a refusal with a reason a user reads
//   4. Blob format   magic + version + program; no weights (they come at load)
//   5. Kernels       the loops that do the arithmetic
//   6. The ABI       capability, compile, load, run, destroy, estimate_cost,
//                    run_profiled
//
// It links only the ONNX protobuf classes and include/tessera/backend.h, as a
// third-party plugin would; nothing of Tessera's own library.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <set>
#include <string>
#include <vector>

#include "tessera/backend.h"

namespace {

// ---------------------------------------------------------------- 1. Errors
// Inside the plugin a failure is a thrown Failure; guarded() turns it into a
// status code and a message at every ABI entry point, so no exception ever
// crosses into the host.
struct Failure {
  tessera_status_t status;
  std::string message;
};

[[noreturn]] void fail(tessera_status_t status, std::string message) { throw Failure{status, std::move(message)}; }

void write_msg(char* msg, size_t cap, std::string text) {
  if (!msg || cap == 0) return;
  std::replace(text.begin(), text.end(), '\n', ' ');  // messages are one line
  size_t n = std::min(text.size(), cap - 1);
  std::memcpy(msg, text.data(), n);
  msg[n] = '\0';
}

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

// --------------------------------------------------------------- 2. Program
// The operator list, in one place. An op's code in the program is its index
// here; an elementwise op is one line (its ONNX name and its arithmetic).
enum class Kind : uint8_t { kUnary, kBinary, kMatMul, kGemm };
struct OpDef {
  const char* onnx_name;
  Kind kind;
  float (*unary)(float);
  float (*binary)(float, float);
};
constexpr OpDef kOps[] = {
    {"Relu", Kind::kUnary, [](float x) { return x > 0.f ? x : 0.f; }, nullptr},
    {"Sigmoid", Kind::kUnary, [](float x) { return 1.f / (1.f + std::exp(-x)); }, nullptr},
    {"Tanh", Kind::kUnary, [](float x) { return std::tanh(x); }, nullptr},
    {"Exp", Kind::kUnary, [](float x) { return std::exp(x); }, nullptr},
    {"Neg", Kind::kUnary, [](float x) { return -x; }, nullptr},
    {"Abs", Kind::kUnary, [](float x) { return std::fabs(x); }, nullptr},
    {"Add", Kind::kBinary, nullptr, [](float x, float y) { return x + y; }},
    {"Sub", Kind::kBinary, nullptr, [](float x, float y) { return x - y; }},
    {"Mul", Kind::kBinary, nullptr, [](float x, float y) { return x * y; }},
    {"Div", Kind::kBinary, nullptr, [](float x, float y) { return x / y; }},
    {"MatMul", Kind::kMatMul, nullptr, nullptr},
    {"Gemm", Kind::kGemm, nullptr, nullptr},
};
constexpr size_t kNumOps = std::size(kOps);

using Dims = std::vector<int64_t>;
constexpr size_t kMaxRank = 8;
constexpr int64_t kMaxElements = int64_t{1} << 40;  // per tensor; bounds what a corrupt blob can ask for

// Every tensor the program touches. A graph input is filled by run(), a
// constant is bound by name at load(), a computed value is written by exactly
// one op (into the output buffer when it is a graph output, else into scratch).
enum class ValueKind : uint8_t { kInput, kConstant, kComputed };
struct Value {
  std::string name;
  ValueKind kind = ValueKind::kComputed;
  Dims dims;
};

struct Op {
  uint8_t code = 0;
  int32_t in[3] = {-1, -1, -1};  // value indices; -1 = absent (Gemm without C)
  int32_t out = -1;
  float alpha = 1.f, beta = 1.f;  // Gemm only
  uint8_t trans_a = 0, trans_b = 0;
  std::string node;  // the ONNX node's name: what run_profiled reports
};

struct Program {
  std::vector<Value> values;
  std::vector<Op> ops;                   // in execution order
  std::vector<int32_t> inputs, outputs;  // value indices, region model order
};

int64_t numel(const Dims& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}

std::string dims_str(const Dims& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
  return s + "]";
}

// Numpy broadcasting of a and b; false when they do not broadcast.
bool broadcast(const Dims& a, const Dims& b, Dims* out) {
  size_t r = std::max(a.size(), b.size());
  out->assign(r, 1);
  for (size_t i = 0; i < r; ++i) {
    int64_t x = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t y = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (x != y && x != 1 && y != 1) return false;
    (*out)[i] = x == 1 ? y : x;
  }
  return true;
}

// The one shape check. Capability and compile use it to refuse a node (the
// text is the reason), load uses it to reject a corrupt blob: kernels index
// buffers by these dims, so an op that passes it cannot read out of bounds.
std::string check_shapes(const Op& op, const std::vector<Value>& v) {
  const Dims& a = v[static_cast<size_t>(op.in[0])].dims;
  const Dims& y = v[static_cast<size_t>(op.out)].dims;
  switch (kOps[op.code].kind) {
    case Kind::kUnary:
      return a == y ? "" : "output shape " + dims_str(y) + " differs from input shape " + dims_str(a);
    case Kind::kBinary: {
      const Dims& b = v[static_cast<size_t>(op.in[1])].dims;
      Dims r;
      if (!broadcast(a, b, &r)) return "shapes " + dims_str(a) + " and " + dims_str(b) + " do not broadcast";
      return r == y ? "" : "output shape " + dims_str(y) + " is not the broadcast shape " + dims_str(r);
    }
    case Kind::kMatMul: {
      const Dims& b = v[static_cast<size_t>(op.in[1])].dims;
      if (a.size() < 2) return "MatMul with a rank-" + std::to_string(a.size()) + " left operand";
      if (b.size() != 2) return "MatMul with a rank-" + std::to_string(b.size()) + " right operand";
      if (a.back() != b[0]) return "MatMul inner dims differ: " + dims_str(a) + " x " + dims_str(b);
      Dims r(a.begin(), a.end() - 1);
      r.push_back(b[1]);
      return r == y ? "" : "MatMul output shape " + dims_str(y) + ", expected " + dims_str(r);
    }
    case Kind::kGemm: {
      const Dims& b = v[static_cast<size_t>(op.in[1])].dims;
      if (a.size() != 2 || b.size() != 2) return "Gemm operands must be 2-D";
      int64_t m = op.trans_a ? a[1] : a[0], k = op.trans_a ? a[0] : a[1];
      int64_t kb = op.trans_b ? b[1] : b[0], n = op.trans_b ? b[0] : b[1];
      if (k != kb) return "Gemm inner dims differ: " + dims_str(a) + " x " + dims_str(b);
      if (y != Dims{m, n}) return "Gemm output shape " + dims_str(y) + ", expected " + dims_str({m, n});
      if (op.in[2] >= 0) {  // C must broadcast to [M, N] without growing
        const Dims& c = v[static_cast<size_t>(op.in[2])].dims;
        Dims r;
        if (c.size() > 2 || !broadcast(c, y, &r) || r != y) {
          return "Gemm with a non-unidirectional-broadcastable C " + dims_str(c) + " (to " + dims_str(y) + ")";
        }
      }
      return "";
    }
  }
  return "unknown op";
}

// ------------------------------------------------------------- 3. Lowering
// Turns the region model into a Program, one node at a time. A node this
// backend cannot run throws a Refusal whose text is the user-facing reason.
struct Refusal {
  std::string reason;
};

// ONNX TensorProto.DataType codes, as users know them.
const char* dtype_name(int32_t t) {
  static constexpr const char* kNames[] = {"undefined", "float32", "uint8",     "int8",       "uint16",  "int16",
                                           "int32",     "int64",   "string",    "bool",       "float16", "float64",
                                           "uint32",    "uint64",  "complex64", "complex128", "bfloat16"};
  return t >= 0 && t < static_cast<int32_t>(std::size(kNames)) ? kNames[t] : "unknown";
}

// What the model says about a value before it is interned.
struct TypeInfo {
  int32_t dtype = 0;
  bool ranked = false;
  Dims dims;           // -1 where symbolic
  std::string symbol;  // the first symbolic dim's name, for the reason
};

class Lowering {
 public:
  explicit Lowering(const onnx::GraphProto& g) {
    auto add = [&](const onnx::ValueInfoProto& vi) {
      if (!vi.type().has_tensor_type()) return;
      const auto& tt = vi.type().tensor_type();
      TypeInfo t;
      t.dtype = tt.elem_type();
      t.ranked = tt.has_shape();
      for (const auto& d : tt.shape().dim()) {
        bool known = d.has_dim_value() && d.dim_value() >= 0;
        t.dims.push_back(known ? d.dim_value() : -1);
        if (!known && t.symbol.empty()) t.symbol = d.has_dim_param() ? d.dim_param() : "?";
      }
      types_[vi.name()] = t;
    };
    for (const auto& vi : g.input()) add(vi);
    for (const auto& vi : g.output()) add(vi);
    for (const auto& vi : g.value_info()) add(vi);
    for (const auto& init : g.initializer()) {
      TypeInfo t{init.data_type(), true, Dims(init.dims().begin(), init.dims().end()), ""};
      types_[init.name()] = t;
      constants_.insert(init.name());
    }
    for (const auto& vi : g.input()) graph_inputs_.insert(vi.name());
  }

  // The op for `node`, its operands interned into the program; or a Refusal.
  Op lower(const onnx::NodeProto& node) {
    if (!node.domain().empty() && node.domain() != "ai.onnx") {
      throw Refusal{"op " + node.domain() + "." + node.op_type() + " is not supported"};
    }
    auto def =
        std::find_if(std::begin(kOps), std::end(kOps), [&](const OpDef& d) { return node.op_type() == d.onnx_name; });
    if (def == std::end(kOps)) throw Refusal{"op " + node.op_type() + " is not supported"};
    Op op;
    op.code = static_cast<uint8_t>(def - std::begin(kOps));
    op.node = node.name();
    int arity = def->kind == Kind::kUnary ? 1 : 2;
    int max_arity = def->kind == Kind::kGemm ? 3 : arity;
    if (node.input_size() < arity || node.input_size() > max_arity || node.output_size() != 1) {
      throw Refusal{node.op_type() + " with " + std::to_string(node.input_size()) + " inputs and " +
                    std::to_string(node.output_size()) + " outputs"};
    }
    for (int i = 0; i < node.input_size(); ++i) {
      if (node.input(i).empty()) {
        if (i < arity) throw Refusal{"input " + std::to_string(i) + " is missing"};
        continue;  // Gemm's optional C left out
      }
      op.in[i] = intern(node.input(i), "input");
    }
    for (const auto& attr : node.attribute()) {  // Gemm's are the only attributes it knows
      const std::string& a = attr.name();
      if (def->kind != Kind::kGemm || (a != "alpha" && a != "beta" && a != "transA" && a != "transB")) {
        throw Refusal{node.op_type() + " with attribute '" + a + "'"};
      }
      if (a == "alpha") op.alpha = attr.f();
      if (a == "beta") op.beta = attr.f();
      if (a == "transA") op.trans_a = attr.i() != 0;
      if (a == "transB") op.trans_b = attr.i() != 0;
    }
    if (produced_.count(node.output(0)) || graph_inputs_.count(node.output(0)) || constants_.count(node.output(0))) {
      throw Refusal{"value '" + node.output(0) + "' is written twice"};
    }
    op.out = intern(node.output(0), "output");
    std::string why = check_shapes(op, program_.values);
    if (!why.empty()) throw Refusal{why};
    return op;
  }

  // Compile: every node lowered in order, then the region's boundary.
  Program lower_graph(const onnx::GraphProto& g) {
    for (int i = 0; i < g.node_size(); ++i) {
      const auto& n = g.node(i);
      try {
        program_.ops.push_back(lower(n));
        produced_.insert(n.output(0));
      } catch (const Refusal& r) {
        fail(TESSERA_ERROR_UNSUPPORTED, "node '" + n.name() + "' (" + n.op_type() + "): " + r.reason);
      }
    }
    try {
      for (const auto& vi : g.input()) program_.inputs.push_back(intern(vi.name(), "input"));
      for (const auto& vi : g.output()) program_.outputs.push_back(intern(vi.name(), "output"));
    } catch (const Refusal& r) {
      fail(TESSERA_ERROR_UNSUPPORTED, "region boundary: " + r.reason);
    }
    for (const auto& vi : g.output()) {
      if (!produced_.count(vi.name()) && !graph_inputs_.count(vi.name()) && !constants_.count(vi.name())) {
        fail(TESSERA_ERROR_INVALID_ARGUMENT, "graph output '" + vi.name() + "' is not computed by any node");
      }
    }
    return std::move(program_);
  }

 private:
  // Index of value `name`, after checking it is a float32 tensor of static
  // shape: the refusals every op shares.
  int32_t intern(const std::string& name, const char* role) {
    auto it = index_.find(name);
    if (it != index_.end()) return it->second;
    auto t = types_.find(name);
    if (t == types_.end()) throw Refusal{std::string(role) + " '" + name + "' has no type"};
    const TypeInfo& ti = t->second;
    if (ti.dtype != 1) {
      throw Refusal{std::string(role) + " '" + name + "' has dtype " + dtype_name(ti.dtype) + " (only float32)"};
    }
    if (!ti.ranked) throw Refusal{std::string(role) + " '" + name + "' has an unknown rank"};
    if (!ti.symbol.empty()) throw Refusal{std::string(role) + " '" + name + "' has a symbolic dim '" + ti.symbol + "'"};
    if (ti.dims.size() > kMaxRank) throw Refusal{std::string(role) + " '" + name + "' has rank > 8"};
    Value v{name, ValueKind::kComputed, ti.dims};
    if (constants_.count(name)) v.kind = ValueKind::kConstant;
    if (graph_inputs_.count(name)) v.kind = ValueKind::kInput;  // an input wins over a default initializer
    program_.values.push_back(std::move(v));
    return index_[name] = static_cast<int32_t>(program_.values.size() - 1);
  }

  std::map<std::string, TypeInfo> types_;
  std::set<std::string> constants_, graph_inputs_, produced_;
  std::map<std::string, int32_t> index_;
  Program program_;
};

onnx::ModelProto parse_model(const void* data, size_t size) {
  onnx::ModelProto m;
  if (!data || size > static_cast<size_t>(std::numeric_limits<int>::max()) ||
      !m.ParseFromArray(data, static_cast<int>(size))) {
    fail(TESSERA_ERROR_INVALID_ARGUMENT, "the model is not a valid ONNX ModelProto");
  }
  return m;
}

// ----------------------------------------------------------- 4. Blob format
// All integers little-endian (the host is; see the static_assert):
//   "TSRXMPL\0"  u32 format version
//   u32 #values  { u32 name length, name bytes, u8 kind, u8 rank, i64 dims[rank] }
//   u32 #ops     { u8 code, i32 in[3], i32 out, f32 alpha, f32 beta, u8 trans_a, u8 trans_b,
//                  u32 node name length, node name bytes }
//   u32 #inputs  { i32 value }     u32 #outputs { i32 value }
// Weights are not in it: load() receives them by name. Bump kBlobVersion on
// any change, so that load() refuses old blobs instead of misreading them.
static_assert(std::endian::native == std::endian::little, "the blob format is little-endian");
constexpr char kMagic[8] = {'T', 'S', 'R', 'X', 'M', 'P', 'L', '\0'};
constexpr uint32_t kBlobVersion = 2;  // 2: ops carry their node's name

struct Writer {
  std::string bytes;
  template <class T>
  void put(T x) {
    bytes.append(reinterpret_cast<const char*>(&x), sizeof(T));
  }
};

std::string serialize(const Program& p) {
  Writer w;
  w.bytes.assign(kMagic, sizeof(kMagic));
  w.put(kBlobVersion);
  w.put(static_cast<uint32_t>(p.values.size()));
  for (const Value& v : p.values) {
    w.put(static_cast<uint32_t>(v.name.size()));
    w.bytes += v.name;
    w.put(static_cast<uint8_t>(v.kind));
    w.put(static_cast<uint8_t>(v.dims.size()));
    for (int64_t d : v.dims) w.put(d);
  }
  w.put(static_cast<uint32_t>(p.ops.size()));
  for (const Op& op : p.ops) {
    w.put(op.code);
    for (int32_t i : op.in) w.put(i);
    w.put(op.out);
    w.put(op.alpha);
    w.put(op.beta);
    w.put(op.trans_a);
    w.put(op.trans_b);
    w.put(static_cast<uint32_t>(op.node.size()));
    w.bytes += op.node;
  }
  for (const auto* list : {&p.inputs, &p.outputs}) {
    w.put(static_cast<uint32_t>(list->size()));
    for (int32_t i : *list) w.put(i);
  }
  return std::move(w.bytes);
}

// Reads the blob and trusts none of it: every read is bounds-checked and any
// inconsistency is TESSERA_ERROR_INCOMPATIBLE_BLOB, never a crash.
struct Reader {
  const char* p;
  size_t left;
  [[noreturn]] static void corrupt(const std::string& what) {
    fail(TESSERA_ERROR_INCOMPATIBLE_BLOB, "corrupt example blob: " + what);
  }
  template <class T>
  T get() {
    if (left < sizeof(T)) corrupt("truncated");
    T x;
    std::memcpy(&x, p, sizeof(T));  // the blob need not be aligned
    p += sizeof(T), left -= sizeof(T);
    return x;
  }
  std::string str() {
    uint32_t len = get<uint32_t>();
    if (len > left) corrupt("truncated");
    std::string s(p, len);
    p += len, left -= len;
    return s;
  }
  int32_t index(size_t limit, bool optional = false) {
    int32_t i = get<int32_t>();
    if ((i < 0 && !(optional && i == -1)) || (i >= 0 && static_cast<size_t>(i) >= limit)) {
      corrupt("value index " + std::to_string(i) + " out of range");
    }
    return i;
  }
};

Program deserialize(const void* blob, size_t size) {
  if (!blob || size < sizeof(kMagic) || std::memcmp(blob, kMagic, sizeof(kMagic)) != 0) {
    fail(TESSERA_ERROR_INCOMPATIBLE_BLOB, "not a blob of the example backend (bad magic)");
  }
  Reader r{static_cast<const char*>(blob) + sizeof(kMagic), size - sizeof(kMagic)};
  if (uint32_t v = r.get<uint32_t>(); v != kBlobVersion) {
    fail(TESSERA_ERROR_INCOMPATIBLE_BLOB,
         "blob format version " + std::to_string(v) + ", this plugin reads version " + std::to_string(kBlobVersion));
  }
  Program p;
  for (uint32_t n = r.get<uint32_t>(); n > 0; --n) {  // no reserve(n): n is not trusted yet
    Value v;
    v.name = r.str();
    uint8_t kind = r.get<uint8_t>(), rank = r.get<uint8_t>();
    if (kind > static_cast<uint8_t>(ValueKind::kComputed) || rank > kMaxRank) Reader::corrupt("bad value header");
    v.kind = static_cast<ValueKind>(kind);
    double elements = 1;  // of the non-zero dims, in double: no int64 product may overflow later
    for (uint8_t d = 0; d < rank; ++d) {
      v.dims.push_back(r.get<int64_t>());
      if (v.dims.back() < 0 || v.dims.back() > kMaxElements) Reader::corrupt("bad dim");
      elements *= static_cast<double>(std::max<int64_t>(v.dims.back(), 1));
    }
    if (elements > static_cast<double>(kMaxElements)) Reader::corrupt("value '" + v.name + "' is too large");
    p.values.push_back(std::move(v));
  }
  const size_t nv = p.values.size();
  std::vector<bool> written(nv, false);
  for (uint32_t n = r.get<uint32_t>(); n > 0; --n) {
    Op op;
    op.code = r.get<uint8_t>();
    if (op.code >= kNumOps) Reader::corrupt("unknown op code " + std::to_string(op.code));
    for (int k = 0; k < 3; ++k) op.in[k] = r.index(nv, /*optional=*/true);
    op.out = r.index(nv);
    op.alpha = r.get<float>();
    op.beta = r.get<float>();
    op.trans_a = r.get<uint8_t>() != 0;
    op.trans_b = r.get<uint8_t>() != 0;
    op.node = r.str();
    // Operands that exist, are already computed, and a fresh output.
    Kind kind = kOps[op.code].kind;
    int needed = kind == Kind::kUnary ? 1 : 2, allowed = kind == Kind::kGemm ? 3 : needed;
    for (int k = 0; k < 3; ++k) {
      int32_t i = op.in[k];
      if ((k < needed && i < 0) || (k >= allowed && i >= 0)) Reader::corrupt("bad operand list");
      if (i >= 0 && p.values[static_cast<size_t>(i)].kind == ValueKind::kComputed && !written[static_cast<size_t>(i)]) {
        Reader::corrupt("operand read before it is written");
      }
    }
    if (p.values[static_cast<size_t>(op.out)].kind != ValueKind::kComputed || written[static_cast<size_t>(op.out)]) {
      Reader::corrupt("op output is not a fresh computed value");
    }
    written[static_cast<size_t>(op.out)] = true;
    if (std::string why = check_shapes(op, p.values); !why.empty()) Reader::corrupt(why);
    p.ops.push_back(op);
  }
  for (auto* list : {&p.inputs, &p.outputs}) {
    for (uint32_t n = r.get<uint32_t>(); n > 0; --n) list->push_back(r.index(nv));
  }
  std::vector<bool> is_input(nv, false);  // the input values are exactly those in the input list
  for (int32_t i : p.inputs) {
    if (p.values[static_cast<size_t>(i)].kind != ValueKind::kInput) Reader::corrupt("graph input is not an input");
    is_input[static_cast<size_t>(i)] = true;
  }
  for (size_t v = 0; v < nv; ++v) {
    if (p.values[v].kind == ValueKind::kInput && !is_input[v]) Reader::corrupt("input value missing from the inputs");
  }
  for (int32_t i : p.outputs) {
    const Value& v = p.values[static_cast<size_t>(i)];
    if (v.kind == ValueKind::kComputed && !written[static_cast<size_t>(i)]) Reader::corrupt("output never written");
  }
  if (r.left != 0) Reader::corrupt("trailing bytes");
  return p;
}

// --------------------------------------------------------------- 5. Kernels
// Plain loops; a real plugin calls its engine here instead.
void unary(float (*f)(float), const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
}

// Strides of `in` as seen from an output of shape `out` (0 on broadcast dims).
Dims broadcast_strides(const Dims& in, const Dims& out) {
  Dims s(out.size(), 0);
  int64_t stride = 1;
  for (size_t i = in.size(); i-- > 0;) {
    size_t o = i + out.size() - in.size();
    s[o] = in[i] == 1 ? 0 : stride;
    stride *= in[i];
  }
  return s;
}

void binary(float (*f)(float, float), const float* a, const Dims& ad, const float* b, const Dims& bd, float* y,
            const Dims& yd) {
  const int64_t n = numel(yd);
  if (ad == yd && bd == yd) {
    for (int64_t i = 0; i < n; ++i) y[i] = f(a[i], b[i]);
    return;
  }
  Dims sa = broadcast_strides(ad, yd), sb = broadcast_strides(bd, yd);
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, oa = 0, ob = 0;
    for (size_t d = yd.size(); d-- > 0;) {
      int64_t c = rem % yd[d];
      rem /= yd[d];
      oa += c * sa[d], ob += c * sb[d];
    }
    y[i] = f(a[oa], b[ob]);
  }
}

// Y[M,N] = alpha * A'[M,K] * B'[K,N] + beta * C (C broadcast to [M,N]).
// MatMul is the case alpha = 1, no C, no transposes, M = all rows of A.
void gemm(const float* a, const float* b, const float* c, const Dims& cd, float* y, int64_t m, int64_t k, int64_t n,
          bool ta, bool tb, float alpha, float beta) {
  Dims sc = c ? broadcast_strides(cd, {m, n}) : Dims{0, 0};
  for (int64_t i = 0; i < m; ++i) {
    float* row = y + i * n;
    for (int64_t j = 0; j < n; ++j) row[j] = c ? beta * c[i * sc[0] + j * sc[1]] : 0.f;
    for (int64_t p = 0; p < k; ++p) {
      float aip = alpha * (ta ? a[p * m + i] : a[i * k + p]);
      if (tb) {
        for (int64_t j = 0; j < n; ++j) row[j] += aip * b[j * k + p];
      } else {
        for (int64_t j = 0; j < n; ++j) row[j] += aip * b[p * n + j];
      }
    }
  }
}

}  // namespace

// The engine: the program plus where each value lives. The tessera_engine
// type is opaque to the host; defining it here needs no casts.
struct tessera_engine {
  Program program;
  // Per-engine scratch for intermediates. Two threads running this engine at
  // once would write the same scratch, which is why the table does not set
  // TESSERA_BACKEND_FLAG_CONCURRENT_RUN: the host serializes run() per engine.
  std::vector<std::vector<float>> scratch;
  // Per value: the host's constant data (zero-copy; only read) or the scratch
  // buffer; inputs and outputs are filled in by each run.
  std::vector<float*> where;
};

namespace {

// With a profile sink (run_profiled), each op is timed and reported as one
// step naming its node; times are from `start`.
void execute(tessera_engine& e, const std::vector<const float*>& in, const std::vector<float*>& out,
             const tessera_profile_sink_t* sink = nullptr,
             std::chrono::steady_clock::time_point start = std::chrono::steady_clock::time_point()) {
  using clock = std::chrono::steady_clock;
  const Program& p = e.program;
  std::vector<float*> ptr = e.where;
  for (size_t i = 0; i < in.size(); ++i) ptr[static_cast<size_t>(p.inputs[i])] = const_cast<float*>(in[i]);
  // A computed graph output is written straight into the host's buffer; the
  // others (a region input passed through, a constant, a value listed twice)
  // are copied at the end.
  std::vector<bool> copy(out.size(), true), redirected(p.values.size(), false);
  for (size_t i = 0; i < out.size(); ++i) {
    auto v = static_cast<size_t>(p.outputs[i]);
    if (p.values[v].kind == ValueKind::kComputed && !redirected[v])
      ptr[v] = out[i], redirected[v] = true, copy[i] = false;
  }
  for (const Op& op : p.ops) {
    const clock::time_point t0 = sink ? clock::now() : clock::time_point();
    auto dims = [&](int k) -> const Dims& { return p.values[static_cast<size_t>(op.in[k])].dims; };
    const float* a = ptr[static_cast<size_t>(op.in[0])];
    const float* b = op.in[1] >= 0 ? ptr[static_cast<size_t>(op.in[1])] : nullptr;
    float* y = ptr[static_cast<size_t>(op.out)];
    const Dims& yd = p.values[static_cast<size_t>(op.out)].dims;
    const int64_t n = numel(yd);
    switch (kOps[op.code].kind) {
      case Kind::kUnary:
        unary(kOps[op.code].unary, a, y, n);
        break;
      case Kind::kBinary:
        binary(kOps[op.code].binary, a, dims(0), b, dims(1), y, yd);
        break;
      case Kind::kMatMul: {  // every row of an N-D A times a 2-D B
        int64_t rows = numel(Dims(dims(0).begin(), dims(0).end() - 1));
        gemm(a, b, nullptr, {}, y, rows, dims(0).back(), dims(1)[1], false, false, 1.f, 0.f);
        break;
      }
      case Kind::kGemm: {
        int64_t m = yd[0], nn = yd[1], k = op.trans_a ? dims(0)[0] : dims(0)[1];
        const float* c = op.in[2] >= 0 ? ptr[static_cast<size_t>(op.in[2])] : nullptr;
        gemm(a, b, c, c ? dims(2) : Dims{}, y, m, k, nn, op.trans_a, op.trans_b, op.alpha, op.beta);
        break;
      }
    }
    if (sink) {
      static constexpr const char* kLoops[] = {"unary loop", "binary loop", "gemm loop", "gemm loop"};
      auto us = [&](clock::time_point t) { return std::chrono::duration<double, std::micro>(t - start).count(); };
      const char* node = op.node.c_str();
      const double began = us(t0);
      sink->step(sink->ctx, &node, 1, kLoops[static_cast<int>(kOps[op.code].kind)], began, us(clock::now()) - began);
    }
  }
  for (size_t i = 0; i < out.size(); ++i) {
    auto v = static_cast<size_t>(p.outputs[i]);
    size_t bytes = static_cast<size_t>(numel(p.values[v].dims)) * sizeof(float);
    if (copy[i] && bytes > 0) std::memcpy(out[i], ptr[v], bytes);
  }
}

// Checks a descriptor against what the program declared for value `v`.
void check_descriptor(const tessera_tensor_t& t, const Value& v, const std::string& what) {
  if (t.dtype != 1)
    fail(TESSERA_ERROR_INVALID_ARGUMENT, what + " has dtype " + dtype_name(t.dtype) + ", expected float32");
  if (t.rank < 0 || static_cast<size_t>(t.rank) != v.dims.size() || (t.rank > 0 && !t.dims)) {
    fail(TESSERA_ERROR_INVALID_ARGUMENT,
         what + " has rank " + std::to_string(t.rank) + ", expected " + std::to_string(v.dims.size()));
  }
  Dims given(t.dims, t.dims + t.rank);
  if (given != v.dims) {
    fail(TESSERA_ERROR_INVALID_ARGUMENT, what + " has shape " + dims_str(given) + ", expected " + dims_str(v.dims));
  }
  size_t bytes = static_cast<size_t>(numel(v.dims)) * sizeof(float);
  if (t.size_bytes != bytes || (bytes > 0 && !t.data)) {
    fail(TESSERA_ERROR_INVALID_ARGUMENT, what + " has " + std::to_string(t.size_bytes) + " bytes at " +
                                             (t.data ? "a valid pointer" : "NULL") + ", expected " +
                                             std::to_string(bytes));
  }
  if (reinterpret_cast<uintptr_t>(t.data) % alignof(float) != 0) {
    fail(TESSERA_ERROR_INVALID_ARGUMENT, what + " is not aligned for float32");
  }
}

// ----------------------------------------------------------------- 6. The ABI
const char* example_version() { return "1.0"; }

tessera_status_t example_capability(const void* model, size_t size, const tessera_capability_sink_t* sink, char* msg,
                                    size_t cap) {
  return guarded(msg, cap, [&] {
    if (!sink || !sink->node) fail(TESSERA_ERROR_INVALID_ARGUMENT, "no capability sink");
    const onnx::ModelProto m = parse_model(model, size);
    const onnx::GraphProto& g = m.graph();
    Lowering lowering(g);
    std::vector<bool> ok(static_cast<size_t>(g.node_size()), false);
    for (int i = 0; i < g.node_size(); ++i) {
      try {
        lowering.lower(g.node(i));
        ok[static_cast<size_t>(i)] = true;
        sink->node(sink->ctx, i, 1, "");
      } catch (const Refusal& r) {
        sink->node(sink->ctx, i, 0, r.reason.c_str());
      }
    }
    // Composite "MatMul+Add": a MatMul whose only consumer is an Add (a bias).
    // One region for both lets an engine fuse the bias into the product.
    if (!sink->composite) return;
    std::map<std::string, std::vector<int32_t>> consumers;
    for (int i = 0; i < g.node_size(); ++i) {
      for (const auto& in : g.node(i).input()) consumers[in].push_back(i);
    }
    for (int i = 0; i < g.node_size(); ++i) {
      const auto& n = g.node(i);
      if (!ok[static_cast<size_t>(i)] || n.op_type() != "MatMul") continue;
      const auto& users = consumers[n.output(0)];
      bool is_graph_output = std::any_of(g.output().begin(), g.output().end(),
                                         [&](const onnx::ValueInfoProto& o) { return o.name() == n.output(0); });
      if (users.size() != 1 || is_graph_output) continue;
      int32_t add = users[0];
      if (g.node(add).op_type() != "Add" || !ok[static_cast<size_t>(add)]) continue;
      const int32_t nodes[2] = {i, add};
      sink->composite(sink->ctx, "MatMul+Add", nodes, 2);
    }
  });
}

tessera_status_t example_compile(const void* model, size_t size, const char* /*options: none*/,
                                 tessera_buffer_t* out_blob, char* msg, size_t cap) {
  if (out_blob) *out_blob = tessera_buffer_t{nullptr, 0};
  return guarded(msg, cap, [&] {
    if (!out_blob) fail(TESSERA_ERROR_INVALID_ARGUMENT, "out_blob is NULL");
    const onnx::ModelProto m = parse_model(model, size);
    Program p = Lowering(m.graph()).lower_graph(m.graph());
    std::string bytes = serialize(p);
    deserialize(bytes.data(), bytes.size());  // what load() would reject must fail here, at build time
    void* data = std::malloc(bytes.size());
    if (!data) throw std::bad_alloc();
    std::memcpy(data, bytes.data(), bytes.size());
    *out_blob = tessera_buffer_t{data, bytes.size()};
  });
}

void example_free_buffer(tessera_buffer_t* buffer) {
  if (!buffer) return;
  std::free(buffer->data);
  *buffer = tessera_buffer_t{nullptr, 0};
}

tessera_status_t example_load(const void* blob, size_t size, const tessera_named_tensor_t* constants, size_t count,
                              const tessera_load_options_t* /*options: this engine runs on one thread*/,
                              tessera_engine_t** out_engine, char* msg, size_t cap) {
  if (out_engine) *out_engine = nullptr;
  return guarded(msg, cap, [&] {
    if (!out_engine) fail(TESSERA_ERROR_INVALID_ARGUMENT, "out_engine is NULL");
    auto e = std::make_unique<tessera_engine>();
    e->program = deserialize(blob, size);
    const Program& p = e->program;
    std::map<std::string, const tessera_tensor_t*> by_name;
    for (size_t i = 0; i < count; ++i) {
      if (constants && constants[i].name) by_name[constants[i].name] = &constants[i].tensor;
    }
    std::set<int32_t> outputs(p.outputs.begin(), p.outputs.end());
    e->scratch.resize(p.values.size());
    e->where.assign(p.values.size(), nullptr);
    for (size_t v = 0; v < p.values.size(); ++v) {
      const Value& val = p.values[v];
      if (val.kind == ValueKind::kConstant) {  // bind by name and keep the pointer: no copy
        auto it = by_name.find(val.name);
        if (it == by_name.end()) fail(TESSERA_ERROR_INVALID_ARGUMENT, "constant '" + val.name + "' was not given");
        check_descriptor(*it->second, val, "constant '" + val.name + "'");
        e->where[v] = static_cast<float*>(it->second->data);
      } else if (val.kind == ValueKind::kComputed && !outputs.count(static_cast<int32_t>(v))) {
        e->scratch[v].assign(static_cast<size_t>(numel(val.dims)), 0.f);  // once, reused by every run
        e->where[v] = e->scratch[v].data();
      }
    }
    *out_engine = e.release();
  });
}

// run and run_profiled: checks the engine and every descriptor, then executes.
void checked_run(tessera_engine_t* engine, const tessera_tensor_t* inputs, size_t num_inputs, tessera_tensor_t* outputs,
                 size_t num_outputs, const tessera_profile_sink_t* sink) {
  const auto start = std::chrono::steady_clock::now();
  if (!engine) fail(TESSERA_ERROR_INVALID_ARGUMENT, "engine is NULL");
  const Program& p = engine->program;
  if (num_inputs != p.inputs.size() || num_outputs != p.outputs.size() || (num_inputs && !inputs) ||
      (num_outputs && !outputs)) {
    fail(TESSERA_ERROR_INVALID_ARGUMENT,
         "run with " + std::to_string(num_inputs) + " inputs and " + std::to_string(num_outputs) +
             " outputs, expected " + std::to_string(p.inputs.size()) + " and " + std::to_string(p.outputs.size()));
  }
  std::vector<const float*> in(num_inputs);
  std::vector<float*> out(num_outputs);
  for (size_t i = 0; i < num_inputs; ++i) {
    const Value& v = p.values[static_cast<size_t>(p.inputs[i])];
    check_descriptor(inputs[i], v, "input " + std::to_string(i) + " ('" + v.name + "')");
    in[i] = static_cast<const float*>(inputs[i].data);
  }
  for (size_t i = 0; i < num_outputs; ++i) {
    const Value& v = p.values[static_cast<size_t>(p.outputs[i])];
    check_descriptor(outputs[i], v, "output " + std::to_string(i) + " ('" + v.name + "')");
    out[i] = static_cast<float*>(outputs[i].data);
  }
  execute(*engine, in, out, sink, start);
}

tessera_status_t example_run(tessera_engine_t* engine, const tessera_tensor_t* inputs, size_t num_inputs,
                             tessera_tensor_t* outputs, size_t num_outputs, char* msg, size_t cap) {
  return guarded(msg, cap, [&] { checked_run(engine, inputs, num_inputs, outputs, num_outputs, nullptr); });
}

// Optional: run() that also reports each op it executes as a step (one node
// each; a plugin that fuses names every node of a fused step).
tessera_status_t example_run_profiled(tessera_engine_t* engine, const tessera_tensor_t* inputs, size_t num_inputs,
                                      tessera_tensor_t* outputs, size_t num_outputs, const tessera_profile_sink_t* sink,
                                      char* msg, size_t cap) {
  return guarded(msg, cap, [&] {
    if (!sink || !sink->step) fail(TESSERA_ERROR_INVALID_ARGUMENT, "no profile sink");
    checked_run(engine, inputs, num_inputs, outputs, num_outputs, sink);
  });
}

void example_destroy(tessera_engine_t* engine) { delete engine; }

// A FLOP count at an assumed 1 GFLOP/s (one thread, plain loops) plus a
// microsecond per op; good enough to rank this backend below a tuned one.
tessera_status_t example_estimate_cost(const void* model, size_t size, int32_t /*num_threads*/, double* out_us,
                                       char* msg, size_t cap) {
  return guarded(msg, cap, [&] {
    if (!out_us) fail(TESSERA_ERROR_INVALID_ARGUMENT, "out_us is NULL");
    const onnx::ModelProto m = parse_model(model, size);
    Program p;
    try {
      p = Lowering(m.graph()).lower_graph(m.graph());
    } catch (const Failure& f) {
      fail(TESSERA_ERROR_UNSUPPORTED, "no estimate: " + f.message);
    }
    double flops = 0;
    for (const Op& op : p.ops) {
      const Dims& a = p.values[static_cast<size_t>(op.in[0])].dims;
      double out = static_cast<double>(numel(p.values[static_cast<size_t>(op.out)].dims));
      Kind kind = kOps[op.code].kind;
      flops += kind == Kind::kMatMul ? 2.0 * out * static_cast<double>(a.back())
               : kind == Kind::kGemm ? 2.0 * out * static_cast<double>(op.trans_a ? a[0] : a[1])
                                     : out;
    }
    *out_us = flops / 1e3 + static_cast<double>(p.ops.size());
  });
}

const tessera_backend_t kTable = {
    .abi_version = TESSERA_BACKEND_ABI_VERSION,
    .struct_size = sizeof(tessera_backend_t),
    .name = "example",
    .flags = 0,  // no CONCURRENT_RUN: engines keep per-engine scratch (see tessera_engine)
    .version = example_version,
    .capability = example_capability,
    .compile = example_compile,
    .free_buffer = example_free_buffer,
    .load = example_load,
    .run = example_run,
    .destroy = example_destroy,
    .estimate_cost = example_estimate_cost,  // optional; NULL means "no estimates"
    // Minor revision 1 (read by the host because struct_size covers them):
    .threading = TESSERA_THREADING_CALLER,  // runs on the calling thread only
    .color = "#fdd0a2",                     // optional: colour of its regions in pictures
    .estimate_region = nullptr,             // optional: an estimate on the host's measured machine
    .run_profiled = example_run_profiled,   // optional: per-node profile of a run
    // Minor revision 3: where run()'s tensors live. Host memory here; a backend on an accelerator says
    // TESSERA_MEMORY_DEVICE and gives the four device-memory functions (docs/backends.md, "Device memory").
    .memory = TESSERA_MEMORY_HOST,
    .device_id = 0,
    .device_alloc = nullptr,
    .device_free = nullptr,
    .copy = nullptr,
    .synchronize = nullptr,
    // Minor revision 4: the host memory an engine holds of its own (packed weights, buffers kept between runs),
    // counted against a session's memory limit where the engine belongs to a shape bucket. Optional.
    .engine_bytes = nullptr,
};

}  // namespace

extern "C" TESSERA_BACKEND_EXPORT const tessera_backend_t* tessera_backend_query(uint32_t host_abi_version) {
  // A table is only meaningful for the ABI version it was built against.
  return host_abi_version == TESSERA_BACKEND_ABI_VERSION ? &kTable : nullptr;
}
