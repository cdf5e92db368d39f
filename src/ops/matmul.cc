// The matrix-product family: MatMul (numpy semantics: 1-D promotion and
// batch broadcasting), Gemm (transposes, alpha/beta, C broadcast to [M,N]),
// com.microsoft FusedGemm (Gemm + activation) and ai.tessera FusedMatMul (MatMul +
// bias [N] + activation, or MatMul times a scalar alpha), both made by the native
// fusion pass.
//
// float32 runs on the packed SGEMM in kernels/gemm.h; a constant B (weights)
// is packed once when the kernel is created. float16/bfloat16 convert
// through float32; float64 and integer types use a plain loop.
#include <algorithm>
#include <cstring>

#include "ops/conv_util.h"
#include "ops/kernels/fused_activation.h"
#include "ops/kernels/gemm.h"
#include "ops/matmul_util.h"
#include "ops/op_registry.h"

namespace tessera {

namespace {

using kernels::Epilogue;
using kernels::GemmA;
using kernels::GemmB;
using kernels::PackedMatrix;

// Per-batch GEMMs smaller than this run one per thread instead of each being
// split across threads.
constexpr double kSmallGemmFlops = 4.0e6;

// ---- MatMul -----------------------------------------------------------------

Status infer_matmul(InferContext& ctx) { return infer_matmul_output(ctx, 0, 1, ctx.in_dtype(0)); }


// Plain loop for float64, integers, and anything not worth the packed path.
template <class T, class Acc>
void matmul_loop(const T* a, const T* b, T* y, int64_t m, int64_t n, int64_t k) {
  std::vector<Acc> row(static_cast<size_t>(n));
  for (int64_t i = 0; i < m; ++i) {
    std::fill(row.begin(), row.end(), Acc{});
    for (int64_t p = 0; p < k; ++p) {
      const Acc av = static_cast<Acc>(a[i * k + p]);
      const T* br = b + p * n;
      for (int64_t j = 0; j < n; ++j) row[static_cast<size_t>(j)] += av * static_cast<Acc>(br[j]);
    }
    for (int64_t j = 0; j < n; ++j) y[i * n + j] = static_cast<T>(row[static_cast<size_t>(j)]);
  }
}

class MatMulKernel final : public Kernel {
 public:
  static Expected<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    auto k = std::make_unique<MatMulKernel>(init);
    if (k->fused_) TSR_RETURN_IF_ERROR(kernels::activation_from_conv_attrs(init.node, &k->act_));
    return std::unique_ptr<Kernel>(std::move(k));
  }

  explicit MatMulKernel(const KernelInit& init)
      : fused_(init.node.op_type == "FusedMatMul"),
        alpha_(fused_ ? init.node.attr_float("alpha", 1.f) : 1.f),
        products_(init.products) {
    const Tensor* b = init.const_inputs.size() > 1 ? init.const_inputs[1] : nullptr;
    // A single column is a matrix-vector product, which gemm handles unpacked.
    if (b && b->dtype() == DType::kFloat32 && b->rank() >= 2 && b->dims().back() > 1) {
      Dims bd = b->dims();
      const int64_t k = bd[bd.size() - 2], n = bd[bd.size() - 1];
      const int64_t count = numel(Dims(bd.begin(), bd.end() - 2));
      for (int64_t i = 0; i < count; ++i) {
        packed_.push_back(PackedMatrix::PackConstantB(b->data<float>() + i * k * n, n, false, k, n, init.products));
      }
      packed_dims_ = b->dims();
    }
  }

  Status run(KernelContext& ctx) const override {
    const Tensor& a = *ctx.input(0);
    const Tensor& b = *ctx.input(1);
    Tensor& y = *ctx.output(0);
    TSR_ASSIGN_OR_RETURN(MatMulDims d, matmul_dims(ctx.node(), a.dims(), b.dims()));
    if (y.numel() == 0) return Status::Ok();
    if (a.dtype() != b.dtype()) return ctx.error("A and B have different dtypes");
    if (fused_) {
      // The epilogue runs in the float32 GEMM only; the fusion pass makes
      // FusedMatMul for float32 alone.
      const Tensor* bias = ctx.input(2);
      if (a.dtype() != DType::kFloat32) return ctx.error("FusedMatMul runs on float32 only");
      if (bias && (bias->dtype() != DType::kFloat32 || bias->numel() != d.n)) {
        return ctx.error("bias " + bias->str() + " must hold " + std::to_string(d.n) + " float32 values");
      }
      Epilogue ep = act_;
      if (bias) {
        ep.bias_kind = Epilogue::Bias::kPerCol;
        ep.bias = bias->data<float>();
      }
      run_float(ctx, d, a.data<float>(), b.data<float>(), y.data<float>(), b.dims() == packed_dims_, ep);
      return Status::Ok();
    }
    switch (a.dtype()) {
      case DType::kFloat32:
        run_float(ctx, d, a.data<float>(), b.data<float>(), y.data<float>(), b.dims() == packed_dims_);
        return Status::Ok();
      case DType::kFloat16:
      case DType::kBFloat16: {
        Tensor af = to_float32(a), bf = to_float32(b), yf(DType::kFloat32, y.dims());
        run_float(ctx, d, af.data<float>(), bf.data<float>(), yf.data<float>(), false);
        assign_from_float32(yf, &y);
        return Status::Ok();
      }
      case DType::kFloat64: return run_loop<double, double>(ctx, d, a, b, y);
      case DType::kInt32: return run_loop<int32_t, int32_t>(ctx, d, a, b, y);
      case DType::kInt64: return run_loop<int64_t, int64_t>(ctx, d, a, b, y);
      case DType::kUInt32: return run_loop<uint32_t, uint32_t>(ctx, d, a, b, y);
      case DType::kUInt64: return run_loop<uint64_t, uint64_t>(ctx, d, a, b, y);
      default: return Unsupported(ctx.node().describe() + ": MatMul on " + dtype_name(a.dtype()));
    }
  }

 private:
  void run_float(KernelContext& ctx, const MatMulDims& d, const float* a, const float* b, float* y,
                 bool use_packed, const Epilogue& ep = {}) const {
    Parallel* pool = &ctx.pool();
    auto one = [&](int64_t ai, int64_t bi, float* yp, Parallel* p) {
      GemmA ga{a + ai * d.m * d.k, d.k, false, nullptr};
      GemmB gb{b + bi * d.k * d.n, d.n, false, nullptr, nullptr};
      if (use_packed) gb = GemmB{nullptr, 0, false, &packed_[static_cast<size_t>(bi)], nullptr};
      kernels::gemm(p, d.m, d.n, d.k, alpha_, ga, gb, 0.f, yp, d.n, ep, products_);
    };
    if (d.b_matrices == 1) {
      // Every batch of A meets the same B: one GEMM over all rows of A.
      GemmA ga{a, d.k, false, nullptr};
      GemmB gb{b, d.n, false, nullptr, nullptr};
      if (use_packed) gb = GemmB{nullptr, 0, false, &packed_[0], nullptr};
      if (d.a_matrices == d.batch_count) {
        kernels::gemm(pool, d.m * d.batch_count, d.n, d.k, alpha_, ga, gb, 0.f, y, d.n, ep, products_);
        return;
      }
    }
    const double flops = 2.0 * static_cast<double>(d.m * d.n) * static_cast<double>(d.k);
    // Whole GEMMs per thread when they are small, or when the batches share
    // out evenly: each GEMM split across the threads pays a hand-off and
    // packs its operands on both (12 attention heads of 197x197x64: 0.40 ->
    // 0.2 ms).
    const int64_t threads = pool->num_threads();
    const int64_t rounds = (d.batch_count + threads - 1) / threads;
    const bool even = d.batch_count >= threads &&
                      static_cast<double>(d.batch_count) >= 0.9 * static_cast<double>(rounds * threads);
    if (d.batch_count > 1 && (flops < kSmallGemmFlops || even)) {
      pool->parallel_for(d.batch_count, 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          int64_t ai, bi;
          d.offsets(i, &ai, &bi);
          one(ai, bi, y + i * d.m * d.n, nullptr);
        }
      });
      return;
    }
    for (int64_t i = 0; i < d.batch_count; ++i) {
      int64_t ai, bi;
      d.offsets(i, &ai, &bi);
      one(ai, bi, y + i * d.m * d.n, pool);
    }
  }

  template <class T, class Acc>
  Status run_loop(KernelContext& ctx, const MatMulDims& d, const Tensor& a, const Tensor& b, Tensor& y) const {
    const T* ap = a.data<T>();
    const T* bp = b.data<T>();
    T* yp = y.data<T>();
    ctx.pool().parallel_for(d.batch_count, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        int64_t ai, bi;
        d.offsets(i, &ai, &bi);
        matmul_loop<T, Acc>(ap + ai * d.m * d.k, bp + bi * d.k * d.n, yp + i * d.m * d.n, d.m, d.n, d.k);
      }
    });
    return Status::Ok();
  }

  bool fused_ = false;  // ai.tessera.FusedMatMul: bias (input 2) and activation in the epilogue
  float alpha_ = 1.f;   // its attribute alpha: the product times alpha, before the bias
  // What products of two operands computed at run time multiply in (--precision; a packed B decides for itself).
  kernels::Products products_ = kernels::Products::kFp32;
  Epilogue act_;
  std::vector<PackedMatrix> packed_;
  Dims packed_dims_;  // dims of the constant B, empty when not packed
};

Expected<std::unique_ptr<Kernel>> create_matmul(const KernelInit& init) {
  return MatMulKernel::Create(init);
}

// ---- Gemm ---------------------------------------------------------------------

Status infer_gemm(InferContext& ctx) {
  const Shape& a = ctx.in_shape(0);
  const Shape& b = ctx.in_shape(1);
  const bool ta = ctx.node().attr_int("transA", 0) != 0;
  const bool tb = ctx.node().attr_int("transB", 0) != 0;
  if ((a.rank_known && a.rank() != 2) || (b.rank_known && b.rank() != 2)) {
    return ctx.error("Gemm inputs must be 2-D, got " + a.str() + " and " + b.str());
  }
  Dim m, n, ka, kb;
  if (a.rank_known) {
    m = ta ? a[1] : a[0];
    ka = ta ? a[0] : a[1];
  }
  if (b.rank_known) {
    n = tb ? b[0] : b[1];
    kb = tb ? b[1] : b[0];
  }
  if (ka.known() && kb.known() && ka.value != kb.value) {
    return ctx.error("inner dimensions differ: " + a.str() + " x " + b.str());
  }
  if (ctx.has_input(2)) {
    const Shape& c = ctx.in_shape(2);
    Shape out;
    if (c.rank_known && c.rank() > 2) return ctx.error("C must have rank <= 2, got " + c.str());
    if (!broadcast_shapes(c, Shape({m, n}), &out)) {
      return ctx.error("C " + c.str() + " cannot be broadcast to the output");
    }
  }
  ctx.set_output(0, ctx.in_dtype(0), Shape({m, n}));
  return Status::Ok();
}

class GemmKernel final : public Kernel {
 public:
  static Expected<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    auto k = std::make_unique<GemmKernel>();
    k->products_ = init.products;
    const Node& node = init.node;
    k->trans_a_ = node.attr_int("transA", 0) != 0;
    k->trans_b_ = node.attr_int("transB", 0) != 0;
    k->alpha_ = node.attr_float("alpha", 1.f);
    k->beta_ = node.attr_float("beta", 1.f);
    if (node.op_type == "FusedGemm") TSR_RETURN_IF_ERROR(kernels::activation_from_gemm_attrs(node, &k->act_));
    const Tensor* b = init.const_inputs.size() > 1 ? init.const_inputs[1] : nullptr;
    if (b && b->dtype() == DType::kFloat32 && b->rank() == 2 && (k->trans_b_ ? b->dim(0) : b->dim(1)) > 1) {
      const int64_t kk = k->trans_b_ ? b->dim(1) : b->dim(0);
      const int64_t n = k->trans_b_ ? b->dim(0) : b->dim(1);
      k->packed_b_ = PackedMatrix::PackConstantB(b->data<float>(), b->dim(1), k->trans_b_, kk, n, init.products);
      k->packed_dims_ = b->dims();
    }
    return std::unique_ptr<Kernel>(std::move(k));
  }

  Status run(KernelContext& ctx) const override {
    const Tensor& a = *ctx.input(0);
    const Tensor& b = *ctx.input(1);
    const Tensor* c = ctx.input(2);
    Tensor& y = *ctx.output(0);
    if (a.rank() != 2 || b.rank() != 2) return ctx.error("Gemm inputs must be 2-D");
    const int64_t m = trans_a_ ? a.dim(1) : a.dim(0);
    const int64_t k = trans_a_ ? a.dim(0) : a.dim(1);
    const int64_t n = trans_b_ ? b.dim(0) : b.dim(1);
    if ((trans_b_ ? b.dim(1) : b.dim(0)) != k) return ctx.error("inner dimensions differ");
    if (c && c->numel() == 0 && m * n != 0) c = nullptr;
    Dims cdims;
    if (c) {
      if (c->rank() > 2 || !broadcast_dims(c->dims(), {m, n}, &cdims) || cdims != Dims{m, n}) {
        return ctx.error("C " + dims_str(c->dims()) + " cannot be broadcast to [" + std::to_string(m) + "," +
                         std::to_string(n) + "]");
      }
    }
    if (y.numel() == 0) return Status::Ok();
    switch (a.dtype()) {
      case DType::kFloat32: return run_float(ctx, a, b, c, y, m, n, k, b.dims() == packed_dims_);
      case DType::kFloat16:
      case DType::kBFloat16:
      case DType::kFloat64: {
        if (a.dtype() == DType::kFloat64 && act_.act == kernels::Activation::kNone) {
          return run_loop<double>(ctx, a, b, c, y, m, n, k);
        }
        Tensor af = to_float32(a), bf = to_float32(b), yf(DType::kFloat32, y.dims());
        Tensor cf;
        if (c) cf = to_float32(*c);
        TSR_RETURN_IF_ERROR(run_float(ctx, af, bf, c ? &cf : nullptr, yf, m, n, k, false));
        assign_from_float32(yf, &y);
        return Status::Ok();
      }
      case DType::kInt32: return run_loop<int32_t>(ctx, a, b, c, y, m, n, k);
      case DType::kInt64: return run_loop<int64_t>(ctx, a, b, c, y, m, n, k);
      case DType::kUInt32: return run_loop<uint32_t>(ctx, a, b, c, y, m, n, k);
      case DType::kUInt64: return run_loop<uint64_t>(ctx, a, b, c, y, m, n, k);
      default: return Unsupported(ctx.node().describe() + ": Gemm on " + dtype_name(a.dtype()));
    }
  }

 private:
  Status run_float(KernelContext& ctx, const Tensor& a, const Tensor& b, const Tensor* c, Tensor& y, int64_t m,
                   int64_t n, int64_t k, bool use_packed) const {
    float* yp = y.data<float>();
    Epilogue ep = act_;
    float beta = 0.f;
    std::vector<float> bias;
    if (c && beta_ != 0.f) {
      const Dims& cd = c->dims();
      const float* cp = c->data<float>();
      const int64_t cn = c->numel();
      const bool per_col = cn == 1 || (cd.back() == n && cn == n);
      const bool per_row = !per_col && cd.size() == 2 && cd[0] == m && cd[1] == 1;
      if (per_col || per_row) {
        const int64_t len = per_col ? n : m;
        if (cn == len && beta_ == 1.f) {
          ep.bias = cp;
        } else {
          bias.resize(static_cast<size_t>(len));
          for (int64_t i = 0; i < len; ++i) bias[static_cast<size_t>(i)] = beta_ * cp[cn == 1 ? 0 : i];
          ep.bias = bias.data();
        }
        ep.bias_kind = per_col ? Epilogue::Bias::kPerCol : Epilogue::Bias::kPerRow;
      } else {
        std::memcpy(yp, cp, sizeof(float) * static_cast<size_t>(m * n));  // C is [M, N]
        beta = beta_;
      }
    }
    GemmA ga{a.data<float>(), a.dim(1), trans_a_, nullptr};
    GemmB gb{b.data<float>(), b.dim(1), trans_b_, nullptr, nullptr};
    if (use_packed) gb = GemmB{nullptr, 0, false, &packed_b_, nullptr};
    kernels::gemm(&ctx.pool(), m, n, k, alpha_, ga, gb, beta, yp, n, ep, products_);
    return Status::Ok();
  }

  template <class T>
  Status run_loop(KernelContext& ctx, const Tensor& a, const Tensor& b, const Tensor* c, Tensor& y, int64_t m,
                  int64_t n, int64_t k) const {
    const T* ap = a.data<T>();
    const T* bp = b.data<T>();
    T* yp = y.data<T>();
    std::vector<int64_t> cs;
    if (c) cs = broadcast_strides(c->dims(), {m, n});
    const T alpha = static_cast<T>(alpha_);
    const T beta = static_cast<T>(beta_);
    ctx.pool().parallel_for(m, 16, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          T acc{};
          for (int64_t p = 0; p < k; ++p) {
            const T av = trans_a_ ? ap[p * m + i] : ap[i * k + p];
            const T bv = trans_b_ ? bp[j * k + p] : bp[p * n + j];
            acc += av * bv;
          }
          T v = alpha * acc;
          if (c) v += beta * c->data<T>()[i * cs[0] + j * cs[1]];
          yp[i * n + j] = v;
        }
      }
    });
    return Status::Ok();
  }

  bool trans_a_ = false;
  bool trans_b_ = false;
  float alpha_ = 1.f;
  float beta_ = 1.f;
  Epilogue act_;
  kernels::Products products_ = kernels::Products::kFp32;  // as MatMulKernel's
  PackedMatrix packed_b_;
  Dims packed_dims_;
};

}  // namespace

TSR_REGISTER_OPS(matmul) {
  reg.add(OpSchema{"MatMul", "", infer_matmul, create_matmul, nullptr, {}});
  reg.add(OpSchema{"Gemm", "", infer_gemm, GemmKernel::Create, nullptr, {}});
  reg.add(OpSchema{"FusedGemm", "com.microsoft", infer_gemm, GemmKernel::Create, nullptr, {}});
  // MatMul + bias [N] + activation, made by the native fusion pass; the
  // activation attributes are FusedConv's (activation, activation_params).
  reg.add(OpSchema{"FusedMatMul", "ai.tessera", infer_matmul, create_matmul, nullptr, {}});
}

}  // namespace tessera
