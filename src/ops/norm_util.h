// Helpers shared by the normalisation, softmax and loss kernels (norm.cc,
// softmax.cc, misc.cc): dtype dispatch restricted to floating types, and
// float32 row primitives (max, sum, exp, affine normalisation) vectorised with
// AVX-512 where the compiler targets it, with scalar fallbacks elsewhere.
//
// The vector exp is the Cephes single-precision polynomial evaluated after a
// range reduction by ln 2; its error is within 2 ulp over the float range,
// which is well inside what softmax and log-softmax need.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#if defined(__AVX512F__)
// GCC 12 reports the deliberately undefined pass-through operand of the
// AVX-512 intrinsics (_mm512_undefined_ps) as maybe-uninitialized once they
// are inlined; the warning is a false positive located in the intrinsics
// header, so it is silenced for that header only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

#include "ir/dtype.h"
#include "ir/shape.h"
#include "ops/op_registry.h"

namespace tessera::normk {

// Accumulation type: double for double inputs, float for everything else.
template <class T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Calls fn(T{}) for float32/float64/float16/bfloat16 and returns true; returns
// false (without calling) for any other dtype.
template <class Fn>
bool visit_float(DType t, Fn&& fn) {
  switch (t) {
    case DType::kFloat32: fn(float{}); return true;
    case DType::kFloat64: fn(double{}); return true;
    case DType::kFloat16: fn(Float16{}); return true;
    case DType::kBFloat16: fn(BFloat16{}); return true;
    default: return false;
  }
}

// A stateless kernel that also needs the model's opset (KernelContext does
// not carry it): register with make_opset_kernel<fn> as the factory.
using OpsetKernelFn = Status (*)(KernelContext& ctx, int64_t opset);

class OpsetKernel final : public Kernel {
 public:
  OpsetKernel(OpsetKernelFn fn, int64_t opset) : fn_(fn), opset_(opset) {}
  Status run(KernelContext& ctx) const override { return fn_(ctx, opset_); }

 private:
  OpsetKernelFn fn_;
  int64_t opset_;
};

template <OpsetKernelFn kFn>
Expected<std::unique_ptr<Kernel>> make_opset_kernel(const KernelInit& init) {
  return std::unique_ptr<Kernel>(std::make_unique<OpsetKernel>(kFn, init.opset));
}

inline int64_t prod(const Dims& d, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end && i < d.size(); ++i) p *= d[i];
  return p;
}

// Grain (rows per task) so that one task touches about `target` elements.
inline int64_t row_grain(int64_t row_len, int64_t target = 16384) {
  return std::max<int64_t>(1, target / std::max<int64_t>(1, row_len));
}

#if defined(__AVX512F__)
inline __mmask16 tail_mask(int64_t remaining) {
  return remaining >= 16 ? static_cast<__mmask16>(0xFFFF)
                         : static_cast<__mmask16>((1u << remaining) - 1u);
}

// exp(x) for 16 lanes. NaN propagates (max/min return their second operand
// when either is NaN).
inline __m512 exp16(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
  x = _mm512_min_ps(_mm512_set1_ps(88.72f), x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 r2 = _mm512_mul_ps(r, r);
  p = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}
#endif

inline float row_max(const float* x, int64_t n) {
#if defined(__AVX512F__)
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 m0 = ninf, m1 = ninf;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + i));
    m1 = _mm512_max_ps(m1, _mm512_loadu_ps(x + i + 16));
  }
  for (; i < n; i += 16) m0 = _mm512_max_ps(m0, _mm512_mask_loadu_ps(ninf, tail_mask(n - i), x + i));
  return _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
#else
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  return m;
#endif
}

inline float row_sum(const float* x, int64_t n) {
#if defined(__AVX512F__)
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm512_add_ps(s0, _mm512_loadu_ps(x + i));
    s1 = _mm512_add_ps(s1, _mm512_loadu_ps(x + i + 16));
  }
  for (; i < n; i += 16) s0 = _mm512_add_ps(s0, _mm512_maskz_loadu_ps(tail_mask(n - i), x + i));
  return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
#else
  float s = 0.f;
  for (int64_t i = 0; i < n; ++i) s += x[i];
  return s;
#endif
}

// sum((x - c)^2)
inline float row_sum_sq_diff(const float* x, float c, int64_t n) {
#if defined(__AVX512F__)
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
#else
  float s = 0.f;
  for (int64_t i = 0; i < n; ++i) s += (x[i] - c) * (x[i] - c);
  return s;
#endif
}

// y = exp(x - shift); returns sum(y). y may alias x.
inline float row_exp_shift_sum(const float* x, float shift, float* y, int64_t n) {
#if defined(__AVX512F__)
  const __m512 vs = _mm512_set1_ps(shift);
  __m512 s0 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), vs));
    _mm512_storeu_ps(y + i, e);
    s0 = _mm512_add_ps(s0, e);
  }
  if (i < n) {
    __mmask16 k = tail_mask(n - i);
    __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vs));
    _mm512_mask_storeu_ps(y + i, k, e);
    s0 = _mm512_add_ps(s0, _mm512_maskz_mov_ps(k, e));
  }
  return _mm512_reduce_add_ps(s0);
#else
  float s = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    y[i] = std::exp(x[i] - shift);
    s += y[i];
  }
  return s;
#endif
}

// y = exp(x) elementwise, in place.
inline void exp_inplace(float* y, int64_t n) {
#if defined(__AVX512F__)
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, exp16(_mm512_loadu_ps(y + i)));
  if (i < n) {
    __mmask16 k = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, k, exp16(_mm512_maskz_loadu_ps(k, y + i)));
  }
#else
  for (int64_t i = 0; i < n; ++i) y[i] = std::exp(y[i]);
#endif
}

// y = x * a + b (scalars a, b). y may alias x.
inline void row_axpb(const float* x, float a, float b, float* y, int64_t n) {
#if defined(__AVX512F__)
  const __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_fmadd_ps(_mm512_loadu_ps(x + i), va, vb));
  if (i < n) {
    __mmask16 k = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, k, _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, x + i), va, vb));
  }
#else
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * a + b;
#endif
}

// y = ((x - mean) * rstd) * scale + bias, with per-element scale and optional
// per-element bias (null = 0).
inline void row_normalize_affine(const float* x, float mean, float rstd, const float* scale,
                                 const float* bias, float* y, int64_t n) {
#if defined(__AVX512F__)
  const __m512 vm = _mm512_set1_ps(mean), vr = _mm512_set1_ps(rstd);
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 k = tail_mask(n - i);
    __m512 v = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm), vr);
    __m512 b = bias ? _mm512_maskz_loadu_ps(k, bias + i) : _mm512_setzero_ps();
    _mm512_mask_storeu_ps(y + i, k, _mm512_fmadd_ps(v, _mm512_maskz_loadu_ps(k, scale + i), b));
  }
#else
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * rstd * scale[i] + (bias ? bias[i] : 0.f);
#endif
}

}  // namespace tessera::normk
