// DynamicQuantizeLinear's scale and zero point, header-only so that the native
// kernel (ops/quantize.cc) and the oneDNN plugin's own loop compute them with
// the same instructions in the same order. ONNX's function body, in float32,
// as ONNX Runtime computes it:
//   scale = (max(0, max(x)) - min(0, min(x))) / 255
//   zero_point = round_half_even(clip(0 - min / scale, 0, 255))
// An all-zero input has scale 0 and zero point 0. NaN is ignored.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace tessera::dynq {

// The min and max of x[0, n), each extended to include 0, NaN ignored (min and
// max are exact in any order). minps(v, lo) is `v < lo ? v : lo`: a NaN v
// leaves lo. Four independent 8-lane accumulators keep the loop at load speed.
inline void min_max_with_zero(const float* x, size_t n, float* out_min, float* out_max) {
  __m256 lo[4], hi[4];
  for (int k = 0; k < 4; ++k) lo[k] = hi[k] = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 4; ++k) {
      const __m256 v = _mm256_loadu_ps(x + i + 8 * k);
      lo[k] = _mm256_min_ps(v, lo[k]);
      hi[k] = _mm256_max_ps(v, hi[k]);
    }
  }
  float l[32], h[32];
  for (int k = 0; k < 4; ++k) {
    _mm256_storeu_ps(l + 8 * k, lo[k]);
    _mm256_storeu_ps(h + 8 * k, hi[k]);
  }
  float mn = 0.f, mx = 0.f;
  for (int k = 0; k < 32; ++k) {
    mn = l[k] < mn ? l[k] : mn;
    mx = h[k] > mx ? h[k] : mx;
  }
  for (; i < n; ++i) {
    mn = x[i] < mn ? x[i] : mn;
    mx = x[i] > mx ? x[i] : mx;
  }
  *out_min = mn;
  *out_max = mx;
}

struct Params {
  float scale = 0.f;
  float zero_point = 0.f;  // an integer in [0, 255]
};

// The scale and zero point from min(0, min(x)) and max(0, max(x)).
inline Params params_from_range(float mn, float mx) {
  Params p;
  p.scale = (mx - mn) / 255.f;
  if (p.scale != 0.f) {
    float z = 0.f - mn / p.scale;
    z = z > 0.f ? z : 0.f;
    z = z < 255.f ? z : 255.f;
    p.zero_point = std::nearbyint(z);
  }
  return p;
}

// QuantizeLinear's arithmetic, shared by native's QuantizeLinear, DynamicQuantizeLinear and DynamicQuantizeLSTM and
// the oneDNN plugin's own quantize loop:
// y = saturate(round(x / scale) + zp) for one run sharing scale and zp. The
// value is clamped before rounding (the bounds are integers, so this is the
// same as saturating after), which keeps |v| < 2^22 for the 1.5 * 2^23 trick
// that rounds to nearest even; NaN clamps to the low end.
template <class T>
void quantize_run(const float* x, int64_t n, float scale, int32_t zp, T* y) {
  const float lo = static_cast<float>(std::numeric_limits<T>::min() - zp);
  const float hi = static_cast<float>(std::numeric_limits<T>::max() - zp);
  constexpr float kMagic = 12582912.f;
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i] / scale;
    v = v > lo ? v : lo;
    v = v < hi ? v : hi;
    v = (v + kMagic) - kMagic;
    y[i] = static_cast<T>(static_cast<int32_t>(v) + zp);
  }
}

}  // namespace tessera::dynq
