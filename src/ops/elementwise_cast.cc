// Elementwise family, part 3: Cast and CastLike between every pair of
// float32/float64/float16/bfloat16/int8..int64/uint8..uint64/bool.
//
// Conversions follow numpy's astype on x86, which the ONNX reference uses:
// float -> integer truncates toward zero (through a 32-bit conversion for
// types up to 32 bits, as the C cast compiles), anything -> bool is "!= 0",
// double -> float16 rounds once (not through float32). float -> bfloat16
// truncates the mantissa, as the reference of opsets <= 17 (ONNX 1.12) does.
// Strings are not supported.
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#endif

#include "ops/elementwise_common.h"
#include "ops/op_registry.h"

namespace tessera::ew {
namespace {

// IEEE half from a double with a single round-to-nearest-even.
uint16_t double_to_half_bits(double d) {
  uint64_t x;
  std::memcpy(&x, &d, 8);
  const uint16_t sign = static_cast<uint16_t>((x >> 48) & 0x8000u);
  const uint64_t ax = x & 0x7fffffffffffffffull;
  if (ax >= 0x7ff0000000000000ull) {  // inf or nan
    return static_cast<uint16_t>(sign | (ax > 0x7ff0000000000000ull ? 0x7e00u : 0x7c00u));
  }
  const int e = static_cast<int>(ax >> 52) - 1023;
  if (e < -25) return sign;
  if (e >= 16) return static_cast<uint16_t>(sign | 0x7c00u);
  const uint64_t m = (ax & 0xfffffffffffffull) | (1ull << 52);
  // Normal halves keep 10 mantissa bits; subnormals count units of 2^-24.
  const int shift = e >= -14 ? 42 : 42 + (-14 - e);
  uint64_t h = m >> shift;
  const uint64_t rem = m & ((1ull << shift) - 1);
  const uint64_t half = 1ull << (shift - 1);
  if (e >= -14) h = (static_cast<uint64_t>(e + 15) << 10) | (h & 0x3ffu);
  if (rem > half || (rem == half && (h & 1))) ++h;  // a carry rolls into the exponent (up to inf)
  return static_cast<uint16_t>(sign | h);
}

uint16_t float_to_bfloat16_trunc(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // keep nan a nan
  return static_cast<uint16_t>(x >> 16);
}

template <class D, class S>
inline D cast_value(S s) {
  if constexpr (std::is_same_v<D, S>) {
    return s;
  } else if constexpr (std::is_same_v<D, bool>) {
    if constexpr (is_half_v<S>) {
      return static_cast<float>(s) != 0.0f;
    } else {
      return s != S(0);
    }
  } else if constexpr (std::is_same_v<D, Float16>) {
    Float16 h;
    if constexpr (std::is_same_v<S, double>) {
      h.bits = double_to_half_bits(s);
    } else {
      h.bits = float_to_half(static_cast<float>(s));
    }
    return h;
  } else if constexpr (std::is_same_v<D, BFloat16>) {
    BFloat16 h;
    h.bits = float_to_bfloat16_trunc(static_cast<float>(s));
    return h;
  } else if constexpr (std::is_integral_v<D> && is_float_v<S>) {
    using F = compute_t<S>;
    const F f = static_cast<F>(s);
    if constexpr (std::is_same_v<D, uint64_t>) {
      constexpr F k2p63 = F(9223372036854775808.0);
      return f >= k2p63 ? static_cast<uint64_t>(static_cast<int64_t>(f - k2p63)) ^ (1ull << 63)
                        : static_cast<uint64_t>(static_cast<int64_t>(f));
    } else if constexpr (std::is_same_v<D, int64_t> || std::is_same_v<D, uint32_t>) {
      return static_cast<D>(static_cast<int64_t>(f));
    } else {
      return static_cast<D>(static_cast<int32_t>(f));
    }
  } else if constexpr (is_half_v<S>) {
    return static_cast<D>(static_cast<float>(s));
  } else {
    return static_cast<D>(s);
  }
}

template <class D, class S>
void convert_range(const S* src, D* dst, int64_t b, int64_t e) {
#if defined(__F16C__) && defined(__AVX__)
  if constexpr (std::is_same_v<S, Float16> && std::is_same_v<D, float>) {
    for (; b + 8 <= e; b += 8) {
      __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + b));
      _mm256_storeu_ps(dst + b, _mm256_cvtph_ps(h));
    }
  } else if constexpr (std::is_same_v<S, float> && std::is_same_v<D, Float16>) {
    for (; b + 8 <= e; b += 8) {
      __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + b), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + b), h);
    }
  }
#endif
  for (int64_t i = b; i < e; ++i) dst[i] = cast_value<D>(src[i]);
}

Status infer_cast_to(InferContext& ctx, DType to) {
  if (ctx.in_dtype(0) == DType::kString || to == DType::kString) {
    return Unsupported(ctx.node().describe() + ": casts from or to string are not supported");
  }
  ctx.set_output(0, to, ctx.in_shape(0));
  return Status::Ok();
}

Status infer_cast(InferContext& ctx) {
  if (!ctx.node().has_attr("to")) return ctx.error("attribute 'to' is required");
  int64_t to = ctx.node().attr_int("to", 0);
  DType t = to == static_cast<int64_t>(DType::kString) ? DType::kString : dtype_from_onnx(static_cast<int32_t>(to));
  if (t == DType::kUndefined) return Unsupported(ctx.node().describe() + ": cannot cast to element type " + std::to_string(to));
  return infer_cast_to(ctx, t);
}

Status infer_cast_like(InferContext& ctx) { return infer_cast_to(ctx, ctx.in_dtype(1)); }

Status run_cast(KernelContext& ctx) { return convert_tensor(*ctx.input(0), *ctx.output(0), ctx.pool()); }

}  // namespace

Status convert_tensor(const Tensor& src, Tensor& dst, Parallel& pool) {
  if (!dtype_in(src.dtype(), kAllTypes) || !dtype_in(dst.dtype(), kAllTypes)) {
    return Unsupported(std::string("cast from ") + dtype_name(src.dtype()) + " to " + dtype_name(dst.dtype()) +
                       " is not supported");
  }
  if (src.numel() != dst.numel()) {
    return InternalError("cast of " + src.str() + " into " + dst.str() + ": element counts differ");
  }
  if (src.dtype() == dst.dtype()) {
    if (src.raw() != dst.raw()) std::memcpy(dst.raw(), src.raw(), src.nbytes());
    return Status::Ok();
  }
  visit_dtype(src.dtype(), [&](auto stag) {
    using S = decltype(stag);
    visit_dtype(dst.dtype(), [&](auto dtag) {
      using D = decltype(dtag);
      const S* ps = src.data<S>();
      D* pd = dst.data<D>();
      pool.parallel_for(src.numel(), kGrain, [&](int64_t b, int64_t e) { convert_range<D, S>(ps, pd, b, e); });
    });
  });
  return Status::Ok();
}

void register_cast_ops(OpRegistry& reg) {
  reg.add(OpSchema{"Cast", "", infer_cast, nullptr, run_cast, {}});
  reg.add(OpSchema{"CastLike", "", infer_cast_like, nullptr, run_cast, {}});
}

}  // namespace tessera::ew
