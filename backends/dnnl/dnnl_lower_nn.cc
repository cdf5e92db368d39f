// Lowering of the spatial operators: Conv, ConvTranspose, MaxPool,
// AveragePool, the global pools, BatchNormalization and LRN.
//
// Pads are resolved here, from the static shapes the region model carries:
// auto_pad (SAME_UPPER/SAME_LOWER/VALID), ceil_mode and ConvTranspose's
// output_padding/output_shape all become explicit begin/end pads for oneDNN,
// computed the way Tessera's native kernels compute them; the output shape
// the model declares is then re-derived by check_op, so a mismatch refuses
// the node instead of producing wrong numbers.
#include <oneapi/dnnl/dnnl_types.h>

#include <algorithm>

#include "dnnl_lowering.h"
#include "ops/qlinear_add_math.h"  // header-only, shared with native
#include "ops/resize_coords.h"     // header-only, shared with native

namespace tessera_dnnl {

using tessera_plugin::attr_float;
using tessera_plugin::attr_floats;
using tessera_plugin::attr_int;
using tessera_plugin::attr_ints;
using tessera_plugin::attr_string;
using tessera_plugin::has_attr;

namespace {

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

std::string list_str(const std::vector<int64_t>& v) { return dims_str(v); }

struct SpatialAttrs {
  size_t r = 0;
  std::string auto_pad;
  Dims kernel, strides, dil, pads;  // pads: ONNX order, begins then ends
};

// Spatial sizes, kernels, strides, dilations and pads beyond 2^30 are refused: the window arithmetic below
// (products of two of them, sums of a few) then stays well within int64, and oneDNN indexes spatial axes with int.
constexpr int64_t kMaxExtent = int64_t{1} << 30;

void check_extents(const Dims& v, size_t from, const char* what) {
  for (size_t i = from; i < v.size(); ++i) {
    if (v[i] > kMaxExtent) throw Refusal{std::string(what) + " " + dims_str(v) + " beyond 2^30"};
  }
}

// Reads kernel_shape (or the kernel from W), strides, dilations, pads and
// auto_pad for `r` spatial axes; refuses malformed attributes.
SpatialAttrs read_spatial(const onnx::NodeProto& n, size_t r, const Dims& kernel_from_w) {
  SpatialAttrs a;
  a.r = r;
  a.auto_pad = attr_string(n, "auto_pad", "NOTSET");
  if (a.auto_pad.empty()) a.auto_pad = "NOTSET";
  if (a.auto_pad != "NOTSET" && a.auto_pad != "VALID" && a.auto_pad != "SAME_UPPER" && a.auto_pad != "SAME_LOWER") {
    throw Refusal{"unknown auto_pad '" + a.auto_pad + "'"};
  }
  a.kernel = has_attr(n, "kernel_shape") ? attr_ints(n, "kernel_shape") : kernel_from_w;
  a.strides = attr_ints(n, "strides", Dims(r, 1));
  a.dil = attr_ints(n, "dilations", Dims(r, 1));
  a.pads = attr_ints(n, "pads", Dims(2 * r, 0));
  if (a.strides.empty()) a.strides.assign(r, 1);
  if (a.dil.empty()) a.dil.assign(r, 1);
  if (a.pads.empty()) a.pads.assign(2 * r, 0);
  if (a.kernel.size() != r || a.strides.size() != r || a.dil.size() != r || a.pads.size() != 2 * r) {
    throw Refusal{"kernel_shape/strides/dilations/pads do not match " + std::to_string(r) + " spatial axes"};
  }
  if (!kernel_from_w.empty() && a.kernel != kernel_from_w) {
    throw Refusal{"kernel_shape " + list_str(a.kernel) + " differs from the weights' " + list_str(kernel_from_w)};
  }
  for (size_t i = 0; i < r; ++i) {
    if (a.kernel[i] < 1 || a.strides[i] < 1 || a.dil[i] < 1) throw Refusal{"non-positive kernel, stride or dilation"};
  }
  for (int64_t p : a.pads) {
    if (p < 0) throw Refusal{"negative pads"};
  }
  check_extents(a.kernel, 0, "kernel");
  check_extents(a.strides, 0, "strides");
  check_extents(a.dil, 0, "dilations");
  check_extents(a.pads, 0, "pads");
  return a;
}

// Begin and end pads of axis i for a window sliding over `in` elements to
// produce `out` outputs (the model's shape). With ceil_mode the end pad grows
// to cover the last window; `explicit_end` says what the model asked for.
void window_pads(const SpatialAttrs& a, size_t i, int64_t in, int64_t out, int64_t* pb, int64_t* pe,
                 int64_t* explicit_end) {
  const int64_t s = a.strides[i], eff = (a.kernel[i] - 1) * a.dil[i] + 1;
  if (a.auto_pad == "SAME_UPPER" || a.auto_pad == "SAME_LOWER") {
    const int64_t total = std::max<int64_t>(0, (out - 1) * s + eff - in);
    *pb = a.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
    *pe = total - *pb;
    *explicit_end = *pe;
    return;
  }
  *pb = a.auto_pad == "VALID" ? 0 : a.pads[i];
  *explicit_end = a.auto_pad == "VALID" ? 0 : a.pads[i + a.r];
  *pe = *explicit_end;
  // A pad as wide as the window reads only padding there; oneDNN then takes its reference path, and a hostile pad
  // (2^20 on a 3-wide kernel) kept its primitive creation busy for 40 s. Real models pad less than the window.
  if (*pb >= eff || *pe >= eff) {
    throw Refusal{"pads " + dims_str(a.pads) + " as wide as the window (" + std::to_string(eff) + ") on axis " +
                  std::to_string(i)};
  }
  const int64_t span = in + *pb + *pe - eff;
  if (span >= 0 && span / s + 1 == out) return;  // floor mode
  *pe = (out - 1) * s + eff - in - *pb;           // ceil mode: pad the end up to the last window
}

void check_spatial_rank(const Dims& x, const char* op) {
  if (x.size() < 3 || x.size() > 5) {
    throw Refusal{std::string(op) + " with " + std::to_string(static_cast<int64_t>(x.size()) - 2) +
                  " spatial axes (oneDNN takes 1 to 3)"};
  }
}

// The operands and attributes Conv, ConvTranspose and QLinearConv share: X, W, the
// optional bias, Y, their dims and the spatial attributes of the r = rank-2
// spatial axes.
struct ConvOperands {
  int32_t x = -1, w = -1, b = -1, y = -1;
  Dims xd, wd, yd;
  size_t r = 0;
  SpatialAttrs a;
};

// Where a convolution's operands are among its node's inputs, and their types (a bit per TESSERA_DTYPE_*; Y has
// X's). Constant weights are reordered once, at load; weights computed at run time (rare outside tests) are
// reordered by every run.
struct ConvInputs {
  int w = 1, b = 2;
  uint32_t x_types = Lowering::kFloat32, w_types = Lowering::kFloat32, b_types = Lowering::kFloat32;
  uint32_t y_types = 0;                     // 0: X's
  const onnx::NodeProto* y_node = nullptr;  // the node whose output 0 is Y (a pattern's last); null: this one
};

ConvOperands conv_operands(Lowering& l, const onnx::NodeProto& n, const char* op, const ConvInputs& in = {}) {
  ConvOperands c;
  c.x = l.value(n.input(0), "input", in.x_types);
  c.xd = l.dims(c.x);
  check_spatial_rank(c.xd, op);
  if (n.input_size() <= in.w || n.input(in.w).empty()) throw Refusal{"weights are missing"};
  c.w = l.value(n.input(in.w), "weights", in.w_types);
  c.b = n.input_size() > in.b && !n.input(in.b).empty() ? l.value(n.input(in.b), "bias", in.b_types) : -1;
  c.y = l.output(in.y_node ? *in.y_node : n, 0, in.y_types ? in.y_types : in.x_types);
  c.wd = l.dims(c.w);
  c.yd = l.dims(c.y);
  c.r = c.xd.size() - 2;
  if (c.wd.size() != c.xd.size() || c.yd.size() != c.xd.size()) throw Refusal{"weights and input ranks differ"};
  check_extents(c.xd, 2, "input");
  check_extents(c.yd, 2, "output");
  c.a = read_spatial(n, c.r, Dims(c.wd.begin() + 2, c.wd.end()));
  return c;
}

// The op both emit (and QLinearConv, with its quantization parameters as `floats`): rank, strides, dilations,
// begin and end pads, group.
void emit_conv(Lowering& l, const onnx::NodeProto& n, OpKind kind, const ConvOperands& c, const Dims& pb,
               const Dims& pe, std::vector<float> floats = {}, std::vector<std::string> nodes = {}) {
  Op op;
  op.kind = kind;
  op.nodes = std::move(nodes);
  op.floats = std::move(floats);
  op.in = {c.x, c.w, c.b};
  op.out = c.y;
  op.ints.push_back(static_cast<int64_t>(c.r));
  for (const Dims* d : {&c.a.strides, &c.a.dil, &pb, &pe}) op.ints.insert(op.ints.end(), d->begin(), d->end());
  op.ints.push_back(attr_int(n, "group", 1));
  l.emit(std::move(op));
}

// A convolution's begin and end pads (not a transposed one's).
void conv_pads(const ConvOperands& c, Dims* pb, Dims* pe) {
  pb->assign(c.r, 0);
  pe->assign(c.r, 0);
  for (size_t i = 0; i < c.r; ++i) {
    int64_t explicit_end;
    window_pads(c.a, i, c.xd[i + 2], c.yd[i + 2], &(*pb)[i], &(*pe)[i], &explicit_end);
  }
}

}  // namespace

void lower_conv(Lowering& l, const onnx::NodeProto& n) {
  const ConvOperands c = conv_operands(l, n, "Conv");
  Dims pb, pe;
  conv_pads(c, &pb, &pe);
  emit_conv(l, n, OpKind::kConv, c, pb, pe);
}

namespace {

// A zero point input `i` (absent: nothing to check) must have the dtype of the 8-bit value it belongs to, as ONNX
// requires; native refuses the node otherwise, and so does this plugin rather than compute something else.
void check_zero_point_type(const Lowering& l, const onnx::NodeProto& n, int i, const std::string& of) {
  if (n.input_size() <= i || n.input(i).empty() || of.empty()) return;
  const int32_t zt = l.model().type(n.input(i)).dtype, vt = l.model().type(of).dtype;
  if (zt != vt) {
    throw Refusal{"zero point '" + n.input(i) + "' is " + tessera_plugin::dtype_name(zt) + ", its value '" + of +
                  "' " + tessera_plugin::dtype_name(vt)};
  }
}

// What QLinearConv and QLinearMatMul share (inputs x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp): constant
// int8 weights with zero point 0 (oneDNN has no weight zero points), and the quantization parameters as kQConv's and
// kQMatMul's floats {x_zp, y_zp, scale[1 or count]}, scale[j] = x_scale * w_scale[j] / y_scale as Tessera's native
// kernels (and ONNX Runtime) compute it.
std::vector<float> requant_floats(Lowering& l, const onnx::NodeProto& n, int64_t count, const char* w) {
  auto one = [&](int i, const std::string& what) {
    const std::vector<float> v = l.constant_floats(n.input(i), what);
    if (v.size() != 1) throw Refusal{what + " is not one value"};
    return v[0];
  };
  auto zero_point = [&](int i, const std::string& what) -> float {
    if (n.input(i).empty()) return 0.f;
    const std::vector<int64_t> v = l.constant_ints(n.input(i), what);
    if (v.size() != 1) throw Refusal{what + " is not one value"};
    return static_cast<float>(v[0]);
  };
  for (int64_t z : l.constant_ints(n.input(5), std::string(w) + "_zero_point")) {
    if (z != 0) throw Refusal{std::string(w) + " with a nonzero zero point (oneDNN takes symmetric int8 weights)"};
  }
  const std::string x = n.op_type() == "QLinearMatMul" ? "a" : "x";
  const float xs = one(1, x + "_scale"), ys = one(6, "y_scale");
  const std::vector<float> ws = l.constant_floats(n.input(4), std::string(w) + "_scale");
  if (ws.size() != 1 && static_cast<int64_t>(ws.size()) != count) {
    throw Refusal{std::string(w) + "_scale has " + std::to_string(ws.size()) + " values for " + std::to_string(count) +
                  " outputs"};
  }
  check_zero_point_type(l, n, 2, n.input(0));
  check_zero_point_type(l, n, 7, n.output(0));
  std::vector<float> f = {zero_point(2, x + "_zero_point"), zero_point(7, "y_zero_point")};
  bool uniform = true;
  for (float x : ws) uniform = uniform && x == ws[0];
  for (size_t j = 0; j < (uniform ? 1 : static_cast<size_t>(count)); ++j) {
    f.push_back(xs * ws[ws.size() == 1 ? 0 : j] / ys);
  }
  return f;
}

}  // namespace

// QLinearConv (x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B?) as oneDNN's int8 convolution: 8-bit X and
// Y, int8 weights with zero point 0 (oneDNN has no weight zero points), an int32 bias; every scale and zero point
// constant. The requantization scales are computed as Tessera's native kernel computes them.
void lower_qlinear_conv(Lowering& l, const onnx::NodeProto& n) {
  if (n.input_size() < 8) throw Refusal{"QLinearConv needs 8 or 9 inputs"};
  if (n.input(3).empty() || !l.is_constant(n.input(3))) throw Refusal{"weights are not constant"};
  if (n.input_size() > 8 && !n.input(8).empty() && !l.is_constant(n.input(8))) throw Refusal{"bias is not constant"};
  const ConvOperands c = conv_operands(l, n, "QLinearConv",
                                       {3, 8, Lowering::k8Bit, 1u << TESSERA_DTYPE_INT8, 1u << TESSERA_DTYPE_INT32});
  std::vector<float> q = requant_floats(l, n, c.wd[0], "w");
  Dims pb, pe;
  conv_pads(c, &pb, &pe);
  emit_conv(l, n, OpKind::kQConv, c, pb, pe, std::move(q));
}

// DynamicQuantizeLinear (x -> y, y_scale, y_zero_point): kQuantParams computes {scale, zero point} from x, a
// kQuantize reading them writes y. The scale and zero point are no values of their own: only the dynamically
// quantized convolutions read them (Lowering::lower checks), from the kQuantParams value.
void lower_dynamic_quantize(Lowering& l, const onnx::NodeProto& n) {
  if (n.input_size() != 1) throw Refusal{"DynamicQuantizeLinear takes 1 input"};
  const int32_t x = l.value(n.input(0));
  Op params;
  params.kind = OpKind::kQuantParams;
  params.in = {x};
  params.out = l.temp(n, {2});
  const int32_t p = params.out;
  l.emit(std::move(params));
  Op q;
  q.kind = OpKind::kQuantize;
  q.in = {x, p};
  q.out = l.output(n, 0, 1u << TESSERA_DTYPE_UINT8);
  l.emit(std::move(q));
  l.set_quant_params(n.output(0), p);
}

namespace {

// What kDynConv and kDynMatMul share: the ConvInteger/MatMulInteger node's weights (constant, int8 with zero point
// 0, or uint8 with any zero points) and their scales (one, or one per output channel or column: axis `axis` of the
// output `yd`, shaped to broadcast there), as the op's floats (dnnl_program.h).
std::vector<float> dyn_weight_floats(Lowering& l, const onnx::NodeProto& n, const Pattern& pat, const Dims& yd,
                                     size_t axis) {
  const bool u8 = l.model().type(n.input(1)).dtype == TESSERA_DTYPE_UINT8;
  const int64_t m = yd[axis];
  std::vector<int64_t> wz(1, 0);
  if (n.input_size() > 3 && !n.input(3).empty()) {
    check_zero_point_type(l, n, 3, n.input(1));
    wz = l.constant_ints(n.input(3), "the weights' zero point");
    if (wz.size() != 1 && static_cast<int64_t>(wz.size()) != m) {
      throw Refusal{"the weights' zero point has " + std::to_string(wz.size()) + " values for " + std::to_string(m) +
                    " outputs"};
    }
  }
  if (!u8) {
    for (int64_t z : wz) {
      if (z != 0) throw Refusal{"int8 weights with a nonzero zero point (oneDNN takes symmetric int8 weights)"};
    }
  }
  std::vector<float> ws = l.constant_floats(pat.w_scale, "the weights' scale");
  const tessera_plugin::ValueType& wst = l.model().type(pat.w_scale);
  if (ws.size() > 1) {
    Dims want(yd.size(), 1);
    want[axis] = m;
    if (static_cast<int64_t>(ws.size()) != m || pad_to_rank(wst.dims, yd.size()) != want) {
      throw Refusal{"the weights' scale " + dims_str(wst.dims) + " is not per output channel"};
    }
  }
  bool uniform = true;
  for (float f : ws) uniform = uniform && f == ws[0];
  if (u8) {  // {w_scale[m], w_zp[m]}
    const float w0 = ws[0];
    ws.resize(static_cast<size_t>(m), w0);
    for (int64_t j = 0; j < m; ++j) ws.push_back(static_cast<float>(wz[wz.size() == 1 ? 0 : static_cast<size_t>(j)]));
  } else if (uniform) {
    ws.resize(1);
  }
  return ws;
}

// The kQuantParams value of the DynamicQuantizeLinear that wrote the product's input, and its nodes' names.
int32_t dyn_params(const Lowering& l, const onnx::NodeProto& n, const Pattern& pat, std::vector<std::string>* nodes) {
  if (n.input(1).empty() || !l.is_constant(n.input(1))) throw Refusal{"weights are not constant"};
  const int32_t params = l.quant_params(n.input(0));
  if (params < 0) throw Refusal{"its DynamicQuantizeLinear is not in the region"};
  for (int i : pat.nodes) nodes->push_back(l.model().node(i).name());  // the op does every node's work
  return params;
}

}  // namespace

// ConvInteger(dynamic) (dnnl_patterns.h) as kDynConv: the quantized input and the kQuantParams value of the
// DynamicQuantizeLinear that wrote it, the constant weights, their scales (and zero points) per output channel.
void lower_dyn_conv(Lowering& l, const Pattern& pat, const onnx::NodeProto& last) {
  const onnx::NodeProto& n = l.model().node(pat.conv);
  std::vector<std::string> nodes;
  const int32_t params = dyn_params(l, n, pat, &nodes);
  ConvInputs in;
  in.b = 99;  // ConvInteger has no bias
  in.x_types = 1u << TESSERA_DTYPE_UINT8;
  in.w_types = Lowering::k8Bit;
  in.y_types = Lowering::kFloat32;
  in.y_node = &last;
  const ConvOperands c = conv_operands(l, n, "ConvInteger", in);
  if (l.model().type(n.input(1)).dtype == TESSERA_DTYPE_UINT8 && attr_int(n, "group", 1) != 1) {
    throw Refusal{"uint8 weights in a grouped convolution"};
  }
  std::vector<float> ws = dyn_weight_floats(l, n, pat, c.yd, 1);
  Dims pb, pe;
  conv_pads(c, &pb, &pe);
  ConvOperands cp = c;
  cp.b = params;
  emit_conv(l, n, OpKind::kDynConv, cp, pb, pe, std::move(ws), std::move(nodes));
}

// MatMulInteger(dynamic) as kDynMatMul: A (any rank, read as [rows, K]) from a DynamicQuantizeLinear, a constant
// 2-D B [K, N]; the scales (and zero points) per column.
void lower_dyn_matmul(Lowering& l, const Pattern& pat, const onnx::NodeProto& last) {
  const onnx::NodeProto& n = l.model().node(pat.conv);
  std::vector<std::string> nodes;
  const int32_t params = dyn_params(l, n, pat, &nodes);
  const int32_t a = l.value(n.input(0), "input", 1u << TESSERA_DTYPE_UINT8);
  const int32_t b = l.value(n.input(1), "B", Lowering::k8Bit);
  const Dims ad = l.dims(a), bd = l.dims(b);
  if (bd.size() != 2) throw Refusal{"B of rank " + std::to_string(bd.size()) + " (oneDNN's int8 path takes a 2-D B)"};
  if (ad.size() < 2 || ad.back() != bd[0]) throw Refusal{"A " + dims_str(ad) + " does not meet B " + dims_str(bd)};
  Op op;
  op.kind = OpKind::kDynMatMul;
  op.in = {a, b, params};
  op.out = l.output(last, 0, Lowering::kFloat32);
  op.ints = {numel(ad) / bd[0], bd[0], bd[1]};
  op.floats = dyn_weight_floats(l, n, pat, l.dims(op.out), l.dims(op.out).size() - 1);
  op.nodes = std::move(nodes);
  l.emit(std::move(op));
}

// QLinearMatMul (a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp) with a constant 2-D int8 B (zero point 0) as
// oneDNN's int8 matmul; A of any rank >= 2 is read as [rows, K]; per-tensor A and Y quantization.
void lower_qlinear_matmul(Lowering& l, const onnx::NodeProto& n) {
  if (n.input_size() != 8) throw Refusal{"QLinearMatMul needs 8 inputs"};
  constexpr uint32_t kInt8 = 1u << TESSERA_DTYPE_INT8;
  if (n.input(3).empty() || !l.is_constant(n.input(3))) throw Refusal{"B is not constant"};
  const int32_t a = l.value(n.input(0), "input", Lowering::k8Bit);
  const int32_t b = l.value(n.input(3), "B", kInt8);
  const Dims ad = l.dims(a), bd = l.dims(b);
  if (bd.size() != 2) throw Refusal{"B of rank " + std::to_string(bd.size()) + " (oneDNN's int8 path takes a 2-D B)"};
  if (ad.size() < 2 || ad.back() != bd[0]) throw Refusal{"A " + dims_str(ad) + " does not meet B " + dims_str(bd)};
  Op op;
  op.kind = OpKind::kQMatMul;
  op.in = {a, b};
  op.out = l.output(n, 0, Lowering::k8Bit);
  op.ints = {numel(ad) / bd[0], bd[0], bd[1]};
  op.floats = requant_floats(l, n, bd[1], "b");
  l.emit(std::move(op));
}

// QuantizeLinear / DequantizeLinear with one constant scale and zero point (per tensor), between float32 and
// 8-bit values; per-axis and blocked quantization, and other types, are refused.
void lower_quantize(Lowering& l, const onnx::NodeProto& n) {
  const bool q = n.op_type() == "QuantizeLinear";
  if (n.input_size() < 2 || n.input(1).empty()) throw Refusal{"the scale is missing"};
  if (attr_int(n, "block_size", 0) != 0) throw Refusal{"blocked quantization"};
  const std::vector<float> scale = l.constant_floats(n.input(1), "the scale");
  if (scale.size() != 1) throw Refusal{"a scale per axis (" + std::to_string(scale.size()) + " values)"};
  int64_t zp = 0;
  if (n.input_size() > 2 && !n.input(2).empty()) {
    const std::vector<int64_t> z = l.constant_ints(n.input(2), "the zero point");
    if (z.size() != 1) throw Refusal{"a zero point per axis"};
    zp = z[0];
  }
  Op op;
  op.kind = q ? OpKind::kQuantize : OpKind::kDequantize;
  op.in = {l.value(n.input(0), "input", q ? Lowering::kFloat32 : Lowering::k8Bit)};
  op.out = l.output(n, 0, q ? Lowering::k8Bit : Lowering::kFloat32);
  check_zero_point_type(l, n, 2, q ? n.output(0) : n.input(0));
  op.floats = {scale[0], static_cast<float>(zp)};
  l.emit(std::move(op));
}

namespace {

// A unary table over 8-bit values that clamps them to [lo, hi] (Relu or ReLU6 between tensors of one scale, as ONNX
// Runtime's quantizer writes them), read entry by entry: {lo, hi}, else empty. Index k holds the value k (uint8) or
// k - 128 (int8; the index is the byte ^ 0x80). The fusion pass folds such a table into the quantized product that
// alone feeds it (kLookup in dnnl_program.h).
// Not folded: a requantizing table (Q(Clip(DQ(x))) to another scale). As post-ops round, clip, linear, clip,
// linear, round, oneDNN 2.7's int8 convolutions gave garbage, and with a no-op linear put first, +-1 differences in
// 0.2 % of the outputs against the same arithmetic done on the host; the table stays a pass of its own, exact.
std::vector<float> clamp_bounds(const std::vector<int64_t>& table, int32_t in_dtype, int32_t out_dtype) {
  if (table.size() != 256 || in_dtype != out_dtype) return {};
  const int64_t first = in_dtype == TESSERA_DTYPE_INT8 ? -128 : 0;
  const int64_t lo = *std::min_element(table.begin(), table.end()), hi = *std::max_element(table.begin(), table.end());
  for (int64_t k = 0; k < 256; ++k) {
    if (table[static_cast<size_t>(k)] != std::clamp(first + k, lo, hi)) return {};
  }
  return {static_cast<float>(lo), static_cast<float>(hi)};
}

}  // namespace

// ai.tessera.QLinearLookup (X, X2?, Table): a table over 8-bit operands (dnnl_program.h, kLookup).
void lower_lookup(Lowering& l, const onnx::NodeProto& n) {
  if (n.domain() != "ai.tessera") throw Refusal{"op QLinearLookup is not supported"};
  if (n.input_size() != 2 && n.input_size() != 3) throw Refusal{"QLinearLookup takes 2 or 3 inputs"};
  const std::string& table = n.input(n.input_size() - 1);
  if (table.empty() || !l.is_constant(table)) throw Refusal{"the table is not constant"};
  Op op;
  op.kind = OpKind::kLookup;
  for (int i = 0; i < n.input_size(); ++i) op.in.push_back(l.value(n.input(i), "input", Lowering::k8Bit));
  op.out = l.output(n, 0, Lowering::k8Bit);
  if (n.input_size() == 2) {
    op.floats = clamp_bounds(l.constant_ints(table, "the table"), l.model().type(n.input(0)).dtype,
                             l.model().type(n.output(0)).dtype);
  } else {
    // A table of ONNX Runtime's QLinearAdd or QLinearMul (operands and result of one type): its arithmetic, when the
    // table holds it.
    const int32_t dt = l.model().type(table).dtype;
    if (l.model().type(n.input(0)).dtype == dt && l.model().type(n.input(1)).dtype == dt) {
      std::vector<uint8_t> bytes;
      for (int64_t v : l.constant_ints(table, "the table")) bytes.push_back(static_cast<uint8_t>(v));
      if (bytes.size() == 65536) {
        if (auto f = tessera::qadd::checked_form(attr_floats(n, "qlinear_add"), attr_floats(n, "qlinear_mul"),
                                                 dt == TESSERA_DTYPE_INT8, bytes.data())) {
          op.floats = tessera::qadd::form_floats(*f);
        }
      }
    }
  }
  l.emit(std::move(op));
}

void lower_conv_transpose(Lowering& l, const onnx::NodeProto& n) {
  const ConvOperands c = conv_operands(l, n, "ConvTranspose");
  const Dims& xd = c.xd;
  const Dims& yd = c.yd;
  const size_t r = c.r;
  const SpatialAttrs& a = c.a;
  Dims out_pad = attr_ints(n, "output_padding", Dims(r, 0));
  if (out_pad.empty()) out_pad.assign(r, 0);
  Dims out_shape = attr_ints(n, "output_shape");
  if (out_shape.size() == r + 2) out_shape.erase(out_shape.begin(), out_shape.begin() + 2);
  if (out_pad.size() != r || (!out_shape.empty() && out_shape.size() != r)) {
    throw Refusal{"output_padding/output_shape do not match " + std::to_string(r) + " spatial axes"};
  }
  const bool same = a.auto_pad == "SAME_UPPER" || a.auto_pad == "SAME_LOWER";
  Dims pb(r), pe(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t s = a.strides[i], eff = (a.kernel[i] - 1) * a.dil[i] + 1;
    if (out_pad[i] < 0 || out_pad[i] >= std::max(s, a.dil[i])) {
      throw Refusal{"ConvTranspose with output_padding " + std::to_string(out_pad[i]) + " >= stride " +
                    std::to_string(s) + " on spatial axis " + std::to_string(i)};
    }
    const int64_t full = s * (xd[i + 2] - 1) + out_pad[i] + eff;
    if (!out_shape.empty() || same) {  // the split the spec (and the native kernel) use
      const int64_t total = full - (!out_shape.empty() ? out_shape[i] : xd[i + 2] * s);
      const int64_t half = floor_div(total, 2);
      pb[i] = a.auto_pad == "SAME_UPPER" ? half : total - half;
    } else {
      pb[i] = a.auto_pad == "VALID" ? 0 : a.pads[i];
    }
    if (pb[i] < 0) throw Refusal{"ConvTranspose whose output_shape needs a negative begin pad"};
    // Whatever remains of the output span is the end pad; output_padding
    // makes it negative, which oneDNN reads as extra output positions.
    pe[i] = s * (xd[i + 2] - 1) + eff - yd[i + 2] - pb[i];
  }
  emit_conv(l, n, OpKind::kDeconv, c, pb, pe);
}

// A nearest Resize (or Upsample) over the spatial dims of a 3-D to 5-D input, with constant scales or sizes: each
// output element copies the input element native picks (ops/resize_coords.h), as the index tables of a kResize op.
// Data movement, so 8-bit values too (the QDQ pass's Resize of quantized values). A bilinear one of a 4-D float
// input over its last two dims, with the neighbours and weights native's kernel computes as ONNX Runtime does
// (ops/resize_coords.h), so that the result is native's to the bit (a QDQ model requantizes it): the same kResize
// op with weights. Cubic mode, linear modes on other dims or transforms, antialias, the `axes` and
// keep_aspect_ratio_policy attributes (opset 18), tf_crop_and_resize and a batch or channel dim that changes (or
// whose elements the transform moves) are refused (native runs them).
void lower_resize(Lowering& l, const onnx::NodeProto& n) {
  namespace rs = tessera::resize;
  const std::string& name = n.op_type();
  const bool legacy = name == "Upsample" || l.opset() < 11;  // (X, scales), asymmetric, Upsample's rounding
  const std::string mode = attr_string(n, "mode", "nearest");
  const bool linear = mode == "linear" || (legacy && mode == "bilinear");
  if (mode != "nearest" && !linear) throw Refusal{name + " mode " + mode + " (only nearest and bilinear)"};
  if (has_attr(n, "axes")) throw Refusal{name + " with axes"};
  if (attr_string(n, "keep_aspect_ratio_policy", "stretch") != "stretch") {
    throw Refusal{name + " with keep_aspect_ratio_policy " + attr_string(n, "keep_aspect_ratio_policy", "")};
  }
  if (linear && attr_int(n, "antialias", 0) != 0) throw Refusal{name + " with antialias"};
  rs::Coord coord = rs::Coord::kAsymmetric;
  rs::Nearest rounding = rs::Nearest::kSimple;
  if (!legacy) {
    const std::string c = attr_string(n, "coordinate_transformation_mode", "half_pixel");
    const std::string r = attr_string(n, "nearest_mode", "round_prefer_floor");
    if (!rs::parse_coord(c, &coord) || coord == rs::Coord::kTfCropAndResize ||
        (linear && !rs::linear_coord_like_onnx_runtime(coord))) {
      throw Refusal{name + " " + mode + " with coordinate_transformation_mode " + c};
    }
    if (!rs::parse_nearest(r, &rounding)) throw Refusal{name + " with nearest_mode " + r};
  }
  // Bilinear weights are float (8-bit values would need ONNX Runtime's integer kernel).
  const uint32_t types = linear ? Lowering::kFloat32 : Lowering::kFloat32 | Lowering::k8Bit;
  const int32_t x = l.value(n.input(0), "input", types);
  const Dims xd = l.dims(x);
  const int32_t y = l.output(n, 0, types);
  const Dims yd = l.dims(y);
  if (xd.size() < 3 || xd.size() > 5 || yd.size() != xd.size()) throw Refusal{name + " of a rank other than 3-5"};
  if (linear && xd.size() != 4) throw Refusal{name + " " + mode + " of a rank other than 4"};
  // The scale of each axis in the coordinate transform: the given scale (a float), else output / input size.
  std::vector<double> scale(xd.size());
  std::vector<float> given;
  const int scales_at = name == "Upsample" ? (l.opset() < 9 ? -1 : 1) : legacy ? 1 : 2;
  if (scales_at < 0) {
    given = attr_floats(n, "scales");
  } else if (n.input_size() > scales_at && !n.input(scales_at).empty()) {
    given = l.constant_floats(n.input(scales_at), "scales");
  }
  const bool sizes = !legacy && n.input_size() > 3 && !n.input(3).empty();
  if (sizes) (void)l.constant_ints(n.input(3), "sizes");  // constant, or refused; the output dims are its values
  if (!sizes && given.size() != xd.size()) throw Refusal{name + " scales of length " + std::to_string(given.size())};
  for (size_t d = 0; d < xd.size(); ++d) {
    scale[d] = sizes ? static_cast<double>(yd[d]) / static_cast<double>(xd[d]) : static_cast<double>(given[d]);
    if (d < 2 && (yd[d] != xd[d] || (linear && scale[d] != 1.0)))
      throw Refusal{name + " that resizes the batch or channel dim"};
  }
  Op op;
  op.kind = OpKind::kResize;
  op.in = {x};
  op.out = y;
  op.ints = {static_cast<int64_t>(xd.size())};
  if (linear) {
    if (xd[2] > (int64_t{1} << 30) || xd[3] > (int64_t{1} << 30)) throw Refusal{name + " of an axis over 2^30"};
    for (size_t d = 2; d < 4; ++d) {
      const rs::LinearAxis t = rs::linear_axis_like_onnx_runtime(coord, xd[d], yd[d], sizes, scale[d]);
      op.ints.insert(op.ints.end(), t.i1.begin(), t.i1.end());
      op.ints.insert(op.ints.end(), t.i2.begin(), t.i2.end());
      op.floats.insert(op.floats.end(), t.d1.begin(), t.d1.end());
      op.floats.insert(op.floats.end(), t.d2.begin(), t.d2.end());
    }
    l.emit(std::move(op));
    return;
  }
  for (size_t d = 0; d < xd.size(); ++d) {
    for (int64_t o = 0; o < yd[d]; ++o) {
      const double at = rs::source_coordinate(coord, o, scale[d], static_cast<double>(xd[d]));
      op.ints.push_back(rs::nearest_index(rounding, at, scale[d], xd[d]));
      // The transform applies to every axis: tf_half_pixel_for_nn with ceil moves even an axis of scale 1.
      if (d < 2 && op.ints.back() != o) throw Refusal{name + " that moves the batch or channel dim"};
    }
  }
  l.emit(std::move(op));
}

void lower_pool(Lowering& l, const onnx::NodeProto& n) {
  const bool is_max = n.op_type() == "MaxPool";
  // Max pooling of 8-bit values too (the QDQ pass's MaxPool of quantized values); averages stay float.
  const uint32_t types = is_max ? Lowering::kFloat32 | Lowering::k8Bit : Lowering::kFloat32;
  const int32_t x = l.value(n.input(0), "input", types);
  const Dims xd = l.dims(x);
  check_spatial_rank(xd, n.op_type().c_str());
  const int32_t y = l.output(n, 0, types);
  const Dims yd = l.dims(y);
  const size_t r = xd.size() - 2;
  if (!has_attr(n, "kernel_shape")) throw Refusal{"kernel_shape is missing"};
  if (!is_max && has_attr(n, "dilations")) {
    for (int64_t d : attr_ints(n, "dilations")) {
      if (d != 1) throw Refusal{"AveragePool with dilations"};
    }
  }
  if (is_max && attr_int(n, "storage_order", 0) != 0 && n.output_size() > 1) {
    throw Refusal{"MaxPool with column-major indices"};
  }
  SpatialAttrs a = read_spatial(n, r, {});
  if (yd.size() != xd.size()) throw Refusal{"output rank differs from the input's"};
  check_extents(xd, 2, "input");
  check_extents(yd, 2, "output");
  const bool include_pad = !is_max && attr_int(n, "count_include_pad", 0) != 0;
  Dims pb(r), pe(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t explicit_end;
    window_pads(a, i, xd[i + 2], yd[i + 2], &pb[i], &pe[i], &explicit_end);
    if (pe[i] < 0) throw Refusal{"pooling window past the input (negative end pad)"};
    if (include_pad && pe[i] > explicit_end) {
      throw Refusal{"AveragePool with ceil_mode and count_include_pad whose last window runs past the end pad "
                    "(oneDNN would count those positions)"};
    }
    // oneDNN requires every window to touch the input.
    if (pb[i] >= (a.kernel[i] - 1) * a.dil[i] + 1 || pe[i] >= (a.kernel[i] - 1) * a.dil[i] + 1) {
      throw Refusal{"pads as large as the pooling window on spatial axis " + std::to_string(i)};
    }
  }
  Op op;
  op.kind = OpKind::kPool;
  op.alg = is_max ? dnnl_pooling_max : include_pad ? dnnl_pooling_avg_include_padding : dnnl_pooling_avg_exclude_padding;
  op.in = {x};
  op.out = y;
  op.ints.push_back(static_cast<int64_t>(r));
  for (const Dims* d : {&a.kernel, &a.strides, &a.dil, &pb, &pe}) op.ints.insert(op.ints.end(), d->begin(), d->end());
  l.emit(std::move(op));
}

void lower_global_pool(Lowering& l, const onnx::NodeProto& n) {
  const int32_t x = l.value(n.input(0));
  const Dims xd = l.dims(x);
  check_spatial_rank(xd, n.op_type().c_str());
  const int32_t y = l.output(n);
  const size_t r = xd.size() - 2;
  Op op;
  op.kind = OpKind::kPool;
  op.alg = n.op_type() == "GlobalMaxPool" ? dnnl_pooling_max : dnnl_pooling_avg_exclude_padding;
  op.in = {x};
  op.out = y;
  op.ints.push_back(static_cast<int64_t>(r));
  op.ints.insert(op.ints.end(), xd.begin() + 2, xd.end());  // kernel = the whole plane
  op.ints.insert(op.ints.end(), r, 1);                      // strides
  op.ints.insert(op.ints.end(), r, 1);                      // dilations
  op.ints.insert(op.ints.end(), 2 * r, 0);                  // pads
  l.emit(std::move(op));
}

void lower_batch_norm(Lowering& l, const onnx::NodeProto& n) {
  if (attr_int(n, "training_mode", 0) != 0) throw Refusal{"BatchNormalization in training mode"};
  if (l.opset() < 9 && attr_int(n, "spatial", 1) == 0) throw Refusal{"BatchNormalization with spatial=0"};
  if (n.input_size() != 5) throw Refusal{"BatchNormalization with " + std::to_string(n.input_size()) + " inputs"};
  const int32_t x = l.value(n.input(0));
  if (l.dims(x).size() < 2 || l.dims(x).size() > 5) {
    throw Refusal{"BatchNormalization of a rank-" + std::to_string(l.dims(x).size()) + " input (oneDNN takes 2 to 5)"};
  }
  Op op;
  op.kind = OpKind::kBatchNorm;
  op.in = {x};
  const char* roles[] = {"scale", "bias", "mean", "variance"};
  for (int k = 1; k < 5; ++k) op.in.push_back(l.value(n.input(k), roles[k - 1]));
  op.out = l.output(n);
  op.floats = {attr_float(n, "epsilon", 1e-5f)};
  l.emit(std::move(op));
}

void lower_lrn(Lowering& l, const onnx::NodeProto& n) {
  const int64_t size = attr_int(n, "size", 0);
  if (size < 1) throw Refusal{"LRN without a positive size"};
  // ONNX's window is [c - floor((size-1)/2), c + ceil((size-1)/2)]; oneDNN's
  // is centred, so the two agree only for odd sizes.
  if (size % 2 == 0) throw Refusal{"LRN with an even size " + std::to_string(size) + " (oneDNN's window is centred)"};
  const int32_t x = l.value(n.input(0));
  if (l.dims(x).size() < 3 || l.dims(x).size() > 5) {
    throw Refusal{"LRN of a rank-" + std::to_string(l.dims(x).size()) + " input (oneDNN takes 3 to 5)"};
  }
  Op op;
  op.kind = OpKind::kLrn;
  op.in = {x};
  op.out = l.output(n);
  op.ints = {size};
  op.floats = {attr_float(n, "alpha", 1e-4f), attr_float(n, "beta", 0.75f), attr_float(n, "bias", 1.f)};
  l.emit(std::move(op));
}

}  // namespace tessera_dnnl
