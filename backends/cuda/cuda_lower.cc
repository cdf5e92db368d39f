// Lowering (cuda_lower.h): the operator table, values, the planning pass that
// groups nodes into fused steps, GEMMs, convolutions, elementwise chains and
// the memory plan. Tensor movement, windows and normalisations are in
// cuda_lower_tensor.cc.
#include "cuda_lower.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

namespace tessera_cuda {

using tessera_plugin::describe;
using tessera_plugin::fail;
using tessera_plugin::Failure;

[[noreturn]] void refuse(const std::string& why) { fail(TESSERA_ERROR_UNSUPPORTED, why); }

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (int k = static_cast<int>(dims.size()) - 2; k >= 0; --k) s[k] = s[k + 1] * dims[k + 1];
  return s;
}

namespace {

// ---- the operator list ------------------------------------------------------

const std::map<std::string, int32_t>& binary_ops() {
  static const std::map<std::string, int32_t> kOps = {{"Add", kAdd}, {"Sub", kSub}, {"Mul", kMul}, {"Div", kDiv},
                                                      {"Pow", kPow}, {"Max", kMax}, {"Min", kMin}, {"PRelu", kPRelu}};
  return kOps;
}

// Unary ops whose code needs no attribute; Gelu, LeakyRelu, Clip, HardSigmoid, Elu, Selu and BatchNormalization
// read theirs in chain_node.
const std::map<std::string, int32_t>& unary_ops() {
  static const std::map<std::string, int32_t> kOps = {{"Relu", kRelu},
                                                      {"Sigmoid", kSigmoid},
                                                      {"Tanh", kTanh},
                                                      {"Exp", kExp},
                                                      {"Log", kLog},
                                                      {"Sqrt", kSqrt},
                                                      {"Neg", kNeg},
                                                      {"Abs", kAbs},
                                                      {"Erf", kErf},
                                                      {"Gelu", kGeluErf},
                                                      {"LeakyRelu", kLeakyRelu},
                                                      {"Clip", kClip},
                                                      {"HardSigmoid", kHardSigmoid},
                                                      {"HardSwish", kHardSwish},
                                                      {"Softplus", kSoftplus},
                                                      {"Reciprocal", kReciprocal},
                                                      {"Floor", kFloor},
                                                      {"Ceil", kCeil},
                                                      {"Sin", kSin},
                                                      {"Cos", kCos},
                                                      {"Elu", kElu},
                                                      {"Selu", kSelu},
                                                      {"Sign", kSign},
                                                      {"Round", kRound},
                                                      {"Softsign", kSoftsign},
                                                      {"Mish", kMish}};
  return kOps;
}

// Everything else, by its lowering.
const std::set<std::string>& other_ops() {
  static const std::set<std::string> kOps = {"MatMul",
                                             "Gemm",
                                             "Conv",
                                             "ConvTranspose",
                                             "Reshape",
                                             "Flatten",
                                             "Squeeze",
                                             "Unsqueeze",
                                             "Identity",
                                             "Dropout",
                                             "Softmax",
                                             "LogSoftmax",
                                             "LayerNormalization",
                                             "ReduceMean",
                                             "ReduceSum",
                                             "ReduceMax",
                                             "ReduceMin",
                                             "ReduceSumSquare",
                                             "ReduceL2",
                                             "GlobalAveragePool",
                                             "GlobalMaxPool",
                                             "MaxPool",
                                             "AveragePool",
                                             "Resize",
                                             "Upsample",
                                             "Concat",
                                             "Transpose",
                                             "Slice",
                                             "Split",
                                             "Gather",
                                             "Expand",
                                             "Tile",
                                             "Pad"};
  return kOps;
}

int chain_ops_of(const onnx::NodeProto& n) { return n.op_type() == "BatchNormalization" ? 2 : 1; }
int chain_operands_of(const onnx::NodeProto& n) {
  if (n.op_type() == "BatchNormalization") return 2;
  return binary_ops().count(n.op_type()) ? 1 : 0;
}

}  // namespace

int32_t binary_op_code(const std::string& op) {
  auto it = binary_ops().find(op);
  return it == binary_ops().end() ? -1 : it->second;
}
int32_t unary_op_code(const std::string& op) {
  auto it = unary_ops().find(op);
  return it == unary_ops().end() ? -1 : it->second;
}

bool is_elementwise_op(const std::string& op) {
  return binary_ops().count(op) || unary_ops().count(op) || op == "BatchNormalization";
}
bool is_known_op(const std::string& op) { return is_elementwise_op(op) || other_ops().count(op); }

// ---- values -------------------------------------------------------------------

void Lowering::reset() {
  p_ = Program();
  ids_.clear();
  const_ids_.clear();
  in_names_ = m_.input_names();
  out_names_ = m_.output_names();
}

int Lowering::add_const(DeviceConst c, const std::vector<int64_t>& dims, const std::string& key) {
  auto it = const_ids_.find(key);
  if (it != const_ids_.end()) return it->second;
  Value v;
  v.name = key;
  v.dtype = c.dtype;
  v.dims = dims;
  v.home = Home::kConst;
  v.index = static_cast<int32_t>(p_.consts.size());
  p_.consts.push_back(std::move(c));
  p_.values.push_back(std::move(v));
  int id = static_cast<int>(p_.values.size()) - 1;
  const_ids_[key] = id;
  return id;
}

int Lowering::value(const std::string& name, bool allow_int64) {
  auto it = ids_.find(name);
  if (it != ids_.end()) {
    if (p_.values[it->second].dtype != 1 && !allow_int64) {
      refuse(std::string("dtype ") + tessera_plugin::dtype_name(p_.values[it->second].dtype));
    }
    return it->second;
  }
  if (name.empty()) refuse("a required input is missing");
  const ValueType& t = m_.type(name);
  if (!t.ranked || t.dtype == 0) refuse("value '" + name + "' has no known type");
  if (!t.is_static()) refuse("symbolic dim" + (t.symbol.empty() ? std::string() : " '" + t.symbol + "'"));
  if (t.dtype != 1 && !(allow_int64 && t.dtype == 7))
    refuse(std::string("dtype ") + tessera_plugin::dtype_name(t.dtype));
  if (t.numel() == 0) refuse("empty tensor '" + name + "'");
  if (t.dims.size() > static_cast<size_t>(kMaxRank)) refuse("rank " + std::to_string(t.dims.size()) + " > 8");
  int id;
  if (m_.is_initializer(name)) {
    DeviceConst c;
    c.name = name;
    c.dtype = t.dtype;
    id = add_const(c, t.dims, name);
  } else {
    p_.values.push_back(named_value(name, t));
    id = static_cast<int>(p_.values.size()) - 1;
  }
  ids_[name] = id;
  return id;
}

Value Lowering::named_value(const std::string& name, const ValueType& t) const {
  Value v;
  v.name = name;
  v.dtype = t.dtype;
  v.dims = t.dims;
  auto in = std::find(in_names_.begin(), in_names_.end(), name);
  auto out = std::find(out_names_.begin(), out_names_.end(), name);
  if (in != in_names_.end()) {
    v.home = Home::kInput;
    v.index = static_cast<int32_t>(in - in_names_.begin());
  } else if (out != out_names_.end()) {
    v.home = Home::kOutput;
    v.index = static_cast<int32_t>(out - out_names_.begin());
  }
  return v;
}

int Lowering::io_value(const std::string& name) {
  auto it = ids_.find(name);
  if (it != ids_.end()) return it->second;
  const ValueType& t = m_.type(name);
  if (!t.is_static()) refuse("symbolic dim in boundary value '" + name + "'");
  if (tessera_plugin::dtype_size(t.dtype) == 0) refuse("boundary value '" + name + "' has an unknown dtype");
  Value v = named_value(name, t);
  if (v.home == Home::kTemp) refuse("'" + name + "' is not a boundary value");
  p_.values.push_back(std::move(v));
  ids_[name] = static_cast<int>(p_.values.size()) - 1;
  return ids_[name];
}

int Lowering::temp(const std::vector<int64_t>& dims, const std::string& hint) {
  Value v;
  v.name = hint;
  v.dims = dims;
  p_.values.push_back(std::move(v));
  return static_cast<int>(p_.values.size()) - 1;
}

const std::vector<int64_t>& Lowering::dims(const std::string& name) { return p_.values[value(name)].dims; }

std::vector<int64_t> Lowering::const_ints(const std::string& name, const char* what) const {
  const onnx::TensorProto* t = m_.initializer(name);
  if (!t) refuse(std::string(what) + " not constant");
  return tessera_plugin::initializer_ints(*t);
}

std::vector<float> Lowering::const_floats(const std::string& name, const char* what) const {
  const onnx::TensorProto* t = m_.initializer(name);
  if (!t) refuse(std::string(what) + " not constant");
  return tessera_plugin::initializer_floats(*t);
}

Step& Lowering::new_step(StepKind kind, const std::vector<int>& nodes, const char* what) {
  Step s;
  s.kind = kind;
  s.what = what;
  s.node = nodes.empty() ? -1 : nodes[0];
  for (int i : nodes) s.nodes.push_back(m_.node(i).name());
  if (!nodes.empty()) s.where = describe(m_.node(nodes[0]));
  p_.steps.push_back(std::move(s));
  return p_.steps.back();
}

size_t Lowering::new_step_index(StepKind kind, const std::vector<int>& nodes, const char* what) {
  new_step(kind, nodes, what);
  return p_.steps.size() - 1;
}

// ---- planning ------------------------------------------------------------------

bool Lowering::fusable_intermediate(const std::string& v) const {
  return !v.empty() && m_.consumers(v).size() == 1 && !m_.is_graph_output(v);
}

Lowering::GemmFusion Lowering::gemm_fusion(int i) const {
  GemmFusion f;
  const onnx::NodeProto& n = m_.node(i);
  if (n.output_size() != 1 || !fusable_intermediate(n.output(0))) return f;
  const std::string& y = n.output(0);
  int j = m_.consumers(y)[0];
  const onnx::NodeProto& a = m_.node(j);
  if (n.op_type() == "Gemm") {
    if (a.op_type() == "Relu") {
      f.act = j;
      f.epilogue = Epilogue::kRelu;
    }
    return f;
  }
  if (a.op_type() != "Add" || a.input_size() != 2 || a.output_size() != 1) return f;
  const std::string& other = a.input(0) == y ? a.input(1) : a.input(0);
  if (other == y) return f;
  const onnx::TensorProto* b = m_.initializer(other);
  const ValueType& yt = m_.type(y);
  if (!b || b->data_type() != 1 || !yt.is_static() || yt.dims.empty()) return f;
  std::vector<int64_t> bd(b->dims().begin(), b->dims().end());
  int64_t n_cols = yt.dims.back();
  if (bd.empty() || bd.back() != n_cols || numel(bd) != n_cols || bd.size() > yt.dims.size()) return f;
  if (m_.type(a.output(0)).dims != yt.dims) return f;
  f.add = j;
  f.bias = other;
  f.epilogue = Epilogue::kBias;
  const std::string& z = a.output(0);
  if (!fusable_intermediate(z)) return f;
  int k = m_.consumers(z)[0];
  const onnx::NodeProto& act = m_.node(k);
  if (act.op_type() == "Relu") {
    f.act = k;
    f.epilogue = Epilogue::kReluBias;
  } else if (act.op_type() == "Gelu" && attr_string(act, "approximate", "none") == "tanh") {
    // cuBLASLt's GELU epilogue is the tanh approximation: an erf Gelu runs as a chain after the bias epilogue.
    f.act = k;
    f.epilogue = Epilogue::kGeluTanhBias;
  }
  return f;
}

Lowering::ConvFusion Lowering::conv_fusion(int i) const {
  ConvFusion f;
  const onnx::NodeProto& n = m_.node(i);
  if (n.op_type() != "Conv" || n.output_size() != 1 || !fusable_intermediate(n.output(0))) return f;
  const std::string& y = n.output(0);
  int j = m_.consumers(y)[0];
  const onnx::NodeProto& a = m_.node(j);
  if (a.op_type() == "Relu") {
    f.relu = j;
    return f;
  }
  if (a.op_type() != "Add" || a.input_size() != 2 || a.output_size() != 1) return f;
  const std::string& z = a.input(0) == y ? a.input(1) : a.input(0);
  if (z == y || m_.is_initializer(z) || !m_.type(y).is_static() || m_.type(z).dims != m_.type(y).dims ||
      m_.type(z).dtype != 1 || m_.type(a.output(0)).dims != m_.type(y).dims || !fusable_intermediate(a.output(0))) {
    return f;
  }
  int k = m_.consumers(a.output(0))[0];
  if (m_.node(k).op_type() != "Relu") return f;
  f.add = j;
  f.relu = k;
  f.z = z;
  return f;
}

int Lowering::chain_next(int last, int ops, int operands) const {
  const onnx::NodeProto& n = m_.node(last);
  if (n.output_size() < 1 || !fusable_intermediate(n.output(0))) return -1;
  const std::string& v = n.output(0);
  int c = m_.consumers(v)[0];
  const onnx::NodeProto& cn = m_.node(c);
  if (!is_elementwise_op(cn.op_type()) || cn.output_size() < 1) return -1;
  int hits = 0;
  for (const auto& in : cn.input()) hits += in == v ? 1 : 0;
  if (hits != 1) return -1;
  if ((cn.op_type() == "PRelu" || cn.op_type() == "BatchNormalization") && cn.input(0) != v) return -1;
  if (ops + chain_ops_of(cn) > kMaxChainOps || operands + chain_operands_of(cn) > kMaxOperands) return -1;
  return c;
}

std::vector<std::pair<std::string, std::vector<int>>> Lowering::composites(const std::vector<bool>& ok) const {
  std::vector<std::pair<std::string, std::vector<int>>> out;
  auto all_ok = [&](const std::vector<int>& v) {
    for (int i : v) {
      if (!ok[static_cast<size_t>(i)]) return false;
    }
    return true;
  };
  for (int i = 0; i < m_.num_nodes(); ++i) {
    const std::string& op = m_.node(i).op_type();
    std::vector<int> nodes{i};
    std::string name = op;
    if (op == "MatMul" || op == "Gemm") {
      GemmFusion f = gemm_fusion(i);
      for (int k : {f.add, f.act}) {
        if (k >= 0) {
          nodes.push_back(k);
          name += "+" + m_.node(k).op_type();
        }
      }
      // An erf Gelu after the bias: the epilogue and a chain, one region.
      if (f.add >= 0 && f.act < 0 && fusable_intermediate(m_.node(f.add).output(0))) {
        int k = m_.consumers(m_.node(f.add).output(0))[0];
        if (m_.node(k).op_type() == "Gelu") {
          nodes.push_back(k);
          name += "+Gelu";
        }
      }
    } else if (op == "Conv") {
      ConvFusion f = conv_fusion(i);
      for (int k : {f.add, f.relu}) {
        if (k >= 0) {
          nodes.push_back(k);
          name += "+" + m_.node(k).op_type();
        }
      }
    }
    if (nodes.size() > 1 && all_ok(nodes)) out.emplace_back(name, nodes);
  }
  return out;
}

// ---- the region ---------------------------------------------------------------------

std::string Lowering::check(int i) {
  reset();
  try {
    lower_node(i);
  } catch (const Failure& f) {
    return f.message.empty() ? std::string("refused") : f.message;
  }
  return "";
}

void Lowering::lower_node(int i) {
  const onnx::NodeProto& n = m_.node(i);
  const std::string& op = n.op_type();
  if (!n.domain().empty() && n.domain() != "ai.onnx") refuse("domain '" + n.domain() + "'");
  if (is_elementwise_op(op)) return lower_chain({i});
  if (op == "MatMul") return lower_matmul(i, GemmFusion{});
  if (op == "Gemm") return lower_gemm(i, GemmFusion{});
  if (op == "Conv") return lower_conv(i, ConvFusion{});
  if (op == "ConvTranspose") return lower_conv_transpose(i);
  static const std::map<std::string, void (Lowering::*)(int)> kOps = {
      {"Reshape", &Lowering::lower_alias},
      {"Flatten", &Lowering::lower_alias},
      {"Squeeze", &Lowering::lower_alias},
      {"Unsqueeze", &Lowering::lower_alias},
      {"Identity", &Lowering::lower_alias},
      {"Dropout", &Lowering::lower_alias},
      {"Softmax", &Lowering::lower_softmax},
      {"LogSoftmax", &Lowering::lower_softmax},
      {"LayerNormalization", &Lowering::lower_layernorm},
      {"ReduceMean", &Lowering::lower_reduce},
      {"ReduceSum", &Lowering::lower_reduce},
      {"ReduceMax", &Lowering::lower_reduce},
      {"ReduceMin", &Lowering::lower_reduce},
      {"ReduceSumSquare", &Lowering::lower_reduce},
      {"ReduceL2", &Lowering::lower_reduce},
      {"GlobalAveragePool", &Lowering::lower_global_pool},
      {"GlobalMaxPool", &Lowering::lower_global_pool},
      {"MaxPool", &Lowering::lower_pool},
      {"AveragePool", &Lowering::lower_pool},
      {"Resize", &Lowering::lower_resize},
      {"Upsample", &Lowering::lower_resize},
      {"Concat", &Lowering::lower_concat},
      {"Transpose", &Lowering::lower_transpose},
      {"Slice", &Lowering::lower_slice},
      {"Split", &Lowering::lower_split},
      {"Gather", &Lowering::lower_gather},
      {"Expand", &Lowering::lower_expand},
      {"Tile", &Lowering::lower_tile},
      {"Pad", &Lowering::lower_pad}};
  auto it = kOps.find(op);
  if (it == kOps.end()) refuse("op " + op + " not supported");
  (this->*(it->second))(i);
}

Program Lowering::lower() {
  reset();
  const int count = m_.num_nodes();
  // Planning: which nodes run together, emitted at the position of the group's last node.
  struct Group {
    std::vector<int> nodes;
    GemmFusion gemm;
    ConvFusion conv;
  };
  std::vector<Group> groups;
  std::vector<int> group_at(static_cast<size_t>(count), -1);
  std::vector<bool> taken(static_cast<size_t>(count), false);
  auto free_node = [&](int k) { return k >= 0 && !taken[static_cast<size_t>(k)]; };
  for (int i = 0; i < count; ++i) {
    if (taken[static_cast<size_t>(i)]) continue;
    const onnx::NodeProto& n = m_.node(i);
    Group g;
    g.nodes.push_back(i);
    if (n.op_type() == "MatMul" || n.op_type() == "Gemm") {
      g.gemm = gemm_fusion(i);
      if (g.gemm.add >= 0 && !free_node(g.gemm.add)) g.gemm = GemmFusion{};
      if (g.gemm.act >= 0 && !free_node(g.gemm.act)) {
        g.gemm.act = -1;
        g.gemm.epilogue = g.gemm.add >= 0 ? Epilogue::kBias : Epilogue::kNone;
      }
      for (int k : {g.gemm.add, g.gemm.act}) {
        if (k >= 0) g.nodes.push_back(k);
      }
    } else if (n.op_type() == "Conv") {
      g.conv = conv_fusion(i);
      if ((g.conv.add >= 0 && !free_node(g.conv.add)) || (g.conv.relu >= 0 && !free_node(g.conv.relu))) {
        g.conv = ConvFusion{};
      }
      for (int k : {g.conv.add, g.conv.relu}) {
        if (k >= 0) g.nodes.push_back(k);
      }
    } else if (is_elementwise_op(n.op_type())) {
      int ops = chain_ops_of(n), operands = 1 + chain_operands_of(n);
      for (int next = chain_next(i, ops, operands); free_node(next); next = chain_next(next, ops, operands)) {
        g.nodes.push_back(next);
        ops += chain_ops_of(m_.node(next));
        operands += chain_operands_of(m_.node(next));
      }
    }
    for (int k : g.nodes) taken[static_cast<size_t>(k)] = true;
    group_at[static_cast<size_t>(g.nodes.back())] = static_cast<int>(groups.size());
    groups.push_back(std::move(g));
  }
  for (int i = 0; i < count; ++i) {
    int gi = group_at[static_cast<size_t>(i)];
    if (gi < 0) continue;
    const Group& g = groups[static_cast<size_t>(gi)];
    const onnx::NodeProto& first = m_.node(g.nodes[0]);
    try {
      if (first.op_type() == "MatMul")
        lower_matmul(g.nodes[0], g.gemm);
      else if (first.op_type() == "Gemm")
        lower_gemm(g.nodes[0], g.gemm);
      else if (first.op_type() == "Conv")
        lower_conv(g.nodes[0], g.conv);
      else if (is_elementwise_op(first.op_type()))
        lower_chain(g.nodes);
      else
        lower_node(g.nodes[0]);
    } catch (const Failure& f) {
      fail(f.status, describe(first) + ": " + f.message);
    }
  }
  for (const std::string& name : in_names_) p_.inputs.push_back(io_value(name));
  for (const std::string& name : out_names_) {
    auto it = ids_.find(name);
    if (it == ids_.end() || p_.values[it->second].home != Home::kOutput) {
      refuse("graph output '" + name + "' is not computed by a node of the region");
    }
    p_.outputs.push_back(it->second);
  }
  plan_memory();
  return std::move(p_);
}

}  // namespace tessera_cuda
