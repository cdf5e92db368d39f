// Lowerings of the windowed ops: Conv, ConvTranspose, MaxPool, AveragePool,
// GlobalAveragePool, GlobalMaxPool, 2-D (NCHW) and 1-D (NCW, run as 2-D with
// a height of 1). Input: one ONNX node. Output: XNNPACK nodes on NHWC
// tensors, filters transposed at load (OIHW -> OHWI, depthwise [M,1,kh,kw] ->
// [1,kh,kw,M], ConvTranspose's [C,M/g,kh,kw] -> [M,kh,kw,C/g]). Method: read
// the window attributes (a 1-D window gets a unit height), resolve pads
// (explicit, or auto_pad from the static input size), map onto XNNPACK's
// parameters, and let emit() check that XNNPACK's output size is the one the
// model declares.
#include <algorithm>

#include "lowering.h"

namespace tessera_xnn {

using tessera_plugin::attr_int;
using tessera_plugin::attr_ints;
using tessera_plugin::attr_string;
using tessera_plugin::has_attr;

namespace {

std::string ints_str(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

// Dims of a window op's operand as 2-D: [N,C,W] -> [N,C,1,W].
// Window sizes, strides, dilations, pads and spatial dims beyond 2^30 are refused: XNNPACK keeps them in 32 bits,
// and the pad arithmetic here (products of two, sums of a few) then stays within int64.
void check_extents(const std::vector<int64_t>& v, size_t from, const std::string& what) {
  for (size_t i = from; i < v.size(); ++i) {
    if (v[i] > (int64_t{1} << 30) || v[i] < -(int64_t{1} << 30)) refuse(what + " " + ints_str(v) + " beyond 2^30");
  }
}

Dims as_2d(const Dims& d) {
  check_extents(d, 2, "spatial dims");
  return d.size() == 3 ? Dims{d[0], d[1], 1, d[2]} : d;
}

// One value per spatial dim (default `def`), as two: a 1-D value gets `unit`
// for the height.
std::vector<int64_t> spatial_attr(const onnx::NodeProto& n, const char* name, size_t spatial, int64_t def,
                                  int64_t unit) {
  std::vector<int64_t> v = attr_ints(n, name, std::vector<int64_t>(spatial, def));
  if (v.size() != spatial)
    refuse(std::string(name) + " " + ints_str(v) + " for " + std::to_string(spatial) + "-D windows");
  check_extents(v, 0, name);
  if (spatial == 1) v.insert(v.begin(), unit);
  return v;
}

// The input of a window op: 2-D (rank 4) or 1-D (rank 3), or a refusal;
// float32 unless `quantized` (then 8-bit).
const Dims& window_input(Lowering& L, const onnx::NodeProto& n, bool quantized = false) {
  if (n.input_size() < 1 || n.output_size() < 1) refuse("missing input or output");
  const Dims& x = quantized ? L.q_dims(n.input(0)) : L.float_dims(n.input(0));
  if (x.size() != 3 && x.size() != 4) {
    refuse(n.op_type() + " on a rank-" + std::to_string(x.size()) + " input (only 1-D and 2-D windows)");
  }
  return x;
}

// `name` as XNNPACK's 4-D NHWC operand (an NWC value gets a unit height).
int32_t input_2d(Lowering& L, const std::string& name) {
  int32_t t = L.input(name, kNhwc);
  const Dims& d = L.dims(name);
  if (d.size() == 4) return t;
  int32_t r = L.temp({d[0], 1, d[2], d[1]}, name);
  L.emit(Op::kReshape, {t}, r);
  return r;
}

// Emits the window op writing value `y`, through a 4-D temporary for 1-D.
void emit_2d(Lowering& L, Op op, std::vector<int32_t> ins, const std::string& y, std::vector<int64_t> ints) {
  const Dims& yd = L.dims(y);
  if (yd.size() == 4) return L.emit(op, std::move(ins), L.output(y, kNhwc), std::move(ints), {-kInf, kInf});
  int32_t t = L.temp({yd[0], 1, yd[2], yd[1]}, y);
  L.emit(op, std::move(ins), t, std::move(ints), {-kInf, kInf});
  L.emit(Op::kReshape, {t}, L.output(y, kNhwc));
}

std::vector<int64_t> window_ints(const Window2d& w) {
  return {w.pad_begin[0], w.pad_end[1], w.pad_end[0], w.pad_begin[1],
          w.kernel[0],    w.kernel[1],  w.stride[0],  w.stride[1]};
}

// True when every window covers at least one input pixel (a window entirely
// in the padding has no ONNX value XNNPACK reproduces).
bool windows_touch_input(int64_t in, int64_t pad, int64_t k, int64_t s, int64_t d, int64_t out) {
  for (int64_t o = 0; o < out; ++o) {
    bool any = false;
    for (int64_t j = 0; j < k && !any; ++j) {
      int64_t i = o * s + j * d - pad;
      any = i >= 0 && i < in;
    }
    if (!any) return false;
  }
  return true;
}

// ceil_mode: XNNPACK rounds the output size down; extra end padding (which
// pooling ignores) makes it produce the model's rounded-up size.
void fit_output(Window2d& w, const Dims& x, const Dims& y) {
  for (int a = 0; a < 2; ++a) {
    int64_t in = x[2 + a], out = y[2 + a];
    int64_t eff = (w.kernel[a] - 1) * w.dilation[a] + 1;
    int64_t need = (out - 1) * w.stride[a] + eff - (in + w.pad_begin[a] + w.pad_end[a]);
    if (need > 0 && need < w.stride[a]) w.pad_end[a] += need;
  }
}

void check_windows_touch_input(const Window2d& w, const Dims& x, const Dims& y) {
  for (int a = 0; a < 2; ++a) {
    if (!windows_touch_input(x[2 + a], w.pad_begin[a], w.kernel[a], w.stride[a], w.dilation[a], y[2 + a])) {
      refuse("a pooling window lies entirely in the padding");
    }
  }
}

}  // namespace

Window2d window_2d(const onnx::NodeProto& n, const Dims& x, const int64_t* kernel) {
  const size_t spatial = x.size() - 2;
  const Dims x2 = as_2d(x);
  Window2d w;
  std::vector<int64_t> k;
  if (kernel) {
    k.assign(kernel, kernel + 2);
    if (has_attr(n, "kernel_shape") && spatial_attr(n, "kernel_shape", spatial, 1, 1) != k) {
      refuse("kernel_shape " + ints_str(attr_ints(n, "kernel_shape")) + " differs from the weights'");
    }
  } else {
    if (!has_attr(n, "kernel_shape")) refuse("no kernel_shape");
    k = spatial_attr(n, "kernel_shape", spatial, 1, 1);
  }
  std::vector<int64_t> s = spatial_attr(n, "strides", spatial, 1, 1), d = spatial_attr(n, "dilations", spatial, 1, 1);
  for (int a = 0; a < 2; ++a) {
    if (k[static_cast<size_t>(a)] < 1 || s[static_cast<size_t>(a)] < 1 || d[static_cast<size_t>(a)] < 1) {
      refuse("kernel_shape, strides or dilations below 1");
    }
    w.kernel[a] = k[static_cast<size_t>(a)];
    w.stride[a] = s[static_cast<size_t>(a)];
    w.dilation[a] = d[static_cast<size_t>(a)];
  }
  std::string auto_pad = attr_string(n, "auto_pad", "NOTSET");
  if (auto_pad == "NOTSET") {
    std::vector<int64_t> p = attr_ints(n, "pads", std::vector<int64_t>(2 * spatial, 0));
    if (p.size() != 2 * spatial) refuse("pads " + ints_str(p) + " for " + std::to_string(spatial) + "-D windows");
    for (int64_t v : p) {
      if (v < 0) refuse("negative pads " + ints_str(p));
    }
    check_extents(p, 0, "pads");
    if (spatial == 1) p = {0, p[0], 0, p[1]};
    w.pad_begin[0] = p[0], w.pad_begin[1] = p[1], w.pad_end[0] = p[2], w.pad_end[1] = p[3];
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (int a = 0; a < 2; ++a) {
      int64_t in = x2[2 + static_cast<size_t>(a)];
      int64_t out = (in + w.stride[a] - 1) / w.stride[a];
      int64_t total = std::max<int64_t>(0, (out - 1) * w.stride[a] + (w.kernel[a] - 1) * w.dilation[a] + 1 - in);
      w.pad_begin[a] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      w.pad_end[a] = total - w.pad_begin[a];
    }
  } else if (auto_pad != "VALID") {
    refuse("auto_pad " + auto_pad);
  }
  return w;
}

namespace {

// What Conv and ConvTranspose check alike: X (a window input), constant
// weights of X's rank, an optional constant bias, the group count.
struct ConvArgs {
  const Dims& x;
  const Dims& w;
  bool has_bias;
  int64_t group;
};

// Conv's operands (X, W, B at 0, 1, 2) or QLinearConv's (X, W, B at 0, 3, 8;
// 8-bit X and W, an int32 B).
ConvArgs conv_args(Lowering& L, const onnx::NodeProto& n, const std::string& op, bool quantized = false) {
  const Dims& x = window_input(L, n, quantized);
  const int wi = quantized ? 3 : 1, bi = quantized ? 8 : 2;
  if (n.input_size() <= wi || n.output_size() != 1) refuse(op + " needs X and W");
  if (!L.is_constant(n.input(wi))) refuse("weights not constant");
  const Dims& w = quantized ? L.q_dims(n.input(wi)) : L.float_dims(n.input(wi));
  if (w.size() != x.size()) refuse("weights of rank " + std::to_string(w.size()));
  bool has_bias = n.input_size() > bi && !n.input(bi).empty();
  if (has_bias && !L.is_constant(n.input(bi))) refuse("bias not constant");
  if (has_bias && quantized && L.model().type(n.input(bi)).dtype != TESSERA_DTYPE_INT32) refuse("bias not int32");
  return ConvArgs{x, w, has_bias, attr_int(n, "group", 1)};
}

// What a convolution's operands become: the window, the input, the filter's
// layout and the XNNPACK op with its parameters.
struct ConvPlan {
  Op op = Op::kConv2d;
  Transform filter = Transform::kFilter;
  Dims filter_dims;
  std::vector<int64_t> ints;
};

ConvPlan plan_conv(Lowering& L, const onnx::NodeProto& n, const ConvArgs& args, const std::string& bias_name) {
  const Dims& x = args.x;
  const Dims& w = args.w;
  const int64_t group = args.group;
  const int64_t c = x[1], m = w[0];
  if (group < 1 || c % group != 0 || m % group != 0) refuse("Conv with group count not dividing channels");
  if (w[1] != c / group) refuse("weights " + dims_str(w) + " do not match " + std::to_string(c) + " input channels");
  if (args.has_bias && L.model().type(bias_name).dims != Dims{m}) refuse("bias is not [" + std::to_string(m) + "]");
  const Dims w2 = as_2d(w);
  const int64_t kernel[2] = {w2[2], w2[3]};
  Window2d win = window_2d(n, x, kernel);
  ConvPlan p;
  p.ints = window_ints(win);
  p.ints.insert(p.ints.end(), {win.dilation[0], win.dilation[1]});
  if (group > 1 && group == c && w[1] == 1) {  // depthwise, M / C filters per channel
    p.op = Op::kDepthwiseConv2d;
    p.filter = Transform::kDepthwise;
    p.filter_dims = {1, w2[2], w2[3], m};
    p.ints.insert(p.ints.end(), {m / c, c});
  } else {
    p.filter_dims = {m, w2[2], w2[3], w[1]};
    p.ints.insert(p.ints.end(), {group, c / group, m / group});
  }
  return p;
}

}  // namespace

void lower_conv(Lowering& L, const onnx::NodeProto& n) {
  const ConvArgs args = conv_args(L, n, "Conv");
  if (args.has_bias) L.float_dims(n.input(2));
  const ConvPlan p = plan_conv(L, n, args, args.has_bias ? n.input(2) : "");
  std::vector<int32_t> ins{input_2d(L, n.input(0)), L.constant(p.filter, {n.input(1)}, p.filter_dims)};
  if (args.has_bias) ins.push_back(L.constant(Transform::kCopy, {n.input(2)}, {args.w[0]}));
  emit_2d(L, p.op, ins, n.output(0), p.ints);
}

// QLinearConv (x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B?) as
// XNNPACK's int8 convolution: 8-bit X and Y (uint8 ones held as int8, see
// program.h), constant weights that are int8 with zero point 0 or uint8 with
// zero point 128 (int8 after the flip), a scale per tensor or per output
// channel, an int32 bias. XNNPACK requantizes as ONNX Runtime and native do:
// float(sum) * (x_scale * w_scale / y_scale), rounded half to even, plus the
// zero point, saturated.
void lower_qlinear_conv(Lowering& L, const onnx::NodeProto& n) {
  if (n.input_size() < 8) refuse("QLinearConv needs 8 or 9 inputs");
  const ConvArgs args = conv_args(L, n, "QLinearConv", true);
  const std::string &x = n.input(0), &y = n.output(0);
  L.q_dims(y);
  const int64_t m = args.w[0];
  const ConvPlan p = plan_conv(L, n, args, args.has_bias ? n.input(8) : "");
  const QuantScales q = product_scales(L, n, m, "w", true);
  const int32_t channel_dim = p.op == Op::kDepthwiseConv2d ? 3 : 0;
  std::vector<int32_t> ins{input_2d(L, x),
                           L.qconstant(p.filter, n.input(3), p.filter_dims, DType::kQC8, q.weights, channel_dim)};
  if (args.has_bias) ins.push_back(L.qconstant(Transform::kCopy, n.input(8), {m}, DType::kQC32, q.bias));
  emit_2d(L, p.op, ins, y, p.ints);
}

void lower_conv_transpose(Lowering& L, const onnx::NodeProto& n) {
  const ConvArgs args = conv_args(L, n, "ConvTranspose");
  const Dims& x = args.x;
  const Dims& w = args.w;
  const bool has_bias = args.has_bias;
  const int64_t group = args.group;
  const int64_t c = x[1];
  if (group < 1 || c % group != 0 || w[0] != c) refuse("ConvTranspose with group count not dividing channels");
  const int64_t m = w[1] * group;
  if (has_bias && L.float_dims(n.input(2)) != Dims{m}) refuse("bias is not [" + std::to_string(m) + "]");
  const size_t spatial = x.size() - 2;
  const Dims x2 = as_2d(x), w2 = as_2d(w);
  std::vector<int64_t> s = spatial_attr(n, "strides", spatial, 1, 1), d = spatial_attr(n, "dilations", spatial, 1, 1);
  std::vector<int64_t> adj = spatial_attr(n, "output_padding", spatial, 0, 0);
  if (has_attr(n, "kernel_shape") &&
      spatial_attr(n, "kernel_shape", spatial, 1, 1) != std::vector<int64_t>{w2[2], w2[3]}) {
    refuse("kernel_shape differs from the weights'");
  }
  for (size_t a = 0; a < 2; ++a) {
    if (s[a] < 1 || d[a] < 1) refuse("strides or dilations below 1");
  }
  // Pads: explicit, or derived (ONNX's formulas) from output_shape / auto_pad.
  int64_t pb[2] = {0, 0}, pe[2] = {0, 0};
  std::string auto_pad = attr_string(n, "auto_pad", "NOTSET");
  std::vector<int64_t> out_shape = attr_ints(n, "output_shape");
  if (out_shape.size() > spatial)
    out_shape.erase(out_shape.begin(), out_shape.end() - static_cast<std::ptrdiff_t>(spatial));
  if (!out_shape.empty() || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    if (!out_shape.empty() && out_shape.size() != spatial) refuse("output_shape " + ints_str(out_shape));
    if (!out_shape.empty() && spatial == 1) out_shape.insert(out_shape.begin(), 1);
    for (size_t a = 0; a < 2; ++a) {
      int64_t target = out_shape.empty() ? x2[2 + a] * s[a] : out_shape[a];
      int64_t total = s[a] * (x2[2 + a] - 1) + adj[a] + (w2[2 + a] - 1) * d[a] + 1 - target;
      if (total < 0) refuse("ConvTranspose output larger than its input can produce (negative padding)");
      pb[a] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pe[a] = total - pb[a];
    }
  } else if (auto_pad == "NOTSET") {
    std::vector<int64_t> p = attr_ints(n, "pads", std::vector<int64_t>(2 * spatial, 0));
    if (p.size() != 2 * spatial) refuse("pads " + ints_str(p));
    for (int64_t v : p) {
      if (v < 0) refuse("negative pads " + ints_str(p));
    }
    check_extents(p, 0, "pads");
    if (spatial == 1) p = {0, p[0], 0, p[1]};
    pb[0] = p[0], pb[1] = p[1], pe[0] = p[2], pe[1] = p[3];
  } else if (auto_pad != "VALID") {
    refuse("auto_pad " + auto_pad);
  }
  for (size_t a = 0; a < 2; ++a) {
    if (adj[a] < 0 || adj[a] >= s[a]) refuse("output_padding " + ints_str(adj) + " not below the strides");
  }
  int32_t in = input_2d(L, n.input(0));
  int32_t filter = L.constant(Transform::kDeconv, {n.input(1)}, {m, w2[2], w2[3], c / group}, 1.f, {group});
  std::vector<int32_t> ins{in, filter};
  if (has_bias) ins.push_back(L.constant(Transform::kCopy, {n.input(2)}, {m}));
  emit_2d(L, Op::kDeconv2d, ins, n.output(0),
          {pb[0], pe[1], pe[0], pb[1], adj[0], adj[1], w2[2], w2[3], s[0], s[1], d[0], d[1], group, c / group, w[1]});
}

void lower_max_pool(Lowering& L, const onnx::NodeProto& n) {
  const Dims& x = window_input(L, n);
  if (n.output_size() > 1 && !n.output(1).empty()) refuse("MaxPool with an Indices output");
  const Dims y2 = as_2d(L.float_dims(n.output(0))), x2 = as_2d(x);
  if (y2.size() != 4) refuse("output rank differs from the input's");
  Window2d w = window_2d(n, x, nullptr);
  if (attr_int(n, "ceil_mode", 0)) fit_output(w, x2, y2);
  if (w.kernel[0] * w.kernel[1] < 2) refuse("1x1 pooling window (XNNPACK refuses it)");
  check_windows_touch_input(w, x2, y2);
  std::vector<int64_t> ints = window_ints(w);
  ints.insert(ints.end(), {w.dilation[0], w.dilation[1]});
  emit_2d(L, Op::kMaxPool2d, {input_2d(L, n.input(0))}, n.output(0), ints);
}

void lower_average_pool(Lowering& L, const onnx::NodeProto& n) {
  const Dims& x = window_input(L, n);
  const size_t spatial = x.size() - 2;
  if (spatial_attr(n, "dilations", spatial, 1, 1) != std::vector<int64_t>{1, 1}) refuse("AveragePool with dilations");
  const Dims y2 = as_2d(L.float_dims(n.output(0))), x2 = as_2d(x);
  if (y2.size() != 4) refuse("output rank differs from the input's");
  Window2d w = window_2d(n, x, nullptr);
  if (w.kernel[0] * w.kernel[1] < 2) refuse("1x1 pooling window (XNNPACK refuses it)");
  // XNNPACK averages over the pixels inside the input (count_include_pad=0),
  // so ceil_mode's partial windows come out right with extra end padding;
  // count_include_pad=1 becomes an explicit zero Pad before an unpadded pool
  // (and ceil_mode there is refused by the output size check).
  const bool include_pad = attr_int(n, "count_include_pad", 0) != 0;
  if (attr_int(n, "ceil_mode", 0) && !include_pad) fit_output(w, x2, y2);
  check_windows_touch_input(w, x2, y2);
  bool any_pad = w.pad_begin[0] || w.pad_begin[1] || w.pad_end[0] || w.pad_end[1];
  int32_t in = input_2d(L, n.input(0));
  if (include_pad && any_pad) {
    Dims padded{x2[0], x2[2] + w.pad_begin[0] + w.pad_end[0], x2[3] + w.pad_begin[1] + w.pad_end[1], x2[1]};
    int32_t t = L.temp(padded);
    L.emit(Op::kConstantPad, {in}, t, {0, w.pad_begin[0], w.pad_begin[1], 0, 0, w.pad_end[0], w.pad_end[1], 0}, {0.f});
    in = t;
    w.pad_begin[0] = w.pad_begin[1] = w.pad_end[0] = w.pad_end[1] = 0;
  }
  emit_2d(L, Op::kAvgPool2d, {in}, n.output(0), window_ints(w));
}

void lower_global_average_pool(Lowering& L, const onnx::NodeProto& n) {
  window_input(L, n);
  emit_2d(L, Op::kGlobalAvgPool2d, {input_2d(L, n.input(0))}, n.output(0), {});
}

void lower_global_max_pool(Lowering& L, const onnx::NodeProto& n) {
  const Dims x2 = as_2d(window_input(L, n));
  int32_t in = input_2d(L, n.input(0));
  if (x2[2] * x2[3] == 1) return L.emit(Op::kReshape, {in}, L.output(n.output(0), kNhwc));
  emit_2d(L, Op::kMaxPool2d, {in}, n.output(0), {0, 0, 0, 0, x2[2], x2[3], 1, 1, 1, 1});
}

}  // namespace tessera_xnn
