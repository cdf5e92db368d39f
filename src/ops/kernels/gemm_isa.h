// The GEMM per instruction set: gemm_impl.inc is compiled twice, for AVX-512
// (gemm_avx512.cc) and for AVX2 + FMA (gemm_avx2.cc), whatever the rest of the
// build targets; gemm.cc picks one when first used, by cpu::avx512()
// (util/cpu_isa.h; TESSERA_ISA=avx2 forces the AVX2 one, e.g. for tests), and
// every GEMM of the process uses it: packed operands (PackedMatrix) keep one
// layout.
#pragma once

#include <cstdint>

#include "ops/kernels/gemm.h"

namespace tessera::kernels {

struct GemmIsa {
  const char* name;  // "avx512", "avx2"
  int mr, nr;
  int64_t kc;
  PackedMatrix (*pack_a)(const float* a, int64_t lda, bool trans, int64_t m, int64_t k);
  PackedMatrix (*pack_b)(const float* b, int64_t ldb, bool trans, int64_t k, int64_t n);
  // The packers of bf16 and fp16 pairs (gemm.h: Products); null where the set has no narrow products (AVX2).
  PackedMatrix (*pack_a_pairs)(Products p, const float* a, int64_t lda, bool trans, int64_t m, int64_t k);
  PackedMatrix (*pack_b_pairs)(Products p, const float* b, int64_t ldb, bool trans, int64_t k, int64_t n);
  // The wide packer (gemm.h: PackConstantAWide) and its panels' rows; null and 0 where the set has none (AVX2).
  PackedMatrix (*pack_a_wide)(const float* a, int64_t lda, bool trans, int64_t m, int64_t k);
  int wide_rows;
  void (*gemm)(Parallel* pool, int64_t m, int64_t n, int64_t k, float alpha, const GemmA& a, const GemmB& b, float beta,
               float* c, int64_t ldc, const Epilogue& ep, Products products);
  void (*apply_activation)(const Epilogue& ep, float* x, int64_t n);
  void (*apply_epilogue)(const Epilogue& ep, int64_t m, int64_t n, float* c, int64_t ldc);
};

namespace avx512 {
const GemmIsa& table();
}
namespace avx2 {
const GemmIsa& table();
}

// The one this process uses.
const GemmIsa& gemm_isa();

}  // namespace tessera::kernels
