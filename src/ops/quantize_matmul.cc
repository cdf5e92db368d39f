// MatMulInteger and QLinearMatMul: numpy matmul semantics (1-D promotion,
// batch broadcasting) over 8-bit operands on the integer GEMM of
// quantize_gemm.h.
//
// Zero points (and QLinearMatMul's scales) of A are per tensor or per row,
// those of B per tensor or per column; a per-row/column tensor may also hold
// one set per batch matrix ([..., M, 1] / [..., 1, N]). A constant B with a
// constant zero point is packed once when the kernel is created.
// QLinearMatMul requantizes the int32 products with
//   y = saturate(round_half_even(acc * (a_scale * b_scale / y_scale)) + y_zp).
#include <algorithm>

#include "ops/matmul_util.h"
#include "ops/quantize_gemm.h"
#include "ops/quantize_ops.h"
#include "util/parallel.h"

namespace tessera::quant {

namespace {

using qgemm::Int8Ref;
using qgemm::QPackedA;
using qgemm::QPackedB;
using qgemm::ZeroPoints;

// Batches whose GEMMs are smaller than this run one per thread.
constexpr double kSmallGemmOps = 4.0e6;

Status infer_qmatmul(InferContext& ctx, int a_index, int b_index, DType out_dtype) {
  return infer_matmul_output(ctx, a_index, b_index, out_dtype);
}

Status infer_matmul_integer(InferContext& ctx) { return infer_qmatmul(ctx, 0, 1, DType::kInt32); }

Status infer_qlinear_matmul(InferContext& ctx) {
  const DType out = ctx.in_dtype(7) == DType::kUndefined ? DType::kUInt8 : ctx.in_dtype(7);
  return infer_qmatmul(ctx, 0, 3, out);
}

// Concrete layout of a batched matmul.

// Expands per-tensor / per-row (or column) / per-batch-row values to one per
// row of every matrix: `rows` rows in each of `matrices` matrices.
template <class V>
Expected<std::vector<V>> expand_per_row(const KernelContext& ctx, const std::vector<V>& v, int64_t rows,
                                        int64_t matrices, const char* what) {
  const auto n = static_cast<int64_t>(v.size());
  std::vector<V> out(static_cast<size_t>(rows * matrices), V{});
  if (n == 0) return out;
  if (n != 1 && n != rows && n != rows * matrices) {
    return ctx.error(std::string(what) + " has " + std::to_string(n) + " values; expected 1, " +
                     std::to_string(rows) + " or " + std::to_string(rows * matrices));
  }
  for (int64_t i = 0; i < rows * matrices; ++i) out[static_cast<size_t>(i)] = v[static_cast<size_t>(i % n)];
  return out;
}

// B matrices (with their zero points) packed at kernel creation.
struct PackedWeights {
  std::vector<QPackedB> matrices;
  Dims dims;  // dims of the constant B; empty when nothing is packed
};

// Packs a constant B when it and its zero point are known.
PackedWeights pack_constant_b(const KernelInit& init, int b_index, int zb_index) {
  PackedWeights w;
  const auto in = [&](int i) -> const Tensor* {
    return i < static_cast<int>(init.const_inputs.size()) ? init.const_inputs[static_cast<size_t>(i)] : nullptr;
  };
  const Tensor* b = in(b_index);
  const bool zb_present = init.node.has_input(zb_index);
  const Tensor* zb = in(zb_index);
  if (!b || !is_8bit(b->dtype()) || b->rank() < 1 || (zb_present && (!zb || zb->dtype() != b->dtype()))) return w;
  Dims bd = b->dims();
  if (bd.size() == 1) bd.push_back(1);
  const int64_t k = bd[bd.size() - 2], n = bd.back();
  const int64_t count = numel(Dims(bd.begin(), bd.end() - 2));
  const std::vector<int32_t> zv = int_values(zb_present ? zb : nullptr);
  const auto zn = static_cast<int64_t>(zv.size());
  if (zn > 1 && zn != n && zn != n * count) return w;  // reported when the kernel runs
  std::vector<int32_t> cols(static_cast<size_t>(n * count), 0);
  for (int64_t i = 0; zn > 0 && i < n * count; ++i) cols[static_cast<size_t>(i)] = zv[static_cast<size_t>(i % zn)];
  for (int64_t i = 0; i < count; ++i) {
    const Int8Ref ref{static_cast<const int8_t*>(b->raw()) + i * k * n, b->dtype() == DType::kInt8};
    qgemm::QMatrixB src(ref, n, k, n, ZeroPoints{cols.data() + i * n, 1});
    w.matrices.push_back(QPackedB::Pack(src, k, n));
  }
  w.dims = b->dims();
  return w;
}

// QLinearMatMul's requantization: per-row A scales and per-column B scales
// (expanded to every matrix), and the output's scale and zero point.
struct Requant {
  std::vector<float> sa, sb;
  bool b_uniform = false;  // one B scale for all columns
  float y_scale = 1.f;
  int32_t y_zp = 0;
  Tensor* y = nullptr;
};

// Requantizes finished GEMM blocks into Y. Rows are rows of the GEMM's A:
// one batch item's rows (`item` >= 0), or every item's rows stacked
// (`item` < 0, a single B).
class RequantSink final : public qgemm::QTileSink {
 public:
  RequantSink(const Requant& q, const MatMulDims& d, int64_t item) : q_(q), d_(d), item_(item) {}

  void consume(int64_t i0, int64_t mi, int64_t j0, int64_t nj, const int32_t* c, int64_t ldc) const override {
    float mult[qgemm::kQMaxBlockCols];
    for (int64_t r = i0; r < i0 + mi; ++r) {
      const int64_t t = item_ < 0 ? r / d_.m : item_, i = item_ < 0 ? r % d_.m : r;
      int64_t am, bm;
      d_.offsets(t, &am, &bm);
      const float ra = q_.sa[static_cast<size_t>(am * d_.m + i)];
      const float* cb = q_.sb.data() + bm * d_.n + j0;
      int64_t stride = 1;
      if (q_.b_uniform) {
        mult[0] = ra * cb[0] / q_.y_scale;
        stride = 0;
      } else {
        for (int64_t j = 0; j < nj; ++j) mult[j] = ra * cb[j] / q_.y_scale;
      }
      const int32_t* row = c + (r - i0) * ldc;
      const int64_t out = (t * d_.m + i) * d_.n + j0;
      if (q_.y->dtype() == DType::kUInt8) {
        qgemm::requantize<uint8_t>(row, nj, 0, mult, stride, q_.y_zp, q_.y->data<uint8_t>() + out);
      } else {
        qgemm::requantize<int8_t>(row, nj, 0, mult, stride, q_.y_zp, q_.y->data<int8_t>() + out);
      }
    }
  }

 private:
  const Requant& q_;
  const MatMulDims& d_;
  int64_t item_;
};

// (A - za) x (B - zb) with za one value per row of every A matrix and zb one
// per column of every B matrix, into int32 Y or, with `q`, requantized.
void run_int_matmul(Parallel* pool, const MatMulDims& d, const Tensor& a, const Tensor& b,
                    const std::vector<int32_t>& za, const std::vector<int32_t>& zb, const PackedWeights* packed,
                    int32_t* y, const Requant* q) {
  const Int8Ref ar = qgemm::int8_ref(a);
  auto a_matrix = [&](int64_t ai, int64_t count) {
    const Int8Ref r{static_cast<const int8_t*>(ar.data) + ai * d.m * d.k, ar.is_signed};
    return QPackedA::Pack(r, d.k, d.m * count, d.k, ZeroPoints{za.data() + ai * d.m, 1});
  };
  // item < 0: all of A's rows against the single B.
  auto one = [&](const QPackedA& pa, int64_t item, int64_t bi, Parallel* p) {
    const Int8Ref r{static_cast<const int8_t*>(b.raw()) + bi * d.k * d.n, b.dtype() == DType::kInt8};
    const qgemm::QMatrixB matrix(r, d.n, d.k, d.n, ZeroPoints{zb.data() + bi * d.n, 1});
    const qgemm::QBSource& src =
        packed ? static_cast<const qgemm::QBSource&>(packed->matrices[static_cast<size_t>(bi)]) : matrix;
    if (q) {
      qgemm::qgemm(p, pa, src, d.n, RequantSink(*q, d, item));
    } else {
      qgemm::qgemm(p, pa, src, d.n, y + std::max<int64_t>(item, 0) * d.m * d.n, d.n);
    }
  };
  if (d.b_matrices == 1 && d.a_matrices == d.batch_count) {
    // Every A matrix meets the same B: one GEMM over all rows of A.
    one(a_matrix(0, d.a_matrices), -1, 0, pool);
    return;
  }
  const double ops = 2.0 * static_cast<double>(d.m * d.n) * static_cast<double>(d.k);
  auto item = [&](int64_t i, Parallel* p) {
    int64_t ai, bi;
    d.offsets(i, &ai, &bi);
    one(a_matrix(ai, 1), i, bi, p);
  };
  if (pool && d.batch_count > 1 && ops < kSmallGemmOps) {
    pool->parallel_for(d.batch_count, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) item(i, nullptr);
    });
    return;
  }
  for (int64_t i = 0; i < d.batch_count; ++i) item(i, pool);
}

class QMatMulKernel final : public Kernel {
 public:
  static Expected<std::unique_ptr<Kernel>> Create(const KernelInit& init) {
    auto k = std::make_unique<QMatMulKernel>();
    k->qlinear_ = init.node.op_type == "QLinearMatMul";
    k->packed_ = pack_constant_b(init, k->qlinear_ ? 3 : 1, k->qlinear_ ? 5 : 3);
    return std::unique_ptr<Kernel>(std::move(k));
  }

  Status run(KernelContext& ctx) const override {
    const int ai = 0, bi = qlinear_ ? 3 : 1, zai = 2, zbi = qlinear_ ? 5 : 3;
    TSR_RETURN_IF_ERROR(check_8bit_input(ctx, ai, "A"));
    TSR_RETURN_IF_ERROR(check_8bit_input(ctx, bi, "B"));
    const Tensor& a = *ctx.input(ai);
    const Tensor& b = *ctx.input(bi);
    const Tensor* za = ctx.input(zai);
    const Tensor* zb = ctx.input(zbi);
    if (za && za->defined() && za->dtype() != a.dtype()) return ctx.error("A and its zero point differ in type");
    if (zb && zb->defined() && zb->dtype() != b.dtype()) return ctx.error("B and its zero point differ in type");
    TSR_ASSIGN_OR_RETURN(MatMulDims d, matmul_dims(ctx.node(), a.dims(), b.dims()));
    TSR_ASSIGN_OR_RETURN(std::vector<int32_t> za_rows,
                         expand_per_row(ctx, int_values(za), d.m, d.a_matrices, "A's zero point"));
    TSR_ASSIGN_OR_RETURN(std::vector<int32_t> zb_cols,
                         expand_per_row(ctx, int_values(zb), d.n, d.b_matrices, "B's zero point"));
    Tensor& y = *ctx.output(0);
    if (y.numel() == 0) return Status::Ok();
    const PackedWeights* packed = !packed_.dims.empty() && b.dims() == packed_.dims ? &packed_ : nullptr;
    if (!qlinear_) {
      run_int_matmul(&ctx.pool(), d, a, b, za_rows, zb_cols, packed, y.data<int32_t>(), nullptr);
      return Status::Ok();
    }
    for (int i : {1, 4, 6}) {
      const Tensor* s = ctx.input(i);
      if (!s || !dtype_is_float(s->dtype())) return ctx.error("scales must be float tensors");
    }
    TSR_RETURN_IF_ERROR(check_8bit_input(ctx, 7, "y_zero_point"));
    if (ctx.input(7)->dtype() != y.dtype()) return ctx.error("y and its zero point differ in type");
    const std::vector<float> ys = float_values(*ctx.input(6));
    const std::vector<int32_t> yz = int_values(ctx.input(7));
    if (ys.size() != 1 || yz.size() != 1) return ctx.error("y_scale and y_zero_point must hold one value");
    Requant q;
    TSR_ASSIGN_OR_RETURN(q.sa, expand_per_row(ctx, float_values(*ctx.input(1)), d.m, d.a_matrices, "a_scale"));
    TSR_ASSIGN_OR_RETURN(q.sb, expand_per_row(ctx, float_values(*ctx.input(4)), d.n, d.b_matrices, "b_scale"));
    q.b_uniform = ctx.input(4)->numel() == 1;
    q.y_scale = ys[0];
    q.y_zp = yz[0];
    q.y = &y;
    run_int_matmul(&ctx.pool(), d, a, b, za_rows, zb_cols, packed, nullptr, &q);
    return Status::Ok();
  }

 private:
  bool qlinear_ = false;
  PackedWeights packed_;
};

}  // namespace

OpSchema qlinear_matmul_schema() {
  return OpSchema{"QLinearMatMul", "", infer_qlinear_matmul, QMatMulKernel::Create, nullptr, {}};
}

OpSchema matmul_integer_schema() {
  return OpSchema{"MatMulInteger", "", infer_matmul_integer, QMatMulKernel::Create, nullptr, {}};
}

}  // namespace tessera::quant
