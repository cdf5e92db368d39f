// The quantization family: QuantizeLinear and DequantizeLinear (per tensor,
// and per axis from opset 13), DynamicQuantizeLinear, and the integer matrix
// ops QLinearMatMul, QLinearConv, MatMulInteger and ConvInteger (defined in
// quantize_matmul.cc / quantize_conv.cc on the integer GEMM of
// quantize_gemm.h).
//
// Rounding is to nearest, ties to even, in float32 as the ONNX reference does
// (x / scale is a true division, not a multiplication by 1/scale), and
// saturation clamps to the 8-bit output type.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/conv_util.h"
#include "ops/dynamic_quantize_math.h"
#include "ops/op_registry.h"
#include "ops/quantize_ops.h"

namespace tessera {

namespace quant {

std::vector<int32_t> int_values(const Tensor* t) {
  std::vector<int32_t> v;
  if (!t || !t->defined()) return v;
  v.resize(static_cast<size_t>(t->numel()));
  for (int64_t i = 0; i < t->numel(); ++i) v[static_cast<size_t>(i)] = static_cast<int32_t>(t->as_int64(i));
  return v;
}

std::vector<float> float_values(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  if (t.dtype() == DType::kFloat32) {
    std::copy(t.data<float>(), t.data<float>() + t.numel(), v.begin());
  } else {
    for (int64_t i = 0; i < t.numel(); ++i) v[static_cast<size_t>(i)] = static_cast<float>(t.as_double(i));
  }
  return v;
}

Status check_8bit_input(const KernelContext& ctx, int i, const char* what) {
  const Tensor* t = ctx.input(i);
  if (!t || !t->defined()) return ctx.error(std::string(what) + " is missing");
  if (!is_8bit(t->dtype())) {
    return Unsupported(ctx.node().describe() + ": " + what + " must be int8 or uint8, got " + dtype_name(t->dtype()));
  }
  return Status::Ok();
}

Expected<UnaryQuant> unary_quant(const KernelContext& ctx) {
  TSR_RETURN_IF_ERROR(check_8bit_input(ctx, 0, "X"));
  const DType t = ctx.input(0)->dtype();
  const Tensor* xs = ctx.input(1);
  const Tensor* ys = ctx.input(3);
  if (!xs || !ys || xs->numel() != 1 || ys->numel() != 1 || xs->dtype() != DType::kFloat32 ||
      ys->dtype() != DType::kFloat32) {
    return ctx.error("the scales must be float32 scalars");
  }
  UnaryQuant q;
  q.x_scale = xs->data<float>()[0];
  q.y_scale = ys->data<float>()[0];
  for (int i : {2, 4}) {
    const Tensor* z = ctx.input(i);
    if (!z || !z->defined()) continue;
    if (z->numel() != 1 || z->dtype() != t) return ctx.error("the zero points must be scalars of X's type");
    (i == 2 ? q.x_zero : q.y_zero) = static_cast<int32_t>(z->as_double(0));
  }
  return q;
}

}  // namespace quant

namespace {

using quant::float_values;
using quant::int_values;
using quant::is_8bit;

// Elements per parallel chunk of the elementwise kernels.
constexpr int64_t kGrain = 1 << 14;

// ---- Per-tensor / per-axis layout ---------------------------------------------

// x viewed as [outer, channels, inner]; every element of a (outer, channel)
// block of `inner` shares the channel's scale and zero point.
struct AxisLayout {
  int64_t channels = 1;
  int64_t inner = 1;
  // Blocked quantization (opset 21, block_size > 0): x viewed as [outer, axis_len, inner] and the scale as
  // [outer, ceil(axis_len / block), inner]; element (o, a, i) uses scale (o, a / block, i).
  int64_t block = 0;
  int64_t axis_len = 1;
};

// The scale index of element e under a blocked layout.
inline int64_t blocked_index(const AxisLayout& l, int64_t e) {
  const int64_t i = e % l.inner, a = (e / l.inner) % l.axis_len, o = e / (l.inner * l.axis_len);
  const int64_t blocks = (l.axis_len + l.block - 1) / l.block;
  return (o * blocks + a / l.block) * l.inner + i;
}

// Per-axis when the scale holds more than one value (or is 1-D with opset 13's
// axis). Checks the scale and zero point against x.
Expected<AxisLayout> axis_layout(const KernelContext& ctx, const Tensor& x, const Tensor& scale, const Tensor* zp) {
  AxisLayout l;
  l.inner = x.numel();
  if (zp && zp->numel() != scale.numel()) {
    return ctx.error("zero point " + dims_str(zp->dims()) + " and scale " + dims_str(scale.dims()) +
                     " differ in shape");
  }
  if (const int64_t block = ctx.node().attr_int("block_size", 0); block > 0) {
    const int axis = normalize_axis(ctx.node().attr_int("axis", 1), x.rank());
    if (axis < 0) return ctx.error("axis is out of range for " + dims_str(x.dims()));
    Dims want = x.dims();
    want[static_cast<size_t>(axis)] = (x.dim(axis) + block - 1) / block;
    if (scale.dims() != want) {
      return ctx.error("blocked scale " + dims_str(scale.dims()) + " does not match " + dims_str(x.dims()) +
                       " in blocks of " + std::to_string(block) + " along axis " + std::to_string(axis));
    }
    l.block = block;
    l.axis_len = x.dim(axis);
    l.inner = 1;
    for (int i = axis + 1; i < x.rank(); ++i) l.inner *= x.dim(i);
    return l;
  }
  if (scale.rank() > 1) return ctx.error("scale must be a scalar or a 1-D tensor, got " + dims_str(scale.dims()));
  if (scale.numel() == 1) return l;
  const int axis = normalize_axis(ctx.node().attr_int("axis", 1), x.rank());
  if (axis < 0) return ctx.error("axis is out of range for " + dims_str(x.dims()));
  if (x.dim(axis) != scale.numel()) {
    return ctx.error("scale has " + std::to_string(scale.numel()) + " values for axis " + std::to_string(axis) +
                     " of size " + std::to_string(x.dim(axis)));
  }
  l.channels = x.dim(axis);
  l.inner = 1;
  for (int i = axis + 1; i < x.rank(); ++i) l.inner *= x.dim(i);
  return l;
}

// Calls fn(begin, count, channel) over runs of elements sharing a channel,
// in parallel chunks.
template <class Fn>
void for_each_run(KernelContext& ctx, int64_t total, const AxisLayout& l, Fn&& fn) {
  if (total == 0) return;
  ctx.pool().parallel_for(total, kGrain, [&](int64_t begin, int64_t end) {
    if (l.block > 0) {  // blocked: each element with its own scale index
      for (int64_t e = begin; e < end; ++e) fn(e, 1, blocked_index(l, e));
      return;
    }
    int64_t i = begin;
    while (i < end) {
      const int64_t block = l.inner > 0 ? i / l.inner : 0;
      const int64_t stop = std::min(end, (block + 1) * l.inner);
      fn(i, stop - i, block % l.channels);
      i = stop;
    }
  });
}

// Inference shared by QuantizeLinear/DequantizeLinear: checks the scale's
// rank and, for per-axis scales, the axis.
Status check_scale_shape(InferContext& ctx) {
  const Shape& x = ctx.in_shape(0);
  const Shape& s = ctx.in_shape(1);
  if (!s.rank_known) return Status::Ok();
  if (ctx.node().attr_int("block_size", 0) > 0) return Status::Ok();  // blocked (opset 21): checked when run
  if (s.rank() > 1) return ctx.error("scale must be a scalar or a 1-D tensor, got " + s.str());
  if (s.rank() == 1 && s[0].known() && s[0].value > 1 && x.rank_known) {
    const int axis = normalize_axis(ctx.node().attr_int("axis", 1), x.rank());
    if (axis < 0) return ctx.error("axis is out of range for " + x.str());
    if (x[axis].known() && x[axis].value != s[0].value) {
      return ctx.error("scale " + s.str() + " does not match axis " + std::to_string(axis) + " of " + x.str());
    }
  }
  if (ctx.has_input(2)) {
    const Shape& z = ctx.in_shape(2);
    if (z.rank_known && z.fully_known() && s.fully_known() && z.numel_or(-1) != s.numel_or(-1)) {
      return ctx.error("zero point " + z.str() + " and scale " + s.str() + " differ in shape");
    }
  }
  return Status::Ok();
}

// ---- QuantizeLinear -----------------------------------------------------------

Status infer_quantize(InferContext& ctx) {
  TSR_RETURN_IF_ERROR(check_scale_shape(ctx));
  DType out = DType::kUInt8;
  if (ctx.has_input(2) && ctx.in_dtype(2) != DType::kUndefined) out = ctx.in_dtype(2);
  ctx.set_output(0, out, ctx.in_shape(0));
  return Status::Ok();
}

// int32 input: divides in double, as numpy does for int32 / float32.
template <class T>
void quantize_run_int32(const int32_t* x, int64_t n, float scale, int32_t zp, T* y) {
  const double lo = static_cast<double>(std::numeric_limits<T>::min() - zp);
  const double hi = static_cast<double>(std::numeric_limits<T>::max() - zp);
  for (int64_t i = 0; i < n; ++i) {
    double v = static_cast<double>(x[i]) / static_cast<double>(scale);
    v = v > lo ? v : lo;
    v = v < hi ? v : hi;
    y[i] = static_cast<T>(static_cast<int32_t>(std::nearbyint(v)) + zp);
  }
}

template <class T>
Status quantize_typed(KernelContext& ctx, const Tensor& x, const std::vector<float>& scales,
                      const std::vector<int32_t>& zps, const AxisLayout& l, Tensor& y) {
  T* yp = y.data<T>();
  auto zp_of = [&](int64_t c) { return zps.empty() ? 0 : zps[static_cast<size_t>(c)]; };
  if (x.dtype() == DType::kInt32) {
    const int32_t* xp = x.data<int32_t>();
    for_each_run(ctx, x.numel(), l, [&](int64_t b, int64_t n, int64_t c) {
      quantize_run_int32<T>(xp + b, n, scales[static_cast<size_t>(c)], zp_of(c), yp + b);
    });
    return Status::Ok();
  }
  Tensor xf = x.dtype() == DType::kFloat32 ? x : to_float32(x);
  const float* xp = xf.data<float>();
  for_each_run(ctx, x.numel(), l, [&](int64_t b, int64_t n, int64_t c) {
    dynq::quantize_run<T>(xp + b, n, scales[static_cast<size_t>(c)], zp_of(c), yp + b);
  });
  return Status::Ok();
}

Status run_quantize(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  const Tensor& scale = *ctx.input(1);
  const Tensor* zp = ctx.input(2);
  if (zp && !zp->defined()) zp = nullptr;
  Tensor& y = *ctx.output(0);
  if (!dtype_is_float(x.dtype()) && x.dtype() != DType::kInt32) {
    return Unsupported(ctx.node().describe() + ": QuantizeLinear of " + dtype_name(x.dtype()));
  }
  if (!dtype_is_float(scale.dtype())) return ctx.error("scale must be a float tensor");
  if (!is_8bit(y.dtype())) {
    return Unsupported(ctx.node().describe() + ": quantization to " + std::string(dtype_name(y.dtype())));
  }
  TSR_ASSIGN_OR_RETURN(AxisLayout l, axis_layout(ctx, x, scale, zp));
  const std::vector<float> scales = float_values(scale);
  const std::vector<int32_t> zps = int_values(zp);
  if (y.dtype() == DType::kUInt8) return quantize_typed<uint8_t>(ctx, x, scales, zps, l, y);
  return quantize_typed<int8_t>(ctx, x, scales, zps, l, y);
}

// ---- DequantizeLinear ---------------------------------------------------------

Status infer_dequantize(InferContext& ctx) {
  TSR_RETURN_IF_ERROR(check_scale_shape(ctx));
  ctx.set_output(0, DType::kFloat32, ctx.in_shape(0));
  return Status::Ok();
}

template <class T>
void dequantize_run(const T* x, int64_t n, float scale, float zp, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = (static_cast<float>(x[i]) - zp) * scale;
}

Status run_dequantize(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  const Tensor& scale = *ctx.input(1);
  const Tensor* zp = ctx.input(2);
  if (zp && !zp->defined()) zp = nullptr;
  Tensor& y = *ctx.output(0);
  if (!is_8bit(x.dtype()) && x.dtype() != DType::kInt32) {
    return Unsupported(ctx.node().describe() + ": DequantizeLinear of " + dtype_name(x.dtype()));
  }
  if (!dtype_is_float(scale.dtype())) return ctx.error("scale must be a float tensor");
  if (zp && zp->dtype() != x.dtype()) {
    return ctx.error(std::string("zero point is ") + dtype_name(zp->dtype()) + " but x is " + dtype_name(x.dtype()));
  }
  TSR_ASSIGN_OR_RETURN(AxisLayout l, axis_layout(ctx, x, scale, zp));
  const std::vector<float> scales = float_values(scale);
  const std::vector<int32_t> zps = int_values(zp);
  float* yp = y.data<float>();
  auto zp_of = [&](int64_t c) { return zps.empty() ? 0.f : static_cast<float>(zps[static_cast<size_t>(c)]); };
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, int8_t> || std::is_same_v<T, uint8_t> || std::is_same_v<T, int32_t>) {
      const T* xp = x.data<T>();
      for_each_run(ctx, x.numel(), l, [&](int64_t b, int64_t n, int64_t c) {
        dequantize_run<T>(xp + b, n, scales[static_cast<size_t>(c)], zp_of(c), yp + b);
      });
    }
  });
  return Status::Ok();
}

// ---- DynamicQuantizeLinear ----------------------------------------------------

Status infer_dynamic_quantize(InferContext& ctx) {
  ctx.set_output(0, DType::kUInt8, ctx.in_shape(0));
  ctx.set_output(1, DType::kFloat32, Shape::FromDims({}));
  ctx.set_output(2, DType::kUInt8, Shape::FromDims({}));
  return Status::Ok();
}

// min(0, min(x)) and max(0, max(x)), NaN ignored, over chunks in parallel.
void min_max_with_zero(KernelContext& ctx, const float* x, int64_t n, float* out_min, float* out_max) {
  const int64_t chunks = std::max<int64_t>(1, (n + kGrain - 1) / kGrain);
  std::vector<float> mins(static_cast<size_t>(chunks), 0.f), maxs(static_cast<size_t>(chunks), 0.f);
  ctx.pool().parallel_for(chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const int64_t b = c * kGrain, e = std::min(n, b + kGrain);
      dynq::min_max_with_zero(x + b, static_cast<size_t>(e - b), &mins[static_cast<size_t>(c)],
                              &maxs[static_cast<size_t>(c)]);
    }
  });
  *out_min = *std::min_element(mins.begin(), mins.end());
  *out_max = *std::max_element(maxs.begin(), maxs.end());
}

// The spec's function body, in float32 (scale and zero point: dynamic_quantize_math.h), then
//   y = QuantizeLinear(x, scale, zero_point).
// An all-zero input has scale 0; it quantizes to zero point 0 and y = 0.
Status run_dynamic_quantize(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  if (x.dtype() != DType::kFloat32) {
    return Unsupported(ctx.node().describe() + ": DynamicQuantizeLinear of " + dtype_name(x.dtype()));
  }
  const float* xp = x.data<float>();
  float mn = 0.f, mx = 0.f;
  min_max_with_zero(ctx, xp, x.numel(), &mn, &mx);
  const dynq::Params p = dynq::params_from_range(mn, mx);
  const float scale = p.scale;
  const auto zp = static_cast<uint8_t>(p.zero_point);
  if (Tensor* s = ctx.output(1)) *s->data<float>() = scale;
  if (Tensor* z = ctx.output(2)) *z->data<uint8_t>() = zp;
  Tensor& y = *ctx.output(0);
  uint8_t* yp = y.data<uint8_t>();
  if (scale == 0.f) {
    std::fill(yp, yp + y.numel(), uint8_t{0});
    return Status::Ok();
  }
  ctx.pool().parallel_for(x.numel(), kGrain, [&](int64_t begin, int64_t end) {
    dynq::quantize_run<uint8_t>(xp + begin, end - begin, scale, zp, yp + begin);
  });
  return Status::Ok();
}

}  // namespace

TSR_REGISTER_OPS(quantize) {
  reg.add(OpSchema{"QuantizeLinear", "", infer_quantize, nullptr, run_quantize, {}});
  reg.add(OpSchema{"DequantizeLinear", "", infer_dequantize, nullptr, run_dequantize, {}});
  reg.add(OpSchema{"DynamicQuantizeLinear", "", infer_dynamic_quantize, nullptr, run_dynamic_quantize, {}});
  reg.add(quant::qlinear_matmul_schema());
  reg.add(quant::qlinear_conv_schema());
  reg.add(quant::matmul_integer_schema());
  reg.add(quant::conv_integer_schema());
}

}  // namespace tessera
