// The lowering's bookkeeping. Input: a region model (ModelView). Output: a
// Program. Method: nodes in order, each handed to its op's lowering; values
// get tensors per layout on demand (input()); a value needed in the other
// layout is reshaped when both layouts share a memory order, else converted
// between buffers in a step of its own, which closes the current segment when
// that segment produced the value. After the last node: outputs are exported
// (written in place when nothing reads them), and clamps (Relu, Clip) whose
// input has no other reader fold into the producer's output range.
#include "lowering.h"

#include <algorithm>
#include <cmath>

namespace tessera_xnn {

using tessera_plugin::describe;
using tessera_plugin::fail;

[[noreturn]] void refuse(std::string reason) { throw Refusal{std::move(reason)}; }

LowerFn find_lowering(const std::string& op_type) {
  static const std::map<std::string, LowerFn> kTable = {
#define TESSERA_XNN_ONNX_OP(name, fn) {#name, fn},
#include "onnx_ops.inc"
#undef TESSERA_XNN_ONNX_OP
  };
  auto it = kTable.find(op_type);
  return it == kTable.end() ? nullptr : it->second;
}

Dims broadcast_dims(const Dims& a, const Dims& b) {
  size_t r = std::max(a.size(), b.size());
  Dims out(r, 1);
  for (size_t i = 0; i < r; ++i) {
    int64_t x = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t y = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (x != y && x != 1 && y != 1) refuse("shapes " + dims_str(a) + " and " + dims_str(b) + " do not broadcast");
    out[i] = x == 1 ? y : x;
  }
  return out;
}

// ---- values ------------------------------------------------------------------

namespace {

bool is_8bit(int32_t dtype) { return dtype == TESSERA_DTYPE_UINT8 || dtype == TESSERA_DTYPE_INT8; }

}  // namespace

const Dims& Lowering::float_dims(const std::string& name) {
  const ValueType& t = model_.type(name);
  if (t.dtype != TESSERA_DTYPE_FLOAT32) {
    refuse("'" + name + "' has dtype " + tessera_plugin::dtype_name(t.dtype) + " (only float32)");
  }
  return dims(name);
}

const Dims& Lowering::q_dims(const std::string& name) {
  const ValueType& t = model_.type(name);
  if (!is_8bit(t.dtype))
    refuse("'" + name + "' has dtype " + tessera_plugin::dtype_name(t.dtype) + " (int8 or uint8 expected)");
  return dims(name);
}

const Dims& Lowering::dims(const std::string& name) {
  const ValueType& t = model_.type(name);
  if (t.dtype != TESSERA_DTYPE_FLOAT32 && !is_8bit(t.dtype)) {
    refuse("'" + name + "' has dtype " + tessera_plugin::dtype_name(t.dtype) + " (float32, int8 or uint8 only)");
  }
  if (!t.ranked) refuse("'" + name + "' has an unknown rank");
  if (!t.is_static()) refuse("'" + name + "' has a symbolic dim '" + (t.symbol.empty() ? "?" : t.symbol) + "'");
  if (t.dims.size() > kMaxRank) refuse("'" + name + "' has rank " + std::to_string(t.dims.size()) + " (at most 6)");
  if (t.numel() == 0) refuse("'" + name + "' is an empty tensor");
  if (t.numel() > kMaxElements) refuse("'" + name + "' is too large");
  return t.dims;
}

std::vector<float> Lowering::constant_floats(const std::string& name, const char* what) {
  const onnx::TensorProto* t = model_.initializer(name);
  if (!t) refuse(std::string(what) + " not constant");
  return tessera_plugin::initializer_floats(*t);
}

std::vector<int64_t> Lowering::constant_ints(const std::string& name, const char* what) {
  const onnx::TensorProto* t = model_.initializer(name);
  if (!t) refuse(std::string(what) + " not constant");
  return tessera_plugin::initializer_ints(*t);
}

int32_t Lowering::new_tensor(Dims dims, TensorKind kind, const std::string& value) {
  TensorDef t;
  t.dims = std::move(dims);
  t.kind = kind;
  if (!value.empty() && is_8bit(model_.type(value).dtype)) t.dtype = DType::kQS8;
  program_.tensors.push_back(std::move(t));
  segment_of_.push_back(kind == TensorKind::kInternal ? segment_ : -1);
  producer_.push_back(-1);
  tensor_value_.push_back(value);
  return static_cast<int32_t>(program_.tensors.size() - 1);
}

std::string Lowering::quant_root(const std::string& name) const {
  std::string r = name;
  for (auto it = values_.find(r); it != values_.end() && !it->second.quant_of.empty(); it = values_.find(r)) {
    r = it->second.quant_of;
  }
  return r;
}

void Lowering::set_quant(const std::string& name, float scale, int64_t zero_point) {
  const int32_t dtype = model_.type(name).dtype;
  if (!is_8bit(dtype)) refuse("'" + name + "' is not an 8-bit value");
  const int64_t lo = dtype == TESSERA_DTYPE_UINT8 ? 0 : -128;
  if (zero_point < lo || zero_point > lo + 255) refuse("zero point " + std::to_string(zero_point) + " out of range");
  if (!std::isfinite(scale) || !(scale > 0)) refuse("scale " + std::to_string(scale) + " is not positive");
  const int32_t zp = static_cast<int32_t>(dtype == TESSERA_DTYPE_UINT8 ? zero_point - 128 : zero_point);
  ValueState& v = values_[quant_root(name)];
  if (v.has_quant && (v.scale != scale || v.zero_point != zp)) {
    refuse("'" + name + "' is read or written with two different scales or zero points");
  }
  v.has_quant = true, v.scale = scale, v.zero_point = zp;
}

void Lowering::same_quant(const std::string& a, const std::string& b) {
  const std::string ra = quant_root(a), rb = quant_root(b);
  if (ra == rb) return;
  ValueState& vb = values_[rb];
  if (vb.has_quant) {
    const int32_t dtype = model_.type(a).dtype;
    set_quant(a, vb.scale, dtype == TESSERA_DTYPE_UINT8 ? vb.zero_point + 128 : vb.zero_point);
  }
  values_[rb].quant_of = ra;
}

// Every int8 tensor of a value takes that value's quantization (scale 1 and
// zero point 0 where nothing asked for one: data that only moves).
void Lowering::fill_quantization() {
  for (size_t t = 0; t < program_.tensors.size(); ++t) {
    TensorDef& d = program_.tensors[t];
    if (d.dtype != DType::kQS8 || tensor_value_[t].empty()) continue;
    auto it = values_.find(quant_root(tensor_value_[t]));
    const bool known = it != values_.end() && it->second.has_quant;
    d.scales = {known ? it->second.scale : 1.f};
    d.zero_point = known ? it->second.zero_point : 0;
  }
}

int32_t Lowering::usable(int32_t t) {
  TensorDef& d = program_.tensors[static_cast<size_t>(t)];
  if (d.kind == TensorKind::kInternal && segment_of_[static_cast<size_t>(t)] != segment_) d.kind = TensorKind::kBuffer;
  return t;
}

bool Lowering::has_layout(const std::string& name, Layout layout) const {
  auto it = values_.find(name);
  return it != values_.end() && it->second.tensor[layout] >= 0;
}

Layout Lowering::preferred(const std::string& name) const {
  if (has_layout(name, kNhwc)) return kNhwc;
  return kPlain;
}

int32_t Lowering::import(const std::string& name, Layout layout) {
  int32_t index = -1;
  auto it = input_index_.find(name);
  if (it != input_index_.end()) {
    index = it->second;
  } else if (!isolated_) {
    fail(TESSERA_ERROR_INVALID_ARGUMENT, "value '" + name + "' is read before any node writes it");
  }
  const Dims& d = dims(name);
  int32_t t = new_tensor(xnn_dims(d, layout == kNhwc), TensorKind::kBuffer, name);
  program_.imports.push_back(Import{index, t, layout == kNhwc ? Transfer::kNhwc : Transfer::kCopy});
  values_[name].tensor[layout] = t;
  return t;
}

int32_t Lowering::input(const std::string& name, Layout layout) {
  const Dims& d = dims(name);
  if (layout == kNhwc && !has_channels_last(d.size()))
    refuse("internal: NHWC asked for a rank-" + std::to_string(d.size()) + " value");
  if (is_constant(name)) {
    if (model_.type(name).dtype != TESSERA_DTYPE_FLOAT32) refuse("'" + name + "' is an 8-bit constant operand");
    auto key = std::make_pair(name, static_cast<int>(layout));
    auto it = constants_.find(key);
    if (it != constants_.end()) return it->second;
    int32_t t = constant(layout == kNhwc ? Transform::kToNhwc : Transform::kCopy, {name}, xnn_dims(d, layout == kNhwc));
    return constants_[key] = t;
  }
  auto it = values_.find(name);
  if (it == values_.end()) return import(name, layout);
  ValueState& v = it->second;
  if (v.tensor[layout] >= 0) return usable(v.tensor[layout]);
  int32_t other = v.tensor[1 - layout];
  if (other < 0) return import(name, layout);
  if (layout_change_is_view(d)) {  // same memory order: a reshape, inside the segment
    int32_t t = temp(xnn_dims(d, layout == kNhwc), name);
    emit(Op::kReshape, {usable(other)}, t);
    values_[name].tensor[layout] = t;
    return t;
  }
  // A real transpose: a conversion step between two buffers. When this
  // segment wrote the source, the segment must run first.
  int32_t src = usable(other);
  program_.tensors[static_cast<size_t>(src)].kind = TensorKind::kBuffer;
  if (segment_of_[static_cast<size_t>(src)] == segment_) close_segment();
  int32_t dst = new_tensor(xnn_dims(d, layout == kNhwc), TensorKind::kBuffer, name);
  program_.steps.push_back(Step{layout == kNhwc ? StepKind::kToNhwc : StepKind::kToPlain, src, dst});
  values_[name].tensor[layout] = dst;
  return dst;
}

int32_t Lowering::input_plain_memory(const std::string& name) {
  const Dims& d = dims(name);
  if (!is_constant(name) && !has_layout(name, kPlain) && has_layout(name, kNhwc) && layout_change_is_view(d)) {
    return input(name, kNhwc);
  }
  return input(name, kPlain);
}

int32_t Lowering::constant(Transform transform, std::vector<std::string> sources, Dims dims, float scale,
                           std::vector<int64_t> ints, std::vector<float> extra) {
  ConstantDef c;
  c.transform = transform;
  for (const std::string& s : sources) {
    const ValueType& t = model_.type(s);
    if (t.dtype != TESSERA_DTYPE_FLOAT32) refuse("'" + s + "' is not a float32 constant");
    c.source_dims.push_back(t.dims);
    c.source_dtypes.push_back(t.dtype);
  }
  c.sources = std::move(sources);
  c.ints = std::move(ints);
  c.floats.push_back(scale);
  c.floats.insert(c.floats.end(), extra.begin(), extra.end());
  program_.constants.push_back(std::move(c));
  int32_t t = new_tensor(std::move(dims), TensorKind::kConstant);
  program_.tensors[static_cast<size_t>(t)].ref = static_cast<int32_t>(program_.constants.size() - 1);
  return t;
}

int32_t Lowering::qconstant(Transform transform, const std::string& source, Dims dims, DType dtype,
                            std::vector<float> scales, int32_t channel_dim) {
  const onnx::TensorProto* init = model_.initializer(source);
  if (!init) refuse("'" + source + "' is not constant");
  const ValueType& t = model_.type(source);
  ConstantDef c;
  c.transform = transform;
  c.sources = {source};
  c.source_dims = {t.dims};
  c.source_dtypes = {t.dtype};
  c.floats = {1.f};
  program_.constants.push_back(std::move(c));
  int32_t id = new_tensor(std::move(dims), TensorKind::kConstant);
  TensorDef& d = program_.tensors[static_cast<size_t>(id)];
  d.ref = static_cast<int32_t>(program_.constants.size() - 1);
  d.dtype = dtype;
  d.scales = std::move(scales);
  d.channel_dim = channel_dim;
  return id;
}

int32_t Lowering::step_input(const std::string& name, Layout layout) {
  if (is_constant(name)) refuse("'" + name + "' is constant");
  int32_t t = input(name, layout);
  TensorDef& d = program_.tensors[static_cast<size_t>(t)];
  if (d.kind == TensorKind::kInternal) {
    d.kind = TensorKind::kBuffer;
    if (segment_of_[static_cast<size_t>(t)] == segment_) close_segment();
  }
  return t;
}

int32_t Lowering::step_output(const std::string& name, Layout layout) {
  return written_value(name, layout, TensorKind::kBuffer);
}

int32_t Lowering::literal(const std::vector<float>& values, Dims dims) {
  return constant(Transform::kLiteral, {}, std::move(dims), 1.f, {}, values);
}

int32_t Lowering::output(const std::string& name, Layout layout) {
  return written_value(name, layout, TensorKind::kInternal);
}

int32_t Lowering::written_value(const std::string& name, Layout layout, TensorKind kind) {
  const Dims& d = dims(name);
  auto it = values_.find(name);
  const bool has_tensor = it != values_.end() && (it->second.tensor[0] >= 0 || it->second.tensor[1] >= 0);
  if (has_tensor || is_constant(name) || input_index_.count(name)) {
    fail(TESSERA_ERROR_INVALID_ARGUMENT, "value '" + name + "' is written twice");
  }
  int32_t t = new_tensor(xnn_dims(d, layout == kNhwc), kind, name);
  values_[name].tensor[layout] = t;
  return t;
}

int32_t Lowering::temp(Dims dims, const std::string& like) {
  return new_tensor(std::move(dims), TensorKind::kInternal, like);
}

void Lowering::emit(Op op, std::vector<int32_t> inputs, int32_t output, std::vector<int64_t> ints,
                    std::vector<float> floats) {
  NodeDef n{op, std::move(inputs), output, std::move(ints), std::move(floats)};
  std::string why = check_node(n, program_.tensors);
  if (!why.empty()) refuse("XNNPACK cannot produce the declared output (" + why + ")");
  producer_[static_cast<size_t>(output)] = static_cast<int>(program_.nodes.size());
  program_.nodes.push_back(std::move(n));
  node_segment_.push_back(segment_);
}

void Lowering::close_segment() {
  int32_t end = static_cast<int32_t>(program_.nodes.size());
  if (end == segment_begin_) return;
  program_.steps.push_back(Step{StepKind::kSegment, segment_begin_, end});
  segment_begin_ = end;
  ++segment_;
}

// ---- driving ---------------------------------------------------------------------

void Lowering::reset(bool isolated) {
  isolated_ = isolated;
  program_ = Program{};
  segment_of_.clear();
  producer_.clear();
  node_segment_.clear();
  tensor_value_.clear();
  values_.clear();
  constants_.clear();
  input_index_.clear();
  segment_ = 0;
  segment_begin_ = 0;
}

void Lowering::lower_node(const onnx::NodeProto& n) {
  // ai.tessera.QLinearLookup: the table Tessera's QDQ pass makes of the float ops between quantized layers.
  const bool lookup = n.domain() == "ai.tessera" && n.op_type() == "QLinearLookup";
  if (!n.domain().empty() && n.domain() != "ai.onnx" && !lookup)
    refuse("op " + n.domain() + "." + n.op_type() + " is not supported");
  if (n.op_type() == "QLinearLookup" && !lookup) refuse("op QLinearLookup is not supported");
  LowerFn fn = find_lowering(n.op_type());
  if (!fn) refuse("op " + n.op_type() + " is not supported by this XNNPACK snapshot");
  fn(*this, n);
}

std::string Lowering::check_alone(int index) {
  reset(true);
  try {
    lower_node(model_.node(index));
    return "";
  } catch (const Refusal& r) {
    return r.reason;
  } catch (const tessera_plugin::Failure& f) {
    return f.message;
  }
}

Program Lowering::lower_region() {
  reset(false);
  std::vector<std::string> inputs = model_.input_names();
  for (size_t i = 0; i < inputs.size(); ++i) {
    input_index_[inputs[i]] = static_cast<int32_t>(i);
    const ValueType& t = model_.type(inputs[i]);
    if (!t.is_static()) fail(TESSERA_ERROR_INVALID_ARGUMENT, "region input '" + inputs[i] + "' has no static shape");
    program_.inputs.push_back(t);
    program_.input_names.push_back(inputs[i]);
  }
  for (const std::string& o : model_.output_names()) {
    const ValueType& t = model_.type(o);
    if (!t.is_static()) fail(TESSERA_ERROR_INVALID_ARGUMENT, "region output '" + o + "' has no static shape");
    program_.outputs.push_back(t);
    program_.output_names.push_back(o);
  }
  for (int i = 0; i < model_.num_nodes(); ++i) {
    const onnx::NodeProto& n = model_.node(i);
    try {
      lower_node(n);
    } catch (const Refusal& r) {
      fail(TESSERA_ERROR_UNSUPPORTED, describe(n) + ": " + r.reason);
    }
  }
  finish();
  validate(program_);
  return std::move(program_);
}

std::vector<int> Lowering::readers() const {
  std::vector<int> r(program_.tensors.size(), 0);
  for (const NodeDef& n : program_.nodes) {
    for (int32_t i : n.inputs) ++r[static_cast<size_t>(i)];
  }
  for (const Step& s : program_.steps) {
    if (s.kind == StepKind::kSegment) continue;
    ++r[static_cast<size_t>(s.a)];
    if (s.x2 >= 0) ++r[static_cast<size_t>(s.x2)];
  }
  return r;
}

void Lowering::finish() {
  // Outputs: plain when the value has it (a copy), else NHWC (a transpose).
  std::set<int32_t> exported;
  for (const std::string& name : program_.output_names) {
    auto it = values_.find(name);
    if (it == values_.end() || (it->second.tensor[kPlain] < 0 && it->second.tensor[kNhwc] < 0)) {
      fail(TESSERA_ERROR_INVALID_ARGUMENT, "region output '" + name + "' is not computed by any node of the region");
    }
    bool plain = it->second.tensor[kPlain] >= 0;
    int32_t t = it->second.tensor[plain ? kPlain : kNhwc];
    if (producer_[static_cast<size_t>(t)] < 0 && program_.tensors[static_cast<size_t>(t)].kind != TensorKind::kBuffer) {
      fail(TESSERA_ERROR_INVALID_ARGUMENT, "region output '" + name + "' is not computed by any node of the region");
    }
    program_.exports.push_back(Export{t, plain ? Transfer::kCopy : Transfer::kNhwc});
    exported.insert(t);
  }
  close_segment();
  fuse_clamps(exported);
  fill_quantization();
  // A plain output that nothing reads is written by its node straight into
  // the host's buffer; every other exported tensor lives in a buffer.
  std::vector<int> r = readers();
  for (size_t t = 0; t < program_.tensors.size(); ++t) {  // a dead value still needs memory to be written to
    if (program_.tensors[t].kind == TensorKind::kInternal && producer_[t] >= 0 && r[t] == 0 &&
        !exported.count(static_cast<int32_t>(t))) {
      program_.tensors[t].kind = TensorKind::kBuffer;
    }
  }
  for (size_t o = 0; o < program_.exports.size(); ++o) {
    Export& e = program_.exports[o];
    TensorDef& t = program_.tensors[static_cast<size_t>(e.tensor)];
    if (e.transfer == Transfer::kCopy && t.kind == TensorKind::kInternal && r[static_cast<size_t>(e.tensor)] == 0 &&
        program_.outputs[o].dtype != TESSERA_DTYPE_UINT8) {
      t.kind = TensorKind::kOutput;
      t.ref = static_cast<int32_t>(o);
      e.transfer = Transfer::kDirect;
    } else {
      t.kind = TensorKind::kBuffer;
    }
  }
}

// Relu and Clip are Clamp nodes; one whose input comes from a node with an
// output range (convolution, fully connected, pooling, arithmetic) and has no
// other reader narrows that range instead of running.
void Lowering::fuse_clamps(const std::set<int32_t>& keep) {
  auto fusable = [](Op op) {
    switch (op) {
      case Op::kConv2d:
      case Op::kDepthwiseConv2d:
      case Op::kDeconv2d:
      case Op::kFullyConnected:
      case Op::kMaxPool2d:
      case Op::kAvgPool2d:
      case Op::kGlobalAvgPool2d:
      case Op::kAdd:
      case Op::kSub:
      case Op::kMul:
      case Op::kDiv:
      case Op::kClamp:
        return true;
      default:
        return false;
    }
  };
  std::vector<int> r = readers();
  std::vector<char> dead(program_.nodes.size(), 0);
  for (size_t c = 0; c < program_.nodes.size(); ++c) {
    NodeDef& clamp = program_.nodes[c];
    if (clamp.op != Op::kClamp) continue;
    int32_t t = clamp.inputs[0];
    const TensorDef& td = program_.tensors[static_cast<size_t>(t)];
    int p = producer_[static_cast<size_t>(t)];
    if (td.kind != TensorKind::kInternal || keep.count(t) || r[static_cast<size_t>(t)] != 1 || p < 0 ||
        dead[static_cast<size_t>(p)] || !fusable(program_.nodes[static_cast<size_t>(p)].op)) {
      continue;
    }
    NodeDef& prod = program_.nodes[static_cast<size_t>(p)];
    float lo = std::max(prod.floats[0], clamp.floats[0]), hi = std::min(prod.floats[1], clamp.floats[1]);
    if (!(lo < hi)) continue;
    prod.floats = {lo, hi};
    prod.output = clamp.output;
    producer_[static_cast<size_t>(clamp.output)] = p;
    producer_[static_cast<size_t>(t)] = -1;  // the folded value is gone
    dead[c] = 1;
  }
  // Drop the folded nodes and renumber the segments.
  std::vector<NodeDef> kept;
  std::vector<int> kept_segment;
  for (size_t i = 0; i < program_.nodes.size(); ++i) {
    if (dead[i]) continue;
    kept.push_back(std::move(program_.nodes[i]));
    kept_segment.push_back(node_segment_[i]);
  }
  int32_t pos = 0;
  for (Step& s : program_.steps) {
    if (s.kind != StepKind::kSegment) continue;
    int seg = node_segment_[static_cast<size_t>(s.a)];
    s.a = pos;
    while (static_cast<size_t>(pos) < kept.size() && kept_segment[static_cast<size_t>(pos)] == seg) ++pos;
    s.b = pos;
  }
  program_.nodes = std::move(kept);
  node_segment_ = std::move(kept_segment);
}

}  // namespace tessera_xnn
