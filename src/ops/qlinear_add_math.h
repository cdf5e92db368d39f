// ONNX Runtime's QLinearAdd arithmetic, as one function of two stored 8-bit values, for the QDQ fusion pass (which
// writes a DQ(a) + DQ(b) -> Q sandwich as a QLinearLookup table of it, with the form as the node's `qlinear_add`
// attribute) and for the kernels that compute it directly instead of looking each pair up in 64 KiB: native's
// QLinearLookup and the engines' own loops. Header-only, so that the plugins compile the same arithmetic.
//
// ONNX Runtime's default level runs the sandwich as com.microsoft QLinearAdd, whose kernel (MLAS, AVX2; probed on
// 1.31.1 over all 65536 operand pairs of eight scale and zero-point sets, uint8 and int8) computes, with a and b the
// stored values as floats,
//   r_a = s_a / s_y, r_b = s_b / s_y, fixed = z_y - fma(r_a, z_a, r_b * z_b)   (its compiler contracts the sum)
//   y = saturate(round_half_even(fma(a, r_a, fma(b, r_b, fixed))))
// All three values are of one 8-bit type. The vector loop uses the CPU's FMA and its default rounding, which give
// the same bits as std::fma and std::nearbyint.
//
// DQ(a) * DQ(b) -> Q runs as com.microsoft QLinearMul, whose x86 kernel (MLAS's SSE2 QLinearMul) computes
//   ratio = s_a * s_b / s_y,  p = (a - z_a) * (b - z_b) exactly in int32,
//   y = saturate(round_half_even(float(p) * ratio + z_y))   (the product and the sum rounded apart)
// (probed on 1.31.1 over all 65536 pairs: equal to level 'all' at every pair, where dequantize, multiply, quantize
// differs at 247). The pass writes that form's table, and the form as the `qlinear_mul` attribute {ratio, z_a, z_b,
// z_y}.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace tessera::qadd {

// r_a, r_b and fixed above (the pass works them out: qdq_fusion.cc).
struct Form {
  float ra = 0.f, rb = 0.f, fixed = 0.f;
  // A QLinearMul form instead: ra the ratio, fixed z_y, za and zb the operands' zero points (integers).
  bool mul = false;
  float za = 0.f, zb = 0.f;
};

// Whether the form's arithmetic stays finite for every operand pair (|a|, |b| <= 255), so that clamping in float
// before rounding gives what rounding and then saturating gives. Forms outside it (absurd scale ratios) are not used.
inline bool usable(const Form& f) {
  constexpr float kLimit = 1 << 20;
  if (f.mul) {  // |p| <= 65536 * 256: the sum stays far inside int32 for ratios up to 2^10
    auto zero_point = [](float z) { return z == std::nearbyint(z) && z >= -128 && z <= 255; };
    return std::isfinite(f.ra) && std::fabs(f.ra) <= 1024 && zero_point(f.za) && zero_point(f.zb) &&
           zero_point(f.fixed);
  }
  return std::isfinite(f.ra) && std::isfinite(f.rb) && std::isfinite(f.fixed) && std::fabs(f.ra) <= kLimit &&
         std::fabs(f.rb) <= kLimit && std::fabs(f.fixed) <= kLimit * 1024;
}

// y for stored values a and b (the int8 or uint8 values themselves), in [lo, hi] (-128..127 or 0..255).
inline int value(const Form& f, int a, int b, int lo, int hi) {
  if (f.mul) {
    const int p = (a - static_cast<int>(f.za)) * (b - static_cast<int>(f.zb));
    float prod = static_cast<float>(p) * f.ra;
    asm("" : "+x"(prod));  // rounded on its own: the compiler cannot contract it into an FMA with the sum
    const float v = prod + f.fixed;
    return static_cast<int>(std::nearbyint(std::min(std::max(v, static_cast<float>(lo)), static_cast<float>(hi))));
  }
  const float v = std::fma(static_cast<float>(a), f.ra, std::fma(static_cast<float>(b), f.rb, f.fixed));
  return static_cast<int>(std::nearbyint(std::min(std::max(v, static_cast<float>(lo)), static_cast<float>(hi))));
}

// The AVX-512 kernels, in a namespace named avx512 as every dispatched kernel is (scripts/isa_check.py): called only
// where the caller's CPU check says AVX-512 F, BW and VL run.
namespace avx512 {

template <bool kSigned>
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m512 widen16(__m128i v) {
  return _mm512_cvtepi32_ps(kSigned ? _mm512_cvtepi8_epi32(v) : _mm512_cvtepu8_epi32(v));
}

// 16 results of value() at once; ra, rb, fixed, lo and hi broadcast.
template <bool kSigned>
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m512i step16(__m128i a, __m128i b, __m512 ra, __m512 rb,
                                                                           __m512 fixed, __m512 lo, __m512 hi) {
  const __m512 v = _mm512_fmadd_ps(widen16<kSigned>(a), ra, _mm512_fmadd_ps(widen16<kSigned>(b), rb, fixed));
  return _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(v, lo), hi));
}

// 16 results of the QLinearMul form; za, zb as int32 lanes, ratio and z_y broadcast.
template <bool kSigned>
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m512i mul16(__m128i a, __m128i b, __m512i za, __m512i zb,
                                                                          __m512 ratio, __m512 zy, __m512 lo,
                                                                          __m512 hi) {
  const __m512i wa = _mm512_sub_epi32(kSigned ? _mm512_cvtepi8_epi32(a) : _mm512_cvtepu8_epi32(a), za);
  const __m512i wb = _mm512_sub_epi32(kSigned ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b), zb);
  __m512 prod = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_mullo_epi32(wa, wb)), ratio);
  asm("" : "+v"(prod));  // rounded on its own, as the scalar form
  return _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_add_ps(prod, zy), lo), hi));
}

template <bool kSigned>
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline void run_mul(const uint8_t* a, const uint8_t* b, uint8_t* y,
                                                                         size_t n, const Form& f) {
  const __m512i za = _mm512_set1_epi32(static_cast<int>(f.za)), zb = _mm512_set1_epi32(static_cast<int>(f.zb));
  const __m512 ratio = _mm512_set1_ps(f.ra), zy = _mm512_set1_ps(f.fixed);
  const __m512 lo = _mm512_set1_ps(kSigned ? -128.f : 0.f), hi = _mm512_set1_ps(kSigned ? 127.f : 255.f);
  for (size_t i = 0; i < n; i += 16) {
    const auto m = n - i >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512i q =
        mul16<kSigned>(_mm_maskz_loadu_epi8(m, a + i), _mm_maskz_loadu_epi8(m, b + i), za, zb, ratio, zy, lo, hi);
    _mm512_mask_cvtepi32_storeu_epi8(y + i, m, q);
  }
}

template <bool kSigned>
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline void run(const uint8_t* a, const uint8_t* b, uint8_t* y,
                                                                     size_t n, const Form& f) {
  if (f.mul) {
    run_mul<kSigned>(a, b, y, n, f);
    return;
  }
  const __m512 ra = _mm512_set1_ps(f.ra), rb = _mm512_set1_ps(f.rb), fixed = _mm512_set1_ps(f.fixed);
  const __m512 lo = _mm512_set1_ps(kSigned ? -128.f : 0.f), hi = _mm512_set1_ps(kSigned ? 127.f : 255.f);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i q = step16<kSigned>(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i)),
                                      _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i)), ra, rb, fixed, lo, hi);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm512_cvtepi32_epi8(q));  // in range: truncation is exact
  }
  if (i < n) {
    const auto m = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512i q =
        step16<kSigned>(_mm_maskz_loadu_epi8(m, a + i), _mm_maskz_loadu_epi8(m, b + i), ra, rb, fixed, lo, hi);
    _mm512_mask_cvtepi32_storeu_epi8(y + i, m, q);
  }
}

}  // namespace avx512

// y[i] = value(a[i], b[i]) for i < n, 16 lanes at a time: only where the caller's CPU check says AVX-512 F, BW and VL
// run (elsewhere the kernels look the pairs up in the table).
inline void run(const Form& f, bool int8, const uint8_t* a, const uint8_t* b, uint8_t* y, size_t n) {
  if (int8) {
    avx512::run<true>(a, b, y, n, f);
  } else {
    avx512::run<false>(a, b, y, n, f);
  }
}

// The 65536-entry QLinearLookup table of the form (stored bytes, indexed u(a) * 256 + u(b), u(v) = v - lo).
inline void fill_table(const Form& f, bool int8, uint8_t* table) {
  const int lo = int8 ? -128 : 0, hi = lo + 255;
  for (int ua = 0; ua < 256; ++ua) {
    for (int ub = 0; ub < 256; ++ub) table[(ua << 8) | ub] = static_cast<uint8_t>(value(f, ua + lo, ub + lo, lo, hi));
  }
}

// Whether a table holds exactly this form: the kernels check it before computing the form in place of the table,
// so the table stays the contract.
inline bool matches_table(const Form& f, bool int8, const uint8_t* table) {
  if (!usable(f)) return false;
  std::vector<uint8_t> want(size_t{1} << 16);
  fill_table(f, int8, want.data());
  return std::equal(want.begin(), want.end(), table);
}

// The attribute values of a form: {r_a, r_b, fixed} (qlinear_add) or {ratio, z_a, z_b, z_y} (qlinear_mul).
inline std::vector<float> form_floats(const Form& f) {
  return f.mul ? std::vector<float>{f.ra, f.za, f.zb, f.fixed} : std::vector<float>{f.ra, f.rb, f.fixed};
}

// The form form_floats() wrote: three values an Add's, four a Mul's; none for another count.
inline std::optional<Form> form_of(const std::vector<float>& v) {
  if (v.size() == 3) return Form{v[0], v[1], v[2]};
  if (v.size() == 4) return Form{v[0], 0.f, v[3], true, v[1], v[2]};
  return std::nullopt;
}

// The form a QLinearLookup's qlinear_add attribute ({r_a, r_b, fixed}) or qlinear_mul attribute ({ratio, z_a, z_b,
// z_y}) names, where its table (stored bytes) holds exactly that at every pair; otherwise none, and the kernel looks
// the pairs up.
inline std::optional<Form> checked_form(const std::vector<float>& add, const std::vector<float>& mul, bool int8,
                                        const uint8_t* table) {
  std::optional<Form> f;
  if (add.size() == 3 && mul.empty()) f = form_of(add);
  if (mul.size() == 4 && add.empty()) f = form_of(mul);
  if (!f || !matches_table(*f, int8, table)) return std::nullopt;
  return f;
}

}  // namespace tessera::qadd
