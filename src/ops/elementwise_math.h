// Branch-free float32 versions of exp, expm1, log, tanh, sigmoid, erf and
// Gelu, written so that GCC vectorizes loops that call them (no libm calls,
// selects instead of branches). libm's scalar versions are not vectorized
// without -ffast-math, and these functions dominate activation-heavy models.
//
// Accuracy (checked against std:: in ops_elementwise_test): relative error
// below 1e-6 over the whole float range, with NaN/Inf handled as libm does;
// erf and Gelu compute ONNX Runtime's arithmetic instead (see there).
// Results that would be float subnormals may flush towards zero.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace tessera::fastmath {

// 2^n for n in [-126, 127], built from the exponent bits.
inline float pow2i(int32_t n) {
  return std::bit_cast<float>(static_cast<uint32_t>(n + 127) << 23);
}

inline bool is_nan(float x) { return x != x; }

// c ? a : b through bit masks. GCC's jump threading turns plain selects whose
// operands are arithmetic back into branches, which the vectorizer then
// refuses (floating-point arithmetic may trap, so it is not speculated).
inline float select(bool c, float a, float b) {
  int32_t m = -static_cast<int32_t>(c);
  return std::bit_cast<float>((std::bit_cast<int32_t>(a) & m) | (std::bit_cast<int32_t>(b) & ~m));
}

// exp(x): Cody-Waite range reduction x = n*ln2 + r, |r| <= ln2/2, a degree-6
// polynomial for exp(r) (Cephes expf coefficients) and a two-step scaling by
// 2^n so that results down to the subnormal range and overflow to +inf come
// out right.
inline float exp(float x) {
  float xc = x < -104.0f ? -104.0f : x;
  xc = xc > 89.0f ? 89.0f : xc;
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  float t = xc * 1.44269504088896341f + kMagic;
  float fn = t - kMagic;
  int32_t n = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kMagic);
  float r = xc - fn * 0.693359375f;
  r = r - fn * -2.12194440e-4f;
  float z = r * r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * z + r + 1.0f;
  int32_t n1 = n >> 1;
  int32_t n2 = n - n1;
  float res = p * pow2i(n1) * pow2i(n2);
  return is_nan(x) ? x : res;
}

// exp(x) - 1 without the cancellation of the naive form near zero.
inline float expm1(float x) {
  float z = x;
  // Taylor series up to x^8/8! for |x| < 0.35 (truncation error < 2e-8 relative).
  float p = 1.0f / 40320.0f;
  p = p * z + 1.0f / 5040.0f;
  p = p * z + 1.0f / 720.0f;
  p = p * z + 1.0f / 120.0f;
  p = p * z + 1.0f / 24.0f;
  p = p * z + 1.0f / 6.0f;
  p = p * z + 0.5f;
  p = p * z * z + z;
  float e = exp(x) - 1.0f;
  return select((x > -0.35f) & (x < 0.35f), p, e);
}

// log(x): frexp by bit manipulation, Cephes logf polynomial.
inline float log(float x) {
  constexpr float kMinNormal = 1.17549435e-38f;
  bool sub = x < kMinNormal;
  float xs = x * select(sub, 8388608.0f, 1.0f);  // scale subnormals by 2^23
  int32_t bits = std::bit_cast<int32_t>(xs);
  float m = std::bit_cast<float>((bits & 0x007fffff) | 0x3f000000);  // in [0.5, 1)
  float fe = static_cast<float>((bits >> 23) & 0xff) - select(sub, 149.0f, 126.0f);
  bool low = m < 0.707106781186547524f;
  fe -= select(low, 1.0f, 0.0f);
  float f = m * select(low, 2.0f, 1.0f) - 1.0f;
  float z = f * f;
  float y = 7.0376836292e-2f;
  y = y * f - 1.1514610310e-1f;
  y = y * f + 1.1676998740e-1f;
  y = y * f - 1.2420140846e-1f;
  y = y * f + 1.4249322787e-1f;
  y = y * f - 1.6668057665e-1f;
  y = y * f + 2.0000714765e-1f;
  y = y * f - 2.4999993993e-1f;
  y = y * f + 3.3333331174e-1f;
  y = y * f * z;
  y += -2.12194440e-4f * fe;
  y += -0.5f * z;
  float res = f + y;
  res += 0.693359375f * fe;
  constexpr float kInf = std::numeric_limits<float>::infinity();
  res = select(x == 0.0f, -kInf, res);
  res = select(x < 0.0f, std::numeric_limits<float>::quiet_NaN(), res);
  res = select(x == kInf, kInf, res);
  return select(is_nan(x), x, res);
}

// log(1 + x), accurate for small x: log(u) * x / (u - 1) with u = 1 + x
// cancels the rounding error of u.
inline float log1p(float x) {
  float u = 1.0f + x;
  float d = u - 1.0f;
  float l = log(u);
  float res = select(d == 0.0f, x, l * (x / d));
  return select(x == std::numeric_limits<float>::infinity(), x, res);
}

inline float sigmoid(float x) { return 1.0f / (1.0f + exp(-x)); }

// The Sigmoid operator: the rational approximation ONNX Runtime evaluates on x86 (Eigen's logistic coefficients, as
// MLAS's FMA3 kernel runs them: x clamped to [-18, 18], odd numerator and even denominator in x^2 by Horner with
// fused multiply-adds, p / q + 0.5, floored at 0), so that its bits are ONNX Runtime's. A model that quantizes a
// Sigmoid or SiLU output (DynamicQuantizeLinear, QDQ) turns a last-bit difference into a quantization step.
// Absolute error below 2e-7 (relative error grows in the far negative tail, where the value is below 1e-6).
// Its clamp and coefficients, highest power first (also the GEMM epilogue's 16-lane copy, kernels/gemm_impl.inc).
inline constexpr float kLogisticClamp = 18.0f;
inline constexpr float kLogisticP[5] = {4.37031012579801e-11f, 1.15627324459942e-07f, 6.08574864600143e-05f,
                                        8.51377133304701e-03f, 2.48287947061529e-01f};
inline constexpr float kLogisticQ[6] = {6.10247389755681e-13f, 5.76102136993427e-09f, 6.29106785017040e-06f,
                                        1.70198817374094e-03f, 1.16817656904453e-01f, 9.93151921023180e-01f};
// Written out and branch-free (select) so that loops over it vectorize: with the Horner steps as a loop, or the
// clamps as branches, GCC kept the Sigmoid of a fused elementwise chain scalar (7x slower).
inline float logistic(float x) {
  float v = select(x < -kLogisticClamp, -kLogisticClamp, x);  // NaN passes through both clamps
  v = select(v > kLogisticClamp, kLogisticClamp, v);
  const float x2 = v * v;
  float p = std::fma(x2, kLogisticP[0], kLogisticP[1]);
  p = std::fma(x2, p, kLogisticP[2]);
  p = std::fma(x2, p, kLogisticP[3]);
  p = std::fma(x2, p, kLogisticP[4]);
  float q = std::fma(x2, kLogisticQ[0], kLogisticQ[1]);
  q = std::fma(x2, q, kLogisticQ[2]);
  q = std::fma(x2, q, kLogisticQ[3]);
  q = std::fma(x2, q, kLogisticQ[4]);
  q = std::fma(x2, q, kLogisticQ[5]);
  const float r = (v * p) / q + 0.5f;
  return select(r < 0.0f, 0.0f, r);
}

// HardSigmoid and HardSwish as ONNX Runtime computes them: alpha * x + beta unfused (compile the caller without
// floating-point contraction), clamped to [0, 1]; HardSwish with alpha the float 1/6, as in ONNX's function body.
template <class C>
inline C hard_sigmoid(C x, C alpha, C beta) {
  C v = alpha * x + beta;
  v = v > C(1) ? C(1) : v;
  return v < C(0) ? C(0) : v;
}
template <class C>
inline C hard_swish(C x) {
  return x * hard_sigmoid(x, C(1.0f / 6.0f), C(0.5));
}

// tanh: odd polynomial (Cephes tanhf) for |x| < 0.625, else 1 - 2/(e^2|x| + 1).
inline float tanh(float x) {
  float ax = std::fabs(x);
  float z = x * x;
  float ps = -5.70498872745e-3f;
  ps = ps * z + 2.06390887954e-2f;
  ps = ps * z - 5.37397155531e-2f;
  ps = ps * z + 1.33314422036e-1f;
  ps = ps * z - 3.33332819422e-1f;
  ps = ps * z * x + x;
  float ac = ax > 10.0f ? 10.0f : ax;
  float e = exp(ac + ac);
  float pl = std::copysign(1.0f - 2.0f / (e + 1.0f), x);
  float res = ax < 0.625f ? ps : pl;
  return is_nan(x) ? x : res;
}

// erf(x) with ONNX Runtime's arithmetic (MLAS's erf kernel, after Norbert Juffa's faithfully rounded erff), so that
// a quantized model requantizing an Erf or a Gelu gets its bits: |x| clamped to 3.925; below 0.921875 an odd
// polynomial x + x * p(x^2); above, 1 - exp(-q(|x|)) with its own exp (rounding-bias reduction, two-part ln 2, a
// degree-6 polynomial); the sign of x copied onto the result. Every step is one fma or one rounded operation, in
// MLAS's order. Relative error below 2e-7 (erf of a large |x| is 1, as ONNX Runtime gives); NaN stays NaN.
inline float erf(float x) {
  const float ax = std::fabs(x);
  const float a = ax < 3.925f ? ax : 3.925f;  // minps: NaN becomes 3.925 (the result is NaN again below)
  const float s = a * a;
  float r = -5.99104969e-4f;
  r = std::fma(r, s, 4.99339588e-3f);
  r = std::fma(r, s, -2.67667342e-2f);
  r = std::fma(r, s, 1.12818025e-1f);
  r = std::fma(r, s, -3.76124859e-1f);
  r = std::fma(r, s, 1.28379151e-1f);
  const float small = std::fma(r, a, a);
  float q = 1.72948930e-5f;
  q = std::fma(q, a, -3.83208680e-4f);
  q = std::fma(q, a, 3.88393435e-3f);
  q = std::fma(q, a, -2.42545605e-2f);
  q = std::fma(q, a, 1.06777847e-1f);
  q = std::fma(q, a, 6.34846687e-1f);
  q = std::fma(q, a, 1.28717512e-1f);
  q = std::fma(q, a, a);
  // exp(-q); q <= 14 here, so no clamp or split scaling is needed.
  const float e = -q;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float n = std::fma(1.44269504088896341f, e, kRound) - kRound;
  float f = std::fma(n, -6.93145752e-1f, e);
  f = std::fma(n, -1.42860677e-6f, f);
  float p = 1.38319808e-3f;
  p = std::fma(p, f, 8.37550033e-3f);
  p = std::fma(p, f, 4.16689515e-2f);
  p = std::fma(p, f, 1.66664466e-1f);
  p = std::fma(p, f, 4.99999851e-1f);
  p = std::fma(p, f, 1.0f);
  p = std::fma(p, f, 1.0f);
  const float big = 1.0f - p * pow2i(static_cast<int32_t>(n));
  const float mag = select(a >= 0.921875f, big, small);
  const float res = std::bit_cast<float>(std::bit_cast<uint32_t>(mag) | (std::bit_cast<uint32_t>(x) & 0x80000000u));
  return select(is_nan(x), x, res);
}

// Gelu with the exact erf form as ONNX Runtime computes it (its Gelu and BiasGelu kernels): 0.5 x (1 + erf(x *
// float(1/sqrt 2))) with the erf above. Its absolute error stays within about 2e-7 |x|; far in the negative tail,
// where 1 + erf cancels, the relative error grows (as ONNX Runtime's does).
inline float gelu_erf(float x) { return 0.5f * x * (erf(x * 0.70710677f) + 1.0f); }

// Gelu with the tanh approximation: 0.5 x (1 + tanh(y)) = x * sigmoid(2y).
inline float gelu_tanh(float x) {
  float y = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  float res = x * sigmoid(2.0f * y);
  return is_nan(x) ? x : res;
}

// sin and cos by Cephes' single-precision method, branch-free so that loops over them vectorize: |x| reduced by the
// even multiple j of pi/4 nearest it (pi/4 in three parts), a degree-7 odd (sin) or degree-8 even (cos) polynomial
// on the remainder, the polynomial and the sign chosen by the octant; cos is sin one quadrant on (j + 2). Within a
// few ulp of libm for |x| <= kSinCosRange. Beyond it (and for infinities and NaN) the result is not meaningful:
// callers take libm for those elements (sin_cos_elements).
inline constexpr float kSinCosRange = 8192.0f;
inline float sin_cos_octant(float x, int32_t quadrant_shift, bool odd) {
  const float ax = std::fabs(x);
  const float a = select(ax <= kSinCosRange, ax, 0.0f);           // keeps the integer conversion in range
  int32_t j = static_cast<int32_t>(a * 1.27323954473516268615f);  // 4 / pi
  j = (j + 1) & ~1;
  const float y = static_cast<float>(j);
  const float r = ((a - y * 0.78515625f) - y * 2.4187564849853515625e-4f) - y * 3.77489497744594108e-8f;
  const float z = r * r;
  float ps = -1.9515295891e-4f;
  ps = ps * z + 8.3321608736e-3f;
  ps = ps * z - 1.6666654611e-1f;
  ps = ps * z * r + r;
  float pc = 2.443315711809948e-5f;
  pc = pc * z - 1.388731625493765e-3f;
  pc = pc * z + 4.166664568298827e-2f;
  pc = pc * z * z - 0.5f * z + 1.0f;
  const int32_t q = j + quadrant_shift;
  const float v = select((q & 2) != 0, pc, ps);
  // The octant's sign, and for sin (odd) the sign of x.
  const uint32_t sign = (static_cast<uint32_t>(q & 4) << 29) ^ (odd ? std::bit_cast<uint32_t>(x) & 0x80000000u : 0u);
  return std::bit_cast<float>(std::bit_cast<uint32_t>(v) ^ sign);
}
inline float sin(float x) { return sin_cos_octant(x, 0, true); }
inline float cos(float x) { return sin_cos_octant(x, 2, false); }
// y = sin(x) or cos(x) over n elements as the Sin and Cos ops compute it (y may be x): the vector form, and where
// some |x| is beyond kSinCosRange (or infinite, or NaN) libm for those elements. Always inlined, so that a caller in
// an AVX-512 region vectorizes it 16 lanes wide.
[[gnu::always_inline]] inline void sin_cos_elements(const float* x, float* y, int64_t n, bool cosine) {
  int beyond = 0;
  for (int64_t i = 0; i < n; ++i) beyond |= !(std::fabs(x[i]) <= kSinCosRange);
  if (!beyond) {
    if (cosine) {
      for (int64_t i = 0; i < n; ++i) y[i] = cos(x[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) y[i] = sin(x[i]);
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = std::fabs(v) <= kSinCosRange ? (cosine ? cos(v) : sin(v)) : (cosine ? std::cos(v) : std::sin(v));
  }
}

// Generic select for code templated on the compute type: the bit-mask form
// for float, a plain conditional otherwise.
template <class T>
inline T sel(bool c, T a, T b) {
  if constexpr (std::is_same_v<T, float>) {
    return select(c, a, b);
  } else {
    return c ? a : b;
  }
}

}  // namespace tessera::fastmath
