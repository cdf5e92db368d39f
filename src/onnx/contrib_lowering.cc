#include "onnx/contrib_lowering.h"

#include <onnx/onnx_pb.h>

#include <string>

namespace tessera {

namespace {

float attr_float(const onnx::NodeProto& n, const std::string& name, float def) {
  for (const auto& a : n.attribute()) {
    if (a.name() == name) return a.f();
  }
  return def;
}

int64_t attr_int(const onnx::NodeProto& n, const std::string& name, int64_t def) {
  for (const auto& a : n.attribute()) {
    if (a.name() == name) return a.i();
  }
  return def;
}

std::string describe(const onnx::NodeProto& n) {
  return "node '" + n.name() + "' (com.microsoft." + n.op_type() + ")";
}

// Appends a default-domain node; returns it for attributes.
onnx::NodeProto& add(std::vector<onnx::NodeProto>* out, const std::string& op, std::vector<std::string> inputs,
                     std::vector<std::string> outputs, const std::string& name) {
  onnx::NodeProto& n = out->emplace_back();
  n.set_op_type(op);
  n.set_name(name);
  for (const auto& i : inputs) n.add_input(i);
  for (const auto& o : outputs) n.add_output(o);
  return n;
}

void set_attr(onnx::NodeProto& n, const std::string& name, const std::string& s) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(s);
}

void set_attr(onnx::NodeProto& n, const std::string& name, float f) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(f);
}

void set_attr(onnx::NodeProto& n, const std::string& name, int64_t i) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(i);
}

// A Constant node holding one float.
void add_scalar(std::vector<onnx::NodeProto>* out, const std::string& value_name, float v, const std::string& name) {
  onnx::NodeProto& c = add(out, "Constant", {}, {value_name}, name);
  auto* a = c.add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto::TENSOR);
  onnx::TensorProto* t = a->mutable_t();
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_float_data(v);
}

std::string in(const onnx::NodeProto& n, int i) { return i < n.input_size() ? n.input(i) : ""; }
std::string out_of(const onnx::NodeProto& n, int i) { return i < n.output_size() ? n.output(i) : ""; }

}  // namespace

Expected<bool> lower_contrib_op(const onnx::NodeProto& n, std::vector<onnx::NodeProto>* out) {
  if (n.domain() != "com.microsoft") return false;
  const std::string& op = n.op_type();
  const std::string base = (n.name().empty() ? op : n.name()) + "/";
  if (op == "FastGelu" || op == "BiasGelu") {
    std::string x = in(n, 0);
    if (!in(n, 1).empty()) {
      add(out, "Add", {x, in(n, 1)}, {base + "biased"}, base + "add");
      x = base + "biased";
    }
    onnx::NodeProto& g = add(out, "Gelu", {x}, {out_of(n, 0)}, base + "gelu");
    if (op == "FastGelu") set_attr(g, "approximate", std::string("tanh"));
    return true;
  }
  if (op == "QuickGelu") {
    add_scalar(out, base + "alpha", attr_float(n, "alpha", 1.702f), base + "alpha_const");
    add(out, "Mul", {in(n, 0), base + "alpha"}, {base + "scaled"}, base + "scale");
    add(out, "Sigmoid", {base + "scaled"}, {base + "gate"}, base + "sigmoid");
    add(out, "Mul", {in(n, 0), base + "gate"}, {out_of(n, 0)}, base + "mul");
    return true;
  }
  if (op == "SkipLayerNormalization") {
    if (in(n, 2).empty()) return InvalidModel(describe(n) + ": gamma (input 2) is missing");
    std::string sum = out_of(n, 3).empty() ? base + "sum" : out_of(n, 3);
    const std::string skip_sum = in(n, 4).empty() ? sum : base + "skip_sum";
    add(out, "Add", {in(n, 0), in(n, 1)}, {skip_sum}, base + "add_skip");
    if (!in(n, 4).empty()) add(out, "Add", {skip_sum, in(n, 4)}, {sum}, base + "add_bias");
    std::vector<std::string> ln_in = {sum, in(n, 2)};
    if (!in(n, 3).empty()) ln_in.push_back(in(n, 3));
    onnx::NodeProto& ln = add(out, "LayerNormalization", ln_in, {out_of(n, 0), out_of(n, 1), out_of(n, 2)},
                              base + "layer_norm");
    set_attr(ln, "axis", int64_t{-1});
    set_attr(ln, "epsilon", attr_float(n, "epsilon", 1e-12f));
    return true;
  }
  if (op == "FusedMatMul") {
    if (attr_int(n, "transBatchA", 0) != 0 || attr_int(n, "transBatchB", 0) != 0) {
      return Unsupported(describe(n) + ": transBatchA / transBatchB are not supported");
    }
    const std::string a = attr_int(n, "transA", 0) ? "...ji" : "...ij";
    const std::string b = attr_int(n, "transB", 0) ? "...kj" : "...jk";
    const float alpha = attr_float(n, "alpha", 1.0f);
    const std::string prod = alpha == 1.0f ? out_of(n, 0) : base + "product";
    onnx::NodeProto& e = add(out, "Einsum", {in(n, 0), in(n, 1)}, {prod}, base + "einsum");
    set_attr(e, "equation", a + "," + b + "->...ik");
    if (alpha != 1.0f) {
      add_scalar(out, base + "alpha", alpha, base + "alpha_const");
      add(out, "Mul", {prod, base + "alpha"}, {out_of(n, 0)}, base + "scale");
    }
    return true;
  }
  return false;
}

}  // namespace tessera
