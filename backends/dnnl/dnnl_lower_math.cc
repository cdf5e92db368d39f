// Lowering of the elementwise, linear-algebra, normalization and shape
// operators: every activation oneDNN's eltwise primitive has (one or a short
// chain of algorithms each), Add/Sub/Mul/Div and the variadic Sum/Max/Min/Mean
// with numpy broadcasting, Gemm and MatMul (batched, broadcast batch dims,
// 1-D operands), Softmax/LogSoftmax (with the opset < 13 coercion to 2-D),
// LayerNormalization, Concat, Transpose, and the ops that only change a
// shape (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout), which
// become zero-copy views.
#include <oneapi/dnnl/dnnl_types.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "dnnl_lowering.h"

namespace tessera_dnnl {

using tessera_plugin::attr_float;
using tessera_plugin::attr_int;
using tessera_plugin::attr_ints;
using tessera_plugin::attr_string;
using tessera_plugin::has_attr;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

struct EltStep {
  int32_t alg;
  float alpha = 0.f, beta = 0.f;
};

// A constant scalar input (Clip's min/max, Pow's exponent), or `def` when the
// input is absent.
float scalar_input(Lowering& l, const onnx::NodeProto& n, int i, float def, const char* what) {
  if (n.input_size() <= i || n.input(i).empty()) return def;
  std::vector<float> v = l.constant_floats(n.input(i), n.op_type() + " " + what);
  if (v.size() != 1) throw Refusal{n.op_type() + " with a non-scalar " + what};
  return v[0];
}

// The eltwise algorithms that compute the node, applied in order.
std::vector<EltStep> eltwise_steps(Lowering& l, const onnx::NodeProto& n) {
  const std::string& op = n.op_type();
  if (op == "Relu") return {{dnnl_eltwise_relu}};
  if (op == "LeakyRelu") return {{dnnl_eltwise_relu, attr_float(n, "alpha", 0.01f)}};
  if (op == "Sigmoid") return {{dnnl_eltwise_logistic}};
  if (op == "Tanh") return {{dnnl_eltwise_tanh}};
  if (op == "Elu") return {{dnnl_eltwise_elu, attr_float(n, "alpha", 1.f)}};
  if (op == "Selu") {  // gamma * elu(x, alpha)
    return {{dnnl_eltwise_elu, attr_float(n, "alpha", 1.67326319217681884765625f)},
            {dnnl_eltwise_linear, attr_float(n, "gamma", 1.05070102214813232421875f), 0.f}};
  }
  if (op == "Celu") {  // alpha * elu(x / alpha, 1)
    const float a = attr_float(n, "alpha", 1.f);
    if (a == 0.f) throw Refusal{"Celu with alpha 0"};
    return {{dnnl_eltwise_linear, 1.f / a, 0.f}, {dnnl_eltwise_elu, 1.f}, {dnnl_eltwise_linear, a, 0.f}};
  }
  if (op == "Clip") {
    float lo, hi;
    if (l.opset() < 11) {
      lo = attr_float(n, "min", -std::numeric_limits<float>::max());
      hi = attr_float(n, "max", std::numeric_limits<float>::max());
    } else {
      lo = scalar_input(l, n, 1, -kInf, "min");
      hi = scalar_input(l, n, 2, kInf, "max");
    }
    // ONNX gives max when min > max; oneDNN's clip is max(lo, min(hi, x)).
    if (lo > hi) return {{dnnl_eltwise_linear, 0.f, hi}};
    return {{dnnl_eltwise_clip, lo, hi}};
  }
  if (op == "HardSigmoid") {  // max(0, min(1, alpha * x + beta))
    return {{dnnl_eltwise_linear, attr_float(n, "alpha", 0.2f), attr_float(n, "beta", 0.5f)},
            {dnnl_eltwise_clip, 0.f, 1.f}};
  }
  if (op == "HardSwish") return {{dnnl_eltwise_hardswish}};
  if (op == "Gelu") {
    const std::string approx = attr_string(n, "approximate", "none");
    if (approx == "none") return {{dnnl_eltwise_gelu_erf}};
    if (approx == "tanh") return {{dnnl_eltwise_gelu_tanh}};
    throw Refusal{"Gelu with approximate='" + approx + "'"};
  }
  if (op == "Exp") return {{dnnl_eltwise_exp}};
  // oneDNN's log is an approximation: log(1) comes out as -1.4e-6, outside
  // the absolute tolerance (1e-7) ONNX's reference outputs are checked with.
  if (op == "Log") throw Refusal{"Log (oneDNN's approximation is off by ~1e-6 near 1)"};
  if (op == "Sqrt") return {{dnnl_eltwise_sqrt}};
  if (op == "Abs") return {{dnnl_eltwise_abs}};
  if (op == "Mish") return {{dnnl_eltwise_mish}};
  if (op == "Softplus") return {{dnnl_eltwise_soft_relu}};
  if (op == "Neg") return {{dnnl_eltwise_linear, -1.f, 0.f}};
  if (op == "Round") return {{dnnl_eltwise_round}};
  if (op == "Reciprocal") return {{dnnl_eltwise_pow, 1.f, -1.f}};
  if (op == "Pow") {
    if (n.input_size() < 2 || !l.is_constant(n.input(1))) throw Refusal{"Pow with a non-constant exponent"};
    return {{dnnl_eltwise_pow, 1.f, scalar_input(l, n, 1, 1.f, "exponent")}};
  }
  throw Refusal{"op " + op + " is not supported"};
}

// Emits `kind` ops in a chain from `x` to the node's output through temps.
void emit_eltwise_chain(Lowering& l, const onnx::NodeProto& n, int32_t x, const std::vector<EltStep>& steps) {
  const int32_t y = l.output(n);
  int32_t src = x;
  for (size_t i = 0; i < steps.size(); ++i) {
    Op op;
    op.kind = OpKind::kEltwise;
    op.alg = steps[i].alg;
    op.floats = {steps[i].alpha, steps[i].beta};
    op.in = {src};
    op.out = i + 1 == steps.size() ? y : l.temp(n, l.dims(y));
    src = op.out;
    l.emit(std::move(op));
  }
}

bool commutative(int32_t alg) {
  return alg == dnnl_binary_add || alg == dnnl_binary_mul || alg == dnnl_binary_max || alg == dnnl_binary_min;
}

// out = a (alg) b; a commutative op takes the operand of the output's shape
// first, which is the one oneDNN's fast kernels want (only the second may broadcast).
void emit_binary(Lowering& l, int32_t alg, int32_t a, int32_t b, int32_t out) {
  if (commutative(alg) && l.dims(a) != l.dims(out) && l.dims(b) == l.dims(out)) std::swap(a, b);
  Op op;
  op.kind = OpKind::kBinary;
  op.alg = alg;
  op.in = {a, b};
  op.out = out;
  l.emit(std::move(op));
}

int32_t binary_alg(const std::string& op) {
  if (op == "Add" || op == "Sum" || op == "Mean") return dnnl_binary_add;
  if (op == "Sub") return dnnl_binary_sub;
  if (op == "Mul") return dnnl_binary_mul;
  if (op == "Div") return dnnl_binary_div;
  if (op == "Max") return dnnl_binary_max;
  return dnnl_binary_min;
}

void emit_view(Lowering& l, int32_t x, int32_t y) {
  Op op;
  op.kind = OpKind::kView;
  op.in = {x};
  op.out = y;
  l.emit(std::move(op));
}

int64_t normalize_axis(int64_t axis, size_t rank, const char* what) {
  const auto r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r) throw Refusal{std::string(what) + " " + std::to_string(axis) + " out of range"};
  return axis < 0 ? axis + r : axis;
}

}  // namespace

void lower_eltwise(Lowering& l, const onnx::NodeProto& n) {
  std::vector<EltStep> steps = eltwise_steps(l, n);
  emit_eltwise_chain(l, n, l.value(n.input(0)), steps);
}

void lower_binary(Lowering& l, const onnx::NodeProto& n) {
  if (has_attr(n, "broadcast") || has_attr(n, "axis")) throw Refusal{"legacy broadcast attributes"};
  if (n.input_size() != 2) throw Refusal{n.op_type() + " with " + std::to_string(n.input_size()) + " inputs"};
  const int32_t a = l.value(n.input(0)), b = l.value(n.input(1));
  // x times a one-element constant is a linear step, alpha x (one rounding, as the Mul): fused after a product it
  // scales the accumulator in the store, where a broadcast binary operand costs a pass of its own (a MatMul's
  // attention scores times the factor canonicalisation moved onto them).
  if (n.op_type() == "Mul" && n.input(0) != n.input(1)) {
    for (int k = 0; k < 2; ++k) {
      const int32_t x = k == 0 ? b : a;
      if (!l.is_constant(n.input(k)) || l.is_constant(n.input(1 - k))) continue;
      const std::vector<float> c = l.constant_floats(n.input(k), "Mul factor");
      if (c.size() != 1) break;
      const int32_t y = l.output(n);
      if (l.dims(x) != l.dims(y)) return emit_binary(l, dnnl_binary_mul, a, b, y);
      Op op;
      op.kind = OpKind::kEltwise;
      op.alg = dnnl_eltwise_linear;
      op.floats = {c[0], 0.f};
      op.in = {x};
      op.out = y;
      return l.emit(std::move(op));
    }
  }
  emit_binary(l, binary_alg(n.op_type()), a, b, l.output(n));
}

void lower_variadic(Lowering& l, const onnx::NodeProto& n) {
  if (n.input_size() < 1) throw Refusal{n.op_type() + " without inputs"};
  std::vector<int32_t> in;
  for (const auto& name : n.input()) in.push_back(l.value(name));
  const int32_t y = l.output(n);
  if (in.size() == 1) return emit_view(l, in[0], y);
  const int32_t alg = binary_alg(n.op_type());
  bool same = true;
  for (int32_t v : in) same = same && l.dims(v) == l.dims(y);
  if (same && n.op_type() == "Sum") {  // one sum primitive
    Op op;
    op.kind = OpKind::kSum;
    op.in = in;
    op.out = y;
    return l.emit(std::move(op));
  }
  // A chain of binary ops; fusion turns the tail into post-ops.
  const bool mean = n.op_type() == "Mean";
  int32_t acc = in[0];
  for (size_t i = 1; i < in.size(); ++i) {
    Dims d;
    broadcast(l.dims(acc), l.dims(in[i]), &d);
    const int32_t out = i + 1 == in.size() && !mean ? y : l.temp(n, d);
    emit_binary(l, alg, acc, in[i], out);
    acc = out;
  }
  if (mean) {
    Op op;
    op.kind = OpKind::kEltwise;
    op.alg = dnnl_eltwise_linear;
    op.floats = {1.f / static_cast<float>(in.size()), 0.f};
    op.in = {acc};
    op.out = y;
    l.emit(std::move(op));
  }
}

void lower_gemm(Lowering& l, const onnx::NodeProto& n) {
  if (n.input_size() < 2) throw Refusal{"Gemm with fewer than 2 inputs"};
  const int32_t a = l.value(n.input(0)), b = l.value(n.input(1));
  if (l.dims(a).size() != 2 || l.dims(b).size() != 2) throw Refusal{"Gemm operands must be 2-D"};
  const float alpha = attr_float(n, "alpha", 1.f), beta = attr_float(n, "beta", 1.f);
  const bool has_c = n.input_size() > 2 && !n.input(2).empty() && beta != 0.f;
  const int32_t c = has_c ? l.value(n.input(2), "C") : -1;
  const int32_t y = l.output(n);
  const Dims yd = l.dims(y);
  if (has_c) {
    Dims r;
    if (l.dims(c).size() > 2 || !broadcast(l.dims(c), yd, &r) || r != yd) {
      throw Refusal{"Gemm with a C " + dims_str(l.dims(c)) + " that does not broadcast to " + dims_str(yd)};
    }
  }
  // C of shape [N] or [1,N] with alpha = beta = 1 is the primitive's bias; any
  // other C is scaled and added by ops that fusion folds into post-ops.
  const bool c_is_bias = has_c && alpha == 1.f && beta == 1.f && yd.size() == 2 &&
                         pad_to_rank(l.dims(c), 2) == Dims{1, yd[1]};
  Op mm;
  mm.kind = OpKind::kMatMul;
  mm.in = {a, b, c_is_bias ? c : -1};
  mm.ints = {2, attr_int(n, "transA", 0) != 0, attr_int(n, "transB", 0) != 0};
  const Dims ad = l.dims(a), bd = l.dims(b);
  mm.ints.insert(mm.ints.end(), ad.begin(), ad.end());
  mm.ints.insert(mm.ints.end(), bd.begin(), bd.end());
  Dims bias_view = c_is_bias ? Dims{1, yd[1]} : Dims{1, 1};
  mm.ints.insert(mm.ints.end(), bias_view.begin(), bias_view.end());
  const bool tail = (has_c && !c_is_bias) || alpha != 1.f;
  mm.out = tail ? l.temp(n, yd) : y;
  int32_t acc = mm.out;
  l.emit(std::move(mm));
  if (alpha != 1.f) {
    Op s;
    s.kind = OpKind::kEltwise;
    s.alg = dnnl_eltwise_linear;
    s.floats = {alpha, 0.f};
    s.in = {acc};
    s.out = has_c && !c_is_bias ? l.temp(n, yd) : y;
    acc = s.out;
    l.emit(std::move(s));
  }
  if (has_c && !c_is_bias) {
    int32_t cc = c;
    if (beta != 1.f) {
      Op s;
      s.kind = OpKind::kEltwise;
      s.alg = dnnl_eltwise_linear;
      s.floats = {beta, 0.f};
      s.in = {c};
      s.out = cc = l.temp(n, l.dims(c));
      l.emit(std::move(s));
    }
    Op add;
    add.kind = OpKind::kBinary;
    add.alg = dnnl_binary_add;
    add.in = {acc, cc};
    add.out = y;
    l.emit(std::move(add));
  }
}

void lower_matmul(Lowering& l, const onnx::NodeProto& n) {
  if (n.input_size() != 2) throw Refusal{"MatMul with " + std::to_string(n.input_size()) + " inputs"};
  const int32_t a = l.value(n.input(0)), b = l.value(n.input(1));
  // 1-D operands: A [K] is a row [1,K], B [K] a column [K,1]; the output
  // drops that dim again, which leaves its elements in the same order.
  Dims av = l.dims(a), bv = l.dims(b);
  if (av.empty() || bv.empty()) throw Refusal{"MatMul with a scalar operand"};
  if (av.size() == 1) av.insert(av.begin(), 1);
  if (bv.size() == 1) bv.push_back(1);
  const size_t r = std::max(av.size(), bv.size());
  av = pad_to_rank(av, r);
  bv = pad_to_rank(bv, r);
  // Weights shared by every batch (B's batch dims all 1): A's batch dims fold
  // into its rows, one [batch*M, K] x [K, N] product over the same elements.
  // oneDNN runs that far faster than a batched one that broadcasts B.
  if (r > 2 && numel(Dims(bv.begin(), bv.end() - 2)) == 1) {
    av = {numel(Dims(av.begin(), av.end() - 1)), av.back()};
    bv = {bv[r - 2], bv[r - 1]};
  }
  const size_t r2 = av.size();
  Op op;
  op.kind = OpKind::kMatMul;
  op.in = {a, b, -1};
  op.out = l.output(n);
  op.ints = {static_cast<int64_t>(r2), 0, 0};
  op.ints.insert(op.ints.end(), av.begin(), av.end());
  op.ints.insert(op.ints.end(), bv.begin(), bv.end());
  op.ints.insert(op.ints.end(), r2, 1);
  l.emit(std::move(op));
}

void lower_softmax(Lowering& l, const onnx::NodeProto& n) {
  const int32_t x = l.value(n.input(0));
  const Dims xd = l.dims(x);
  if (xd.empty()) throw Refusal{n.op_type() + " of a scalar"};
  Op op;
  op.kind = OpKind::kSoftmax;
  op.alg = n.op_type() == "LogSoftmax" ? dnnl_softmax_log : dnnl_softmax_accurate;
  op.in = {x};
  op.out = l.output(n);
  if (l.opset() < 13) {
    // Before opset 13 the input is coerced to 2-D at `axis`: one softmax over
    // all trailing dims together.
    const int64_t axis = normalize_axis(attr_int(n, "axis", 1), xd.size(), "axis");
    const int64_t rows = numel(Dims(xd.begin(), xd.begin() + axis)), cols = numel(Dims(xd.begin() + axis, xd.end()));
    op.ints = {2, rows, cols, 1};
  } else {
    const int64_t axis = normalize_axis(attr_int(n, "axis", -1), xd.size(), "axis");
    op.ints = {static_cast<int64_t>(xd.size())};
    op.ints.insert(op.ints.end(), xd.begin(), xd.end());
    op.ints.push_back(axis);
  }
  l.emit(std::move(op));
}

void lower_layer_norm(Lowering& l, const onnx::NodeProto& n) {
  if (n.input_size() < 2) throw Refusal{"LayerNormalization without Scale"};
  const int32_t x = l.value(n.input(0));
  const Dims xd = l.dims(x);
  if (xd.empty()) throw Refusal{"LayerNormalization of a scalar"};
  const int64_t axis = normalize_axis(attr_int(n, "axis", -1), xd.size(), "axis");
  const int64_t rows = numel(Dims(xd.begin(), xd.begin() + axis)), cols = numel(Dims(xd.begin() + axis, xd.end()));
  const int32_t scale = l.value(n.input(1), "scale");
  const int32_t bias = n.input_size() > 2 && !n.input(2).empty() ? l.value(n.input(2), "bias") : -1;
  if (numel(l.dims(scale)) != cols || (bias >= 0 && numel(l.dims(bias)) != cols)) {
    throw Refusal{"LayerNormalization whose Scale or B broadcasts (oneDNN takes one value per normalized element)"};
  }
  Op op;
  op.kind = OpKind::kLayerNorm;
  op.in = {x, scale, bias};
  op.out = l.output(n);
  op.ints = {rows, cols};
  op.floats = {attr_float(n, "epsilon", 1e-5f)};
  l.emit(std::move(op));
}

void lower_concat(Lowering& l, const onnx::NodeProto& n) {
  if (!has_attr(n, "axis")) throw Refusal{"Concat without axis"};
  std::vector<int32_t> in;
  for (const auto& name : n.input()) in.push_back(l.value(name));
  if (in.empty()) throw Refusal{"Concat without inputs"};
  const int32_t y = l.output(n);
  if (in.size() == 1) return emit_view(l, in[0], y);
  Op op;
  op.kind = OpKind::kConcat;
  op.in = in;
  op.out = y;
  op.ints = {normalize_axis(attr_int(n, "axis", 0), l.dims(y).size(), "axis")};
  l.emit(std::move(op));
}

void lower_view(Lowering& l, const onnx::NodeProto& n) {
  if (n.op_type() == "Dropout" && n.input_size() > 2 && !n.input(2).empty()) {
    std::vector<int64_t> training = l.constant_ints(n.input(2), "Dropout training_mode");
    if (training.size() != 1 || training[0] != 0) throw Refusal{"Dropout in training mode"};
  }
  // The output's shape is static in the region model, so a Reshape's shape
  // input (constant or not) is never read. A view moves no bytes: 8-bit values
  // too (the QDQ pass's Reshape/Flatten of quantized values).
  constexpr uint32_t kAny = Lowering::kFloat32 | Lowering::k8Bit;
  emit_view(l, l.value(n.input(0), "input", kAny), l.output(n, 0, kAny));
}

namespace {

// Output `y` as the box of `x` that starts at `offsets`; the output's dims
// give the box's extent.
void emit_slice(Lowering& l, int32_t x, int32_t y, const Dims& offsets) {
  Op op;
  op.kind = OpKind::kSlice;
  op.in = {x};
  op.out = y;
  op.ints = offsets;
  l.emit(std::move(op));
}

}  // namespace

// Each output of a Split is the next box along the axis. The sizes are the
// outputs' static dims, so the `split` input or attribute and opset 18's
// num_outputs are never read.
void lower_split(Lowering& l, const onnx::NodeProto& n) {
  const int32_t x = l.value(n.input(0));
  const Dims xd = l.dims(x);
  const auto axis = static_cast<size_t>(normalize_axis(attr_int(n, "axis", 0), xd.size(), "axis"));
  // Every output is interned before any op is emitted, so a refused output leaves nothing behind.
  std::vector<int32_t> ys;
  int64_t total = 0;
  for (int i = 0; i < n.output_size(); ++i) {
    if (n.output(i).empty()) throw Refusal{"Split with an unnamed output"};
    ys.push_back(l.output(n, i));
    total += l.dims(ys.back()).size() == xd.size() ? l.dims(ys.back())[axis] : 0;
  }
  if (total != xd[axis]) throw Refusal{"Split outputs do not cover the input along axis " + std::to_string(axis)};
  Dims offsets(xd.size(), 0);
  for (int32_t y : ys) {
    emit_slice(l, x, y, offsets);
    offsets[axis] += l.dims(y)[axis];
  }
}

// Gather of one constant index along an axis (`x[i]`, `x[:, i]`: q, k, v = qkv[0], qkv[1], qkv[2] as PyTorch
// exports attention's unpacking, a class token taken from the sequence): the box of extent 1 at that index, viewed
// without the axis (a scalar index) or as it is (an index of one element). Other indices stay native.
void lower_gather(Lowering& l, const onnx::NodeProto& n) {
  const int32_t x = l.value(n.input(0));
  const Dims xd = l.dims(x);
  const auto axis = static_cast<size_t>(normalize_axis(attr_int(n, "axis", 0), xd.size(), "axis"));
  const std::vector<int64_t> idx = l.constant_ints(n.input(1), "Gather indices");
  if (idx.size() != 1) throw Refusal{"Gather of " + std::to_string(idx.size()) + " indices (only one)"};
  const int64_t i = idx[0] < 0 ? idx[0] + xd[axis] : idx[0];
  if (i < 0 || i >= xd[axis]) throw Refusal{"Gather index " + std::to_string(idx[0]) + " out of range"};
  const int32_t y = l.output(n);
  Dims box = xd;
  box[axis] = 1;
  Dims offsets(xd.size(), 0);
  offsets[axis] = i;
  if (l.dims(y) == box) {
    emit_slice(l, x, y, offsets);
    return;
  }
  const int32_t t = l.temp(n, box);
  emit_slice(l, x, t, offsets);
  emit_view(l, t, y);
}

// Slice with unit steps and constant starts: one box. The ends are implied
// by the output's static dims.
void lower_slice(Lowering& l, const onnx::NodeProto& n) {
  if (n.input_size() < 3) throw Refusal{"Slice with starts/ends attributes (opset < 10)"};
  const int32_t x = l.value(n.input(0));
  const Dims xd = l.dims(x);
  const std::vector<int64_t> starts = l.constant_ints(n.input(1), "Slice starts");
  std::vector<int64_t> axes(starts.size());
  std::iota(axes.begin(), axes.end(), 0);
  if (n.input_size() > 3 && !n.input(3).empty()) axes = l.constant_ints(n.input(3), "Slice axes");
  if (n.input_size() > 4 && !n.input(4).empty()) {
    for (int64_t s : l.constant_ints(n.input(4), "Slice steps")) {
      if (s != 1) throw Refusal{"Slice with step " + std::to_string(s) + " (only 1)"};
    }
  }
  if (axes.size() != starts.size()) throw Refusal{"Slice axes and starts differ in length"};
  Dims offsets(xd.size(), 0);
  for (size_t i = 0; i < axes.size(); ++i) {
    const auto a = static_cast<size_t>(normalize_axis(axes[i], xd.size(), "axis"));
    const int64_t dim = xd[a];
    int64_t s = starts[i] < 0 ? starts[i] + dim : starts[i];
    offsets[a] = std::clamp<int64_t>(s, 0, dim);
  }
  emit_slice(l, x, l.output(n), offsets);
}

void lower_transpose(Lowering& l, const onnx::NodeProto& n) {
  constexpr uint32_t kAny = Lowering::kFloat32 | Lowering::k8Bit;  // a reorder: 8-bit values too
  const int32_t x = l.value(n.input(0), "input", kAny);
  const size_t r = l.dims(x).size();
  Dims perm = attr_ints(n, "perm");
  if (perm.empty()) {
    perm.resize(r);
    std::iota(perm.rbegin(), perm.rend(), 0);
  }
  Op op;
  op.kind = OpKind::kTranspose;
  op.in = {x};
  op.out = l.output(n, 0, kAny);
  op.ints = perm;
  l.emit(std::move(op));
}

}  // namespace tessera_dnnl

namespace tessera_dnnl {

void lower_reduce(Lowering& l, const onnx::NodeProto& n) {
  const std::string& name = n.op_type();
  const int32_t x = l.value(n.input(0));
  const Dims xd = l.dims(x);
  // Axes are an attribute up to opset 17 (12 for ReduceSum), an input after.
  const bool from_input = n.input_size() > 1 && !n.input(1).empty();
  const Dims axes = from_input ? l.constant_ints(n.input(1), name + " axes") : attr_ints(n, "axes");
  const int32_t y = l.output(n);
  if (axes.empty() && attr_int(n, "noop_with_empty_axes", 0) != 0) return emit_view(l, x, y);
  Dims kept = xd;
  if (axes.empty()) kept.assign(xd.size(), 1);
  for (int64_t a : axes) kept[static_cast<size_t>(normalize_axis(a, xd.size(), "axis"))] = 1;
  Op op;
  op.kind = OpKind::kReduce;
  op.in = {x};
  op.out = y;
  op.ints = {static_cast<int64_t>(xd.size())};
  op.ints.insert(op.ints.end(), kept.begin(), kept.end());
  float p = 0.f;
  if (name == "ReduceMean") op.alg = dnnl_reduction_mean;
  else if (name == "ReduceSum") op.alg = dnnl_reduction_sum;
  else if (name == "ReduceMax") op.alg = dnnl_reduction_max;
  else if (name == "ReduceMin") op.alg = dnnl_reduction_min;
  else if (name == "ReduceProd") op.alg = dnnl_reduction_mul;
  else if (name == "ReduceL1") op.alg = dnnl_reduction_norm_lp_sum, p = 1.f;
  else if (name == "ReduceL2") op.alg = dnnl_reduction_norm_lp_sum, p = 2.f;
  else op.alg = dnnl_reduction_norm_lp_power_p_sum, p = 2.f;  // ReduceSumSquare
  op.floats = {p, 0.f};
  l.emit(std::move(op));
}

void lower_prelu(Lowering& l, const onnx::NodeProto& n) {
  if (n.input_size() != 2) throw Refusal{"PRelu with " + std::to_string(n.input_size()) + " inputs"};
  Op op;
  op.kind = OpKind::kPRelu;
  op.in = {l.value(n.input(0)), l.value(n.input(1), "slope")};
  op.out = l.output(n);
  l.emit(std::move(op));
}

}  // namespace tessera_dnnl
