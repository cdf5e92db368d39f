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

// DequantizeLinear(x, scale[, zero_point]) -> y; axis < 0: the op's default.
void add_dequantize(std::vector<onnx::NodeProto>* out, const std::string& x, const std::string& scale,
                    const std::string& zp, const std::string& y, const std::string& name, int64_t axis = -1) {
  std::vector<std::string> inputs = {x, scale};
  if (!zp.empty()) inputs.push_back(zp);
  onnx::NodeProto& d = add(out, "DequantizeLinear", inputs, {y}, name);
  if (axis >= 0) set_attr(d, "axis", axis);
}

// QuantizeLinear(x, scale, zero_point) -> y.
void add_quantize(std::vector<onnx::NodeProto>* out, const std::string& x, const std::string& scale,
                  const std::string& zp, const std::string& y, const std::string& name) {
  add(out, "QuantizeLinear", {x, scale, zp}, {y}, name);
}

// Copies the attributes of `from` named in `names` onto `to`.
void copy_attrs(const onnx::NodeProto& from, onnx::NodeProto& to, std::initializer_list<const char*> names) {
  for (const auto& a : from.attribute()) {
    for (const char* nm : names) {
      if (a.name() == nm) *to.add_attribute() = a;
    }
  }
}

// The QLinear* ops of ONNX Runtime's QOperator format are defined as their float op between a dequantization of
// each input and a quantization of the output: they are lowered to exactly that (QDQ recognition then turns
// unary ones into exact tables). Their output zero point gives the output type, so it must be present.
Expected<bool> lower_qlinear(const onnx::NodeProto& n, const std::string& base, std::vector<onnx::NodeProto>* out) {
  const std::string& op = n.op_type();
  auto need = [&](int i, const char* what) -> Status {
    if (in(n, i).empty()) return InvalidModel(describe(n) + ": " + what + " (input " + std::to_string(i) + ") is missing");
    return Status::Ok();
  };
  if (op == "QLinearAdd" || op == "QLinearMul") {
    TSR_RETURN_IF_ERROR(need(7, "C_zero_point"));
    add_dequantize(out, in(n, 0), in(n, 1), in(n, 2), base + "a", base + "dequantize_a");
    add_dequantize(out, in(n, 3), in(n, 4), in(n, 5), base + "b", base + "dequantize_b");
    add(out, op == "QLinearAdd" ? "Add" : "Mul", {base + "a", base + "b"}, {base + "c"}, base + "op");
    add_quantize(out, base + "c", in(n, 6), in(n, 7), out_of(n, 0), base + "quantize");
    return true;
  }
  if (op == "QLinearSigmoid" || op == "QLinearLeakyRelu" || op == "QLinearGlobalAveragePool") {
    TSR_RETURN_IF_ERROR(need(4, "y_zero_point"));
    if (attr_int(n, "channels_last", 0) != 0) {
      return Unsupported(describe(n) + ": channels_last=1 (channels-last pooling) is not supported");
    }
    add_dequantize(out, in(n, 0), in(n, 1), in(n, 2), base + "x", base + "dequantize");
    std::string y = base + "y";
    if (op == "QLinearSigmoid") {
      add(out, "Sigmoid", {base + "x"}, {y}, base + "sigmoid");
    } else if (op == "QLinearLeakyRelu") {
      set_attr(add(out, "LeakyRelu", {base + "x"}, {y}, base + "leaky_relu"), "alpha", attr_float(n, "alpha", 0.01f));
    } else {
      add(out, "GlobalAveragePool", {base + "x"}, {y}, base + "pool");
    }
    add_quantize(out, y, in(n, 3), in(n, 4), out_of(n, 0), base + "quantize");
    return true;
  }
  if (op == "QLinearConcat") {
    // Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per input.
    TSR_RETURN_IF_ERROR(need(1, "Y_zero_point"));
    if (n.input_size() < 5 || (n.input_size() - 2) % 3 != 0) {
      return InvalidModel(describe(n) + ": expects Y_scale, Y_zero_point and (X, scale, zero point) triples, got " +
                          std::to_string(n.input_size()) + " inputs");
    }
    std::vector<std::string> parts;
    for (int i = 2; i + 2 < n.input_size(); i += 3) {
      parts.push_back(base + "x" + std::to_string(parts.size()));
      add_dequantize(out, in(n, i), in(n, i + 1), in(n, i + 2), parts.back(), parts.back() + "_dequantize");
    }
    set_attr(add(out, "Concat", parts, {base + "y"}, base + "concat"), "axis", attr_int(n, "axis", 0));
    add_quantize(out, base + "y", in(n, 0), in(n, 1), out_of(n, 0), base + "quantize");
    return true;
  }
  if (op == "QGemm") {
    // A, a_scale, a_zp, B, b_scale, b_zp, C (int32), y_scale, y_zp; a float Y without y_scale.
    // B's scale may be per output column: along B's axis 0 when transposed, else axis 1 (DequantizeLinear's default).
    const bool trans_b = attr_int(n, "transB", 0) != 0;
    add_dequantize(out, in(n, 0), in(n, 1), in(n, 2), base + "a", base + "dequantize_a");
    add_dequantize(out, in(n, 3), in(n, 4), in(n, 5), base + "b", base + "dequantize_b", trans_b ? 0 : -1);
    std::vector<std::string> gemm_in = {base + "a", base + "b"};
    if (!in(n, 6).empty()) {
      // C is quantized at alpha * a_scale * b_scale: ONNX Runtime adds it to the integer product before scaling.
      add(out, "Mul", {in(n, 1), in(n, 4)}, {base + "ab_scale"}, base + "ab_scale_mul");
      std::string c_scale = base + "ab_scale";
      if (const float alpha = attr_float(n, "alpha", 1.f); alpha != 1.f) {
        add_scalar(out, base + "alpha", alpha, base + "alpha_const");
        add(out, "Mul", {c_scale, base + "alpha"}, {base + "c_scale"}, base + "c_scale_mul");
        c_scale = base + "c_scale";
      }
      add_dequantize(out, in(n, 6), c_scale, "", base + "c", base + "dequantize_c", 0);
      gemm_in.push_back(base + "c");
    }
    const bool quantized = !in(n, 7).empty();
    if (quantized) TSR_RETURN_IF_ERROR(need(8, "y_zero_point"));
    onnx::NodeProto& g = add(out, "Gemm", gemm_in, {quantized ? base + "y" : out_of(n, 0)}, base + "gemm");
    copy_attrs(n, g, {"alpha", "transA", "transB"});
    if (quantized) add_quantize(out, base + "y", in(n, 7), in(n, 8), out_of(n, 0), base + "quantize");
    return true;
  }
  if (op == "DynamicQuantizeMatMul" || op == "MatMulIntegerToFloat") {
    // DynamicQuantizeMatMul(A float, B, b_scale, b_zp?, bias?) quantizes A as DynamicQuantizeLinear does;
    // MatMulIntegerToFloat(A, B, a_scale, b_scale, a_zp?, b_zp?, bias?) takes A quantized. Either way
    // (A - a_zp)(B - b_zp) in int32, cast, times a_scale * b_scale, plus the bias: ONNX Runtime's quantize_dynamic
    // pattern, which engines recognise.
    const bool dynamic = op == "DynamicQuantizeMatMul";
    std::string a = in(n, 0), a_scale, a_zp;
    const std::string b_scale = dynamic ? in(n, 2) : in(n, 3);
    const std::string b_zp = dynamic ? in(n, 3) : in(n, 5);
    const std::string bias = dynamic ? in(n, 4) : in(n, 6);
    if (dynamic) {
      add(out, "DynamicQuantizeLinear", {a}, {base + "a_q", base + "a_scale", base + "a_zp"}, base + "quantize_a");
      a = base + "a_q";
      a_scale = base + "a_scale";
      a_zp = base + "a_zp";
    } else {
      a_scale = in(n, 2);
      a_zp = in(n, 4);
    }
    std::vector<std::string> mm_in = {a, in(n, 1), a_zp, b_zp};
    while (!mm_in.empty() && mm_in.back().empty()) mm_in.pop_back();
    add(out, "MatMulInteger", mm_in, {base + "acc"}, base + "matmul");
    set_attr(add(out, "Cast", {base + "acc"}, {base + "acc_f"}, base + "cast"), "to",
             int64_t{onnx::TensorProto::FLOAT});
    add(out, "Mul", {a_scale, b_scale}, {base + "scale"}, base + "scales_mul");
    add(out, "Mul", {base + "acc_f", base + "scale"}, {bias.empty() ? out_of(n, 0) : base + "scaled"},
        base + "scale_mul");
    if (!bias.empty()) add(out, "Add", {base + "scaled", bias}, {out_of(n, 0)}, base + "bias_add");
    return true;
  }
  return false;
}

}  // namespace

Expected<bool> lower_contrib_op(const onnx::NodeProto& n, std::vector<onnx::NodeProto>* out) {
  if (n.domain() != "com.microsoft") return false;
  const std::string& op = n.op_type();
  // Names of the values a lowering adds: under the node's first output, which is unique in the graph (node names
  // need not be, nor be present).
  const std::string base = (n.output_size() > 0 && !n.output(0).empty() ? n.output(0) : n.name()) + "/" + op + "/";
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
  // Native ops of their own, with ONNX Runtime's kernel arithmetic (ops/softmax.cc, ops/pool.cc).
  if (op == "QLinearSoftmax" || op == "QLinearAveragePool") return false;
  if (op.rfind("QLinear", 0) == 0 || op == "QGemm" || op == "DynamicQuantizeMatMul" || op == "MatMulIntegerToFloat") {
    return lower_qlinear(n, base, out);
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
