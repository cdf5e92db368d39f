#include "ops/quantize_gemm.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>

#include "util/cpu_isa.h"
#include "util/parallel.h"

namespace tessera::qgemm {

Layout layout() {
  static const Layout l = cpu::avx512_vnni() ? Layout::kQuads : Layout::kPairs;
  return l;
}

namespace {

// The portable micro-kernel of the kPairs layout, vectorised by the compiler for the build's baseline.
void micro_kernel(const uint8_t* apb, const uint8_t* bpb, int64_t kp, int32_t* c, int64_t ldc, int mr, int nr) {
  const auto* ap = reinterpret_cast<const int16_t*>(apb);
  const auto* bp = reinterpret_cast<const int16_t*>(bpb);
  int32_t acc[kQMR][kQNR] = {};
  for (int64_t q = 0; q < kp; ++q) {
    for (int r = 0; r < kQMR; ++r) {
      const int32_t a0 = ap[2 * r], a1 = ap[2 * r + 1];
      for (int j = 0; j < kQNR; ++j) acc[r][j] += a0 * bp[2 * j] + a1 * bp[2 * j + 1];
    }
    ap += 2 * kQMR;
    bp += 2 * kQNR;
  }
  for (int r = 0; r < mr; ++r) {
    for (int j = 0; j < nr; ++j) c[r * ldc + j] = acc[r][j];
  }
}

}  // namespace

TSR_AVX512_BEGIN
namespace avx512 {
namespace {
#define TSR_QGEMM_VNNI 0
#include "ops/quantize_gemm_avx512.inc"
#undef TSR_QGEMM_VNNI
}  // namespace
}  // namespace avx512
TSR_AVX512_END

TSR_AVX512_VNNI_BEGIN
namespace avx512_vnni {
namespace {
#define TSR_QGEMM_VNNI 1
#include "ops/quantize_gemm_avx512.inc"
#undef TSR_QGEMM_VNNI
}  // namespace
}  // namespace avx512_vnni
TSR_AVX512_END

namespace {

using MicroKernel = void (*)(const uint8_t* ap, const uint8_t* bp, int64_t kg, int32_t* c, int64_t ldc, int mr, int nr);

// The CPU's widest micro-kernel for the process's layout (util/cpu_isa.h).
MicroKernel micro_kernel_for_cpu() {
  if (layout() == Layout::kQuads) return &avx512_vnni::quad_kernel;
  if (cpu::avx512_vnni()) return &avx512_vnni::micro_kernel;
  if (cpu::avx512()) return &avx512::micro_kernel;
  return &micro_kernel;
}

// Offsets that make an 8-bit operand signed (A, kQuads) or unsigned (B, kQuads):
// the stored value is v - offset.
int32_t signed_offset(bool is_signed) { return is_signed ? 0 : 128; }
int32_t unsigned_offset(bool is_signed) { return is_signed ? -128 : 0; }

void store_i32(uint8_t* dst, int64_t i, int32_t v) { std::memcpy(dst + 4 * i, &v, sizeof v); }

// Interleaves rows r[0..3] (16 bytes each) into 16 columns of 4 bytes at dst
// and adds each column's four bytes to sums[0..15].
void interleave_quads16(const uint8_t* r0, const uint8_t* r1, const uint8_t* r2, const uint8_t* r3, uint8_t* dst,
                        int32_t* sums) {
  const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r0));
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r1));
  const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r2));
  const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r3));
  const __m128i ab_lo = _mm_unpacklo_epi8(a, b), ab_hi = _mm_unpackhi_epi8(a, b);
  const __m128i cd_lo = _mm_unpacklo_epi8(c, d), cd_hi = _mm_unpackhi_epi8(c, d);
  const __m128i q[4] = {_mm_unpacklo_epi16(ab_lo, cd_lo), _mm_unpackhi_epi16(ab_lo, cd_lo),
                        _mm_unpacklo_epi16(ab_hi, cd_hi), _mm_unpackhi_epi16(ab_hi, cd_hi)};
  const __m128i ones8 = _mm_set1_epi8(1), ones16 = _mm_set1_epi16(1);
  for (int i = 0; i < 4; ++i) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 16 * i), q[i]);
    // Unsigned bytes times 1, pairwise (at most 510: no saturation), then the pairs.
    const __m128i s = _mm_madd_epi16(_mm_maddubs_epi16(q[i], ones8), ones16);
    auto* acc = reinterpret_cast<__m128i*>(sums + 4 * i);
    _mm_storeu_si128(acc, _mm_add_epi32(_mm_loadu_si128(acc), s));
  }
}

}  // namespace

template <class E>
void pack_b_rows(int64_t k, int64_t nc, ZeroPoints ob, uint8_t* dst, const std::function<void(int64_t, E*)>& fill) {
  constexpr bool kQuad = std::is_same_v<E, uint8_t>;
  constexpr Layout kLayout = kQuad ? Layout::kQuads : Layout::kPairs;
  constexpr int64_t kGroup = kQuad ? 4 : 2;
  const int64_t kg = k_groups(k, kLayout), width = round_up(std::max<int64_t>(nc, 1), kQNR);
  const int64_t panel = b_panel_bytes(k, kLayout);
  thread_local std::vector<E> rows;
  thread_local std::vector<int32_t> sums;
  if (rows.size() < static_cast<size_t>(kGroup * width)) rows.resize(static_cast<size_t>(kGroup * width));
  if (kQuad) sums.assign(static_cast<size_t>(width), 0);
  for (int64_t q = 0; q < kg; ++q) {
    for (int64_t t = 0; t < kGroup; ++t) {
      E* row = rows.data() + t * width;
      const int64_t kk = q * kGroup + t;
      if (kk < k) {
        fill(kk, row);
      } else {
        std::fill(row, row + nc, E{0});
      }
      std::fill(row + nc, row + width, E{0});
    }
    for (int64_t j0 = 0; j0 < width; j0 += kQNR) {
      uint8_t* d = dst + (j0 / kQNR) * panel + q * kQNR * 4;
      if constexpr (kQuad) {
        for (int64_t h = 0; h < kQNR; h += 16) {
          const E* r = rows.data() + j0 + h;
          interleave_quads16(r, r + width, r + 2 * width, r + 3 * width, d + 4 * h, sums.data() + j0 + h);
        }
      } else {
        auto* d16 = reinterpret_cast<int16_t*>(d);
        const E* r0 = rows.data() + j0;
        const E* r1 = r0 + width;
        for (int j = 0; j < kQNR; ++j) {
          d16[2 * j] = r0[j];
          d16[2 * j + 1] = r1[j];
        }
      }
    }
  }
  if constexpr (kQuad) {
    // Each panel's tail: sum_k B_u + K * ob, then ob, per column (0 past nc).
    for (int64_t j0 = 0; j0 < width; j0 += kQNR) {
      uint8_t* tail = dst + (j0 / kQNR) * panel + kg * kQNR * 4;
      for (int64_t j = 0; j < kQNR; ++j) {
        const bool in = j0 + j < nc;
        const auto o = static_cast<uint32_t>(in ? ob.at(j0 + j) : 0);
        store_i32(tail, j,
                  static_cast<int32_t>(static_cast<uint32_t>(sums[static_cast<size_t>(j0 + j)]) +
                                       static_cast<uint32_t>(k) * o));
        store_i32(tail, kQNR + j, static_cast<int32_t>(o));
      }
    }
  }
}

template void pack_b_rows<int16_t>(int64_t, int64_t, ZeroPoints, uint8_t*,
                                   const std::function<void(int64_t, int16_t*)>&);
template void pack_b_rows<uint8_t>(int64_t, int64_t, ZeroPoints, uint8_t*,
                                   const std::function<void(int64_t, uint8_t*)>&);

QPackedA QPackedA::Pack(Int8Ref a, int64_t lda, int64_t m, int64_t k, ZeroPoints za) {
  QPackedA p;
  p.m_ = m;
  p.k_ = k;
  const Layout l = layout();
  const int64_t kg = k_groups(k, l), panel = a_panel_bytes(k, l);
  p.data_.assign(static_cast<size_t>(p.panels() * panel), 0);
  for (int64_t i = 0; i < m; ++i) {
    uint8_t* base = p.data_.data() + (i / kQMR) * panel;
    const int64_t r = i % kQMR;
    const int32_t z = za.at(i);
    const int64_t row = i * lda;
    if (l == Layout::kQuads) {
      // A_s = A - 128 for uint8 A flips the top bit of each byte; int8 A is stored as it is. Each group of 4 k is one
      // 32-bit word of the row, moved whole; the sum is taken over the stored (signed) bytes.
      const int32_t ca = signed_offset(a.is_signed);
      const uint32_t flip = a.is_signed ? 0u : 0x80808080u;
      const auto* src = static_cast<const uint8_t*>(a.data) + row;
      const int64_t whole = k / 4;
      for (int64_t q = 0; q < whole; ++q) {
        uint32_t w;
        std::memcpy(&w, src + 4 * q, 4);
        w ^= flip;
        std::memcpy(base + q * kQMR * 4 + r * 4, &w, 4);
      }
      for (int64_t kk = 4 * whole; kk < k; ++kk) {  // the last group, padded with zeros
        base[whole * kQMR * 4 + r * 4 + (kk & 3)] = static_cast<uint8_t>(static_cast<int8_t>(a.at(row + kk) - ca));
      }
      // sum_k A_s = sum_k A - K * ca, in wrapping int32.
      uint32_t sum = 0;
      if (a.is_signed) {
        for (int64_t kk = 0; kk < k; ++kk) sum += static_cast<uint32_t>(static_cast<int8_t>(src[kk]));
      } else {
        for (int64_t kk = 0; kk < k; ++kk) sum += src[kk];
      }
      sum -= static_cast<uint32_t>(k) * static_cast<uint32_t>(ca);
      store_i32(base + kg * kQMR * 4, r, static_cast<int32_t>(sum));
      store_i32(base + kg * kQMR * 4, kQMR + r, ca - z);
    } else {
      auto* dst = reinterpret_cast<int16_t*>(base) + r * 2;
      for (int64_t kk = 0; kk < k; ++kk) {
        dst[(kk / 2) * kQMR * 2 + (kk & 1)] = static_cast<int16_t>(a.at(row + kk) - z);
      }
    }
  }
  return p;
}

namespace {

// row[j] = s[j] - offsets[j], or s[j] - offsets[0] for all j when `uniform`.
template <class T, class E>
void matrix_row(const T* s, int64_t n, const int32_t* offsets, bool uniform, E* row) {
  if (uniform) {
    const int32_t o = offsets[0];
    if (std::is_same_v<T, E> && o == 0) {
      std::memcpy(row, s, sizeof(E) * static_cast<size_t>(n));
      return;
    }
    for (int64_t j = 0; j < n; ++j) row[j] = static_cast<E>(static_cast<int32_t>(s[j]) - o);
    return;
  }
  for (int64_t j = 0; j < n; ++j) row[j] = static_cast<E>(static_cast<int32_t>(s[j]) - offsets[j]);
}

}  // namespace

void QMatrixB::pack(int64_t n0, int64_t nc, uint8_t* dst) const {
  // Per column: what the layout subtracts (zb, or cb), and in kQuads ob = cb - zb.
  std::vector<int32_t> sub(static_cast<size_t>(nc)), ob;
  const bool quads = layout() == Layout::kQuads;
  const int32_t cb = unsigned_offset(b_.is_signed);
  for (int64_t j = 0; j < nc; ++j) sub[static_cast<size_t>(j)] = quads ? cb : zb_.at(n0 + j);
  if (quads) {
    ob.resize(static_cast<size_t>(nc));
    for (int64_t j = 0; j < nc; ++j) ob[static_cast<size_t>(j)] = cb - zb_.at(n0 + j);
  }
  const bool uniform = nc == 0 || std::all_of(sub.begin(), sub.end(), [&](int32_t v) { return v == sub[0]; });
  auto fill = [&](int64_t kk, auto* row) {
    const int64_t at = kk * ldb_ + n0;
    if (b_.is_signed) {
      matrix_row(static_cast<const int8_t*>(b_.data) + at, nc, sub.data(), uniform, row);
    } else {
      matrix_row(static_cast<const uint8_t*>(b_.data) + at, nc, sub.data(), uniform, row);
    }
  };
  if (quads) {
    pack_b_rows<uint8_t>(k_, nc, ZeroPoints{ob.data(), 1}, dst, fill);
  } else {
    pack_b_rows<int16_t>(k_, nc, ZeroPoints{}, dst, fill);
  }
}

QPackedB QPackedB::Pack(const QBSource& src, int64_t k, int64_t n) {
  QPackedB p;
  p.k_ = k;
  p.n_ = n;
  p.data_.assign(static_cast<size_t>(round_up(std::max<int64_t>(n, 1), kQNR) / kQNR * b_panel_bytes(k)), 0);
  if (n > 0) src.pack(0, n, p.data_.data());
  return p;
}

void QPackedB::pack(int64_t n0, int64_t nc, uint8_t* dst) const {
  const int64_t panels = (nc + kQNR - 1) / kQNR;
  std::memcpy(dst, packed(n0), static_cast<size_t>(panels * b_panel_bytes(k_)));
}

namespace {

// Bytes of packed B a tile aims to keep in L2.
constexpr int64_t kBlockBytes = 256 * 1024;

// Rows of C a sink receives at once (whole A panels).
constexpr int64_t kSinkPanels = 8;

void qgemm_impl(Parallel* pool, const QPackedA& a, const QBSource& b, int64_t n, int32_t* c, int64_t ldc,
                const QTileSink* sink) {
  const int64_t m = a.m(), kp = k_groups(a.k());
  if (m == 0 || n == 0) return;
  const int64_t n_panels = (n + kQNR - 1) / kQNR;
  const int64_t panel_bytes = b_panel_bytes(a.k());
  const int64_t block_panels =
      std::clamp<int64_t>(kBlockBytes / std::max<int64_t>(panel_bytes, 1), 1, kQMaxBlockCols / kQNR);
  const int64_t tiles_n = (n_panels + block_panels - 1) / block_panels;
  const int threads = pool ? pool->num_threads() : 1;
  // Split rows too when the column blocks alone cannot keep every thread busy;
  // each row tile then packs its own copy of the B block.
  int64_t tiles_m = 1;
  const double work = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(a.k());
  if (threads > 1 && work > 1.0e6 && tiles_n < 4 * threads) {
    tiles_m = std::clamp<int64_t>((4 * threads + tiles_n - 1) / tiles_n, 1, a.panels());
  }
  const int64_t m_panels_per_tile = (a.panels() + tiles_m - 1) / tiles_m;
  tiles_m = (a.panels() + m_panels_per_tile - 1) / m_panels_per_tile;

  const MicroKernel kernel = micro_kernel_for_cpu();
  auto run_tile = [&](int64_t t) {
    const int64_t tm = t / tiles_n, tn = t % tiles_n;
    const int64_t n0 = tn * block_panels * kQNR;
    const int64_t nc = std::min(n - n0, block_panels * kQNR);
    const uint8_t* bblock = kp > 0 ? b.packed(n0) : nullptr;
    if (!bblock && kp > 0) {
      thread_local std::vector<uint8_t> buf;
      const auto need = static_cast<size_t>(round_up(nc, kQNR) / kQNR * panel_bytes);
      if (buf.size() < need) buf.resize(need);
      b.pack(n0, nc, buf.data());
      bblock = buf.data();
    }
    thread_local std::vector<int32_t> scratch;
    const int64_t p0 = tm * m_panels_per_tile, p1 = std::min(a.panels(), p0 + m_panels_per_tile);
    const int64_t chunk = sink ? kSinkPanels : p1 - p0;
    for (int64_t pc = p0; pc < p1; pc += chunk) {
      const int64_t pe = std::min(p1, pc + chunk);
      const int64_t rows = std::min(m, pe * kQMR) - pc * kQMR;
      int32_t* out = nullptr;
      int64_t ld = ldc;
      if (sink) {
        ld = round_up(nc, kQNR);
        const auto need = static_cast<size_t>(kSinkPanels * kQMR * ld);
        if (scratch.size() < need) scratch.resize(need);
        out = scratch.data();
      } else {
        out = c + pc * kQMR * ldc + n0;
      }
      if (kp == 0) {
        for (int64_t i = 0; i < rows; ++i) std::fill(out + i * ld, out + i * ld + nc, 0);
      }
      for (int64_t j0 = 0; j0 < nc && kp > 0; j0 += kQNR) {
        const uint8_t* bp = bblock + (j0 / kQNR) * panel_bytes;
        const int nr = static_cast<int>(std::min<int64_t>(kQNR, nc - j0));
        for (int64_t p = pc; p < pe; ++p) {
          const int mr = static_cast<int>(std::min<int64_t>(kQMR, m - p * kQMR));
          kernel(a.panel(p), bp, kp, out + (p - pc) * kQMR * ld + j0, ld, mr, nr);
        }
      }
      if (sink) sink->consume(pc * kQMR, rows, n0, nc, out, ld);
    }
  };
  const int64_t tiles = tiles_m * tiles_n;
  if (!pool || tiles == 1 || work < 2.0e5) {
    for (int64_t t = 0; t < tiles; ++t) run_tile(t);
    return;
  }
  pool->parallel_for(tiles, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) run_tile(t);
  });
}

}  // namespace

void qgemm(Parallel* pool, const QPackedA& a, const QBSource& b, int64_t n, int32_t* c, int64_t ldc) {
  qgemm_impl(pool, a, b, n, c, ldc, nullptr);
}

void qgemm(Parallel* pool, const QPackedA& a, const QBSource& b, int64_t n, const QTileSink& sink) {
  qgemm_impl(pool, a, b, n, nullptr, 0, &sink);
}

template <class T>
void requantize(const int32_t* acc, int64_t n, int32_t bias, const float* scales, int64_t scale_stride, int32_t zp,
                T* y) {
  // Clamp first, in the output's range shifted by the zero point, so the
  // rounding below only sees |v| < 2^22: adding and subtracting 1.5 * 2^23
  // then rounds to nearest even under the default rounding mode. NaN clamps
  // to the low end.
  const float lo = static_cast<float>(std::numeric_limits<T>::min() - zp);
  const float hi = static_cast<float>(std::numeric_limits<T>::max() - zp);
  constexpr float kMagic = 12582912.f;
  int64_t j = 0;
  // Eight at a time, with the same operations in the same order as the loop below (max/min return their second
  // operand for NaN, as the comparisons there do).
  const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi), magic = _mm256_set1_ps(kMagic);
  const __m256i vbias = _mm256_set1_epi32(bias), vzp = _mm256_set1_epi32(zp);
  for (; j + 8 <= n; j += 8) {
    const __m256i a = _mm256_add_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc + j)), vbias);
    const __m256 sc = scale_stride == 0 ? _mm256_set1_ps(scales[0]) : _mm256_loadu_ps(scales + j);
    __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(a), sc);
    v = _mm256_min_ps(_mm256_max_ps(v, vlo), vhi);
    v = _mm256_sub_ps(_mm256_add_ps(v, magic), magic);
    const __m256i q = _mm256_add_epi32(_mm256_cvttps_epi32(v), vzp);  // within T's range: packing is exact
    const __m128i q0 = _mm256_castsi256_si128(q), q1 = _mm256_extracti128_si256(q, 1);
    __m128i bytes;
    if constexpr (std::is_same_v<T, uint8_t>) {
      bytes = _mm_packus_epi16(_mm_packus_epi32(q0, q1), _mm_setzero_si128());
    } else {
      bytes = _mm_packs_epi16(_mm_packs_epi32(q0, q1), _mm_setzero_si128());
    }
    _mm_storel_epi64(reinterpret_cast<__m128i*>(y + j), bytes);
  }
  for (; j < n; ++j) {
    const auto a = static_cast<int32_t>(static_cast<uint32_t>(acc[j]) + static_cast<uint32_t>(bias));
    float v = static_cast<float>(a) * scales[j * scale_stride];
    v = v > lo ? v : lo;
    v = v < hi ? v : hi;
    v = (v + kMagic) - kMagic;
    y[j] = static_cast<T>(static_cast<int32_t>(v) + zp);
  }
}

template void requantize<uint8_t>(const int32_t*, int64_t, int32_t, const float*, int64_t, int32_t, uint8_t*);
template void requantize<int8_t>(const int32_t*, int64_t, int32_t, const float*, int64_t, int32_t, int8_t*);

}  // namespace tessera::qgemm
