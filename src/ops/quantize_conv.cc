// ConvInteger and QLinearConv: N-D convolution (groups, strides, dilations,
// pads, auto_pad) over 8-bit X and W on the integer GEMM of quantize_gemm.h.
//
// Each (image, group) is one GEMM, Y[oc, p] = sum_k (W[oc, k] - wz[oc]) *
// (col[k, p] - xz), where k runs over (input channel, kernel offset) and p
// over output positions. The weights are packed once at kernel creation when
// they and their zero points are constant; QIm2col writes the column matrix
// straight into the GEMM's packed B panels, with padding contributing zero
// (the padded value is the zero point). A pointwise convolution reads the
// input planes as a plain matrix.
// QLinearConv adds the int32 bias and requantizes each output channel with
//   y = saturate(round_half_even((acc + B[oc]) * (x_scale * w_scale[oc] / y_scale)) + y_zp).
#include <algorithm>
#include <cstring>

#include "ops/conv_util.h"
#include "ops/quantize_gemm.h"
#include "ops/quantize_ops.h"
#include "runtime/thread_pool.h"

namespace tessera::quant {

namespace {

using qgemm::Int8Ref;
using qgemm::kQNR;
using qgemm::QPackedA;
using qgemm::ZeroPoints;

// (image, group) GEMMs smaller than this run one per thread.
constexpr double kSmallGemmOps = 4.0e6;

// ---- Inference ----------------------------------------------------------------

Status infer_qconv(InferContext& ctx, int x_index, int w_index, DType out_dtype) {
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

Status infer_conv_integer(InferContext& ctx) { return infer_qconv(ctx, 0, 1, DType::kInt32); }

Status infer_qlinear_conv(InferContext& ctx) {
  const DType out = ctx.in_dtype(7) == DType::kUndefined ? DType::kUInt8 : ctx.in_dtype(7);
  return infer_qconv(ctx, 0, 3, out);
}

// ---- Geometry -------------------------------------------------------------------

struct QConvSetup {
  int64_t n = 0, c = 0, m = 0, group = 1, cg = 0, mg = 0;
  int64_t k = 0;  // GEMM depth: cg * kernel size
  Geometry g;
};

Expected<QConvSetup> qconv_setup(const Node& node, const Dims& xd, const Dims& wd) {
  if (xd.size() < 3 || wd.size() != xd.size()) {
    return InvalidInput(node.describe() + ": X " + dims_str(xd) + " and W " + dims_str(wd) +
                        " must have the same rank >= 3");
  }
  QConvSetup s;
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
  s.k = s.cg * s.g.kernel_size();
  return s;
}

bool is_pointwise_geometry(const Geometry& g) {
  for (size_t i = 0; i < g.in.size(); ++i) {
    if (g.kernel[i] != 1 || g.strides[i] != 1 || g.pad_begin[i] != 0 || g.pad_end[i] != 0) return false;
  }
  return true;
}

// ---- im2col into packed panels --------------------------------------------------

class QIm2col final : public qgemm::QBSource {
 public:
  // `x` points at the first of `channels` input planes of one image/group.
  QIm2col(Int8Ref x, int64_t channels, const Geometry& g, int32_t zp) : x_(x), channels_(channels), g_(g), zp_(zp) {}

  void pack(int64_t n0, int64_t nc, int16_t* dst) const override {
    if (x_.is_signed) {
      pack_typed(static_cast<const int8_t*>(x_.data), n0, nc, dst);
    } else {
      pack_typed(static_cast<const uint8_t*>(x_.data), n0, nc, dst);
    }
  }

 private:
  template <class T>
  void pack_typed(const T* x, int64_t n0, int64_t nc, int16_t* dst) const {
    const int64_t ksize = g_.kernel_size(), k = channels_ * ksize, kp = qgemm::k_pairs(k);
    const int64_t panel_stride = kp * kQNR * 2;
    const int64_t panels = (nc + kQNR - 1) / kQNR;
    std::memset(dst, 0, sizeof(int16_t) * static_cast<size_t>(panels * panel_stride));
    const size_t r = g_.in.size();
    const int64_t isz = g_.in_size();
    std::vector<int64_t> koff(r), oidx(r);
    for (int64_t kk = 0; kk < k; ++kk) {
      const int64_t c = kk / ksize;
      int64_t rem = kk % ksize;
      for (size_t i = r; i-- > 0;) {
        koff[i] = rem % g_.kernel[i] * g_.dilations[i] - g_.pad_begin[i];
        rem /= g_.kernel[i];
      }
      const T* plane = x + c * isz;
      int16_t* row = dst + (kk / 2) * kQNR * 2 + (kk & 1);
      // Column j of the block lives at panel j / kQNR, lane j % kQNR.
      auto put = [&](int64_t j, int16_t v) { row[(j / kQNR) * panel_stride + (j % kQNR) * 2] = v; };
      if (r <= 2) {
        // 1-D is 2-D with a height of 1.
        const int64_t ih = r == 2 ? g_.in[0] : 1, iw = g_.in[r - 1];
        const int64_t oh = r == 2 ? g_.out[0] : 1, ow = g_.out[r - 1];
        const int64_t sh = r == 2 ? g_.strides[0] : 1, sw = g_.strides[r - 1];
        const int64_t offh = r == 2 ? koff[0] : 0, offw = koff[r - 1];
        (void)oh;
        int64_t j = 0;
        int64_t oy = n0 / ow, ox = n0 % ow;
        while (j < nc) {
          const int64_t run = std::min(nc - j, ow - ox);
          const int64_t iy = oy * sh + offh;
          if (iy >= 0 && iy < ih) {
            const T* src = plane + iy * iw;
            for (int64_t t = 0; t < run; ++t) {
              const int64_t ix = (ox + t) * sw + offw;
              if (ix >= 0 && ix < iw) put(j + t, static_cast<int16_t>(static_cast<int32_t>(src[ix]) - zp_));
            }
          }
          j += run;
          ox = 0;
          ++oy;
        }
        continue;
      }
      // N-D: decode each output position.
      for (int64_t j = 0; j < nc; ++j) {
        int64_t p = n0 + j, off = 0;
        bool inside = true;
        for (size_t i = r; i-- > 0;) {
          oidx[i] = p % g_.out[i];
          p /= g_.out[i];
        }
        for (size_t i = 0; i < r && inside; ++i) {
          const int64_t pos = oidx[i] * g_.strides[i] + koff[i];
          inside = pos >= 0 && pos < g_.in[i];
          off = off * g_.in[i] + pos;
        }
        if (inside) put(j, static_cast<int16_t>(static_cast<int32_t>(plane[off]) - zp_));
      }
    }
  }

  Int8Ref x_;
  int64_t channels_;
  const Geometry& g_;
  int32_t zp_;
};

// ---- Kernel -----------------------------------------------------------------------

// Inputs of the two ops by role.
struct Roles {
  int x, xz, w, wz;
};
constexpr Roles kConvIntegerRoles{0, 2, 1, 3};
constexpr Roles kQLinearConvRoles{0, 2, 3, 5};

// Per-output-channel weight zero points (M values) from a scalar or 1-D tensor.
Expected<std::vector<int32_t>> weight_zero_points(const Node& node, const Tensor* wz, int64_t m) {
  std::vector<int32_t> v = int_values(wz);
  if (v.empty()) return std::vector<int32_t>(static_cast<size_t>(m), 0);
  if (v.size() == 1) return std::vector<int32_t>(static_cast<size_t>(m), v[0]);
  if (static_cast<int64_t>(v.size()) != m) {
    return InvalidInput(node.describe() + ": w_zero_point has " + std::to_string(v.size()) + " values for " +
                        std::to_string(m) + " output channels");
  }
  return v;
}

// Packs W (M x cg x kernel) per group, with its zero points subtracted.
std::vector<QPackedA> pack_weights(const Tensor& w, const std::vector<int32_t>& wz, int64_t group) {
  std::vector<QPackedA> out;
  const int64_t m = w.dim(0), mg = m / group, k = w.numel() / std::max<int64_t>(m, 1);
  const Int8Ref wr = qgemm::int8_ref(w);
  for (int64_t g = 0; g < group; ++g) {
    const Int8Ref r{static_cast<const int8_t*>(wr.data) + g * mg * k, wr.is_signed};
    out.push_back(QPackedA::Pack(r, k, mg, k, ZeroPoints{wz.data() + g * mg, 1}));
  }
  return out;
}

class QConvKernel final : public Kernel {
 public:
  static Expected<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    auto k = std::make_unique<QConvKernel>();
    k->qlinear_ = init.node.op_type == "QLinearConv";
    k->roles_ = k->qlinear_ ? kQLinearConvRoles : kConvIntegerRoles;
    const auto in = [&](int i) -> const Tensor* {
      return i < static_cast<int>(init.const_inputs.size()) ? init.const_inputs[static_cast<size_t>(i)] : nullptr;
    };
    const Tensor* w = in(k->roles_.w);
    const bool wz_present = init.node.has_input(k->roles_.wz);
    const Tensor* wz = in(k->roles_.wz);
    const int64_t group = init.node.attr_int("group", 1);
    if (w && is_8bit(w->dtype()) && w->rank() >= 3 && group > 0 && w->dim(0) % group == 0 &&
        (!wz_present || (wz && wz->dtype() == w->dtype()))) {
      auto zps = weight_zero_points(init.node, wz_present ? wz : nullptr, w->dim(0));
      if (zps.ok()) {
        k->packed_ = pack_weights(*w, zps.value(), group);
        k->packed_dims_ = w->dims();
      }
    }
    return std::unique_ptr<Kernel>(std::move(k));
  }

  Status run(KernelContext& ctx) const override {
    TSR_RETURN_IF_ERROR(check_8bit_input(ctx, roles_.x, "X"));
    TSR_RETURN_IF_ERROR(check_8bit_input(ctx, roles_.w, "W"));
    const Tensor& x = *ctx.input(roles_.x);
    const Tensor& w = *ctx.input(roles_.w);
    const Tensor* xz = ctx.input(roles_.xz);
    const Tensor* wz = ctx.input(roles_.wz);
    if (xz && xz->defined() && xz->dtype() != x.dtype()) return ctx.error("X and its zero point differ in type");
    if (wz && wz->defined() && wz->dtype() != w.dtype()) return ctx.error("W and its zero point differ in type");
    TSR_ASSIGN_OR_RETURN(QConvSetup s, qconv_setup(ctx.node(), x.dims(), w.dims()));
    const std::vector<int32_t> xzv = int_values(xz);
    if (xzv.size() > 1) return ctx.error("x_zero_point must be a scalar");
    const int32_t x_zp = xzv.empty() ? 0 : xzv[0];
    TSR_ASSIGN_OR_RETURN(std::vector<int32_t> wzv, weight_zero_points(ctx.node(), wz, s.m));
    Tensor& y = *ctx.output(0);
    if (y.numel() == 0) return Status::Ok();

    std::vector<QPackedA> local;
    const std::vector<QPackedA>* weights = &packed_;
    if (packed_dims_.empty() || w.dims() != packed_dims_) {
      local = pack_weights(w, wzv, s.group);
      weights = &local;
    }
    if (!qlinear_) {
      conv_int32(ctx, s, x, x_zp, *weights, y.data<int32_t>());
      return Status::Ok();
    }
    return run_qlinear(ctx, s, x, x_zp, *weights, y);
  }

 private:
  // Y (int32, N x M x out positions) of every (image, group).
  void conv_int32(KernelContext& ctx, const QConvSetup& s, const Tensor& x, int32_t x_zp,
                  const std::vector<QPackedA>& weights, int32_t* y) const {
    const int64_t isz = s.g.in_size(), osz = s.g.out_size();
    const bool pointwise = is_pointwise_geometry(s.g);
    const Int8Ref xr = qgemm::int8_ref(x);
    const int32_t zp_value = x_zp;
    auto one = [&](int64_t t, ThreadPool* pool) {
      const int64_t n = t / s.group, g = t % s.group;
      const Int8Ref xg{static_cast<const int8_t*>(xr.data) + (n * s.c + g * s.cg) * isz, xr.is_signed};
      int32_t* yg = y + (n * s.m + g * s.mg) * osz;
      const QPackedA& a = weights[static_cast<size_t>(g)];
      if (pointwise) {
        qgemm::QMatrixB src(xg, isz, s.cg, osz, ZeroPoints{&zp_value, 0});
        qgemm::qgemm(pool, a, src, osz, yg, osz);
      } else {
        QIm2col src(xg, s.cg, s.g, zp_value);
        qgemm::qgemm(pool, a, src, osz, yg, osz);
      }
    };
    const int64_t items = s.n * s.group;
    const double ops = 2.0 * static_cast<double>(s.mg * osz) * static_cast<double>(s.k);
    if (items > 1 && ops < kSmallGemmOps) {
      ctx.pool().parallel_for(items, 1, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) one(t, nullptr);
      });
      return;
    }
    for (int64_t t = 0; t < items; ++t) one(t, &ctx.pool());
  }

  Status run_qlinear(KernelContext& ctx, const QConvSetup& s, const Tensor& x, int32_t x_zp,
                     const std::vector<QPackedA>& weights, Tensor& y) const {
    for (int i : {1, 4, 6}) {
      const Tensor* t = ctx.input(i);
      if (!t || !dtype_is_float(t->dtype())) return ctx.error("scales must be float tensors");
    }
    TSR_RETURN_IF_ERROR(check_8bit_input(ctx, 7, "y_zero_point"));
    if (ctx.input(7)->dtype() != y.dtype()) return ctx.error("y and its zero point differ in type");
    const std::vector<float> xs = float_values(*ctx.input(1));
    const std::vector<float> ws = float_values(*ctx.input(4));
    const std::vector<float> ys = float_values(*ctx.input(6));
    const std::vector<int32_t> yz = int_values(ctx.input(7));
    if (xs.size() != 1 || ys.size() != 1 || yz.size() != 1) {
      return ctx.error("x_scale, y_scale and y_zero_point must hold one value");
    }
    if (ws.size() != 1 && static_cast<int64_t>(ws.size()) != s.m) {
      return ctx.error("w_scale has " + std::to_string(ws.size()) + " values for " + std::to_string(s.m) +
                       " output channels");
    }
    const Tensor* bias = ctx.input(8);
    if (bias && !bias->defined()) bias = nullptr;
    if (bias && (bias->dtype() != DType::kInt32 || bias->numel() != s.m)) {
      return ctx.error("B must be int32 with one value per output channel");
    }
    std::vector<float> scales(static_cast<size_t>(s.m));
    for (int64_t oc = 0; oc < s.m; ++oc) {
      scales[static_cast<size_t>(oc)] = xs[0] * ws[ws.size() == 1 ? 0 : static_cast<size_t>(oc)] / ys[0];
    }
    const int64_t osz = s.g.out_size();
    std::vector<int32_t> acc(static_cast<size_t>(s.n * s.m * osz));
    conv_int32(ctx, s, x, x_zp, weights, acc.data());
    const int32_t y_zp = yz[0];
    ctx.pool().parallel_for(s.n * s.m, std::max<int64_t>(1, 16384 / std::max<int64_t>(osz, 1)),
                            [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t oc = row % s.m;
        int32_t* a = acc.data() + row * osz;
        if (bias) {
          // Wraps like the int32 accumulation it extends.
          const auto b = static_cast<uint32_t>(bias->data<int32_t>()[oc]);
          for (int64_t j = 0; j < osz; ++j) a[j] = static_cast<int32_t>(static_cast<uint32_t>(a[j]) + b);
        }
        const float* sc = &scales[static_cast<size_t>(oc)];
        if (y.dtype() == DType::kUInt8) {
          qgemm::requantize<uint8_t>(a, osz, sc, 0, y_zp, y.data<uint8_t>() + row * osz);
        } else {
          qgemm::requantize<int8_t>(a, osz, sc, 0, y_zp, y.data<int8_t>() + row * osz);
        }
      }
    });
    return Status::Ok();
  }

  bool qlinear_ = false;
  Roles roles_ = kConvIntegerRoles;
  std::vector<QPackedA> packed_;
  Dims packed_dims_;  // dims of the constant W, empty when not packed
};

}  // namespace

OpSchema qlinear_conv_schema() {
  return OpSchema{"QLinearConv", "", infer_qlinear_conv, QConvKernel::Create, nullptr, {}};
}

OpSchema conv_integer_schema() {
  return OpSchema{"ConvInteger", "", infer_conv_integer, QConvKernel::Create, nullptr, {}};
}

}  // namespace tessera::quant
