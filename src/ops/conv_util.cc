#include "ops/conv_util.h"

#include <algorithm>

namespace tessera {

Status read_spatial_attrs(const Node& node, int rank, const std::vector<int64_t>& kernel_from_weights, bool with_ceil,
                          SpatialAttrs* out) {
  SpatialAttrs a;
  a.rank = rank;
  const std::string ap = node.attr_string("auto_pad", "NOTSET");
  if (ap == "NOTSET" || ap.empty()) {
    a.auto_pad = AutoPad::kNotSet;
  } else if (ap == "VALID") {
    a.auto_pad = AutoPad::kValid;
  } else if (ap == "SAME_UPPER") {
    a.auto_pad = AutoPad::kSameUpper;
  } else if (ap == "SAME_LOWER") {
    a.auto_pad = AutoPad::kSameLower;
  } else {
    return InvalidModel(node.describe() + ": unknown auto_pad '" + ap + "'");
  }
  const auto r = static_cast<size_t>(rank);
  if (node.has_attr("kernel_shape")) {
    a.kernel = node.attr_ints("kernel_shape");
  } else if (!kernel_from_weights.empty()) {
    a.kernel = kernel_from_weights;
  } else {
    return InvalidModel(node.describe() + ": attribute kernel_shape is required");
  }
  if (a.kernel.size() != r) {
    return InvalidModel(node.describe() + ": kernel_shape has " + std::to_string(a.kernel.size()) +
                        " values for " + std::to_string(rank) + " spatial axes");
  }
  a.strides = node.attr_ints("strides", std::vector<int64_t>(r, 1));
  a.dilations = node.attr_ints("dilations", std::vector<int64_t>(r, 1));
  a.pads = node.attr_ints("pads", std::vector<int64_t>(2 * r, 0));
  if (a.strides.empty()) a.strides.assign(r, 1);
  if (a.dilations.empty()) a.dilations.assign(r, 1);
  if (a.pads.empty()) a.pads.assign(2 * r, 0);
  if (a.strides.size() != r || a.dilations.size() != r || a.pads.size() != 2 * r) {
    return InvalidModel(node.describe() + ": strides/dilations/pads do not match " + std::to_string(rank) +
                        " spatial axes");
  }
  for (size_t i = 0; i < r; ++i) {
    if (a.strides[i] <= 0 || a.dilations[i] <= 0) {
      return InvalidModel(node.describe() + ": strides and dilations must be positive");
    }
    if (a.kernel[i] == 0 || a.kernel[i] < -1) return InvalidModel(node.describe() + ": bad kernel size");
  }
  for (int64_t p : a.pads) {
    if (p < 0) return InvalidModel(node.describe() + ": pads must be non-negative");
  }
  // Window arithmetic ((k - 1) * d + 1, in + pads, out * s) stays far from overflow; no real window comes near.
  constexpr int64_t kMaxWindow = int64_t{1} << 31;
  for (const auto* v : {&a.kernel, &a.strides, &a.dilations, &a.pads}) {
    for (int64_t x : *v) {
      if (x > kMaxWindow) {
        return InvalidModel(node.describe() + ": kernel_shape, strides, dilations and pads must be at most 2^31, got " +
                            std::to_string(x));
      }
    }
  }
  a.ceil_mode = with_ceil && node.attr_int("ceil_mode", 0) != 0;
  *out = std::move(a);
  return Status::Ok();
}

AxisGeometry conv_axis(int64_t in, const SpatialAttrs& a, int axis) {
  const auto i = static_cast<size_t>(axis);
  const int64_t k = a.kernel[i];
  const int64_t s = a.strides[i];
  const int64_t d = a.dilations[i];
  AxisGeometry g;
  if (in < 0 || k < 0) return g;
  const int64_t eff_k = (k - 1) * d + 1;
  switch (a.auto_pad) {
    case AutoPad::kSameUpper:
    case AutoPad::kSameLower: {
      g.out = (in + s - 1) / s;
      const int64_t total = std::max<int64_t>(0, (g.out - 1) * s + eff_k - in);
      if (a.auto_pad == AutoPad::kSameUpper) {
        g.pad_begin = total / 2;
        g.pad_end = total - total / 2;
      } else {
        g.pad_begin = total - total / 2;
        g.pad_end = total / 2;
      }
      return g;
    }
    case AutoPad::kValid:
      g.pad_begin = g.pad_end = 0;
      break;
    case AutoPad::kNotSet:
      g.pad_begin = a.pads[i];
      g.pad_end = a.pads[i + static_cast<size_t>(a.rank)];
      break;
  }
  const int64_t span = in + g.pad_begin + g.pad_end - eff_k;
  if (span < 0) {
    g.out = 0;
    return g;
  }
  if (a.ceil_mode) {
    g.out = (span + s - 1) / s + 1;
    // A window must start inside the input or the leading padding.
    if ((g.out - 1) * s >= in + g.pad_begin) --g.out;
  } else {
    g.out = span / s + 1;
  }
  return g;
}

int64_t Geometry::in_size() const { return numel(in); }
int64_t Geometry::out_size() const { return numel(out); }
int64_t Geometry::kernel_size() const { return numel(kernel); }

bool Geometry::input_offset(const int64_t* oidx, const int64_t* kidx, size_t axes, int64_t* offset) const {
  int64_t off = 0;
  for (size_t i = 0; i < axes; ++i) {
    const int64_t p = oidx[i] * strides[i] - pad_begin[i] + kidx[i] * dilations[i];
    if (p < 0 || p >= in[i]) return false;
    off = off * in[i] + p;
  }
  *offset = off;
  return true;
}

Expected<Geometry> conv_geometry(const Dims& in_spatial, const SpatialAttrs& a, const std::string& who) {
  Geometry g;
  g.in = in_spatial;
  g.kernel = a.kernel;
  g.strides = a.strides;
  g.dilations = a.dilations;
  for (int i = 0; i < a.rank; ++i) {
    const AxisGeometry ax = conv_axis(in_spatial[static_cast<size_t>(i)], a, i);
    const int64_t eff_k = (a.kernel[static_cast<size_t>(i)] - 1) * a.dilations[static_cast<size_t>(i)] + 1;
    if (in_spatial[static_cast<size_t>(i)] + ax.pad_begin + ax.pad_end < eff_k) {
      return InvalidInput(who + ": kernel of extent " + std::to_string(eff_k) + " does not fit spatial axis " +
                          std::to_string(i) + " of size " + std::to_string(in_spatial[static_cast<size_t>(i)]) +
                          " with padding");
    }
    g.out.push_back(ax.out);
    g.pad_begin.push_back(ax.pad_begin);
    g.pad_end.push_back(ax.pad_end);
  }
  return g;
}

std::vector<Dim> conv_output_dims(const Shape& x, const SpatialAttrs& a) {
  std::vector<Dim> out;
  for (int i = 0; i < a.rank; ++i) {
    const Dim& d = x[i + 2];
    const AxisGeometry ax = conv_axis(d.known() ? d.value : -1, a, i);
    // A symbolic size comes out unchanged where a unit stride and padding of (extent - 1) keep it: the output then
    // keeps the input's symbol, so values of equal shape stay recognisably equal (native fusion joins them).
    const auto u = static_cast<size_t>(i);
    const bool same = !d.known() && !d.symbol.empty() && a.strides[u] == 1 && a.kernel[u] >= 1 &&
                      (a.auto_pad == AutoPad::kSameUpper || a.auto_pad == AutoPad::kSameLower ||
                       (a.auto_pad == AutoPad::kNotSet &&
                        a.pads[u] + a.pads[u + static_cast<size_t>(a.rank)] == (a.kernel[u] - 1) * a.dilations[u]));
    out.push_back(ax.out >= 0 ? Dim(ax.out) : same ? d : Dim());
  }
  return out;
}

Tensor to_float32(const Tensor& t) {
  if (t.dtype() == DType::kFloat32) return t;
  Tensor out(DType::kFloat32, t.dims());
  float* o = out.data<float>();
  const int64_t n = t.numel();
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = t.data<T>();
    for (int64_t i = 0; i < n; ++i) o[i] = static_cast<float>(p[i]);
  });
  return out;
}

void assign_from_float32(const Tensor& src, Tensor* dst) {
  const float* s = src.data<float>();
  const int64_t n = std::min(src.numel(), dst->numel());
  visit_dtype(dst->dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* d = dst->data<T>();
    for (int64_t i = 0; i < n; ++i) d[i] = static_cast<T>(s[i]);
  });
}

Expected<ConvSetup> conv_setup(const Node& node, const Dims& xd, const Dims& wd) {
  if (xd.size() < 3 || wd.size() != xd.size()) {
    return InvalidInput(node.describe() + ": X " + dims_str(xd) + " and W " + dims_str(wd) +
                        " must have the same rank >= 3");
  }
  ConvSetup s;
  s.n = xd[0];
  s.c = xd[1];
  s.m = wd[0];
  s.group = node.attr_int("group", 1);
  if (s.group <= 0 || s.c % s.group != 0 || s.m % s.group != 0 || wd[1] * s.group != s.c) {
    return InvalidInput(node.describe() + ": channels of X " + dims_str(xd) + " and W " + dims_str(wd) +
                        " do not match group " + std::to_string(s.group));
  }
  s.cg = wd[1];
  s.mg = s.m / s.group;
  const int spatial = static_cast<int>(xd.size()) - 2;
  SpatialAttrs a;
  TSR_RETURN_IF_ERROR(read_spatial_attrs(node, spatial, Dims(wd.begin() + 2, wd.end()), false, &a));
  for (int i = 0; i < spatial; ++i) {
    if (a.kernel[static_cast<size_t>(i)] != wd[static_cast<size_t>(i) + 2]) {
      return InvalidInput(node.describe() + ": kernel_shape does not match W " + dims_str(wd));
    }
  }
  TSR_ASSIGN_OR_RETURN(s.g, conv_geometry(Dims(xd.begin() + 2, xd.end()), a, node.describe()));
  return s;
}

Status infer_conv_output(InferContext& ctx, int x_index, int w_index, DType out_dtype) {
  const Shape& x = ctx.in_shape(x_index);
  const Shape& w = ctx.in_shape(w_index);
  const int rank = x.rank_known ? x.rank() : w.rank_known ? w.rank() : -1;
  if (rank < 0) {
    ctx.set_output(0, out_dtype, Shape::Unranked());
    return Status::Ok();
  }
  if (rank < 3) return ctx.error("input must have rank >= 3, got " + x.str());
  if (x.rank_known && w.rank_known && x.rank() != w.rank()) {
    return ctx.error("X " + x.str() + " and W " + w.str() + " differ in rank");
  }
  const int spatial = rank - 2;
  std::vector<int64_t> kernel(static_cast<size_t>(spatial), -1);
  if (w.rank_known) {
    for (int i = 0; i < spatial; ++i) kernel[static_cast<size_t>(i)] = w[i + 2].known() ? w[i + 2].value : -1;
  }
  SpatialAttrs a;
  TSR_RETURN_IF_ERROR(read_spatial_attrs(ctx.node(), spatial, kernel, false, &a));
  const int64_t group = ctx.node().attr_int("group", 1);
  if (group <= 0) return ctx.error("group must be positive");
  if (x.rank_known && w.rank_known && x[1].known() && w[1].known() && x[1].value != w[1].value * group) {
    return ctx.error("X has " + std::to_string(x[1].value) + " channels but W expects " +
                     std::to_string(w[1].value) + " x group " + std::to_string(group));
  }
  std::vector<Dim> out;
  out.push_back(x.rank_known ? x[0] : Dim());
  out.push_back(w.rank_known ? w[0] : Dim());
  if (x.rank_known) {
    for (const Dim& d : conv_output_dims(x, a)) out.push_back(d);
  } else {
    for (int i = 0; i < spatial; ++i) out.push_back(Dim());
  }
  ctx.set_output(0, out_dtype, Shape(out));
  return Status::Ok();
}

}  // namespace tessera
