#include "dnnl_lowering.h"

#include <oneapi/dnnl/dnnl_types.h>

#include <algorithm>
#include <iterator>

namespace tessera_dnnl {

using tessera_plugin::describe;
using tessera_plugin::fail;
using tessera_plugin::ModelView;
using tessera_plugin::ValueType;

namespace {

// The operator list, in one place: ONNX op type -> handler.
struct OpEntry {
  const char* onnx_name;
  Handler handler;
};
constexpr OpEntry kOps[] = {
    {"Conv", lower_conv},
    {"ConvTranspose", lower_conv_transpose},
    {"MaxPool", lower_pool},
    {"Resize", lower_resize},
    {"Upsample", lower_resize},
    {"AveragePool", lower_pool},
    {"GlobalAveragePool", lower_global_pool},
    {"GlobalMaxPool", lower_global_pool},
    {"BatchNormalization", lower_batch_norm},
    {"LRN", lower_lrn},
    {"Softmax", lower_softmax},
    {"LogSoftmax", lower_softmax},
    {"LayerNormalization", lower_layer_norm},
    {"Gemm", lower_gemm},
    {"MatMul", lower_matmul},
    {"Add", lower_binary},
    {"Sub", lower_binary},
    {"Mul", lower_binary},
    {"Div", lower_binary},
    {"Sum", lower_variadic},
    {"Max", lower_variadic},
    {"Min", lower_variadic},
    {"Mean", lower_variadic},
    {"Concat", lower_concat},
    {"Transpose", lower_transpose},
    {"Split", lower_split},
    {"Slice", lower_slice},
    {"Gather", lower_gather},
    {"PRelu", lower_prelu},
    {"QLinearConv", lower_qlinear_conv},
    {"QLinearMatMul", lower_qlinear_matmul},
    {"QLinearLookup", lower_lookup},
    {"QuantizeLinear", lower_quantize},
    {"DequantizeLinear", lower_quantize},
    {"DynamicQuantizeLinear", lower_dynamic_quantize},
    {"ReduceMean", lower_reduce},
    {"ReduceSum", lower_reduce},
    {"ReduceMax", lower_reduce},
    {"ReduceMin", lower_reduce},
    {"ReduceProd", lower_reduce},
    {"ReduceL1", lower_reduce},
    {"ReduceL2", lower_reduce},
    {"ReduceSumSquare", lower_reduce},
    // Same elements, another shape: zero-copy views.
    {"Reshape", lower_view},
    {"Flatten", lower_view},
    {"Squeeze", lower_view},
    {"Unsqueeze", lower_view},
    {"Identity", lower_view},
    {"Dropout", lower_view},
    // Elementwise functions (the table of algorithms is in dnnl_lower_math.cc).
    {"Relu", lower_eltwise},
    {"LeakyRelu", lower_eltwise},
    {"Sigmoid", lower_eltwise},
    {"Tanh", lower_eltwise},
    {"Elu", lower_eltwise},
    {"Selu", lower_eltwise},
    {"Celu", lower_eltwise},
    {"Clip", lower_eltwise},
    {"HardSigmoid", lower_eltwise},
    {"HardSwish", lower_eltwise},
    {"Gelu", lower_eltwise},
    {"Exp", lower_eltwise},
    {"Log", lower_eltwise},
    {"Sqrt", lower_eltwise},
    {"Abs", lower_eltwise},
    {"Mish", lower_eltwise},
    {"Softplus", lower_eltwise},
    {"Neg", lower_eltwise},
    {"Round", lower_eltwise},
    {"Reciprocal", lower_eltwise},
    {"Pow", lower_eltwise},
};

}  // namespace

Handler find_handler(const std::string& op_type) {
  auto it = std::find_if(std::begin(kOps), std::end(kOps),
                         [&](const OpEntry& e) { return op_type == e.onnx_name; });
  return it == std::end(kOps) ? nullptr : it->handler;
}

Lowering::Lowering(const ModelView& model) : model_(model), patterns_(find_patterns(model)) {
  for (size_t p = 0; p < patterns_.size(); ++p) {
    for (int n : patterns_[p].nodes) pattern_of_[n] = p;
  }
}

void Lowering::lower_pattern(const Pattern& p, const onnx::NodeProto& last) {
  if (p.kind == Pattern::Kind::kDynConv || p.kind == Pattern::Kind::kDynMatMul) {
    (p.kind == Pattern::Kind::kDynConv ? lower_dyn_conv : lower_dyn_matmul)(*this, p, last);
    return;
  }
  Op op;
  op.in = {value(p.x)};
  if (p.kind == Pattern::Kind::kGelu) {
    op.kind = OpKind::kEltwise;
    op.alg = dnnl_eltwise_gelu_erf;
    op.floats = {0.f, 0.f};
  } else {
    const Dims x = dims(op.in[0]);
    const int64_t cols = numel(Dims(x.end() - p.axes, x.end()));
    op.kind = OpKind::kLayerNorm;
    op.in.push_back(p.gamma.empty() ? -1 : value(p.gamma, "scale"));
    op.in.push_back(p.beta.empty() ? -1 : value(p.beta, "bias"));
    op.ints = {numel(x) / cols, cols};
    op.floats = {p.epsilon};
  }
  op.out = output(last);
  for (int i : p.nodes) op.nodes.push_back(model_.node(i).name());  // the op does every node's work
  emit(std::move(op));
}

namespace {

std::string dtypes_str(uint32_t dtypes) {
  std::string s;
  for (int32_t d = 1; d < 32; ++d) {
    if (dtypes & (1u << d)) s += (s.empty() ? "" : "/") + std::string(tessera_plugin::dtype_name(d));
  }
  return s;
}

}  // namespace

int32_t Lowering::value(const std::string& name, const char* role, uint32_t dtypes) {
  const std::string who = std::string(role) + " '" + name + "'";
  auto wrong_type = [&](int32_t dtype) {
    return dtype <= 0 || dtype >= 32 || !(dtypes & (1u << dtype));
  };
  auto it = index_.find(name);
  if (it != index_.end()) {
    const int32_t dtype = program_.values[static_cast<size_t>(it->second)].dtype;
    if (wrong_type(dtype)) {
      throw Refusal{who + " has dtype " + tessera_plugin::dtype_name(dtype) + " (only " + dtypes_str(dtypes) + ")"};
    }
    return it->second;
  }
  if (name.empty()) throw Refusal{std::string("a required ") + role + " is missing"};
  const ValueType& t = model_.type(name);
  if (t.dtype == 0) throw Refusal{who + " has no type"};
  if (wrong_type(t.dtype)) {
    throw Refusal{who + " has dtype " + tessera_plugin::dtype_name(t.dtype) + " (only " + dtypes_str(dtypes) + ")"};
  }
  if (!t.ranked) throw Refusal{who + " has an unknown rank"};
  if (!t.is_static()) throw Refusal{who + " has a symbolic dim" + (t.symbol.empty() ? "" : " '" + t.symbol + "'")};
  if (t.dims.size() > kMaxRank) throw Refusal{who + " has rank " + std::to_string(t.dims.size()) + " (at most 8)"};
  if (t.numel() == 0) throw Refusal{who + " has no elements"};
  if (t.numel() > kMaxElements) throw Refusal{who + " is too large"};
  Value v{name, ValueKind::kComputed, t.dims, t.dtype};
  const bool graph_input = [&] {
    for (const auto& vi : model_.graph().input()) {
      if (vi.name() == name) return true;
    }
    return false;
  }();
  if (model_.is_initializer(name)) v.kind = ValueKind::kConstant;
  if (graph_input && !model_.is_initializer(name)) v.kind = ValueKind::kInput;
  program_.values.push_back(std::move(v));
  return index_[name] = static_cast<int32_t>(program_.values.size() - 1);
}

int32_t Lowering::boundary_input(const std::string& name) {
  if (index_.count(name)) return index_[name];
  // An input no op reads (a Reshape's shape computed elsewhere, say): run()
  // checks its descriptor and never touches it, so any dtype will do.
  const ValueType& t = model_.type(name);
  if (!t.is_static() || t.dims.size() > kMaxRank || t.numel() > kMaxElements || t.dtype <= 0) {
    throw Refusal{"region input '" + name + "' has no static type"};
  }
  program_.values.push_back(Value{name, ValueKind::kInput, t.dims, t.dtype});
  return index_[name] = static_cast<int32_t>(program_.values.size() - 1);
}

int32_t Lowering::temp(const onnx::NodeProto& n, const Dims& dims) {
  Value v{n.name() + "/t" + std::to_string(temps_++), ValueKind::kComputed, dims};
  program_.values.push_back(std::move(v));
  return static_cast<int32_t>(program_.values.size() - 1);
}

int32_t Lowering::output(const onnx::NodeProto& n, int i, uint32_t dtypes) {
  if (n.output_size() <= i || n.output(i).empty()) throw Refusal{"output " + std::to_string(i) + " is missing"};
  const std::string& name = n.output(i);
  if (produced_.count(name) || index_.count(name)) {
    auto it = index_.find(name);
    if (it == index_.end() || program_.values[static_cast<size_t>(it->second)].kind != ValueKind::kComputed ||
        produced_.count(name)) {
      throw Refusal{"value '" + name + "' is written twice"};
    }
  }
  int32_t id = value(name, "output", dtypes);
  if (program_.values[static_cast<size_t>(id)].kind != ValueKind::kComputed) {
    throw Refusal{"output '" + name + "' is also a region input or constant"};
  }
  return id;
}

std::vector<float> Lowering::constant_floats(const std::string& name, const std::string& what) const {
  const onnx::TensorProto* t = model_.initializer(name);
  if (!t) throw Refusal{what + " is not constant"};
  try {
    return tessera_plugin::initializer_floats(*t);
  } catch (const tessera_plugin::Failure& f) {
    throw Refusal{what + ": " + f.message};
  }
}

std::vector<int64_t> Lowering::constant_ints(const std::string& name, const std::string& what) const {
  const onnx::TensorProto* t = model_.initializer(name);
  if (!t) throw Refusal{what + " is not constant"};
  try {
    return tessera_plugin::initializer_ints(*t);
  } catch (const tessera_plugin::Failure& f) {
    throw Refusal{what + ": " + f.message};
  }
}

void Lowering::emit(Op op) {
  if (current_ && op.nodes.empty()) op.nodes = {current_->name()};
  std::string why = check_op(op, program_.values);
  if (!why.empty()) throw Refusal{why};
  program_.ops.push_back(std::move(op));
}

void Lowering::lower(int index) {
  const onnx::NodeProto& n = model_.node(index);
  // A refused node leaves no trace: values and ops it added are dropped.
  const size_t values_before = program_.values.size(), ops_before = program_.ops.size();
  const std::map<std::string, int32_t> index_before = index_, quant_params_before = quant_params_;
  const int temps_before = temps_;
  current_ = &n;
  try {
    // com.microsoft's Gelu (ONNX Runtime's transformer exports) is the erf GELU.
    const bool ms_gelu = n.domain() == "com.microsoft" && n.op_type() == "Gelu";
    // ai.tessera.QLinearLookup: Tessera's own graph pass writes it for quantized elementwise chains.
    const bool lookup = n.domain() == "ai.tessera" && n.op_type() == "QLinearLookup";
    if (!n.domain().empty() && n.domain() != "ai.onnx" && !ms_gelu && !lookup) {
      throw Refusal{"op " + n.domain() + "." + n.op_type() + " is not supported"};
    }
    auto pat = pattern_of_.find(index);
    if (pat != pattern_of_.end()) {
      const Pattern& p = patterns_[pat->second];
      if (index == p.nodes.back()) lower_pattern(p, n);
      for (const auto& o : n.output()) produced_[o] = true;
      current_ = nullptr;
      return;
    }
    Handler h = find_handler(n.op_type());
    if (!h) throw Refusal{"op " + n.op_type() + " is not supported"};
    // Outputs past the first (BatchNormalization's running statistics,
    // MaxPool's indices, Dropout's mask...) are computed by no op here;
    // Split computes every output.
    // DynamicQuantizeLinear's scale and zero point live in its kQuantParams value, which the dynamically
    // quantized convolutions read: no other reader may see them.
    const bool dql = n.op_type() == "DynamicQuantizeLinear";
    for (int i = 1; i < n.output_size() && n.op_type() != "Split"; ++i) {
      const std::string& o = n.output(i);
      const std::vector<int>& readers = model_.consumers(o);
      if (dql && !model_.is_graph_output(o) &&
          std::all_of(readers.begin(), readers.end(), [&](int r) { return in_dyn_conv(r); })) {
        continue;
      }
      if (!o.empty() && (!readers.empty() || model_.is_graph_output(o))) {
        throw Refusal{n.op_type() + " with its output " + std::to_string(i) + " ('" + o + "') used"};
      }
    }
    h(*this, n);
  } catch (const Refusal&) {
    program_.values.resize(values_before);
    program_.ops.resize(ops_before);
    index_ = index_before;
    quant_params_ = quant_params_before;
    temps_ = temps_before;
    current_ = nullptr;
    throw;
  }
  for (const auto& o : n.output()) {
    if (!o.empty()) produced_[o] = true;
  }
  current_ = nullptr;
}

Program Lowering::lower_all(const ModelView& model) {
  Lowering l(model);
  for (int i = 0; i < model.num_nodes(); ++i) {
    try {
      l.lower(i);
    } catch (const Refusal& r) {
      fail(TESSERA_ERROR_UNSUPPORTED, describe(model.node(i)) + ": " + r.reason);
    }
  }
  try {
    for (const std::string& name : model.input_names()) l.program_.inputs.push_back(l.boundary_input(name));
    for (const std::string& name : model.output_names()) {
      l.program_.outputs.push_back(l.value(name, "region output", kFloat32 | k8Bit));
    }
  } catch (const Refusal& r) {
    fail(TESSERA_ERROR_UNSUPPORTED, "region boundary: " + r.reason);
  }
  for (const std::string& name : model.output_names()) {
    const Value& v = l.program_.values[static_cast<size_t>(l.index_[name])];
    if (v.kind == ValueKind::kComputed && !l.produced_.count(name)) {
      fail(TESSERA_ERROR_INVALID_ARGUMENT, "region output '" + name + "' is not computed by any node");
    }
  }
  return std::move(l.program_);
}

}  // namespace tessera_dnnl
