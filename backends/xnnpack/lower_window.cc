// Lowerings of the windowed ops: Conv, ConvTranspose, MaxPool, AveragePool,
// GlobalAveragePool, GlobalMaxPool. Input: one ONNX node (NCHW). Output:
// XNNPACK nodes on NHWC tensors, filters transposed at load (OIHW -> OHWI,
// depthwise [M,1,kh,kw] -> [1,kh,kw,M], ConvTranspose's [C,M/g,kh,kw] ->
// [M,kh,kw,C/g]). Method: resolve pads (explicit, or auto_pad from the static
// input size), map onto XNNPACK's parameters, and let emit() check that
// XNNPACK's output size is the one the model declares.
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

// A 2-D attribute (strides, dilations...) with default 1.
std::vector<int64_t> pair_attr(const onnx::NodeProto& n, const char* name) {
  std::vector<int64_t> v = attr_ints(n, name, {1, 1});
  if (v.size() != 2) refuse(std::string(name) + " " + ints_str(v) + " (only 2-D windows)");
  for (int64_t x : v) {
    if (x < 1) refuse(std::string(name) + " " + ints_str(v));
  }
  return v;
}

// The 4-D input of a 2-D window op, or a refusal that says why not.
const Dims& input_4d(Lowering& L, const onnx::NodeProto& n) {
  if (n.input_size() < 1 || n.output_size() < 1) refuse("missing input or output");
  const Dims& x = L.float_dims(n.input(0));
  if (x.size() != 4) {
    refuse(n.op_type() + " on a rank-" + std::to_string(x.size()) + " input (only 2-D, NCHW)");
  }
  return x;
}

std::vector<int64_t> window_ints(const Window2d& w) {
  return {w.pad_begin[0], w.pad_end[1], w.pad_end[0], w.pad_begin[1],
          w.kernel[0],    w.kernel[1],  w.stride[0],  w.stride[1]};
}

// True when every window of a max pool covers at least one input pixel (a
// window entirely in the padding has no ONNX value XNNPACK reproduces).
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

// ceil_mode: XNNPACK rounds the output size down; extra end padding makes it
// produce the model's (rounded up) size. Only for max pooling, where padding
// never wins.
void fit_output(Window2d& w, const Dims& x, const Dims& y, bool extend) {
  for (int a = 0; a < 2; ++a) {
    int64_t in = x[2 + a], out = y[2 + a];
    int64_t eff = (w.kernel[a] - 1) * w.dilation[a] + 1;
    int64_t need = (out - 1) * w.stride[a] + eff - (in + w.pad_begin[a] + w.pad_end[a]);
    if (need > 0 && extend && need < w.stride[a]) w.pad_end[a] += need;
  }
}

}  // namespace

Window2d window_2d(const onnx::NodeProto& n, int64_t in_h, int64_t in_w, const int64_t* kernel) {
  Window2d w;
  std::vector<int64_t> k;
  if (kernel) {
    k = {kernel[0], kernel[1]};
    if (has_attr(n, "kernel_shape") && attr_ints(n, "kernel_shape") != k) {
      refuse("kernel_shape " + ints_str(attr_ints(n, "kernel_shape")) + " differs from the weights' " + ints_str(k));
    }
  } else {
    k = attr_ints(n, "kernel_shape");
    if (k.size() != 2) refuse("kernel_shape " + ints_str(k) + " (only 2-D windows)");
  }
  std::vector<int64_t> s = pair_attr(n, "strides"), d = pair_attr(n, "dilations");
  const int64_t in[2] = {in_h, in_w};
  for (int a = 0; a < 2; ++a) {
    if (k[static_cast<size_t>(a)] < 1) refuse("kernel_shape " + ints_str(k));
    w.kernel[a] = k[static_cast<size_t>(a)];
    w.stride[a] = s[static_cast<size_t>(a)];
    w.dilation[a] = d[static_cast<size_t>(a)];
  }
  std::string auto_pad = attr_string(n, "auto_pad", "NOTSET");
  if (auto_pad == "NOTSET") {
    std::vector<int64_t> p = attr_ints(n, "pads", {0, 0, 0, 0});
    if (p.size() != 4) refuse("pads " + ints_str(p) + " (only 2-D windows)");
    for (int64_t v : p) {
      if (v < 0) refuse("negative pads " + ints_str(p));
    }
    w.pad_begin[0] = p[0], w.pad_begin[1] = p[1], w.pad_end[0] = p[2], w.pad_end[1] = p[3];
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (int a = 0; a < 2; ++a) {
      int64_t out = (in[a] + w.stride[a] - 1) / w.stride[a];
      int64_t total = std::max<int64_t>(0, (out - 1) * w.stride[a] + (w.kernel[a] - 1) * w.dilation[a] + 1 - in[a]);
      w.pad_begin[a] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      w.pad_end[a] = total - w.pad_begin[a];
    }
  } else if (auto_pad != "VALID") {
    refuse("auto_pad " + auto_pad);
  }
  return w;
}

void lower_conv(Lowering& L, const onnx::NodeProto& n) {
  const Dims& x = input_4d(L, n);
  if (n.input_size() < 2 || n.output_size() != 1) refuse("Conv needs X and W");
  if (!L.is_constant(n.input(1))) refuse("weights not constant");
  const Dims& w = L.float_dims(n.input(1));
  bool has_bias = n.input_size() > 2 && !n.input(2).empty();
  if (has_bias && !L.is_constant(n.input(2))) refuse("bias not constant");
  const int64_t group = attr_int(n, "group", 1);
  const int64_t c = x[1], m = w.size() == 4 ? w[0] : 0;
  if (w.size() != 4) refuse("weights of rank " + std::to_string(w.size()));
  if (group < 1 || c % group != 0 || m % group != 0) refuse("Conv with group count not dividing channels");
  if (w[1] != c / group) refuse("weights " + dims_str(w) + " do not match " + std::to_string(c) + " input channels");
  if (has_bias && L.float_dims(n.input(2)) != Dims{m}) refuse("bias is not [" + std::to_string(m) + "]");
  const int64_t kernel[2] = {w[2], w[3]};
  Window2d win = window_2d(n, x[2], x[3], kernel);

  int32_t in = L.input(n.input(0), kNhwc);
  int32_t bias = has_bias ? L.constant(Transform::kCopy, {n.input(2)}, {m}) : -1;
  std::vector<int64_t> ints = window_ints(win);
  ints.insert(ints.end(), {win.dilation[0], win.dilation[1]});
  int32_t filter;
  Op op;
  if (group > 1 && group == c && w[1] == 1) {  // depthwise, M / C filters per channel
    filter = L.constant(Transform::kDepthwise, {n.input(1)}, {1, w[2], w[3], m});
    ints.insert(ints.end(), {m / c, c});
    op = Op::kDepthwiseConv2d;
  } else {
    filter = L.constant(Transform::kToNhwc, {n.input(1)}, {m, w[2], w[3], w[1]});
    ints.insert(ints.end(), {group, c / group, m / group});
    op = Op::kConv2d;
  }
  std::vector<int32_t> ins{in, filter};
  if (bias >= 0) ins.push_back(bias);
  L.emit(op, ins, L.output(n.output(0), kNhwc), ints, {-kInf, kInf});
}

void lower_conv_transpose(Lowering& L, const onnx::NodeProto& n) {
  const Dims& x = input_4d(L, n);
  if (n.input_size() < 2 || n.output_size() != 1) refuse("ConvTranspose needs X and W");
  if (!L.is_constant(n.input(1))) refuse("weights not constant");
  const Dims& w = L.float_dims(n.input(1));
  if (w.size() != 4) refuse("weights of rank " + std::to_string(w.size()));
  bool has_bias = n.input_size() > 2 && !n.input(2).empty();
  if (has_bias && !L.is_constant(n.input(2))) refuse("bias not constant");
  const int64_t group = attr_int(n, "group", 1);
  const int64_t c = x[1];
  if (group < 1 || c % group != 0 || w[0] != c) refuse("ConvTranspose with group count not dividing channels");
  const int64_t m = w[1] * group;
  if (has_bias && L.float_dims(n.input(2)) != Dims{m}) refuse("bias is not [" + std::to_string(m) + "]");
  const Dims& y = L.float_dims(n.output(0));
  if (y.size() != 4) refuse("output is not 4-D");

  std::vector<int64_t> s = pair_attr(n, "strides"), d = pair_attr(n, "dilations");
  std::vector<int64_t> adj = attr_ints(n, "output_padding", {0, 0});
  if (adj.size() != 2) refuse("output_padding " + ints_str(adj));
  if (has_attr(n, "kernel_shape") && attr_ints(n, "kernel_shape") != std::vector<int64_t>{w[2], w[3]}) {
    refuse("kernel_shape differs from the weights'");
  }
  // Pads: explicit, or derived (ONNX's formulas) from output_shape / auto_pad.
  int64_t pb[2] = {0, 0}, pe[2] = {0, 0};
  std::string auto_pad = attr_string(n, "auto_pad", "NOTSET");
  std::vector<int64_t> out_shape = attr_ints(n, "output_shape");
  if (out_shape.size() > 2) out_shape.erase(out_shape.begin(), out_shape.end() - 2);
  if (!out_shape.empty() || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    if (!out_shape.empty() && out_shape.size() != 2) refuse("output_shape " + ints_str(out_shape));
    for (size_t a = 0; a < 2; ++a) {
      int64_t target = out_shape.empty() ? x[2 + a] * s[a] : out_shape[a];
      int64_t total = s[a] * (x[2 + a] - 1) + adj[a] + (w[2 + a] - 1) * d[a] + 1 - target;
      if (total < 0) refuse("ConvTranspose output larger than its input can produce (negative padding)");
      pb[a] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pe[a] = total - pb[a];
    }
  } else if (auto_pad == "NOTSET") {
    std::vector<int64_t> p = attr_ints(n, "pads", {0, 0, 0, 0});
    if (p.size() != 4) refuse("pads " + ints_str(p));
    for (int64_t v : p) {
      if (v < 0) refuse("negative pads " + ints_str(p));
    }
    pb[0] = p[0], pb[1] = p[1], pe[0] = p[2], pe[1] = p[3];
  } else if (auto_pad != "VALID") {
    refuse("auto_pad " + auto_pad);
  }
  for (size_t a = 0; a < 2; ++a) {
    if (adj[a] < 0 || adj[a] >= s[a]) refuse("output_padding " + ints_str(adj) + " not below the strides");
  }
  int32_t in = L.input(n.input(0), kNhwc);
  int32_t filter = L.constant(Transform::kDeconv, {n.input(1)}, {m, w[2], w[3], c / group}, 1.f, {group});
  std::vector<int32_t> ins{in, filter};
  if (has_bias) ins.push_back(L.constant(Transform::kCopy, {n.input(2)}, {m}));
  L.emit(Op::kDeconv2d, ins, L.output(n.output(0), kNhwc),
         {pb[0], pe[1], pe[0], pb[1], adj[0], adj[1], w[2], w[3], s[0], s[1], d[0], d[1], group, c / group, w[1]},
         {-kInf, kInf});
}

void lower_max_pool(Lowering& L, const onnx::NodeProto& n) {
  const Dims& x = input_4d(L, n);
  if (n.output_size() > 1 && !n.output(1).empty()) refuse("MaxPool with an Indices output");
  const Dims& y = L.float_dims(n.output(0));
  Window2d w = window_2d(n, x[2], x[3], nullptr);
  if (attr_int(n, "ceil_mode", 0)) fit_output(w, x, y, true);
  if (w.kernel[0] * w.kernel[1] < 2) refuse("1x1 pooling window (XNNPACK refuses it)");
  for (int a = 0; a < 2; ++a) {
    if (y.size() == 4 &&
        !windows_touch_input(x[2 + a], w.pad_begin[a], w.kernel[a], w.stride[a], w.dilation[a], y[2 + a])) {
      refuse("a pooling window lies entirely in the padding");
    }
  }
  std::vector<int64_t> ints = window_ints(w);
  ints.insert(ints.end(), {w.dilation[0], w.dilation[1]});
  L.emit(Op::kMaxPool2d, {L.input(n.input(0), kNhwc)}, L.output(n.output(0), kNhwc), ints, {-kInf, kInf});
}

void lower_average_pool(Lowering& L, const onnx::NodeProto& n) {
  const Dims& x = input_4d(L, n);
  if (pair_attr(n, "dilations") != std::vector<int64_t>{1, 1}) refuse("AveragePool with dilations");
  const Dims& y = L.float_dims(n.output(0));
  Window2d w = window_2d(n, x[2], x[3], nullptr);
  if (w.kernel[0] * w.kernel[1] < 2) refuse("1x1 pooling window (XNNPACK refuses it)");
  // XNNPACK averages over the pixels inside the input (count_include_pad=0),
  // so ceil_mode's partial windows come out right with extra end padding;
  // count_include_pad=1 becomes an explicit zero Pad before an unpadded pool
  // (and ceil_mode there is refused by the output size check).
  const bool include_pad = attr_int(n, "count_include_pad", 0) != 0;
  if (attr_int(n, "ceil_mode", 0) && !include_pad) fit_output(w, x, y, true);
  for (int a = 0; a < 2; ++a) {
    if (y.size() == 4 && !windows_touch_input(x[2 + a], w.pad_begin[a], w.kernel[a], w.stride[a], 1, y[2 + a])) {
      refuse("a pooling window lies entirely in the padding");
    }
  }
  bool any_pad = w.pad_begin[0] || w.pad_begin[1] || w.pad_end[0] || w.pad_end[1];
  int32_t in = L.input(n.input(0), kNhwc);
  if (include_pad && any_pad) {
    Dims padded{x[0], x[2] + w.pad_begin[0] + w.pad_end[0], x[3] + w.pad_begin[1] + w.pad_end[1], x[1]};
    int32_t t = L.temp(padded);
    L.emit(Op::kConstantPad, {in}, t, {0, w.pad_begin[0], w.pad_begin[1], 0, 0, w.pad_end[0], w.pad_end[1], 0}, {0.f});
    in = t;
    w.pad_begin[0] = w.pad_begin[1] = w.pad_end[0] = w.pad_end[1] = 0;
  }
  L.emit(Op::kAvgPool2d, {in}, L.output(n.output(0), kNhwc), window_ints(w), {-kInf, kInf});
}

void lower_global_average_pool(Lowering& L, const onnx::NodeProto& n) {
  input_4d(L, n);
  L.emit(Op::kGlobalAvgPool2d, {L.input(n.input(0), kNhwc)}, L.output(n.output(0), kNhwc), {}, {-kInf, kInf});
}

void lower_global_max_pool(Lowering& L, const onnx::NodeProto& n) {
  const Dims& x = input_4d(L, n);
  int32_t in = L.input(n.input(0), kNhwc);
  int32_t out = L.output(n.output(0), kNhwc);
  if (x[2] * x[3] == 1) {
    L.emit(Op::kReshape, {in}, out);
    return;
  }
  L.emit(Op::kMaxPool2d, {in}, out, {0, 0, 0, 0, x[2], x[3], 1, 1, 1, 1}, {-kInf, kInf});
}

}  // namespace tessera_xnn
