// The GEMM's public entry points (gemm.h), dispatched at run time to the
// implementation for the CPU's instruction set (gemm_isa.h).
#include "ops/kernels/gemm.h"

#include <cstdlib>
#include <cstring>

#include "ops/kernels/gemm_isa.h"
#include "util/cpu_isa.h"

namespace tessera::kernels {

const GemmIsa& gemm_isa() {
  static const GemmIsa& isa = cpu::avx512() ? avx512::table() : avx2::table();
  return isa;
}

const char* gemm_isa_name() { return gemm_isa().name; }
int gemm_mr() { return gemm_isa().mr; }
int gemm_nr() { return gemm_isa().nr; }
int64_t gemm_kc() { return gemm_isa().kc; }

PackedMatrix PackedMatrix::Make(Side side, int64_t rows, int64_t cols, int64_t padded, std::shared_ptr<float> data) {
  PackedMatrix pm;
  pm.side_ = side;
  pm.rows_ = rows;
  pm.cols_ = cols;
  pm.padded_ = padded;
  pm.data_ = std::move(data);
  return pm;
}

size_t PackedMatrix::bytes() const {
  return static_cast<size_t>(padded_) * static_cast<size_t>(side_ == Side::kA ? cols_ : rows_) * sizeof(float);
}

PackedMatrix PackedMatrix::PackA(const float* a, int64_t lda, bool trans, int64_t m, int64_t k) {
  return gemm_isa().pack_a(a, lda, trans, m, k);
}

PackedMatrix PackedMatrix::PackB(const float* b, int64_t ldb, bool trans, int64_t k, int64_t n) {
  return gemm_isa().pack_b(b, ldb, trans, k, n);
}

void gemm(Parallel* pool, int64_t m, int64_t n, int64_t k, float alpha, const GemmA& a, const GemmB& b, float beta,
          float* c, int64_t ldc, const Epilogue& ep) {
  gemm_isa().gemm(pool, m, n, k, alpha, a, b, beta, c, ldc, ep);
}

void sgemm(Parallel* pool, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
           const Epilogue& ep) {
  GemmA ga{a, lda, trans_a, nullptr};
  GemmB gb{b, ldb, trans_b, nullptr, nullptr};
  gemm(pool, m, n, k, alpha, ga, gb, beta, c, ldc, ep);
}

void apply_activation(const Epilogue& ep, float* x, int64_t n) { gemm_isa().apply_activation(ep, x, n); }

void apply_epilogue(const Epilogue& ep, int64_t m, int64_t n, float* c, int64_t ldc) {
  gemm_isa().apply_epilogue(ep, m, n, c, ldc);
}

}  // namespace tessera::kernels
