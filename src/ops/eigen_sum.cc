// See eigen_sum.h. Built with -ffp-contract=off: a square added to an accumulator must stay two roundings.
#include "ops/eigen_sum.h"

#include <immintrin.h>

#include <algorithm>

namespace tessera::eigen_order {

namespace {

// `packet(i)` loads the 4 transformed elements at i, `one(i)` one of them.
template <class Packet, class One>
float traverse(int64_t n, int64_t offset, Packet packet, One one) {
  constexpr int64_t kP = 4;
  const int64_t start = std::min<int64_t>(((-offset) % kP + kP) % kP, n);
  const int64_t size2 = ((n - start) / (2 * kP)) * (2 * kP);
  const int64_t size1 = ((n - start) / kP) * kP;
  const int64_t end2 = start + size2, end1 = start + size1;
  float res;
  if (size1 > 0) {
    __m128 r0 = packet(start);
    if (size1 > kP) {
      __m128 r1 = packet(start + kP);
      for (int64_t i = start + 2 * kP; i < end2; i += 2 * kP) {
        r0 = _mm_add_ps(r0, packet(i));
        r1 = _mm_add_ps(r1, packet(i + kP));
      }
      r0 = _mm_add_ps(r0, r1);
      if (end1 > end2) r0 = _mm_add_ps(r0, packet(end2));
    }
    const __m128 t = _mm_add_ps(r0, _mm_movehl_ps(r0, r0));  // a0 + a2, a1 + a3
    res = _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
    for (int64_t i = 0; i < start; ++i) res += one(i);
    for (int64_t i = end1; i < n; ++i) res += one(i);
  } else {
    res = n > 0 ? one(0) : 0.0f;
    for (int64_t i = 1; i < n; ++i) res += one(i);
  }
  return res;
}

}  // namespace

float row_sum(const float* x, int64_t n, int64_t offset) {
  return traverse(
      n, offset, [&](int64_t i) { return _mm_loadu_ps(x + i); }, [&](int64_t i) { return x[i]; });
}

float row_sum_sq_diff(const float* x, float c, int64_t n) {
  const __m128 vc = _mm_set1_ps(c);
  return traverse(
      n, 0,
      [&](int64_t i) {
        const __m128 d = _mm_sub_ps(_mm_loadu_ps(x + i), vc);
        return _mm_mul_ps(d, d);
      },
      [&](int64_t i) {
        const float d = x[i] - c;
        return d * d;
      });
}

}  // namespace tessera::eigen_order
