// Lowerings of the elementwise ops: activations and clamps, binary and
// variadic arithmetic with broadcasting, PRelu, BatchNormalization (folded to
// a multiply and an add at load). Input: one ONNX node. Output: XNNPACK nodes
// that run in whatever layout their input already has: an NHWC value stays
// NHWC, and a broadcast operand follows it (a constant is permuted at load, a
// lower-rank value is reshaped when that keeps its memory order).
#include <cfloat>
#include <cmath>

#include "lowering.h"

namespace tessera_xnn {

using tessera_plugin::attr_float;
using tessera_plugin::attr_int;

namespace {

// `d` with leading 1s up to `rank`.
Dims pad_to(const Dims& d, size_t rank) {
  Dims p(rank - d.size(), 1);
  p.insert(p.end(), d.begin(), d.end());
  return p;
}

// The layout a broadcasting op over `names` (output dims `y`) runs in: NHWC
// when the output has a channels-last layout, some operand already is NHWC,
// and every lower-rank runtime operand can follow without a transpose.
Layout common_layout(Lowering& L, const std::vector<std::string>& names, const Dims& y) {
  if (!has_channels_last(y.size())) return kPlain;
  bool any_nhwc = false;
  for (const std::string& n : names) {
    const Dims& d = L.float_dims(n);
    if (L.is_constant(n)) continue;
    if (d.size() < y.size() && !layout_change_is_view(pad_to(d, y.size()))) return kPlain;
    any_nhwc = any_nhwc || L.has_layout(n, kNhwc);
  }
  return any_nhwc ? kNhwc : kPlain;
}

// `name` as an operand of a broadcasting op running in `layout` with an
// output of rank `rank`.
int32_t operand(Lowering& L, const std::string& name, Layout layout, size_t rank) {
  if (layout == kPlain) return L.input(name, kPlain);
  const Dims& d = L.float_dims(name);
  if (d.size() == rank) return L.input(name, kNhwc);
  Dims nhwc = to_nhwc(pad_to(d, rank));
  if (L.is_constant(name)) return L.constant(Transform::kToNhwc, {name}, nhwc);
  int32_t t = L.temp(nhwc);
  L.emit(Op::kReshape, {L.input(name, kPlain)}, t);
  return t;
}

Dims layout_dims(const Dims& onnx, Layout layout, size_t rank) {
  return layout == kNhwc ? to_nhwc(pad_to(onnx, rank)) : xnn_dims(onnx, false);
}

bool has_range(Op op) { return op == Op::kAdd || op == Op::kSub || op == Op::kMul || op == Op::kDiv; }

// out = inputs[0] op inputs[1] op ... (left to right), into value `y`.
void chain(Lowering& L, Op op, const std::vector<std::string>& inputs, const std::string& y) {
  const Dims& yd = L.float_dims(y);
  Layout layout = common_layout(L, inputs, yd);
  std::vector<float> range = has_range(op) ? std::vector<float>{-kInf, kInf} : std::vector<float>{};
  int32_t acc = operand(L, inputs[0], layout, yd.size());
  Dims acc_dims = L.float_dims(inputs[0]);
  for (size_t i = 1; i < inputs.size(); ++i) {
    int32_t rhs = operand(L, inputs[i], layout, yd.size());
    acc_dims = broadcast_dims(acc_dims, L.float_dims(inputs[i]));
    int32_t out = i + 1 == inputs.size() ? L.output(y, layout) : L.temp(layout_dims(acc_dims, layout, yd.size()));
    L.emit(op, {acc, rhs}, out, {}, range);
    acc = out;
  }
}

void copy(Lowering& L, const std::string& x, const std::string& y) {
  Layout layout = L.preferred(x);
  L.emit(Op::kReshape, {L.input(x, layout)}, L.output(y, layout));
}

void need(const onnx::NodeProto& n, int inputs, int outputs) {
  if (n.input_size() < inputs || n.output_size() < outputs) refuse("missing inputs or outputs");
  for (int i = 0; i < inputs; ++i) {
    if (n.input(i).empty()) refuse("input " + std::to_string(i) + " is missing");
  }
}

}  // namespace

void lower_binary(Lowering& L, const onnx::NodeProto& n) {
  need(n, 2, 1);
  static const std::map<std::string, Op> kOps = {
      {"Add", Op::kAdd}, {"Sub", Op::kSub}, {"Mul", Op::kMul}, {"Div", Op::kDiv}};
  if (L.opset() < 7 && tessera_plugin::has_attr(n, "broadcast")) refuse("legacy broadcast attribute");
  chain(L, kOps.at(n.op_type()), {n.input(0), n.input(1)}, n.output(0));
}

void lower_variadic(Lowering& L, const onnx::NodeProto& n) {
  need(n, 1, 1);
  std::vector<std::string> inputs;
  for (const auto& in : n.input()) {
    if (in.empty()) refuse("an input is missing");
    inputs.push_back(in);
  }
  if (inputs.size() == 1) return copy(L, inputs[0], n.output(0));
  const std::string& op = n.op_type();
  if (op != "Mean") return chain(L, op == "Max" ? Op::kMax : op == "Min" ? Op::kMin : Op::kAdd, inputs, n.output(0));
  // Mean: the sum, then times 1/n.
  const Dims& yd = L.float_dims(n.output(0));
  Layout layout = common_layout(L, inputs, yd);
  int32_t acc = operand(L, inputs[0], layout, yd.size());
  Dims acc_dims = L.float_dims(inputs[0]);
  for (size_t i = 1; i < inputs.size(); ++i) {
    acc_dims = broadcast_dims(acc_dims, L.float_dims(inputs[i]));
    int32_t sum = L.temp(layout_dims(acc_dims, layout, yd.size()));
    L.emit(Op::kAdd, {acc, operand(L, inputs[i], layout, yd.size())}, sum, {}, {-kInf, kInf});
    acc = sum;
  }
  int32_t scale = L.literal({1.f / static_cast<float>(inputs.size())}, {1});
  L.emit(Op::kMul, {acc, scale}, L.output(n.output(0), layout), {}, {-kInf, kInf});
}

void lower_unary(Lowering& L, const onnx::NodeProto& n) {
  need(n, 1, 1);
  const std::string& op = n.op_type();
  const std::string& x = n.input(0);
  if (op == "Identity") return copy(L, x, n.output(0));
  if (op == "Dropout") {
    if (n.output_size() > 1 && !n.output(1).empty()) refuse("Dropout with a mask output");
    if (n.input_size() > 2 && !n.input(2).empty()) {
      std::vector<int64_t> training = L.constant_ints(n.input(2), "training_mode");
      if (training.size() != 1 || training[0] != 0) refuse("Dropout in training mode");
    }
    return copy(L, x, n.output(0));
  }
  Layout layout = L.preferred(x);
  L.float_dims(n.output(0));
  int32_t in = L.input(x, layout);
  std::vector<float> floats;
  Op xop;
  if (op == "Relu") {
    xop = Op::kClamp, floats = {0.f, kInf};
  } else if (op == "Elu") {
    float alpha = attr_float(n, "alpha", 1.f);
    if (!(alpha > 0.f) || !std::isfinite(alpha))
      refuse("Elu with alpha " + std::to_string(alpha) + " (XNNPACK needs > 0)");
    xop = Op::kElu, floats = {alpha};
  } else if (op == "LeakyRelu") {
    float alpha = attr_float(n, "alpha", 0.01f);
    if (!std::isfinite(alpha)) refuse("LeakyRelu with a non-finite alpha");
    xop = Op::kLeakyRelu, floats = {alpha};
  } else {
    static const std::map<std::string, Op> kOps = {
        {"Abs", Op::kAbs},     {"Neg", Op::kNeg},   {"Floor", Op::kFloor},     {"Ceil", Op::kCeil},
        {"Round", Op::kRound}, {"Sqrt", Op::kSqrt}, {"Sigmoid", Op::kSigmoid}, {"HardSwish", Op::kHardSwish}};
    xop = kOps.at(op);
  }
  L.emit(xop, {in}, L.output(n.output(0), layout), {}, floats);
}

void lower_reciprocal(Lowering& L, const onnx::NodeProto& n) {
  need(n, 1, 1);
  const std::string& x = n.input(0);
  Layout layout = L.preferred(x);
  L.float_dims(n.output(0));
  L.emit(Op::kDiv, {L.literal({1.f}, {1}), L.input(x, layout)}, L.output(n.output(0), layout), {}, {-kInf, kInf});
}

// Pow with a constant exponent XNNPACK has a node for: 2 (Square), 0.5
// (Sqrt), 1 (a copy).
void lower_pow(Lowering& L, const onnx::NodeProto& n) {
  need(n, 2, 1);
  std::vector<float> e = L.constant_floats(n.input(1), "exponent");
  if (e.size() != 1) refuse("Pow with a non-scalar exponent");
  const std::string& x = n.input(0);
  if (L.float_dims(n.output(0)) != L.float_dims(x)) refuse("Pow whose exponent broadcasts the input");
  if (e[0] == 1.f) return copy(L, x, n.output(0));
  if (e[0] != 2.f && e[0] != 0.5f) refuse("Pow with exponent " + std::to_string(e[0]) + " (only 2, 0.5 and 1)");
  Layout layout = L.preferred(x);
  L.emit(e[0] == 2.f ? Op::kSquare : Op::kSqrt, {L.input(x, layout)}, L.output(n.output(0), layout));
}

void lower_clip(Lowering& L, const onnx::NodeProto& n) {
  need(n, 1, 1);
  float lo = -kInf, hi = kInf;
  if (L.opset() < 11) {
    lo = attr_float(n, "min", -FLT_MAX);
    hi = attr_float(n, "max", FLT_MAX);
  } else {
    auto bound = [&](int i, float def) {
      if (n.input_size() <= i || n.input(i).empty()) return def;
      std::vector<float> v = L.constant_floats(n.input(i), i == 1 ? "Clip min" : "Clip max");
      if (v.size() != 1) refuse("Clip bound with " + std::to_string(v.size()) + " elements");
      return v[0];
    };
    lo = bound(1, -kInf);
    hi = bound(2, kInf);
  }
  if (std::isnan(lo) || std::isnan(hi) || !(lo < hi)) refuse("Clip with min >= max (XNNPACK needs min < max)");
  Layout layout = L.preferred(n.input(0));
  L.float_dims(n.output(0));
  L.emit(Op::kClamp, {L.input(n.input(0), layout)}, L.output(n.output(0), layout), {}, {lo, hi});
}

void lower_hard_sigmoid(Lowering& L, const onnx::NodeProto& n) {
  need(n, 1, 1);
  float alpha = attr_float(n, "alpha", 0.2f), beta = attr_float(n, "beta", 0.5f);
  const std::string& x = n.input(0);
  Layout layout = L.preferred(x);
  int32_t in = L.input(x, layout);
  int32_t scaled = L.temp(layout_dims(L.float_dims(x), layout, L.float_dims(x).size()));
  L.emit(Op::kMul, {in, L.literal({alpha}, {1})}, scaled, {}, {-kInf, kInf});
  L.emit(Op::kAdd, {scaled, L.literal({beta}, {1})}, L.output(n.output(0), layout), {}, {0.f, 1.f});
}

void lower_prelu(Lowering& L, const onnx::NodeProto& n) {
  need(n, 2, 1);
  const std::string &x = n.input(0), &slope = n.input(1);
  const Dims& xd = L.float_dims(x);
  const Dims& sd = L.float_dims(slope);
  if (L.float_dims(n.output(0)) != xd) refuse("PRelu whose slope broadcasts beyond the input");
  // As the native backend reads it: a 1-D slope of X's channel count that
  // does not fit X's last dim is per channel ([C] -> [C,1,...,1]).
  const bool per_channel = sd.size() == 1 && sd[0] != 1 && xd.size() >= 3 && xd[1] == sd[0] && xd.back() != sd[0];
  Dims slope_dims = sd;
  if (per_channel) {
    slope_dims.assign(xd.size() - 1, 1);
    slope_dims[0] = sd[0];
  } else if (sd.size() > xd.size() || broadcast_dims(xd, sd) != xd) {
    refuse("PRelu slope " + dims_str(sd) + " does not broadcast to the input " + dims_str(xd));
  }
  // XNNPACK's PRelu: NHWC input, one constant slope per channel.
  if (xd.size() == 4 && L.is_constant(slope) && (numel(sd) == 1 || pad_to(slope_dims, 4) == Dims{1, xd[1], 1, 1})) {
    int32_t s = L.constant(numel(sd) == 1 ? Transform::kBroadcastRow : Transform::kCopy, {slope}, {xd[1]});
    L.emit(Op::kPRelu, {L.input(x, kNhwc), s}, L.output(n.output(0), kNhwc));
    return;
  }
  // Otherwise max(x, 0) + slope * min(x, 0).
  Layout layout = per_channel ? kPlain : common_layout(L, {x, slope}, xd);
  int32_t in = operand(L, x, layout, xd.size()), s;
  if (per_channel) {
    if (!L.is_constant(slope)) refuse("PRelu with a per-channel slope computed at run time");
    s = L.constant(Transform::kCopy, {slope}, slope_dims);
  } else {
    s = operand(L, slope, layout, xd.size());
  }
  Dims td = layout_dims(xd, layout, xd.size());
  int32_t zero = L.literal({0.f}, {1});
  int32_t pos = L.temp(td), neg = L.temp(td), scaled = L.temp(td);
  L.emit(Op::kMax, {in, zero}, pos);
  L.emit(Op::kMin, {in, zero}, neg);
  L.emit(Op::kMul, {neg, s}, scaled, {}, {-kInf, kInf});
  L.emit(Op::kAdd, {pos, scaled}, L.output(n.output(0), layout), {}, {-kInf, kInf});
}

void lower_batch_norm(Lowering& L, const onnx::NodeProto& n) {
  need(n, 5, 1);
  for (int i = 1; i < n.output_size(); ++i) {
    if (!n.output(i).empty()) refuse("BatchNormalization with training outputs");
  }
  if (attr_int(n, "training_mode", 0) != 0) refuse("BatchNormalization in training mode");
  if (L.opset() < 9 && attr_int(n, "spatial", 1) != 1) refuse("BatchNormalization with spatial=0");
  const Dims& xd = L.float_dims(n.input(0));
  if (xd.size() < 2) refuse("BatchNormalization on a rank-" + std::to_string(xd.size()) + " input");
  const int64_t c = xd[1];
  for (int i = 1; i < 5; ++i) {
    if (!L.is_constant(n.input(i))) refuse("BatchNormalization parameters not constant");
    if (numel(L.float_dims(n.input(i))) != c) refuse("BatchNormalization parameter is not [" + std::to_string(c) + "]");
  }
  float eps = attr_float(n, "epsilon", 1e-5f);
  Layout layout = has_channels_last(xd.size()) ? L.preferred(n.input(0)) : kPlain;
  // Per-channel constants broadcast along C: the last dim in NHWC, dim 1 otherwise.
  Dims cd{c};
  if (layout == kPlain) cd.resize(xd.size() - 1, 1);
  int32_t scale = L.constant(Transform::kBnScale, {n.input(1), n.input(4)}, cd, 1.f, {}, {eps});
  int32_t shift = L.constant(Transform::kBnShift, {n.input(2), n.input(3), n.input(1), n.input(4)}, cd, 1.f, {}, {eps});
  int32_t in = L.input(n.input(0), layout);
  int32_t t = L.temp(xnn_dims(xd, layout == kNhwc));
  L.emit(Op::kMul, {in, scale}, t, {}, {-kInf, kInf});
  L.emit(Op::kAdd, {t, shift}, L.output(n.output(0), layout), {}, {-kInf, kInf});
}

}  // namespace tessera_xnn
