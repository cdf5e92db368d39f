// The plugin's own int8 depthwise convolution (dnnl_dw_int8.h).
//
// Layout of the work: per image, per channel block, per tile of kTile output
// columns, output rows in order. Each output row needs k input rows (padding
// rows read as the zero point); an input row is interleaved once per tile into a
// ring of k slots (slot = row mod k), so with stride 1 each is built once and
// read by k output rows. An interleaved row holds, per output column and 4-tap
// group g, the 4 vectors whose dword (lane l, j) of vector i is channel
// 16 l + 4 i + j's 4 source bytes at columns ow * sw - pl + 4 g + (0..3) —
// what unpacking 4 source vectors bytewise, then wordwise, gives. The packing of
// the four int32 results (packs_epi32 pairs, then packs/packus_epi16) undoes
// that order, so each result vector stores straight to the block's channels.
#include "dnnl_dw_int8.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

namespace tessera_dnnl {

namespace {

constexpr int64_t kTile = 32;  // output columns per interleaved tile: the ring of k rows stays in L1 for k = 3

// Every function that holds AVX-512 code is in this namespace (scripts/isa_check.py); they run only where
// dw_int8_cpu() says yes.
namespace avx512_vnni {

#define TS_DW_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
#define TS_DW_INLINE TS_DW_TARGET __attribute__((always_inline)) inline

// One vector width's operations: 64 bytes (zmm) and 32 (ymm).
struct V64 {
  using I = __m512i;
  using M = __mmask64;
  static constexpr int64_t kBytes = 64;
  static TS_DW_INLINE M mask(int64_t n) { return n >= 64 ? ~M{0} : (M{1} << n) - 1; }
  static TS_DW_INLINE I load(M m, const uint8_t* p) { return _mm512_maskz_loadu_epi8(m, p); }
  static TS_DW_INLINE I set1(uint8_t b) { return _mm512_set1_epi8(static_cast<char>(b)); }
  static TS_DW_INLINE I bxor(I a, I b) { return _mm512_xor_si512(a, b); }
  static TS_DW_INLINE I lo8(I a, I b) { return _mm512_unpacklo_epi8(a, b); }
  static TS_DW_INLINE I hi8(I a, I b) { return _mm512_unpackhi_epi8(a, b); }
  static TS_DW_INLINE I lo16(I a, I b) { return _mm512_unpacklo_epi16(a, b); }
  static TS_DW_INLINE I hi16(I a, I b) { return _mm512_unpackhi_epi16(a, b); }
  static TS_DW_INLINE void store(I* p, I v) { _mm512_store_si512(p, v); }
  static TS_DW_INLINE I get(const I* p) { return _mm512_load_si512(p); }
  static TS_DW_INLINE I getu(const void* p) { return _mm512_loadu_si512(p); }
  static TS_DW_INLINE I dot(I acc, I u8, I s8) { return _mm512_dpbusd_epi32(acc, u8, s8); }
  // round_half_even(float(acc) * scale) as int32 (the current rounding mode: nearest even, as native's).
  static TS_DW_INLINE I requant(I acc, const float* scale) {
    return _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_cvtepi32_ps(acc), _mm512_loadu_ps(scale)));
  }
  static TS_DW_INLINE I set1_32(int32_t v) { return _mm512_set1_epi32(v); }
  static TS_DW_INLINE I add32(I a, I b) { return _mm512_add_epi32(a, b); }
  static TS_DW_INLINE I packs32(I a, I b) { return _mm512_packs_epi32(a, b); }
  static TS_DW_INLINE I pack8(I a, I b, bool s) { return s ? _mm512_packs_epi16(a, b) : _mm512_packus_epi16(a, b); }
  static TS_DW_INLINE I clamp8(I v, I lo, I hi, bool s) {
    return s ? _mm512_min_epi8(_mm512_max_epi8(v, lo), hi) : _mm512_min_epu8(_mm512_max_epu8(v, lo), hi);
  }
  static TS_DW_INLINE void put(M m, uint8_t* p, I v) { _mm512_mask_storeu_epi8(p, m, v); }
};

struct V32 {
  using I = __m256i;
  using M = __mmask32;
  static constexpr int64_t kBytes = 32;
  static TS_DW_INLINE M mask(int64_t n) { return n >= 32 ? ~M{0} : static_cast<M>((uint64_t{1} << n) - 1); }
  static TS_DW_INLINE I load(M m, const uint8_t* p) { return _mm256_maskz_loadu_epi8(m, p); }
  static TS_DW_INLINE I set1(uint8_t b) { return _mm256_set1_epi8(static_cast<char>(b)); }
  static TS_DW_INLINE I bxor(I a, I b) { return _mm256_xor_si256(a, b); }
  static TS_DW_INLINE I lo8(I a, I b) { return _mm256_unpacklo_epi8(a, b); }
  static TS_DW_INLINE I hi8(I a, I b) { return _mm256_unpackhi_epi8(a, b); }
  static TS_DW_INLINE I lo16(I a, I b) { return _mm256_unpacklo_epi16(a, b); }
  static TS_DW_INLINE I hi16(I a, I b) { return _mm256_unpackhi_epi16(a, b); }
  static TS_DW_INLINE void store(I* p, I v) { _mm256_store_si256(p, v); }
  static TS_DW_INLINE I get(const I* p) { return _mm256_load_si256(p); }
  static TS_DW_INLINE I getu(const void* p) { return _mm256_loadu_si256(static_cast<const I*>(p)); }
  static TS_DW_INLINE I dot(I acc, I u8, I s8) { return _mm256_dpbusd_epi32(acc, u8, s8); }
  static TS_DW_INLINE I requant(I acc, const float* scale) {
    return _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_cvtepi32_ps(acc), _mm256_loadu_ps(scale)));
  }
  static TS_DW_INLINE I set1_32(int32_t v) { return _mm256_set1_epi32(v); }
  static TS_DW_INLINE I add32(I a, I b) { return _mm256_add_epi32(a, b); }
  static TS_DW_INLINE I packs32(I a, I b) { return _mm256_packs_epi32(a, b); }
  static TS_DW_INLINE I pack8(I a, I b, bool s) { return s ? _mm256_packs_epi16(a, b) : _mm256_packus_epi16(a, b); }
  static TS_DW_INLINE I clamp8(I v, I lo, I hi, bool s) {
    return s ? _mm256_min_epi8(_mm256_max_epi8(v, lo), hi) : _mm256_min_epu8(_mm256_max_epu8(v, lo), hi);
  }
  static TS_DW_INLINE void put(M m, uint8_t* p, I v) { _mm256_mask_storeu_epi8(p, m, v); }
};

// The 4 interleaved vectors of sources a, b, c, e (taps 0..3 of a group) at o.
template <class V>
TS_DW_INLINE void interleave(typename V::I* o, typename V::I a, typename V::I b, typename V::I c, typename V::I e) {
  const typename V::I lab = V::lo8(a, b), hab = V::hi8(a, b), lcd = V::lo8(c, e), hcd = V::hi8(c, e);
  V::store(o + 0, V::lo16(lab, lcd));
  V::store(o + 1, V::hi16(lab, lcd));
  V::store(o + 2, V::lo16(hab, hcd));
  V::store(o + 3, V::hi16(hab, hcd));
}

template <class V, bool kSigned>
TS_DW_INLINE typename V::I source(typename V::M m, const uint8_t* p) {
  const typename V::I v = V::load(m, p);
  return kSigned ? V::bxor(v, V::set1(0x80)) : v;
}

// Output columns [a, b) of tap group g whose kTaps taps all lie inside the row: no bounds checks.
template <class V, bool kSigned, int kTaps>
TS_DW_INLINE void interleave_inside(const DwInt8& d, typename V::M m, const uint8_t* row, int64_t g, int64_t a,
                                    int64_t b, typename V::I pad, typename V::I* out) {
  const int64_t step = d.sw * d.c;
  const uint8_t* p = row + (a * d.sw - d.pl + 4 * g) * d.c;
  for (int64_t ow = a; ow < b; ++ow, p += step, out += 4) {
    const typename V::I t0 = source<V, kSigned>(m, p);
    const typename V::I t1 = kTaps > 1 ? source<V, kSigned>(m, p + d.c) : pad;
    const typename V::I t2 = kTaps > 2 ? source<V, kSigned>(m, p + 2 * d.c) : pad;
    const typename V::I t3 = kTaps > 3 ? source<V, kSigned>(m, p + 3 * d.c) : pad;
    interleave<V>(out, t0, t1, t2, t3);
  }
}

// Interleaves input row `row` (null: a padding row) of block `b` for output columns [o0, o1) into t
// ([group][o1 - o0][4] vectors).
template <class V, int K, bool kSigned>
TS_DW_TARGET void build_row(const DwInt8& d, const DwInt8::Block& blk, const uint8_t* row, int64_t o0, int64_t o1,
                            typename V::I* t) {
  using I = typename V::I;
  constexpr int kGroups = (K + 3) / 4;
  const int64_t tw = o1 - o0;
  const I pad = V::set1(d.pad);
  if (!row) {
    for (int64_t i = 0; i < kGroups * tw; ++i) interleave<V>(t + i * 4, pad, pad, pad, pad);
    return;
  }
  const typename V::M m = V::mask(blk.count);
  row += blk.first;
  for (int g = 0; g < kGroups; ++g) {
    const int taps = std::min(4, K - 4 * g);
    // The columns whose taps are all inside the row: [a, b).
    int64_t a = o0, b = o1;
    while (a < o1 && a * d.sw - d.pl + 4 * g < 0) ++a;
    while (b > a && (b - 1) * d.sw - d.pl + 4 * g + taps - 1 >= d.w) --b;
    I* out = t + g * tw * 4 - o0 * 4;
    for (int64_t ow = o0; ow < o1; ++ow) {
      if (ow == a && b > a) {
        switch (taps) {
          case 1:
            interleave_inside<V, kSigned, 1>(d, m, row, g, a, b, pad, out + a * 4);
            break;
          case 2:
            interleave_inside<V, kSigned, 2>(d, m, row, g, a, b, pad, out + a * 4);
            break;
          case 3:
            interleave_inside<V, kSigned, 3>(d, m, row, g, a, b, pad, out + a * 4);
            break;
          default:
            interleave_inside<V, kSigned, 4>(d, m, row, g, a, b, pad, out + a * 4);
            break;
        }
        ow = b;
        if (ow >= o1) break;
      }
      I v[4];
      for (int j = 0; j < 4; ++j) {
        const int64_t p = ow * d.sw - d.pl + 4 * g + j;
        v[j] = j < taps && p >= 0 && p < d.w ? source<V, kSigned>(m, row + p * d.c) : pad;
      }
      interleave<V>(out + ow * 4, v[0], v[1], v[2], v[3]);
    }
  }
}

// Output columns [o0, o1) of one output row of block `blk` from its k interleaved input rows.
template <class V, int K>
TS_DW_TARGET void compute_row(const DwInt8& d, const DwInt8::Block& blk, int64_t o0, int64_t o1,
                              const typename V::I* const* rows, uint8_t* y) {
  using I = typename V::I;
  constexpr int kGroups = (K + 3) / 4;
  constexpr int64_t kLanes = V::kBytes / 4;  // int32 lanes per vector
  const int64_t tw = o1 - o0;
  const int8_t* wp = d.weights.data() + blk.w_offset;
  I w[K * kGroups * 4];
  for (int i = 0; i < K * kGroups * 4; ++i) w[i] = V::getu(wp + i * V::kBytes);
  I bias[4];
  for (int i = 0; i < 4; ++i) bias[i] = V::getu(d.bias.data() + blk.b_offset + i * kLanes);
  const float* scale = d.scale.data() + blk.b_offset;
  const I zp = V::set1_32(d.y_zero_point);
  const I lo = V::set1(static_cast<uint8_t>(d.lo)), hi = V::set1(static_cast<uint8_t>(d.hi));
  const typename V::M m = V::mask(blk.count);
  y += blk.first;
  for (int64_t ow = o0; ow < o1; ++ow) {
    I acc[4] = {bias[0], bias[1], bias[2], bias[3]};
    for (int r = 0; r < K; ++r) {
      for (int g = 0; g < kGroups; ++g) {
        const I* t = rows[r] + (g * tw + ow - o0) * 4;
        for (int i = 0; i < 4; ++i) acc[i] = V::dot(acc[i], V::get(t + i), w[(r * kGroups + g) * 4 + i]);
      }
    }
    I q[4];
    for (int i = 0; i < 4; ++i) q[i] = V::add32(V::requant(acc[i], scale + i * kLanes), zp);
    const I bytes = V::pack8(V::packs32(q[0], q[1]), V::packs32(q[2], q[3]), d.y_signed);
    V::put(m, y + ow * d.c, V::clamp8(bytes, lo, hi, d.y_signed));
  }
}

// Asks for the block's bytes of input rows [i0, i1), at the columns output columns [o0, o1) read, to be brought into
// L1 while the current output row computes: the source was just written, often by the other core, and each new
// row's loads otherwise stall the interleaving.
TS_DW_INLINE void prefetch_rows(const DwInt8& d, const DwInt8::Block& blk, const uint8_t* x, int64_t i0, int64_t i1,
                                int64_t o0, int64_t o1) {
  const int64_t c0 = std::max<int64_t>(0, o0 * d.sw - d.pl), c1 = std::min(d.w, (o1 - 1) * d.sw - d.pl + d.k);
  for (int64_t ih = std::max<int64_t>(0, i0); ih < std::min(d.h, i1); ++ih) {
    const char* row = reinterpret_cast<const char*>(x + (ih * d.w) * d.c + blk.first);
    for (int64_t col = c0; col < c1; ++col) {
      _mm_prefetch(row + col * d.c, _MM_HINT_T0);
      _mm_prefetch(row + col * d.c + blk.count - 1, _MM_HINT_T0);
    }
  }
}

// Output rows [r0, r1) of block `blk` of one image, with `ring` (k interleaved rows of a tile).
template <class V, int K>
TS_DW_TARGET void block_rows(const DwInt8& d, const DwInt8::Block& blk, const uint8_t* x, uint8_t* y, int64_t r0,
                             int64_t r1, void* ring) {
  using I = typename V::I;
  constexpr int kGroups = (K + 3) / 4;
  for (int64_t o0 = 0; o0 < d.ow; o0 += kTile) {
    const int64_t o1 = std::min(d.ow, o0 + kTile), row_vectors = kGroups * (o1 - o0) * 4;
    int64_t held[K];  // the input row each ring slot holds
    std::fill(held, held + K, std::numeric_limits<int64_t>::min());
    const I* rows[K];
    for (int64_t oh = r0; oh < r1; ++oh) {
      for (int r = 0; r < K; ++r) {
        const int64_t ih = oh * d.sh - d.pt + r, slot = ((ih % K) + K) % K;
        I* t = static_cast<I*>(ring) + slot * row_vectors;
        if (held[slot] != ih) {
          const uint8_t* row = ih >= 0 && ih < d.h ? x + ih * d.w * d.c : nullptr;
          if (d.x_signed)
            build_row<V, K, true>(d, blk, row, o0, o1, t);
          else
            build_row<V, K, false>(d, blk, row, o0, o1, t);
          held[slot] = ih;
        }
        rows[r] = t;
      }
      if (oh + 1 < r1) prefetch_rows(d, blk, x, oh * d.sh - d.pt + K, (oh + 1) * d.sh - d.pt + K, o0, o1);
      compute_row<V, K>(d, blk, o0, o1, rows, y + oh * d.ow * d.c);
    }
  }
}

}  // namespace avx512_vnni

using BlockRows = void (*)(const DwInt8&, const DwInt8::Block&, const uint8_t*, uint8_t*, int64_t, int64_t, void*);

BlockRows block_rows_for(int64_t width, int64_t k) {
  using namespace avx512_vnni;
  if (width == 64) return k == 3 ? block_rows<V64, 3> : k == 5 ? block_rows<V64, 5> : block_rows<V64, 7>;
  return k == 3 ? block_rows<V32, 3> : k == 5 ? block_rows<V32, 5> : block_rows<V32, 7>;
}

// `bytes` bytes, 64-byte aligned, kept by the calling thread for its next runs (std::bad_alloc when there is no
// memory, before any thread starts).
void* scratch(size_t bytes) {
  struct Buffer {
    void* p = nullptr;
    size_t size = 0;
    ~Buffer() { std::free(p); }
  };
  static thread_local Buffer buf;
  if (buf.size < bytes) {
    std::free(buf.p);
    buf.size = 0;
    buf.p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!buf.p) throw std::bad_alloc();
    buf.size = bytes;
  }
  return buf.p;
}

int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

}  // namespace

bool dw_int8_geometry(int64_t k_h, int64_t k_w, const int64_t* dilations) {
  return k_h == k_w && (k_h == 3 || k_h == 5 || k_h == 7) && dilations[0] == 1 && dilations[1] == 1;
}

std::unique_ptr<DwInt8> make_dw_int8(int64_t c, int64_t h, int64_t w, int64_t k, const int64_t* strides,
                                     const int64_t* pad_begin, const int64_t* pad_end, const int8_t* weights,
                                     const int32_t* bias, const float* scales, size_t num_scales, int32_t x_zero_point,
                                     bool x_signed, bool y_signed, int32_t y_zero_point, float clip_lo, float clip_hi) {
  auto d = std::make_unique<DwInt8>();
  d->c = c;
  d->h = h;
  d->w = w;
  d->k = k;
  d->sh = strides[0];
  d->sw = strides[1];
  d->pt = pad_begin[0];
  d->pl = pad_begin[1];
  d->oh = (h + pad_begin[0] + pad_end[0] - k) / d->sh + 1;
  d->ow = (w + pad_begin[1] + pad_end[1] - k) / d->sw + 1;
  d->taps_groups = (k + 3) / 4;
  d->x_signed = x_signed;
  d->y_signed = y_signed;
  d->y_zero_point = y_zero_point;
  const int32_t u_zp = x_signed ? x_zero_point + 128 : x_zero_point;
  d->pad = static_cast<uint8_t>(u_zp);
  const int32_t type_lo = y_signed ? -128 : 0, type_hi = y_signed ? 127 : 255;
  d->lo = std::max<int64_t>(type_lo, static_cast<int64_t>(std::ceil(std::max(clip_lo, -1e9f))) + y_zero_point);
  d->hi = std::min<int64_t>(type_hi, static_cast<int64_t>(std::floor(std::min(clip_hi, 1e9f))) + y_zero_point);
  int64_t w_off = 0, b_off = 0;
  for (int64_t first = 0; first < c;) {
    const int64_t left = c - first, width = left > 32 ? 64 : 32, count = std::min(left, width);
    d->blocks.push_back(DwInt8::Block{first, width, count, w_off, b_off});
    w_off += k * d->taps_groups * 4 * width;
    b_off += width;
    first += count;
  }
  d->weights.assign(static_cast<size_t>(w_off), 0);
  d->bias.assign(static_cast<size_t>(b_off), 0);
  d->scale.assign(static_cast<size_t>(b_off), 0.f);
  for (const DwInt8::Block& blk : d->blocks) {
    for (int64_t cc = 0; cc < blk.count; ++cc) {
      const int64_t ch = blk.first + cc, lane = cc / 16, i = cc % 16 / 4, j = cc % 4;
      const int64_t entry = blk.b_offset + i * (blk.width / 4) + lane * 4 + j;
      int64_t sum = 0, abs_sum = 0;
      for (int64_t r = 0; r < k; ++r) {
        for (int64_t col = 0; col < k; ++col) {
          const int8_t v = weights[(ch * k + r) * k + col];
          sum += v;
          abs_sum += std::abs(static_cast<int64_t>(v));
          const int64_t g = col / 4, t = col % 4;
          d->weights[static_cast<size_t>(blk.w_offset + ((r * d->taps_groups + g) * 4 + i) * blk.width + lane * 16 +
                                         j * 4 + t)] = v;
        }
      }
      const int64_t b = (bias ? bias[ch] : 0) - int64_t{u_zp} * sum;
      const float s = scales[num_scales == 1 ? 0 : ch];
      // Every accumulator lies within |B'| + 255 * sum |w|: int32, and its float product converts exactly.
      const double bound = static_cast<double>(std::abs(b) + 255 * abs_sum);
      if (bound >= 2147483648.0 || !(bound * std::fabs(static_cast<double>(s)) < 1073741824.0)) return nullptr;
      d->bias[static_cast<size_t>(entry)] = static_cast<int32_t>(b);
      d->scale[static_cast<size_t>(entry)] = s;
    }
  }
  return d;
}

void run_dw_int8_part(const DwInt8& d, const void* x, void* y, int64_t n0, int64_t n1, int64_t r0, int64_t r1) {
  void* ring = scratch(static_cast<size_t>(d.k * d.taps_groups * kTile * 4 * 64));
  for (int64_t img = n0; img < n1; ++img) {
    const uint8_t* xi = static_cast<const uint8_t*>(x) + img * d.h * d.w * d.c;
    uint8_t* yi = static_cast<uint8_t*>(y) + img * d.oh * d.ow * d.c;
    for (const DwInt8::Block& blk : d.blocks) block_rows_for(blk.width, d.k)(d, blk, xi, yi, r0, r1, ring);
  }
}

void run_dw_int8(const DwInt8& d, const void* xv, void* yv, int64_t n) {
  const auto* x = static_cast<const uint8_t*>(xv);
  auto* y = static_cast<uint8_t*>(yv);
  const auto nb = static_cast<int64_t>(d.blocks.size());
  const int64_t units = n * d.oh * nb;  // (image, output row, block), the block fastest
  // Each thread's ring: k interleaved rows of a tile.
  const size_t ring_bytes = static_cast<size_t>(d.k * d.taps_groups * kTile * 4 * 64);
  const int max_threads = std::max(1, omp_get_max_threads());
  char* rings = static_cast<char*>(scratch(ring_bytes * static_cast<size_t>(max_threads)));
#pragma omp parallel num_threads(max_threads)
  {
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t u0 = units * t / nt, u1 = units * (t + 1) / nt;
    void* ring = rings + ring_bytes * static_cast<size_t>(t);
    {
      for (int64_t img = u0 / (d.oh * nb); img < n && img * d.oh * nb < u1; ++img) {
        const int64_t base = img * d.oh * nb;
        for (int64_t b = 0; b < nb; ++b) {
          const int64_t r0 = std::max<int64_t>(0, ceil_div(u0 - base - b, nb));
          const int64_t r1 = std::min(d.oh, ceil_div(u1 - base - b, nb));
          if (r1 <= r0) continue;
          const DwInt8::Block& blk = d.blocks[static_cast<size_t>(b)];
          block_rows_for(blk.width, d.k)(d, blk, x + img * d.h * d.w * d.c, y + img * d.oh * d.ow * d.c, r0, r1, ring);
        }
      }
    }
  }
}

}  // namespace tessera_dnnl
