#include "plugin_util.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>

namespace tessera_plugin {

[[noreturn]] void fail(tessera_status_t status, std::string message) { throw Failure{status, std::move(message)}; }

void write_msg(char* msg, size_t cap, std::string text) {
  if (!msg || cap == 0) return;
  std::replace(text.begin(), text.end(), '\n', ' ');
  size_t n = std::min(text.size(), cap - 1);
  std::memcpy(msg, text.data(), n);
  msg[n] = '\0';
}

// ---- types -----------------------------------------------------------------

const char* dtype_name(int32_t dtype) {
  switch (dtype) {
    case 1: return "float32";
    case 2: return "uint8";
    case 3: return "int8";
    case 4: return "uint16";
    case 5: return "int16";
    case 6: return "int32";
    case 7: return "int64";
    case 8: return "string";
    case 9: return "bool";
    case 10: return "float16";
    case 11: return "float64";
    case 12: return "uint32";
    case 13: return "uint64";
    case 16: return "bfloat16";
    default: return "unknown";
  }
}

size_t dtype_size(int32_t dtype) {
  switch (dtype) {
    case 1: case 6: case 12: return 4;
    case 2: case 3: case 9: return 1;
    case 4: case 5: case 10: case 16: return 2;
    case 7: case 11: case 13: return 8;
    default: return 0;
  }
}

bool ValueType::is_static() const {
  if (!ranked) return false;
  for (int64_t d : dims) {
    if (d < 0) return false;
  }
  return true;
}

int64_t numel(const std::vector<int64_t>& dims) {
  // A zero anywhere gives 0 whatever the other dims; a product past int64 saturates instead of overflowing (dims
  // from a damaged blob or model must fail a size check, not wrap).
  for (int64_t d : dims) {
    if (d == 0) return 0;
  }
  int64_t n = 1;
  for (int64_t d : dims) {
    if (__builtin_mul_overflow(n, d, &n)) return d < 0 ? INT64_MIN : INT64_MAX;
  }
  return n;
}

std::string dims_str(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
  return s + "]";
}

int64_t ValueType::numel() const { return tessera_plugin::numel(dims); }

std::string ValueType::str() const {
  std::string s = dtype_name(dtype);
  if (!ranked) return s + "[?]";
  s += "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + (dims[i] >= 0 ? std::to_string(dims[i]) : "?");
  return s + "]";
}

namespace {

ValueType type_of(const onnx::TypeProto& tp) {
  ValueType t;
  if (!tp.has_tensor_type()) return t;
  t.dtype = tp.tensor_type().elem_type();
  if (!tp.tensor_type().has_shape()) return t;
  t.ranked = true;
  for (const auto& d : tp.tensor_type().shape().dim()) {
    if (d.has_dim_value() && d.dim_value() >= 0) {
      t.dims.push_back(d.dim_value());
    } else {
      t.dims.push_back(-1);
      if (t.symbol.empty() && d.has_dim_param()) t.symbol = d.dim_param();
    }
  }
  return t;
}

}  // namespace

// ---- ModelView ---------------------------------------------------------------

std::string ModelView::metadata(const std::string& key) const {
  for (const auto& p : model_.metadata_props()) {
    if (p.key() == key) return p.value();
  }
  return "";
}

ModelView::ModelView(const void* data, size_t size) {
  if (!data || size > static_cast<size_t>(std::numeric_limits<int>::max()) ||
      !model_.ParseFromArray(data, static_cast<int>(size))) {
    fail(TESSERA_ERROR_INVALID_ARGUMENT, "the model is not a valid serialized ONNX ModelProto");
  }
  for (const auto& os : model_.opset_import()) {
    if (os.domain().empty() || os.domain() == "ai.onnx") opset_ = os.version();
  }
  const auto& g = model_.graph();
  for (const auto& vi : g.input()) types_[vi.name()] = type_of(vi.type());
  for (const auto& vi : g.output()) types_[vi.name()] = type_of(vi.type());
  for (const auto& vi : g.value_info()) types_[vi.name()] = type_of(vi.type());
  for (const auto& init : g.initializer()) {
    inits_[init.name()] = &init;
    ValueType t;
    t.dtype = init.data_type();
    t.ranked = true;
    t.dims.assign(init.dims().begin(), init.dims().end());
    types_[init.name()] = t;
  }
  for (int i = 0; i < g.node_size(); ++i) {
    for (const auto& in : g.node(i).input()) {
      if (!in.empty()) consumers_[in].push_back(i);
    }
  }
}

const ValueType& ModelView::type(const std::string& name) const {
  static const ValueType kUnknown;
  auto it = types_.find(name);
  return it == types_.end() ? kUnknown : it->second;
}

const onnx::TensorProto* ModelView::initializer(const std::string& name) const {
  auto it = inits_.find(name);
  return it == inits_.end() ? nullptr : it->second;
}

bool ModelView::is_graph_output(const std::string& name) const {
  for (const auto& o : model_.graph().output()) {
    if (o.name() == name) return true;
  }
  return false;
}

const std::vector<int>& ModelView::consumers(const std::string& name) const {
  static const std::vector<int> kNone;
  auto it = consumers_.find(name);
  return it == consumers_.end() ? kNone : it->second;
}

std::vector<std::string> ModelView::input_names() const {
  std::vector<std::string> v;
  for (const auto& vi : model_.graph().input()) {
    if (!inits_.count(vi.name())) v.push_back(vi.name());
  }
  return v;
}

std::vector<std::string> ModelView::output_names() const {
  std::vector<std::string> v;
  for (const auto& vi : model_.graph().output()) v.push_back(vi.name());
  return v;
}

// ---- attributes ------------------------------------------------------------

namespace {
const onnx::AttributeProto* find_attr(const onnx::NodeProto& n, const std::string& name) {
  for (const auto& a : n.attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}
}  // namespace

bool has_attr(const onnx::NodeProto& n, const std::string& name) { return find_attr(n, name) != nullptr; }

int64_t attr_int(const onnx::NodeProto& n, const std::string& name, int64_t def) {
  const auto* a = find_attr(n, name);
  return a ? a->i() : def;
}

float attr_float(const onnx::NodeProto& n, const std::string& name, float def) {
  const auto* a = find_attr(n, name);
  return a ? a->f() : def;
}

std::string attr_string(const onnx::NodeProto& n, const std::string& name, const std::string& def) {
  const auto* a = find_attr(n, name);
  return a ? a->s() : def;
}

std::vector<float> attr_floats(const onnx::NodeProto& n, const std::string& name) {
  const auto* a = find_attr(n, name);
  return a ? std::vector<float>(a->floats().begin(), a->floats().end()) : std::vector<float>{};
}

std::vector<int64_t> attr_ints(const onnx::NodeProto& n, const std::string& name, std::vector<int64_t> def) {
  const auto* a = find_attr(n, name);
  if (!a) return def;
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

std::string describe(const onnx::NodeProto& n) { return "node '" + n.name() + "' (" + n.op_type() + ")"; }

std::vector<float> initializer_floats(const onnx::TensorProto& t) {
  int64_t count = 1;
  for (int64_t d : t.dims()) count *= d;
  std::vector<float> v;
  if (t.data_type() == onnx::TensorProto::FLOAT) {
    if (t.has_raw_data()) {
      if (t.raw_data().size() != static_cast<size_t>(count) * 4) {
        fail(TESSERA_ERROR_INVALID_ARGUMENT, "initializer '" + t.name() + "' has the wrong size");
      }
      v.resize(static_cast<size_t>(count));
      if (!v.empty()) std::memcpy(v.data(), t.raw_data().data(), v.size() * 4);
    } else {
      v.assign(t.float_data().begin(), t.float_data().end());
    }
  } else if (t.data_type() == onnx::TensorProto::DOUBLE) {
    if (t.has_raw_data()) {
      std::vector<double> d(static_cast<size_t>(count));
      if (t.raw_data().size() != d.size() * 8) fail(TESSERA_ERROR_INVALID_ARGUMENT, "initializer '" + t.name() + "' has the wrong size");
      if (!d.empty()) std::memcpy(d.data(), t.raw_data().data(), d.size() * 8);
      v.assign(d.begin(), d.end());
    } else {
      v.assign(t.double_data().begin(), t.double_data().end());
    }
  } else {
    std::vector<int64_t> iv = initializer_ints(t);
    v.assign(iv.begin(), iv.end());
  }
  if (static_cast<int64_t>(v.size()) != count) {
    fail(TESSERA_ERROR_INVALID_ARGUMENT, "initializer '" + t.name() + "' has the wrong element count");
  }
  return v;
}

std::vector<bool> reaches_op(const ModelView& m, const std::vector<std::string>& targets) {
  const auto n = static_cast<size_t>(m.num_nodes());
  std::vector<bool> reaches(n, false);
  auto is_target = [&](int j) {
    return std::find(targets.begin(), targets.end(), m.node(j).op_type()) != targets.end();
  };
  for (size_t i = n; i-- > 0;) {
    for (const std::string& o : m.node(static_cast<int>(i)).output()) {
      if (o.empty()) continue;
      for (int j : m.consumers(o)) {
        if (static_cast<size_t>(j) > i && (reaches[static_cast<size_t>(j)] || is_target(j))) reaches[i] = true;
      }
    }
  }
  return reaches;
}

std::vector<int64_t> initializer_ints(const onnx::TensorProto& t) {
  int64_t count = 1;
  for (int64_t d : t.dims()) {
    if (d < 0 || (d > 0 && count > INT64_MAX / d)) {
      fail(TESSERA_ERROR_INVALID_ARGUMENT, "initializer '" + t.name() + "' has an invalid shape");
    }
    count *= d;
  }
  // A float holding an index: integral values only, within int64 (NaN and 1e30 are no index).
  auto integral = [&](float f) {
    if (!(f >= -9.2e18f && f <= 9.2e18f) || f != static_cast<float>(static_cast<int64_t>(f))) {
      fail(TESSERA_ERROR_INVALID_ARGUMENT, "initializer '" + t.name() + "' holds " + std::to_string(f) +
                                               ", not an integer");
    }
    return static_cast<int64_t>(f);
  };
  std::vector<int64_t> v;
  const std::string& raw = t.raw_data();
  auto from_raw = [&](auto tag) {
    using T = decltype(tag);
    if (raw.size() != static_cast<size_t>(count) * sizeof(T)) {
      fail(TESSERA_ERROR_INVALID_ARGUMENT, "initializer '" + t.name() + "' has the wrong size");
    }
    for (int64_t i = 0; i < count; ++i) {
      T x;
      std::memcpy(&x, raw.data() + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
      if constexpr (std::is_floating_point_v<T>) v.push_back(integral(x));
      else v.push_back(static_cast<int64_t>(x));
    }
  };
  switch (t.data_type()) {
    case onnx::TensorProto::INT64:
      if (t.has_raw_data()) from_raw(int64_t{});
      else v.assign(t.int64_data().begin(), t.int64_data().end());
      break;
    case onnx::TensorProto::INT32:
      if (t.has_raw_data()) from_raw(int32_t{});
      else v.assign(t.int32_data().begin(), t.int32_data().end());
      break;
    case onnx::TensorProto::FLOAT:
      if (t.has_raw_data()) from_raw(float{});
      else for (float f : t.float_data()) v.push_back(integral(f));
      break;
    case onnx::TensorProto::UINT8:  // outside raw_data, 8-bit values are stored in int32_data
      if (t.has_raw_data()) from_raw(uint8_t{});
      else v.assign(t.int32_data().begin(), t.int32_data().end());
      break;
    case onnx::TensorProto::INT8:
      if (t.has_raw_data()) from_raw(int8_t{});
      else v.assign(t.int32_data().begin(), t.int32_data().end());
      break;
    default:
      fail(TESSERA_ERROR_UNSUPPORTED, "initializer '" + t.name() + "' has dtype " + dtype_name(t.data_type()));
  }
  if (static_cast<int64_t>(v.size()) != count) {
    fail(TESSERA_ERROR_INVALID_ARGUMENT, "initializer '" + t.name() + "' has the wrong element count");
  }
  return v;
}

// ---- blobs -----------------------------------------------------------------

void BlobWriter::str(const std::string& s) {
  u32(static_cast<uint32_t>(s.size()));
  put(s.data(), s.size());
}

void BlobWriter::release_to(tessera_buffer_t* out) const {
  out->data = nullptr;
  out->size = 0;
  void* p = std::malloc(std::max<size_t>(1, buf_.size()));
  if (!p) throw std::bad_alloc();
  std::memcpy(p, buf_.data(), buf_.size());
  out->data = p;
  out->size = buf_.size();
}

void BlobReader::take(void* out, size_t n) {
  if (n > n_ - pos_) fail(TESSERA_ERROR_INCOMPATIBLE_BLOB, "blob truncated");
  std::memcpy(out, p_ + pos_, n);
  pos_ += n;
}

uint32_t BlobReader::u32() {
  uint32_t v;
  take(&v, 4);
  return v;
}
int32_t BlobReader::i32() {
  int32_t v;
  take(&v, 4);
  return v;
}
int64_t BlobReader::i64() {
  int64_t v;
  take(&v, 8);
  return v;
}
float BlobReader::f32() {
  float v;
  take(&v, 4);
  return v;
}
std::string BlobReader::str(size_t max_len) {
  uint32_t n = u32();
  if (n > max_len || n > n_ - pos_) fail(TESSERA_ERROR_INCOMPATIBLE_BLOB, "blob truncated (string)");
  std::string s(p_ + pos_, n);
  pos_ += n;
  return s;
}
void BlobReader::bytes(void* out, size_t n) { take(out, n); }

int64_t BlobReader::i64_in(int64_t lo, int64_t hi, const char* what) {
  int64_t v = i64();
  if (v < lo || v > hi) fail(TESSERA_ERROR_INCOMPATIBLE_BLOB, std::string("blob: bad ") + what);
  return v;
}

void free_buffer(tessera_buffer_t* b) {
  if (!b) return;
  std::free(b->data);
  b->data = nullptr;
  b->size = 0;
}

void check_descriptors(const tessera_tensor_t* t, size_t n, const std::vector<ValueType>& want, const char* what) {
  if (n != want.size()) {
    fail(TESSERA_ERROR_INVALID_ARGUMENT, std::string("expected ") + std::to_string(want.size()) + " " + what +
                                             ", got " + std::to_string(n));
  }
  for (size_t i = 0; i < n; ++i) {
    const ValueType& w = want[i];
    bool ok = t[i].dtype == w.dtype && t[i].rank == static_cast<int32_t>(w.dims.size()) &&
              (t[i].rank == 0 || t[i].dims) && t[i].size_bytes == static_cast<size_t>(w.numel()) * dtype_size(w.dtype) &&
              (t[i].data || t[i].size_bytes == 0);
    for (int32_t d = 0; ok && d < t[i].rank; ++d) ok = t[i].dims[d] == w.dims[static_cast<size_t>(d)];
    if (!ok) {
      fail(TESSERA_ERROR_INVALID_ARGUMENT,
           std::string(what) + " " + std::to_string(i) + " does not match the compiled " + w.str());
    }
  }
}

// ---- pricing --------------------------------------------------------------

MachineFigures MachineFigures::Nominal(int threads) {
  MachineFigures f;
  f.threads = std::max(1, threads);
  f.bytes_per_us = 8.0e3 * f.threads;
  return f;
}

MachineFigures MachineFigures::From(const tessera_machine_t* m) {
  MachineFigures f;
  if (!m || m->struct_size < offsetof(tessera_machine_t, num_threads) + sizeof(int32_t)) return f;
  f = Nominal(m->num_threads);
  auto has = [&](size_t end) { return m->struct_size >= end; };
  if (has(offsetof(tessera_machine_t, peak_gflops) + sizeof(double)) && m->peak_gflops > 0) {
    f.flops_per_us = m->peak_gflops * 1e3;
  }
  if (has(offsetof(tessera_machine_t, bandwidth_gbps) + sizeof(double)) && m->bandwidth_gbps > 0) {
    f.bytes_per_us = m->bandwidth_gbps * 1e3;
  }
  if (has(offsetof(tessera_machine_t, launch_us) + sizeof(double)) && m->launch_us >= 0) f.launch_us = m->launch_us;
  if (has(offsetof(tessera_machine_t, wake_us) + sizeof(double)) && m->wake_us > 0) f.wake_us = m->wake_us;
  if (has(offsetof(tessera_machine_t, clock_ghz) + sizeof(double)) && m->clock_ghz > 0) {
    f.cycles_per_us = m->clock_ghz * 1e3;
  }
  if (has(offsetof(tessera_machine_t, isa) + sizeof(const char*)) && m->isa) {
    std::string isa = std::string(",") + m->isa + ",";
    f.vector_floats = isa.find(",avx512f,") != std::string::npos ? 16 : 8;
  }
  return f;
}

}  // namespace tessera_plugin
