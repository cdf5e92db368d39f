// float32 row primitives of norm_util.h, with AVX-512 and AVX2 versions; each
// call takes the AVX-512 one where the CPU has it (util/cpu_isa.h). The vector
// exp, and the AVX-512 max, exp-sum and affine rows, are ops/kernels/softmax_row.h's
// (shared with the oneDNN plugin's own softmax loop).
#include <cmath>
#include <cstdint>
#include <limits>

#include "ops/kernels/softmax_row.h"
#include "ops/norm_util.h"
#include "util/cpu_isa.h"

namespace tessera::normk {

TSR_AVX512_BEGIN
namespace avx512 {
namespace {

using rowk::avx512::exp16;
using rowk::avx512::tail_mask;

}  // namespace

float row_max(const float* x, int64_t n) { return rowk::avx512::row_max(x, n); }

float row_sum(const float* x, int64_t n) {
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm512_add_ps(s0, _mm512_loadu_ps(x + i));
    s1 = _mm512_add_ps(s1, _mm512_loadu_ps(x + i + 16));
  }
  for (; i < n; i += 16) s0 = _mm512_add_ps(s0, _mm512_maskz_loadu_ps(tail_mask(n - i), x + i));
  return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

float row_sum_sq_diff(const float* x, float c, int64_t n) {
  const __m512 vc = _mm512_set1_ps(c);
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512 d0 = _mm512_sub_ps(_mm512_loadu_ps(x + i), vc);
    __m512 d1 = _mm512_sub_ps(_mm512_loadu_ps(x + i + 16), vc);
    s0 = _mm512_fmadd_ps(d0, d0, s0);
    s1 = _mm512_fmadd_ps(d1, d1, s1);
  }
  for (; i < n; i += 16) {
    __mmask16 k = tail_mask(n - i);
    __m512 d = _mm512_maskz_sub_ps(k, _mm512_maskz_loadu_ps(k, x + i), vc);
    s0 = _mm512_fmadd_ps(d, d, s0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

float row_exp_shift_sum(const float* x, float shift, float* y, int64_t n) {
  return rowk::avx512::row_exp_shift_sum(x, shift, y, n);
}

void exp_inplace(float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, exp16(_mm512_loadu_ps(y + i)));
  if (i < n) {
    __mmask16 k = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, k, exp16(_mm512_maskz_loadu_ps(k, y + i)));
  }
}

void row_axpb(const float* x, float a, float b, float* y, int64_t n) { rowk::avx512::row_axpb(x, a, b, y, n); }

void row_mul_then_add(const float* x, float a, float b, float* y, int64_t n) {
  // The rounding-mode forms are builtins, not vector arithmetic, so the compiler does not contract them into an FMA.
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 k = tail_mask(n - i);
    __m512 p = _mm512_mul_round_ps(_mm512_maskz_loadu_ps(k, x + i), va, kRound);
    _mm512_mask_storeu_ps(y + i, k, _mm512_add_round_ps(p, vb, kRound));
  }
}

}  // namespace avx512
TSR_AVX512_END

// AVX2: 8 lanes, the tails scalar.
namespace avx2 {
namespace {

inline __m256 exp8(__m256 x) {
  using namespace rowk::expc;
  x = _mm256_max_ps(_mm256_set1_ps(kLo), x);
  x = _mm256_min_ps(_mm256_set1_ps(kHi), x);
  const __m256 n =
      _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kP0);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP1));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP5));
  const __m256 r2 = _mm256_mul_ps(r, r);
  p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // p * 2^n: n is within [-150, 128] after the clamp, so split it in two halves that each fit an exponent.
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i h = _mm256_srai_epi32(ni, 1);
  auto pow2 = [](__m256i e) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23));
  };
  return _mm256_mul_ps(_mm256_mul_ps(p, pow2(h)), pow2(_mm256_sub_epi32(ni, h)));
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace

float row_max(const float* x, int64_t n) {
  const __m256 ninf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 m0 = ninf, m1 = ninf;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    m0 = _mm256_max_ps(m0, _mm256_loadu_ps(x + i));
    m1 = _mm256_max_ps(m1, _mm256_loadu_ps(x + i + 8));
  }
  float m = hmax(_mm256_max_ps(m0, m1));
  for (; i < n; ++i) m = x[i] > m || x[i] != x[i] ? x[i] : m;
  return m;
}

float row_sum(const float* x, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_add_ps(s0, _mm256_loadu_ps(x + i));
    s1 = _mm256_add_ps(s1, _mm256_loadu_ps(x + i + 8));
  }
  float s = hsum(_mm256_add_ps(s0, s1));
  for (; i < n; ++i) s += x[i];
  return s;
}

float row_sum_sq_diff(const float* x, float c, int64_t n) {
  const __m256 vc = _mm256_set1_ps(c);
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(x + i), vc);
    const __m256 d1 = _mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vc);
    s0 = _mm256_fmadd_ps(d0, d0, s0);
    s1 = _mm256_fmadd_ps(d1, d1, s1);
  }
  float s = hsum(_mm256_add_ps(s0, s1));
  for (; i < n; ++i) s += (x[i] - c) * (x[i] - c);
  return s;
}

float row_exp_shift_sum(const float* x, float shift, float* y, int64_t n) {
  const __m256 vs = _mm256_set1_ps(shift);
  __m256 s0 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vs));
    _mm256_storeu_ps(y + i, e);
    s0 = _mm256_add_ps(s0, e);
  }
  float s = hsum(s0);
  for (; i < n; ++i) {
    y[i] = std::exp(x[i] - shift);
    s += y[i];
  }
  return s;
}

void exp_inplace(float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp8(_mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] = std::exp(y[i]);
}

}  // namespace avx2

float row_max(const float* x, int64_t n) { return cpu::avx512() ? avx512::row_max(x, n) : avx2::row_max(x, n); }

float row_sum(const float* x, int64_t n) { return cpu::avx512() ? avx512::row_sum(x, n) : avx2::row_sum(x, n); }

float row_sum_sq_diff(const float* x, float c, int64_t n) {
  return cpu::avx512() ? avx512::row_sum_sq_diff(x, c, n) : avx2::row_sum_sq_diff(x, c, n);
}

float row_exp_shift_sum(const float* x, float shift, float* y, int64_t n) {
  return cpu::avx512() ? avx512::row_exp_shift_sum(x, shift, y, n) : avx2::row_exp_shift_sum(x, shift, y, n);
}

void exp_inplace(float* y, int64_t n) {
  if (cpu::avx512()) {
    avx512::exp_inplace(y, n);
  } else {
    avx2::exp_inplace(y, n);
  }
}

// Elementwise: the compiler vectorises these for the baseline.
void row_axpb(const float* x, float a, float b, float* y, int64_t n) {
  if (cpu::avx512()) {
    avx512::row_axpb(x, a, b, y, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * a + b;
}

void row_mul_then_add(const float* x, float a, float b, float* y, int64_t n) {
  if (cpu::avx512()) {
    avx512::row_mul_then_add(x, a, b, y, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) y[i] = mul_unfused(x[i], a) + b;
}

void layernorm_row(const float* x, int64_t n, float eps, const float* scale, const float* bias, float* y,
                   float* mean_out, float* inv_std_out) {
  if (n < 8) {
    float sum = 0.f, sq = 0.f;
    for (int64_t h = 0; h < n; ++h) {
      sum += x[h];
      sq += mul_unfused(x[h], x[h]);
    }
    const float mean = sum / static_cast<float>(n);
    const float d = std::sqrt(sq / static_cast<float>(n) - mul_unfused(mean, mean) + eps);
    for (int64_t h = 0; h < n; ++h) {
      const float v = mul_unfused((x[h] - mean) / d, scale[h]);
      y[h] = bias ? v + bias[h] : v;
    }
    if (mean_out) *mean_out = mean;
    if (inv_std_out) *inv_std_out = 1.f / d;
    return;
  }
  // The mean: a double sum (four partial sums; in double their order does not reach the float result).
  double s4[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int k = 0; k < 4; ++k) s4[k] += static_cast<double>(x[i + k]);
  }
  double sum = (s4[0] + s4[1]) + (s4[2] + s4[3]);
  for (; i < n; ++i) sum += static_cast<double>(x[i]);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  // The variance: eight float lanes, exactly in that order.
  const __m256 vm = _mm256_set1_ps(mean);
  __m256 acc = _mm256_setzero_ps();
  for (i = 0; i + 8 <= n; i += 8) {
    const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + i), vm);
    acc = _mm256_fmadd_ps(d, d, acc);
  }
  __m128 r = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  float sq = _mm_cvtss_f32(r);
  for (; i < n; ++i) {
    const float d = x[i] - mean;
    sq = std::fma(d, d, sq);
  }
  const float var = sq / static_cast<float>(n);
  const float inv = 1.f / std::sqrt(var + eps);
  const __m256 vi = _mm256_set1_ps(inv);
  for (i = 0; i + 8 <= n; i += 8) {
    const __m256 t = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm), vi);
    const __m256 b = bias ? _mm256_loadu_ps(bias + i) : _mm256_setzero_ps();
    _mm256_storeu_ps(
        y + i, bias ? _mm256_fmadd_ps(t, _mm256_loadu_ps(scale + i), b) : _mm256_mul_ps(t, _mm256_loadu_ps(scale + i)));
  }
  for (; i < n; ++i) {
    const float t = mul_unfused(x[i] - mean, inv);
    y[i] = bias ? std::fma(t, scale[i], bias[i]) : mul_unfused(t, scale[i]);
  }
  if (mean_out) *mean_out = mean;
  if (inv_std_out) *inv_std_out = inv;
}

}  // namespace tessera::normk
