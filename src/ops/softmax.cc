// Softmax, LogSoftmax and Hardmax.
//
// Semantics by opset: before 13 the input is coerced to 2-D at `axis`
// (default 1) and the op runs over each row of prod(dims[axis:]) elements;
// from 13 on it runs along the single dimension `axis` (default -1).
// Either way the work is [outer, n, inner]: `n` values reduced per
// (outer, inner) position. inner == 1 (the common last-axis case, e.g.
// attention scores) runs rows through the vectorised float32 primitives of
// norm_util.h; inner > 1 runs blocks of the inner dimension so every load stays
// contiguous. All variants subtract the row maximum before exponentiating.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/kernels/softmax_row.h"  // FlushDenormals
#include "ops/norm_util.h"
#include "ops/op_registry.h"
#include "ops/quantize_ops.h"

namespace tessera {
namespace {

using normk::acc_t;

enum class SoftmaxKind { kSoftmax, kLogSoftmax, kHardmax };

// [outer, n, inner] view of the input for the node's opset and axis.
struct SoftmaxGeometry {
  int64_t outer = 1, n = 1, inner = 1;
};

int64_t default_axis(int64_t opset) { return opset < 13 ? 1 : -1; }

Status softmax_infer(InferContext& ctx) {
  const Shape& s = ctx.in_shape(0);
  if (s.rank_known) {
    int64_t axis = ctx.node().attr_int("axis", default_axis(ctx.opset()));
    int rank = s.rank();
    // Before opset 13 axis == rank is accepted (a [N, 1] coercion).
    bool ok = ctx.opset() < 13 ? (axis >= -rank && axis <= rank) : normalize_axis(axis, rank) >= 0;
    if (rank > 0 && !ok) return ctx.error("axis " + std::to_string(axis) + " out of range for rank " + std::to_string(rank));
  }
  if (ctx.in_dtype(0) != DType::kUndefined && !dtype_is_float(ctx.in_dtype(0))) {
    return ctx.error(std::string("unsupported input type ") + dtype_name(ctx.in_dtype(0)));
  }
  return infer_same_as_input0(ctx);
}

SoftmaxGeometry geometry(const Dims& d, int64_t axis, int64_t opset) {
  SoftmaxGeometry g;
  int rank = static_cast<int>(d.size());
  if (rank == 0) return g;
  if (axis < 0) axis += rank;
  size_t a = static_cast<size_t>(std::clamp<int64_t>(axis, 0, rank));
  if (opset < 13) {
    g.outer = normk::prod(d, 0, a);
    g.n = normk::prod(d, a, d.size());
  } else {
    if (a >= d.size()) a = d.size() - 1;
    g.outer = normk::prod(d, 0, a);
    g.n = d[a];
    g.inner = normk::prod(d, a + 1, d.size());
  }
  return g;
}

// float32, inner == 1: one row per outer index.
void softmax_rows_f32(SoftmaxKind kind, const float* x, float* y, int64_t rows, int64_t n, Parallel& pool) {
  pool.parallel_for(rows, normk::row_grain(n), [&](int64_t r0, int64_t r1) {
    const tessera::rowk::FlushDenormals flush;  // masked scores' exponentials
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * n;
      float* yr = y + r * n;
      float m = normk::row_max(xr, n);
      float s = normk::row_exp_shift_sum(xr, m, yr, n);
      if (kind == SoftmaxKind::kSoftmax) {
        normk::row_axpb(yr, 1.0f / s, 0.0f, yr, n);
      } else {
        normk::row_axpb(xr, 1.0f, -(m + std::log(s)), yr, n);
      }
    }
  });
}

// float32, inner > 1: blocks of kBlock inner positions per task.
void softmax_strided_f32(SoftmaxKind kind, const float* x, float* y, const SoftmaxGeometry& g, Parallel& pool) {
  constexpr int64_t kBlock = 256;
  const int64_t n = g.n, inner = g.inner;
  const int64_t blocks = (inner + kBlock - 1) / kBlock;
  pool.parallel_for(g.outer * blocks, normk::row_grain(n * kBlock), [&](int64_t t0, int64_t t1) {
    float mx[kBlock], sm[kBlock];
    const tessera::rowk::FlushDenormals flush;  // masked scores' exponentials
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t o = t / blocks, i0 = (t % blocks) * kBlock;
      const int64_t w = std::min(kBlock, inner - i0);
      const float* xb = x + o * n * inner + i0;
      float* yb = y + o * n * inner + i0;
      for (int64_t k = 0; k < w; ++k) {
        mx[k] = -std::numeric_limits<float>::infinity();
        sm[k] = 0.f;
      }
      for (int64_t j = 0; j < n; ++j) {
        const float* xr = xb + j * inner;
        for (int64_t k = 0; k < w; ++k) mx[k] = xr[k] > mx[k] ? xr[k] : mx[k];
      }
      for (int64_t j = 0; j < n; ++j) {
        const float* xr = xb + j * inner;
        float* yr = yb + j * inner;
        for (int64_t k = 0; k < w; ++k) yr[k] = xr[k] - mx[k];
        normk::exp_inplace(yr, w);
        for (int64_t k = 0; k < w; ++k) sm[k] += yr[k];
      }
      if (kind == SoftmaxKind::kSoftmax) {
        for (int64_t k = 0; k < w; ++k) sm[k] = 1.0f / sm[k];
        for (int64_t j = 0; j < n; ++j) {
          float* yr = yb + j * inner;
          for (int64_t k = 0; k < w; ++k) yr[k] *= sm[k];
        }
      } else {
        for (int64_t k = 0; k < w; ++k) mx[k] += std::log(sm[k]);
        for (int64_t j = 0; j < n; ++j) {
          const float* xr = xb + j * inner;
          float* yr = yb + j * inner;
          for (int64_t k = 0; k < w; ++k) yr[k] = xr[k] - mx[k];
        }
      }
    }
  });
}

// Any float type, any geometry; computes in float (double for double).
template <class T>
void softmax_generic(SoftmaxKind kind, const T* x, T* y, const SoftmaxGeometry& g, Parallel& pool) {
  using A = acc_t<T>;
  const int64_t n = g.n, inner = g.inner;
  pool.parallel_for(g.outer * inner, normk::row_grain(n), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t o = t / inner, i = t % inner;
      const T* xr = x + o * n * inner + i;
      T* yr = y + o * n * inner + i;
      A m = -std::numeric_limits<A>::infinity();
      for (int64_t j = 0; j < n; ++j) m = std::max<A>(m, static_cast<A>(xr[j * inner]));
      A s = 0;
      for (int64_t j = 0; j < n; ++j) s += std::exp(static_cast<A>(xr[j * inner]) - m);
      if (kind == SoftmaxKind::kSoftmax) {
        for (int64_t j = 0; j < n; ++j) yr[j * inner] = static_cast<T>(std::exp(static_cast<A>(xr[j * inner]) - m) / s);
      } else {
        A shift = m + std::log(s);
        for (int64_t j = 0; j < n; ++j) yr[j * inner] = static_cast<T>(static_cast<A>(xr[j * inner]) - shift);
      }
    }
  });
}

// 1 at the first maximum along the axis, 0 elsewhere.
template <class T>
void hardmax(const T* x, T* y, const SoftmaxGeometry& g, Parallel& pool) {
  using A = acc_t<T>;
  const int64_t n = g.n, inner = g.inner;
  pool.parallel_for(g.outer * inner, normk::row_grain(n), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t o = t / inner, i = t % inner;
      const T* xr = x + o * n * inner + i;
      T* yr = y + o * n * inner + i;
      int64_t best = 0;
      A bv = n > 0 ? static_cast<A>(xr[0]) : A(0);
      for (int64_t j = 1; j < n; ++j) {
        A v = static_cast<A>(xr[j * inner]);
        if (v > bv) {
          bv = v;
          best = j;
        }
      }
      for (int64_t j = 0; j < n; ++j) yr[j * inner] = static_cast<T>(j == best ? 1.0f : 0.0f);
    }
  });
}

class SoftmaxKernel final : public Kernel {
 public:
  SoftmaxKernel(SoftmaxKind kind, int64_t axis, int64_t opset) : kind_(kind), axis_(axis), opset_(opset) {}

  Status run(KernelContext& ctx) const override {
    const Tensor* x = ctx.input(0);
    Tensor* y = ctx.output(0);
    if (!x || !y) return ctx.error("missing input or output");
    if (x->numel() == 0) return Status::Ok();
    SoftmaxGeometry g = geometry(x->dims(), axis_, opset_);
    bool ok = normk::visit_float(x->dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* xp = x->data<T>();
      T* yp = y->data<T>();
      if (kind_ == SoftmaxKind::kHardmax) {
        hardmax(xp, yp, g, ctx.pool());
      } else if constexpr (std::is_same_v<T, float>) {
        if (g.inner == 1) {
          softmax_rows_f32(kind_, xp, yp, g.outer, g.n, ctx.pool());
        } else {
          softmax_strided_f32(kind_, xp, yp, g, ctx.pool());
        }
      } else {
        softmax_generic(kind_, xp, yp, g, ctx.pool());
      }
    });
    if (!ok) return ctx.error(std::string("unsupported input type ") + dtype_name(x->dtype()));
    return Status::Ok();
  }

 private:
  SoftmaxKind kind_;
  int64_t axis_;
  int64_t opset_;
};

template <SoftmaxKind kKind>
Expected<std::unique_ptr<Kernel>> create_softmax(const KernelInit& init) {
  int64_t axis = init.node.attr_int("axis", default_axis(init.opset));
  return std::unique_ptr<Kernel>(std::make_unique<SoftmaxKernel>(kKind, axis, init.opset));
}

// ---- com.microsoft QLinearSoftmax -------------------------------------------------------------------------------
//
// (X, X_scale, X_zero_point, Y_scale, Y_zero_point; axis, opset) as ONNX Runtime's kernel computes it: its default
// level also fuses DequantizeLinear -> Softmax -> QuantizeLinear into it (passes/qdq_fusion.cc). Probed on 1.31.1
// (uint8 and int8, scales 1/255, 1/256 and odd ones, axes -1 and 1, the opset-12 form) and equal to it everywhere,
// where dequantize, softmax, quantize is a step off at up to 17 % of the elements. The arithmetic:
//   a table of 256 floats, entry i = (float) exp((i - 255 + shift) * x_scale) in double, with
//   shift = max(0, log(FLT_MAX / D) - 5) / x_scale (D the softmax length; the exponent of the largest element is
//   `shift`, so the sum stays finite); per row, the entry of each element counted from the row's maximum
//   (x - max + 255), their float sum in order, and y = round_half_even(e * floor(1 / y_scale) / sum) + y_zero_point.
// X's zero point cancels. Where ONNX Runtime lets an int8 result above 127 wrap, this saturates it.
Status qlinear_softmax_infer(InferContext& ctx) {
  if (ctx.node().num_inputs() < 4) return ctx.error("takes X, X_scale, X_zero_point, Y_scale and Y_zero_point");
  const DType t = ctx.in_dtype(0);
  if (t != DType::kUndefined && t != DType::kUInt8 && t != DType::kInt8) {
    return ctx.error(std::string("X must be uint8 or int8, got ") + dtype_name(t));
  }
  if (ctx.has_input(4) && ctx.in_dtype(4) != DType::kUndefined && t != DType::kUndefined && ctx.in_dtype(4) != t) {
    return ctx.error("Y_zero_point must have X's type");
  }
  ctx.set_output(0, t, ctx.in_shape(0));
  return Status::Ok();
}

template <class T>
void qlinear_softmax_typed(const T* x, T* y, const SoftmaxGeometry& g, const float* table, float y_scale, int32_t yz,
                           Parallel& pool) {
  constexpr int32_t kLo = std::numeric_limits<T>::min(), kHi = std::numeric_limits<T>::max();
  const int64_t n = g.n, inner = g.inner;
  pool.parallel_for(g.outer * inner, normk::row_grain(n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t base = r / inner * n * inner + r % inner;
      int32_t mx = kLo;
      for (int64_t k = 0; k < n; ++k) mx = std::max<int32_t>(mx, x[base + k * inner]);
      // Entry (x - max + 255) of the table indexed from kLo: the table's index for value v is v - kLo.
      const float* shifted = table + (255 - (mx - kLo));
      float sum = 0.f;
      for (int64_t k = 0; k < n; ++k) sum += shifted[x[base + k * inner] - kLo];
      for (int64_t k = 0; k < n; ++k) {
        const float e = shifted[x[base + k * inner] - kLo];
        int32_t q = yz;
        if (sum != 0.f) q += static_cast<int32_t>(std::nearbyint(normk::mul_unfused(e, y_scale) / sum));
        y[base + k * inner] = static_cast<T>(std::clamp(q, kLo, kHi));
      }
    }
  });
}

Status run_qlinear_softmax(KernelContext& ctx) {
  TSR_ASSIGN_OR_RETURN(quant::UnaryQuant q, quant::unary_quant(ctx));
  const Tensor& x = *ctx.input(0);
  const int64_t opset = ctx.node().attr_int("opset", 13);
  const int64_t axis = ctx.node().attr_int("axis", default_axis(opset));
  const int rank = x.rank();
  if (rank == 0 || axis < -rank || axis >= rank) return ctx.error("axis " + std::to_string(axis) + " out of range");
  const SoftmaxGeometry g = geometry(x.dims(), axis, opset);
  if (x.numel() == 0) return Status::Ok();
  const float x_scale = q.x_scale;
  double shift = std::log(static_cast<double>(std::numeric_limits<float>::max() / static_cast<float>(g.n)));
  shift = std::max(0.0, shift - 5.0) / static_cast<double>(x_scale);
  float table[256];
  for (int i = 0; i < 256; ++i) {
    table[i] = static_cast<float>(std::exp((static_cast<double>(i) - 255 + shift) * static_cast<double>(x_scale)));
  }
  const float y_scale = std::floor(1.0f / q.y_scale);
  const int32_t zp = q.y_zero;
  Tensor& y = *ctx.output(0);
  if (x.dtype() == DType::kUInt8) {
    qlinear_softmax_typed(x.data<uint8_t>(), y.data<uint8_t>(), g, table, y_scale, zp, ctx.pool());
  } else {
    qlinear_softmax_typed(x.data<int8_t>(), y.data<int8_t>(), g, table, y_scale, zp, ctx.pool());
  }
  return Status::Ok();
}

}  // namespace

TSR_REGISTER_OPS(softmax) {
  reg.add(OpSchema{"Softmax", "", softmax_infer, create_softmax<SoftmaxKind::kSoftmax>, nullptr, {}});
  reg.add(OpSchema{"LogSoftmax", "", softmax_infer, create_softmax<SoftmaxKind::kLogSoftmax>, nullptr, {}});
  reg.add(OpSchema{"Hardmax", "", softmax_infer, create_softmax<SoftmaxKind::kHardmax>, nullptr, {}});
  reg.add(OpSchema{"QLinearSoftmax", "com.microsoft", qlinear_softmax_infer, nullptr, run_qlinear_softmax, {}});
}

}  // namespace tessera
