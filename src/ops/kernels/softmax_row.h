// Softmax and log-softmax over a contiguous float32 row on AVX-512, header-only so that the native kernels (whose
// AVX-512 row primitives in ops/norm_rows.cc are these; ops/softmax.cc composes them as softmax_row does) and the
// oneDNN plugin's own loop compute them with the same instructions in the same order (oneDNN 2.7's softmax_v2 took
// 2-2.5x native's time on attention's rows). Callers check the CPU (cpu::avx512() in Tessera; the plugin its own
// check) before calling anything in `avx512`.
//
// A softmax row's exponentials are MLAS's (sum_exp16, ONNX Runtime's bits); exp16, for any x, is the Cephes
// single-precision polynomial evaluated after a range reduction by ln 2, within 2 ulp over the float range. NaN
// propagates (max and min return their second operand when either is NaN).
#pragma once

// First: it brings <immintrin.h> with GCC 12's false uninitialized warnings silenced, and TSR_AVX512_BEGIN (the
// macros only: nothing here calls into util).
#include "util/cpu_isa.h"

#include <cmath>
#include <cstdint>
#include <limits>

namespace tessera::rowk {

// Denormal results flushed to zero, and denormal operands read as zero, on this thread while it lives (MXCSR's FTZ
// and DAZ; restored after). A masked attention score's exponential, clamped at -103.97 as ONNX Runtime's, is about
// 7e-46, a denormal, and every denormal result costs a microcode assist: softmax rows of 512 with a fifth of them
// masked ran 3.4x slower (4.45 against 1.32 ms for 6144 rows, one thread). Such a probability becomes 0 instead.
// Held once per thread's share of rows, not per row: saving and setting MXCSR costs about 10 ns, 6 % of a row of 512
// and a third of a row of 64.
class FlushDenormals {
 public:
  FlushDenormals() : csr_(_mm_getcsr()) { _mm_setcsr(csr_ | 0x8040u); }
  ~FlushDenormals() { _mm_setcsr(csr_); }
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;

 private:
  unsigned csr_;
};

// The exp polynomial's constants, shared by the AVX-512 and AVX2 versions.
namespace expc {
constexpr float kLo = -104.0f, kHi = 88.72f, kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f, kP3 = 4.1665795894e-2f,
                kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;
}  // namespace expc

TSR_AVX512_BEGIN
namespace avx512 {

inline __mmask16 tail_mask(int64_t remaining) {
  return remaining >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << remaining) - 1u);
}

inline __m512 exp16(__m512 x) {
  using namespace expc;
  x = _mm512_max_ps(_mm512_set1_ps(kLo), x);
  x = _mm512_min_ps(_mm512_set1_ps(kHi), x);
  const __m512 n =
      _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kP0);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP1));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP5));
  const __m512 r2 = _mm512_mul_ps(r, r);
  p = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

inline float row_max(const float* x, int64_t n) {
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 m0 = ninf, m1 = ninf;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + i));
    m1 = _mm512_max_ps(m1, _mm512_loadu_ps(x + i + 16));
  }
  for (; i < n; i += 16) m0 = _mm512_max_ps(m0, _mm512_mask_loadu_ps(ninf, tail_mask(n - i), x + i));
  return _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
}

// exp(x) for x <= 0 (x - max of a softmax row) as ONNX Runtime's AVX-512 softmax computes it (MLAS's sum-exp
// kernel): clamped below at -103.97, m = round(x / ln 2) by a rounding bias, x reduced by m * ln 2 in two parts, a
// degree-6 polynomial by FMAs, scaled by 2^m. Its bits, so that a model that quantizes a Softmax output (a quantized
// transformer's attention) gets ONNX Runtime's steps.
inline __m512 sum_exp16(__m512 x) {
  const __m512 bias = _mm512_set1_ps(12582912.0f);  // 1.5 * 2^23
  x = _mm512_max_ps(_mm512_set1_ps(-103.9720840454f), x);
  const __m512 m = _mm512_sub_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), bias), bias);
  x = _mm512_fmadd_ps(m, _mm512_set1_ps(-6.93145752e-1f), x);
  x = _mm512_fmadd_ps(m, _mm512_set1_ps(-1.42860677e-6f), x);
  __m512 p = _mm512_set1_ps(0x1.694000p-10f);
  p = _mm512_fmadd_ps(p, x, _mm512_set1_ps(0x1.125edcp-7f));
  p = _mm512_fmadd_ps(p, x, _mm512_set1_ps(0x1.555b5ap-5f));
  p = _mm512_fmadd_ps(p, x, _mm512_set1_ps(0x1.555450p-3f));
  p = _mm512_fmadd_ps(p, x, _mm512_set1_ps(0x1.fffff6p-2f));
  p = _mm512_fmadd_ps(p, x, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, x, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, m);
}

// y = exp(x - shift), shift the row's maximum; returns sum(y). y may alias x. As ONNX Runtime's AVX-512 softmax: x
// plus the negated maximum, sum_exp16, the vectors added in order into one accumulator, its lanes reduced as
// ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)) with a_i = lane i + lane i + 8.
inline float row_exp_shift_sum(const float* x, float shift, float* y, int64_t n) {
  const __m512 neg = _mm512_set1_ps(-shift);
  __m512 s0 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 e = sum_exp16(_mm512_add_ps(_mm512_loadu_ps(x + i), neg));
    _mm512_storeu_ps(y + i, e);
    s0 = _mm512_add_ps(s0, e);
  }
  if (i < n) {
    __mmask16 k = tail_mask(n - i);
    __m512 e = sum_exp16(_mm512_maskz_add_ps(k, _mm512_maskz_loadu_ps(k, x + i), neg));
    _mm512_mask_storeu_ps(y + i, k, e);
    s0 = _mm512_mask_add_ps(s0, k, s0, e);
  }
  const __m256 a =
      _mm256_add_ps(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s0), 1)), _mm512_castps512_ps256(s0));
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a, a), _mm256_hadd_ps(a, a));
  return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
}

// y = x * a + b (scalars a, b). y may alias x.
inline void row_axpb(const float* x, float a, float b, float* y, int64_t n) {
  const __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_fmadd_ps(_mm512_loadu_ps(x + i), va, vb));
  if (i < n) {
    __mmask16 k = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, k, _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, x + i), va, vb));
  }
}

// y = softmax(x) over the row, or log-softmax: x - (max + log(sum(exp(x - max)))). y may alias x for softmax only
// (log-softmax reads x after the exponentials went to y). Callers hold a FlushDenormals around their rows.
inline void softmax_row(const float* x, float* y, int64_t n, bool log) {
  const float m = row_max(x, n);
  const float s = row_exp_shift_sum(x, m, y, n);
  if (log) {
    row_axpb(x, 1.0f, -(m + std::log(s)), y, n);
  } else {
    row_axpb(y, 1.0f / s, 0.0f, y, n);
  }
}

}  // namespace avx512
TSR_AVX512_END

}  // namespace tessera::rowk
