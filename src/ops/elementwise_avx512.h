// The activations of ops/elementwise_math.h whose bits must be ONNX Runtime's (fastmath::logistic, hard_swish), on
// 16 lanes: operation for operation and with the same constants, so that a vector loop gives the scalar function's
// bits. Header-only, for native's GEMM epilogue and for the plugins' own loops. Call only where the CPU has AVX-512
// (the callers branch on it); compile the caller without floating-point contraction where it matters (these use
// explicit FMAs only where the scalar functions do).
#pragma once

// As in util/cpu_isa.h: GCC 12 reports the intrinsics' deliberately undefined operands once they are inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include "ops/elementwise_math.h"

namespace tessera::fastmath::avx512 {

// fastmath::logistic. NaN passes through both clamps (max and min return their second operand).
[[gnu::always_inline]] __attribute__((target("avx512f"))) inline __m512 logistic16(__m512 x) {
  __m512 v = _mm512_max_ps(_mm512_set1_ps(-kLogisticClamp), x);
  v = _mm512_min_ps(_mm512_set1_ps(kLogisticClamp), v);
  const __m512 x2 = _mm512_mul_ps(v, v);
  __m512 p = _mm512_fmadd_ps(x2, _mm512_set1_ps(kLogisticP[0]), _mm512_set1_ps(kLogisticP[1]));
#pragma GCC unroll 4
  for (int i = 2; i < 5; ++i) p = _mm512_fmadd_ps(x2, p, _mm512_set1_ps(kLogisticP[i]));
  __m512 q = _mm512_fmadd_ps(x2, _mm512_set1_ps(kLogisticQ[0]), _mm512_set1_ps(kLogisticQ[1]));
#pragma GCC unroll 4
  for (int i = 2; i < 6; ++i) q = _mm512_fmadd_ps(x2, q, _mm512_set1_ps(kLogisticQ[i]));
  const __m512 r = _mm512_add_ps(_mm512_div_ps(_mm512_mul_ps(v, p), q), _mm512_set1_ps(0.5f));
  return _mm512_max_ps(_mm512_setzero_ps(), r);  // r < 0 ? 0 : r, NaN kept
}

// fastmath::hard_swish: x * clamp(x * (1/6) + 0.5, 0, 1), the product and the sum rounded apart; NaN kept.
[[gnu::always_inline]] __attribute__((target("avx512f"))) inline __m512 hard_swish16(__m512 x) {
  __m512 v = _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(1.0f / 6.0f), x), _mm512_set1_ps(0.5f));
  v = _mm512_min_ps(_mm512_set1_ps(1.0f), v);
  v = _mm512_max_ps(_mm512_setzero_ps(), v);
  return _mm512_mul_ps(x, v);
}

}  // namespace tessera::fastmath::avx512
