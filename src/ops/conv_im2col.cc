#include "ops/conv_im2col.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <vector>

#include <unistd.h>

#include "util/cpu_isa.h"

namespace tessera {

namespace {

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// Output positions o in [0, out) whose input index o*s + off falls in
// [0, in): returns [lo, hi).
inline void valid_range(int64_t off, int64_t s, int64_t in, int64_t out, int64_t* lo, int64_t* hi) {
  if (s == 1) {  // the common case, without the divisions (im2col calls this once per run)
    *lo = std::min(std::max<int64_t>(-off, 0), out);
    *hi = std::max(std::min(in - off, out), *lo);
    return;
  }
  // o*s + off >= 0  <=>  o >= ceil(-off / s)
  int64_t l = off >= 0 ? 0 : (-off + s - 1) / s;
  // o*s + off <= in - 1  <=>  o <= floor((in - 1 - off) / s)
  int64_t h = in - 1 - off < 0 ? 0 : floor_div(in - 1 - off, s) + 1;
  *lo = std::min(std::max<int64_t>(l, 0), out);
  *hi = std::max(std::min(h, out), *lo);
}

// A 1-D or 2-D convolution's geometry as a plane (1-D: one row).
struct Plane2d {
  int64_t ih, iw, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw;
};

Plane2d plane2d(const Geometry& g) {
  const bool one = g.in.size() == 1;
  return {one ? 1 : g.in[0],        g.in.back(),         one ? 1 : g.out[0],       g.out.back(),
          one ? 1 : g.kernel[0],    g.kernel.back(),     one ? 1 : g.strides[0],   g.strides.back(),
          one ? 1 : g.dilations[0], g.dilations.back(),  one ? 0 : g.pad_begin[0], g.pad_begin.back()};
}

}  // namespace

bool is_pointwise(const Geometry& g) {
  for (size_t i = 0; i < g.kernel.size(); ++i) {
    if (g.kernel[i] != 1 || g.strides[i] != 1 || g.pad_begin[i] != 0 || g.pad_end[i] != 0) return false;
  }
  return true;
}

Im2colSource::Im2colSource(const float* x, int64_t channels, const Geometry& g) : x_(x), channels_(channels), g_(g) {}

namespace {

// A piece of one output row inside one panel, at most 16 columns: where it
// goes in the packed block (row 0 of the block), which output row it belongs
// to (an index into the tile's rows), its first output column and its length.
struct Im2colSegment {
  int64_t dst;
  int64_t row;
  int64_t ow;
  int64_t count;
};

struct Im2colScratch {
  std::vector<Im2colSegment> segs;
  std::vector<int64_t> row_oidx;  // per tile row, its outer output indices
  std::vector<int64_t> row_off;   // per tile row, the input row it reads for the current k (-1: padding)
};
thread_local Im2colScratch t_im2col;

// Copies `count` elements xr[off + e*sw], zero where off + e*sw falls outside [0, iw) or the row is
// padding (xr null), to d[0, count). (im2col copies at most im2col_segment_width at a time, the padded
// copy of conv_by_rows whole rows.)
inline void im2col_segment(const float* xr, int64_t off, int64_t sw, int64_t iw, int64_t count, float* d) {
  int64_t lo = 0, hi = 0;
  if (xr) valid_range(off, sw, iw, count, &lo, &hi);
  for (int64_t e = 0; e < lo; ++e) d[e] = 0.f;
  if (sw == 1 && hi > lo) {
    std::memcpy(d + lo, xr + off + lo, sizeof(float) * static_cast<size_t>(hi - lo));
  } else {
    for (int64_t e = lo; e < hi; ++e) d[e] = xr[off + e * sw];
  }
  for (int64_t e = hi; e < count; ++e) d[e] = 0.f;
}

#include "ops/conv_im2col_segments.inc"

}  // namespace

TSR_AVX512_BEGIN
namespace avx512 {
namespace {

// im2col_segment with one masked load and store at strides 1 and 2 (count <= 16 there).
inline void im2col_segment(const float* xr, int64_t off, int64_t sw, int64_t iw, int64_t count, float* d) {
  if (sw > 2) {
    tessera::im2col_segment(xr, off, sw, iw, count, d);
    return;
  }
  int64_t lo = 0, hi = 0;
  if (xr) valid_range(off, sw, iw, count, &lo, &hi);
  const auto store = static_cast<__mmask16>((1u << count) - 1u);
  const uint32_t valid = hi <= lo ? 0u : ((1u << hi) - 1u) & ~((1u << lo) - 1u);
  __m512 v;
  if (valid == 0) {
    v = _mm512_setzero_ps();
  } else if (sw == 1) {
    // Masked loads never touch the masked-off addresses.
    v = _mm512_maskz_loadu_ps(static_cast<__mmask16>(valid), xr + off);
  } else {
    const uint32_t spread = _pdep_u32(valid, 0x55555555u);
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    v = _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(static_cast<__mmask16>(spread & 0xFFFF), xr + off), even,
                               _mm512_maskz_loadu_ps(static_cast<__mmask16>(spread >> 16), xr + off + 16));
  }
  _mm512_mask_storeu_ps(d, store, v);
}

#include "ops/conv_im2col_segments.inc"

}  // namespace

// split_row (below) at stride 2: 32 padded columns at a time, split into the even and odd ones.
void split_row_stride2(const float* xr, int64_t iw, int64_t pw, bool even, bool odd, int64_t wq, float* d0, float* d1) {
  const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  // 32 padded columns from 2w: masked where they reach the padding or the end of the phase rows.
  auto edge = [&](int64_t w) {
    const int64_t base = 2 * w - pw;  // input column of padded column 2w
    const int64_t lo = std::clamp<int64_t>(-base, 0, 32), hi = std::clamp<int64_t>(iw - base, lo, 32);
    const uint64_t bits = ((uint64_t{1} << hi) - 1u) & ~((uint64_t{1} << lo) - 1u);  // input columns [lo, hi)
    const __m512 a = _mm512_maskz_loadu_ps(static_cast<__mmask16>(bits & 0xFFFF), xr + base);
    const __m512 b = _mm512_maskz_loadu_ps(static_cast<__mmask16>((bits >> 16) & 0xFFFF), xr + base + 16);
    const auto store = static_cast<__mmask16>(wq - w >= 16 ? 0xFFFFu : (1u << (wq - w)) - 1u);
    if (even) _mm512_mask_storeu_ps(d0 + w, store, _mm512_permutex2var_ps(a, ev, b));
    if (odd) _mm512_mask_storeu_ps(d1 + w, store, _mm512_permutex2var_ps(a, od, b));
  };
  int64_t w = 0;
  for (; w < wq && 2 * w < pw; w += 16) edge(w);
  // Inside the row, plain loads and stores: the masks' setup cost more than the copy (2 threads, 16->32 stride 2
  // at 320x320: this copy took 30 % of the layer).
  for (; w + 16 <= wq && 2 * w - pw + 32 <= iw; w += 16) {
    const float* s = xr + 2 * w - pw;
    const __m512 a = _mm512_loadu_ps(s), b = _mm512_loadu_ps(s + 16);
    if (even) _mm512_storeu_ps(d0 + w, _mm512_permutex2var_ps(a, ev, b));
    if (odd) _mm512_storeu_ps(d1 + w, _mm512_permutex2var_ps(a, od, b));
  }
  for (; w < wq; w += 16) edge(w);
}

}  // namespace avx512
TSR_AVX512_END

namespace {

// The widest segment a k row copies at stride sw: one vector where the
// AVX-512 copy uses masks, else a whole panel.
inline int64_t im2col_segment_width(int64_t sw, int64_t nr) { return cpu::avx512() && sw <= 2 ? 16 : nr; }

}  // namespace

// The columns [n0, n0 + nc) of a block are the same for every k row: they
// are cut once into segments (pieces of output rows, split at panel
// boundaries and, where they are copied with vector masks, every 16
// columns), and each k row then copies each segment from one input row (or
// writes padding), with one masked load and store at strides 1 and 2. Cutting
// the runs anew for every k row cost more than the copies on short rows
// (0.8 -> 0.36 ns per element at 14x14). Spatial ranks 1, 2, 3 and more take
// the same path: the outer axes only choose the input row.
void Im2colSource::pack(int64_t k0, int64_t kc, int64_t n0, int64_t nc, float* dst) const {
  const int64_t nr = kernels::gemm_nr();
  const size_t r = g_.in.size();
  const size_t outer = r - 1;
  const int64_t ksize = g_.kernel_size();
  const int64_t isize = g_.in_size();
  const int64_t iw = g_.in[outer], own = g_.out[outer], sw = g_.strides[outer], dw = g_.dilations[outer];
  const int64_t pw = g_.pad_begin[outer];
  const int64_t panel_stride = nr * kc;

  const bool wide = cpu::avx512();
  const int64_t width = im2col_segment_width(sw, nr);
  Im2colScratch& sc = t_im2col;
  sc.segs.clear();
  sc.row_oidx.clear();
  {
    std::vector<int64_t> oidx(outer == 0 ? 1 : outer, 0);
    int64_t o = n0 / own;
    for (size_t i = outer; i-- > 0;) {
      oidx[i] = o % g_.out[i];
      o /= g_.out[i];
    }
    int64_t j = 0, ow = n0 % own, row = 0;
    while (j < nc) {
      sc.row_oidx.insert(sc.row_oidx.end(), oidx.begin(), oidx.begin() + static_cast<std::ptrdiff_t>(outer));
      const int64_t end = j + std::min(own - ow, nc - j);
      while (j < end) {
        const int64_t lane = j % nr;
        const int64_t count = std::min({end - j, nr - lane, width});
        sc.segs.push_back({(j / nr) * panel_stride + lane, row, ow, count});
        j += count;
        ow += count;
      }
      ++row;
      ow = 0;
      for (size_t i = outer; i-- > 0;) {  // next output row
        if (++oidx[i] < g_.out[i]) break;
        oidx[i] = 0;
      }
    }
    sc.row_off.resize(static_cast<size_t>(row));
  }

  // Locals, so that the compiler need not reload them after every store.
  const Im2colSegment* segs = sc.segs.data();
  const size_t nsegs = sc.segs.size();
  const size_t nrows = sc.row_off.size();
  const int64_t* row_oidx = sc.row_oidx.data();
  int64_t* row_off = sc.row_off.data();
  std::vector<int64_t> kidx(r);
  for (int64_t kk = 0; kk < kc; ++kk) {
    const int64_t k = k0 + kk;
    const int64_t c = k / ksize;
    int64_t rem = k % ksize;
    for (size_t i = r; i-- > 0;) {
      kidx[i] = rem % g_.kernel[i];
      rem /= g_.kernel[i];
    }
    const float* xc = x_ + c * isize;
    for (size_t t = 0; t < nrows; ++t) {
      // The input row output row t reads for this k: its outer indices, or padding.
      const int64_t* oi = row_oidx + t * outer;
      int64_t off = 0;
      bool ok = true;
      for (size_t i = 0; i < outer; ++i) {
        const int64_t q = oi[i] * g_.strides[i] - g_.pad_begin[i] + kidx[i] * g_.dilations[i];
        ok = ok && q >= 0 && q < g_.in[i];
        off = off * g_.in[i] + q;
      }
      row_off[t] = ok ? off * iw : -1;
    }
    float* drow = dst + kk * nr;  // row kk of panel 0
    const int64_t shift = kidx[outer] * dw - pw;
    if (wide) {
      avx512::copy_segments(segs, nsegs, row_off, xc, shift, sw, iw, drow);
    } else {
      copy_segments(segs, nsegs, row_off, xc, shift, sw, iw, drow);
    }
    // Zero the lanes past nc in the last panel.
    if (nc % nr != 0) {
      float* d = drow + (nc / nr) * panel_stride + nc % nr;
      std::memset(d, 0, sizeof(float) * static_cast<size_t>(nr - nc % nr));
    }
  }
}

// ---- depthwise ----------------------------------------------------------------

namespace {

// One output row of a depthwise convolution: yr[ow] += sum_kw w[kw] *
// xr[ow*sw - pw + kw*dw] for the valid taps. KW > 0 fixes the kernel width
// at compile time so the interior loop vectorises.
template <int KW>
void dw_row(const float* __restrict xr, const float* __restrict w, int64_t kw_rt, int64_t iw, int64_t ow,
            int64_t sw, int64_t pw, int64_t dw, float* __restrict yr) {
  const int64_t kwn = KW > 0 ? KW : kw_rt;
  // Interior: every tap valid.
  int64_t lo = 0, hi = ow;
  for (int64_t kw = 0; kw < kwn; ++kw) {
    int64_t l, h;
    valid_range(kw * dw - pw, sw, iw, ow, &l, &h);
    lo = std::max(lo, l);
    hi = std::min(hi, h);
  }
  if (hi < lo) hi = lo;
  auto edge = [&](int64_t o) {
    float s = yr[o];
    for (int64_t kw = 0; kw < kwn; ++kw) {
      const int64_t p = o * sw - pw + kw * dw;
      if (p >= 0 && p < iw) s += w[kw] * xr[p];
    }
    yr[o] = s;
  };
  for (int64_t o = 0; o < lo; ++o) edge(o);
  if constexpr (KW > 0) {
    float wk[KW];
    for (int k = 0; k < KW; ++k) wk[k] = w[k];
    const float* base = xr - pw;
    if (sw == 1) {
      for (int64_t o = lo; o < hi; ++o) {
        float s = yr[o];
        for (int k = 0; k < KW; ++k) s += wk[k] * base[o + k * dw];
        yr[o] = s;
      }
    } else if (sw == 2) {
      for (int64_t o = lo; o < hi; ++o) {
        float s = yr[o];
        for (int k = 0; k < KW; ++k) s += wk[k] * base[2 * o + k * dw];
        yr[o] = s;
      }
    } else {
      for (int64_t o = lo; o < hi; ++o) {
        float s = yr[o];
        for (int k = 0; k < KW; ++k) s += wk[k] * base[o * sw + k * dw];
        yr[o] = s;
      }
    }
  } else {
    // A kernel of any length: tap by tap over the whole interior, so the
    // inner loop runs along the row (vectorised) and not along the taps (a
    // 31-tap 1-D depthwise conv ran at 0.4x ONNX Runtime with the taps inner).
    // Each output still sums its taps in order.
    const float* base = xr - pw;
    for (int64_t k = 0; k < kwn; ++k) {
      const float wk = w[k];
      const float* src = base + k * dw;
      if (sw == 1) {
        for (int64_t o = lo; o < hi; ++o) yr[o] += wk * src[o];
      } else {
        for (int64_t o = lo; o < hi; ++o) yr[o] += wk * src[o * sw];
      }
    }
  }
  for (int64_t o = std::max(hi, lo); o < ow; ++o) edge(o);
}

}  // namespace

TSR_AVX512_BEGIN
namespace avx512 {
namespace {

// Depthwise convolution with AVX-512 for kernels up to 8 wide and horizontal
// strides 1 and 2. Stride 2 first splits each input row into its even and
// odd columns, so every tap reads contiguous columns of one of them. Each
// block of up to 4 x 16 outputs of a row keeps its accumulators in registers
// across all taps. Vectors that touch the left/right border use masked loads
// (the masks supply the zero padding) and are kept in blocks of their own;
// interior blocks use plain loads. Blocks and masks depend only on columns,
// so they are computed once per plane.
constexpr int kDwMaxKW = 8;

struct DwTap {
  int src;        // 0: the input (stride 1) or its even columns; 1: odd columns
  int64_t shift;  // source column of output column 0
};

struct DwBlock {
  int64_t ow0 = 0;
  int vecs = 0;
  bool masked = false;
  __mmask16 in[kDwMaxKW][4];  // per tap and vector: lanes inside the source row
  __mmask16 out[4];           // output lanes to store
};

struct DwPlan {
  std::vector<DwTap> taps;
  int64_t width[2] = {0, 0};  // columns of each source row
  std::vector<DwBlock> blocks;
};

DwPlan dw_plan(int64_t iw, int64_t ow, int64_t kw, int64_t sw, int64_t pw, int64_t dw) {
  DwPlan plan;
  auto floor_div2 = [](int64_t v) { return v >= 0 ? v / 2 : -((-v + 1) / 2); };
  if (sw == 1) {
    plan.width[0] = iw;
  } else {
    plan.width[0] = (iw + 1) / 2;
    plan.width[1] = iw / 2;
  }
  for (int64_t b = 0; b < kw; ++b) {
    const int64_t off = b * dw - pw;
    if (sw == 1) {
      plan.taps.push_back({0, off});
    } else {
      const int64_t q = floor_div2(off);
      plan.taps.push_back({static_cast<int>(off - 2 * q), q});
    }
  }
  auto lanes = [](int64_t first, int64_t width) -> __mmask16 {
    const int64_t lo = std::clamp<int64_t>(-first, 0, 16);
    const int64_t hi = std::clamp<int64_t>(width - first, 0, 16);
    if (hi <= lo) return 0;
    return static_cast<__mmask16>(((1u << hi) - 1u) & ~((1u << lo) - 1u));
  };
  // Classify each output vector, then group runs of interior vectors.
  const int64_t nvec = (ow + 15) / 16;
  auto interior = [&](int64_t v) {
    if (16 * (v + 1) > ow) return false;
    for (int64_t b = 0; b < kw; ++b) {
      const DwTap& t = plan.taps[static_cast<size_t>(b)];
      if (lanes(16 * v + t.shift, plan.width[t.src]) != 0xFFFF) return false;
    }
    return true;
  };
  for (int64_t v = 0; v < nvec;) {
    DwBlock blk;
    blk.ow0 = 16 * v;
    const int n = static_cast<int>(std::min<int64_t>(4, nvec - v));
    blk.masked = false;
    for (int j = 0; j < n; ++j) blk.masked = blk.masked || !interior(v + j);
    blk.vecs = n;
    for (int j = 0; j < 4; ++j) {
      const int64_t left = ow - (blk.ow0 + 16 * j);
      blk.out[j] = j >= n ? static_cast<__mmask16>(0)
                   : left >= 16 ? static_cast<__mmask16>(0xFFFF)
                                : static_cast<__mmask16>((1u << left) - 1u);
      for (int64_t b = 0; b < kw; ++b) {
        const DwTap& t = plan.taps[static_cast<size_t>(b)];
        blk.in[b][j] = j < n ? lanes(blk.ow0 + 16 * j + t.shift, plan.width[t.src]) : 0;
      }
    }
    plan.blocks.push_back(blk);
    v += n;
  }
  return plan;
}

// dw_plan for this geometry, built once per thread while the geometry repeats: a convolution calls
// depthwise_conv2d once per channel, and at wide kernels (a Conformer's 31 taps over 200 columns) building the plan
// for each took longer than the channel's product.
const DwPlan& cached_dw_plan(int64_t iw, int64_t ow, int64_t kw, int64_t sw, int64_t pw, int64_t dw) {
  thread_local std::array<int64_t, 6> key{-1, -1, -1, -1, -1, -1};
  thread_local DwPlan plan;
  const std::array<int64_t, 6> want{iw, ow, kw, sw, pw, dw};
  if (want != key) {
    plan = dw_plan(iw, ow, kw, sw, pw, dw);
    key = want;
  }
  return plan;
}

// Computes output rows [o, o + R) of one column block. src[0..1] are the
// source planes (row strides plan.width[]). Every loaded input vector feeds
// each of the R rows whose window covers its row.
template <int R, int V, bool kMasked>
void dw_block_avx512(const DwPlan& plan, const DwBlock& blk, const float* const src[2], int64_t ih, const float* w,
                     int64_t kh, int64_t kw, int64_t o, int64_t sh, int64_t ph, int64_t dh, float bias,
                     bool accumulate, float* y, int64_t ow) {
  const int64_t ow0 = blk.ow0;
  __m512 acc[R][V];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      acc[r][v] = _mm512_set1_ps(bias);
      if (accumulate) {
        acc[r][v] = _mm512_add_ps(acc[r][v], _mm512_maskz_loadu_ps(blk.out[v], y + (o + r) * ow + ow0 + 16 * v));
      }
    }
  }
  const int64_t first = std::max<int64_t>(0, o * sh - ph);
  const int64_t last = std::min<int64_t>(ih - 1, (o + R - 1) * sh - ph + (kh - 1) * dh);
  for (int64_t i = first; i <= last; ++i) {
    // Kernel row used by each output row for input row i, or null.
    const float* wr[R];
    bool any = false;
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const int64_t a = i - ((o + r) * sh - ph);
      wr[r] = a >= 0 && a % dh == 0 && a / dh < kh ? w + (a / dh) * kw : nullptr;
      any = any || wr[r] != nullptr;
    }
    if (!any) continue;
    for (int64_t b = 0; b < kw; ++b) {
      const DwTap& t = plan.taps[static_cast<size_t>(b)];
      const float* p = src[t.src] + i * plan.width[t.src] + ow0 + t.shift;
      __m512 xv[V];
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) {
        xv[v] = kMasked ? _mm512_maskz_loadu_ps(blk.in[b][v], p + 16 * v) : _mm512_loadu_ps(p + 16 * v);
      }
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        if (!wr[r]) continue;
        const __m512 wv = _mm512_set1_ps(wr[r][b]);
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(wv, xv[v], acc[r][v]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      float* dst = y + (o + r) * ow + ow0 + 16 * v;
      if (kMasked) {
        _mm512_mask_storeu_ps(dst, blk.out[v], acc[r][v]);
      } else {
        _mm512_storeu_ps(dst, acc[r][v]);
      }
    }
  }
}

template <int R>
void dw_rows_avx512(const DwPlan& plan, const float* const src[2], int64_t ih, const float* w, int64_t kh,
                    int64_t kw, int64_t o, int64_t ow, int64_t sh, int64_t ph, int64_t dh, float bias,
                    bool accumulate, float* y) {
  for (const DwBlock& blk : plan.blocks) {
#define TSR_DW_CASE(V)                                                                                        \
  if (blk.masked) {                                                                                           \
    dw_block_avx512<R, V, true>(plan, blk, src, ih, w, kh, kw, o, sh, ph, dh, bias, accumulate, y, ow);       \
  } else {                                                                                                    \
    dw_block_avx512<R, V, false>(plan, blk, src, ih, w, kh, kw, o, sh, ph, dh, bias, accumulate, y, ow);      \
  }
    switch (blk.vecs) {
      case 4: TSR_DW_CASE(4) break;
      case 3: TSR_DW_CASE(3) break;
      case 2: TSR_DW_CASE(2) break;
      default: TSR_DW_CASE(1) break;
    }
#undef TSR_DW_CASE
  }
}

void dw_plane_avx512(const DwPlan& plan, const float* const src[2], int64_t ih, const float* w, int64_t kh,
                     int64_t kw, int64_t oh, int64_t ow, int64_t sh, int64_t ph, int64_t dh, float bias,
                     bool accumulate, const kernels::Epilogue& act, float* y) {
  int64_t o = 0;
  for (; o + 2 <= oh; o += 2) {
    dw_rows_avx512<2>(plan, src, ih, w, kh, kw, o, ow, sh, ph, dh, bias, accumulate, y);
    kernels::apply_activation(act, y + o * ow, 2 * ow);
  }
  if (o < oh) {
    dw_rows_avx512<1>(plan, src, ih, w, kh, kw, o, ow, sh, ph, dh, bias, accumulate, y);
    kernels::apply_activation(act, y + o * ow, ow);
  }
}

// Splits every row of an ih x iw plane into its even columns (ceil(iw/2) per
// row, into `even`) and odd columns (floor(iw/2), into `odd`).
void deinterleave_columns(const float* x, int64_t ih, int64_t iw, float* even, float* odd) {
  const int64_t we = (iw + 1) / 2, wo = iw / 2;
  const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (int64_t i = 0; i < ih; ++i) {
    const float* r = x + i * iw;
    float* e = even + i * we;
    float* d = odd + i * wo;
    int64_t j = 0;
    for (; 2 * j + 32 <= iw; j += 16) {
      const __m512 a = _mm512_loadu_ps(r + 2 * j), b = _mm512_loadu_ps(r + 2 * j + 16);
      _mm512_storeu_ps(e + j, _mm512_permutex2var_ps(a, ie, b));
      _mm512_storeu_ps(d + j, _mm512_permutex2var_ps(a, io, b));
    }
    for (; 2 * j < iw; ++j) {
      e[j] = r[2 * j];
      if (2 * j + 1 < iw) d[j] = r[2 * j + 1];
    }
  }
}

thread_local std::vector<float> t_dw_scratch;

// Fast path for square K x K kernels (K = 3, 5), unit dilation and equal
// strides S = 1, 2: the plane is first copied into a zero-padded buffer (for
// S = 2 split into even and odd padded columns) so that every tap is a plain
// unaligned load and the whole tap loop unrolls at compile time with the
// weights in registers.
struct PaddedPlane {
  const float* src[2];  // S = 1: src[0]; S = 2: even, odd columns
  int64_t stride;       // floats per padded row (of each source)
};

// Copies x (ih x iw) into zero-padded rows starting ph rows and pw columns
// in; for S = 2 the padded rows are split into their even and odd columns
// in the same pass.
PaddedPlane pad_plane(const float* x, int64_t ih, int64_t iw, int64_t ph, int64_t pw, int64_t rows, int64_t cols,
                      int s) {
  PaddedPlane pp;
  const int64_t half = (cols + 1) / 2;
  const size_t need = static_cast<size_t>(s == 1 ? rows * cols : 2 * rows * half);
  if (t_dw_scratch.size() < need) t_dw_scratch.resize(need);
  float* buf = t_dw_scratch.data();
  if (s == 1) {
    for (int64_t r = 0; r < rows; ++r) {
      float* d = buf + r * cols;
      const int64_t i = r - ph;
      if (i < 0 || i >= ih) {
        std::memset(d, 0, sizeof(float) * static_cast<size_t>(cols));
        continue;
      }
      const int64_t n = std::min(iw, cols - pw);
      std::memset(d, 0, sizeof(float) * static_cast<size_t>(pw));
      std::memcpy(d + pw, x + i * iw, sizeof(float) * static_cast<size_t>(n));
      std::memset(d + pw + n, 0, sizeof(float) * static_cast<size_t>(cols - pw - n));
    }
    pp.src[0] = buf;
    pp.src[1] = nullptr;
    pp.stride = cols;
    return pp;
  }
  float* even = buf;
  float* odd = buf + rows * half;
  const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (int64_t r = 0; r < rows; ++r) {
    float* e = even + r * half;
    float* d = odd + r * half;
    const int64_t i = r - ph;
    if (i < 0 || i >= ih) {
      std::memset(e, 0, sizeof(float) * static_cast<size_t>(half));
      std::memset(d, 0, sizeof(float) * static_cast<size_t>(half));
      continue;
    }
    const float* xr = x + i * iw;
    // Padded column c holds x[c - pw]: even[j] = x[2j - pw], odd[j] = x[2j + 1 - pw].
    auto at = [&](int64_t c) { return c >= 0 && c < iw ? xr[c] : 0.f; };
    int64_t j = 0;
    for (; j < half && 2 * j - pw < 0; ++j) {
      e[j] = at(2 * j - pw);
      d[j] = at(2 * j + 1 - pw);
    }
    for (; j + 16 <= half && 2 * j - pw + 32 <= iw; j += 16) {
      const __m512 lo = _mm512_loadu_ps(xr + 2 * j - pw), hi = _mm512_loadu_ps(xr + 2 * j - pw + 16);
      _mm512_storeu_ps(e + j, _mm512_permutex2var_ps(lo, ie, hi));
      _mm512_storeu_ps(d + j, _mm512_permutex2var_ps(lo, io, hi));
    }
    for (; j < half; ++j) {
      e[j] = at(2 * j - pw);
      d[j] = at(2 * j + 1 - pw);
    }
  }
  pp.src[0] = even;
  pp.src[1] = odd;
  pp.stride = half;
  return pp;
}

// Rows [o, o + R) x vectors [v0, v0 + V) of the output; x rows/cols are
// padded coordinates.
template <int K, int S, int R, int V>
inline void dw_fast_block(const PaddedPlane& pp, const __m512 (&wv)[K * K], float bias, int64_t o, int64_t ow0,
                          int64_t ow, bool accumulate, __mmask16 tail, bool last, float* y) {
  __m512 acc[R][V];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      acc[r][v] = _mm512_set1_ps(bias);
      if (accumulate) {
        const __mmask16 m = last && v == V - 1 ? tail : static_cast<__mmask16>(0xFFFF);
        acc[r][v] = _mm512_add_ps(acc[r][v], _mm512_maskz_loadu_ps(m, y + (o + r) * ow + ow0 + 16 * v));
      }
    }
  }
  // Input rows (o*S + i) for i in [0, (R-1)*S + K) feed output row r with
  // kernel row a = i - r*S.
#pragma GCC unroll 16
  for (int i = 0; i < (R - 1) * S + K; ++i) {
#pragma GCC unroll 8
    for (int b = 0; b < K; ++b) {
      const float* p = S == 1 ? pp.src[0] + (o * S + i) * pp.stride + ow0 + b
                              : pp.src[b % 2] + (o * S + i) * pp.stride + ow0 + b / 2;
      __m512 xv[V];
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) xv[v] = _mm512_loadu_ps(p + 16 * v);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const int a = i - r * S;
        if (a < 0 || a >= K) continue;
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(wv[a * K + b], xv[v], acc[r][v]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      float* dst = y + (o + r) * ow + ow0 + 16 * v;
      if (last && v == V - 1) {
        _mm512_mask_storeu_ps(dst, tail, acc[r][v]);
      } else {
        _mm512_storeu_ps(dst, acc[r][v]);
      }
    }
  }
}

template <int K, int S, int R>
void dw_fast_rows(const PaddedPlane& pp, const __m512 (&wv)[K * K], float bias, int64_t o, int64_t ow,
                  bool accumulate, float* y) {
  const int64_t nvec = (ow + 15) / 16;
  const int64_t rem = ow - 16 * (nvec - 1);
  const __mmask16 tail = rem >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << rem) - 1u);
  int64_t v = 0;
  for (; v + 4 <= nvec; v += 4) dw_fast_block<K, S, R, 4>(pp, wv, bias, o, 16 * v, ow, accumulate, tail, v + 4 == nvec, y);
  switch (nvec - v) {
    case 3: dw_fast_block<K, S, R, 3>(pp, wv, bias, o, 16 * v, ow, accumulate, tail, true, y); break;
    case 2: dw_fast_block<K, S, R, 2>(pp, wv, bias, o, 16 * v, ow, accumulate, tail, true, y); break;
    case 1: dw_fast_block<K, S, R, 1>(pp, wv, bias, o, 16 * v, ow, accumulate, tail, true, y); break;
    default: break;
  }
}

template <int K, int S>
void dw_fast_plane(const float* x, const float* w, const float* bias, int64_t mult, int64_t ih, int64_t iw,
                   int64_t oh, int64_t ow, int64_t ph, int64_t pw, bool accumulate, const kernels::Epilogue& act,
                   float* y) {
  // Padded extent read by the last (partial) vector of the last row.
  const int64_t rows = (oh - 1) * S + K;
  const int64_t cols = ((ow + 15) / 16 * 16) * S + K + 16;
  const PaddedPlane pp = pad_plane(x, ih, iw, ph, pw, rows, cols, S);
  for (int64_t m = 0; m < mult; ++m) {
    __m512 wv[K * K];
    for (int t = 0; t < K * K; ++t) wv[t] = _mm512_set1_ps(w[m * K * K + t]);
    const float b = bias ? bias[m] : 0.f;
    float* ym = y + m * oh * ow;
    int64_t o = 0;
    for (; o + 2 <= oh; o += 2) {
      dw_fast_rows<K, S, 2>(pp, wv, b, o, ow, accumulate, ym);
      kernels::apply_activation(act, ym + o * ow, 2 * ow);
    }
    if (o < oh) {
      dw_fast_rows<K, S, 1>(pp, wv, b, o, ow, accumulate, ym);
      kernels::apply_activation(act, ym + o * ow, ow);
    }
  }
}

}  // namespace

// Horizontal stride 1, one kernel row or a kernel wider than kDwMaxKW (a speech model's 1-D depthwise convolution
// over time: a Conformer's 31 taps, QuartzNet's up to 87): the plane copied zero-padded once, then per output row
// blocks of 64 outputs whose 4 accumulators stay in registers over every tap, each tap one broadcast weight and 4
// unaligned loads. The sum's order is the general path's: the bias, then the taps row by row.
void dw_plane_padded_rows(const float* x, const float* w, const float* bias, int64_t mult, const Geometry& g,
                          bool accumulate, const kernels::Epilogue& act, float* y) {
  const auto [ih, iw, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw] = plane2d(g);
  (void)sw;
  constexpr int64_t kBlock = 64;
  const int64_t rows = (oh - 1) * sh + (kh - 1) * dh + 1;
  const int64_t cols = (ow + kBlock - 1) / kBlock * kBlock + (kw - 1) * dw;
  const PaddedPlane pp = pad_plane(x, ih, iw, ph, pw, rows, cols, 1);
  for (int64_t m = 0; m < mult; ++m) {
    const float* wm = w + m * kh * kw;
    float* ym = y + m * oh * ow;
    const __m512 b = _mm512_set1_ps(bias ? bias[m] : 0.f);
    for (int64_t o = 0; o < oh; ++o) {
      float* yr = ym + o * ow;
      for (int64_t j0 = 0; j0 < ow; j0 += kBlock) {
        __mmask16 out[4];
        __m512 acc[4];
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) {
          const int64_t left = std::clamp<int64_t>(ow - j0 - 16 * v, 0, 16);
          out[v] = static_cast<__mmask16>((1u << left) - 1u);
          acc[v] = accumulate ? _mm512_add_ps(b, _mm512_maskz_loadu_ps(out[v], yr + j0 + 16 * v)) : b;
        }
        for (int64_t a = 0; a < kh; ++a) {
          const float* row = pp.src[0] + (o * sh + a * dh) * pp.stride + j0;
          const float* wr = wm + a * kw;
          for (int64_t k = 0; k < kw; ++k) {
            const __m512 wv = _mm512_set1_ps(wr[k]);
            const float* p = row + k * dw;
#pragma GCC unroll 4
            for (int v = 0; v < 4; ++v) acc[v] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(p + 16 * v), acc[v]);
          }
        }
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) _mm512_mask_storeu_ps(yr + j0 + 16 * v, out[v], acc[v]);
      }
      kernels::apply_activation(act, yr, ow);
    }
  }
}

// The AVX-512 depthwise paths (kernels 3 and 5 with equal strides 1 or 2; at horizontal stride 1 one kernel row
// or any width; any kernel up to kDwMaxKW wide at horizontal strides 1 and 2); false where none applies. `act` has no
// bias.
bool depthwise_conv2d(const float* x, const float* w, const float* bias, int64_t mult, const Geometry& g,
                      bool accumulate, const kernels::Epilogue& act, float* y) {
  const auto [ih, iw, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw] = plane2d(g);
  if (kh == kw && (kw == 3 || kw == 5) && sh == sw && (sw == 1 || sw == 2) && dh == 1 && dw == 1) {
    auto fast = kw == 3 ? (sw == 1 ? &dw_fast_plane<3, 1> : &dw_fast_plane<3, 2>)
                        : (sw == 1 ? &dw_fast_plane<5, 1> : &dw_fast_plane<5, 2>);
    fast(x, w, bias, mult, ih, iw, oh, ow, ph, pw, accumulate, act, y);
    return true;
  }
  if (sw == 1 && (kh == 1 || kw > kDwMaxKW)) {
    dw_plane_padded_rows(x, w, bias, mult, g, accumulate, act, y);
    return true;
  }
  if ((sw == 1 || sw == 2) && kw <= kDwMaxKW) {
    const DwPlan& plan = cached_dw_plan(iw, ow, kw, sw, pw, dw);
    const float* src[2] = {x, nullptr};
    if (sw == 2) {
      t_dw_scratch.resize(static_cast<size_t>(ih * iw));
      float* even = t_dw_scratch.data();
      float* odd = even + ih * plan.width[0];
      deinterleave_columns(x, ih, iw, even, odd);
      src[0] = even;
      src[1] = odd;
    }
    for (int64_t m = 0; m < mult; ++m) {
      const float b = bias ? bias[m] : 0.f;
      dw_plane_avx512(plan, src, ih, w + m * kh * kw, kh, kw, oh, ow, sh, ph, dh, b, accumulate, act,
                      y + m * oh * ow);
    }
    return true;
  }
  return false;
}

}  // namespace avx512
TSR_AVX512_END

void depthwise_conv2d(const float* x, const float* w, const float* bias, int64_t mult, const Geometry& g,
                      bool accumulate, const kernels::Epilogue& ep, float* y) {
  const auto [ih, iw, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw] = plane2d(g);
  kernels::Epilogue act = ep;
  act.bias_kind = kernels::Epilogue::Bias::kNone;
  if (cpu::avx512() && avx512::depthwise_conv2d(x, w, bias, mult, g, accumulate, act, y)) return;
  auto row_fn = kw == 3 ? &dw_row<3> : kw == 5 ? &dw_row<5> : kw == 7 ? &dw_row<7> : &dw_row<0>;
  for (int64_t m = 0; m < mult; ++m) {
    const float* wm = w + m * kh * kw;
    float* ym = y + m * oh * ow;
    const float b = bias ? bias[m] : 0.f;
    for (int64_t o = 0; o < oh; ++o) {
      float* yr = ym + o * ow;
      if (!accumulate) std::fill(yr, yr + ow, 0.f);
      for (int64_t k = 0; k < kh; ++k) {
        const int64_t i = o * sh - ph + k * dh;
        if (i < 0 || i >= ih) continue;
        row_fn(x + i * iw, wm + k * kw, kw, iw, ow, sw, pw, dw, yr);
      }
      if (b != 0.f) {
        for (int64_t j = 0; j < ow; ++j) yr[j] += b;
      }
      kernels::apply_activation(act, yr, ow);
    }
  }
}

// ---- col2im -------------------------------------------------------------------

// ---- convolution by rows read in place ---------------------------------------

namespace {

// A band's copy may not exceed this many floats (the copy is kept per thread); a convolution whose one output row
// needs more takes im2col (whose blocks are small).
constexpr int64_t kMaxPaddedFloats = int64_t{16} << 20;

// Where the copy of a band of output rows [oh0, oh0 + rows) goes. Along each axis the padded input is read at
// positions o * s + t * d (output o, tap t, stride s, dilation d) = (o + q) * s + r for q = t * d / s,
// r = t * d % s: the copy keeps, per phase r that some tap reads, the positions r, r + s, r + 2s, .. side by side,
// so consecutive outputs read consecutive floats. Per channel: one block of hq x wq floats per (row phase, column
// phase) pair.
struct PaddedLayout {
  Plane2d p;
  std::vector<int64_t> phases_h, phases_w;  // the phases some tap reads, ascending
  int64_t wq = 0;                           // columns of a phase block
  int64_t halo = 0;                         // phase rows a band reads past its output rows (the largest q)

  explicit PaddedLayout(const Geometry& g) : p(plane2d(g)) {
    auto phases = [](int64_t taps, int64_t d, int64_t s) {
      std::vector<int64_t> r;
      for (int64_t t = 0; t < taps; ++t) r.push_back(t * d % s);
      std::sort(r.begin(), r.end());
      r.erase(std::unique(r.begin(), r.end()), r.end());
      return r;
    };
    phases_h = phases(p.kh, p.dh, p.sh);
    phases_w = phases(p.kw, p.dw, p.sw);
    // Padded columns read: 0 .. (ow - 1) * sw + (kw - 1) * dw.
    wq = ((p.ow - 1) * p.sw + (p.kw - 1) * p.dw) / p.sw + 1;
    halo = (p.kh - 1) * p.dh / p.sh;
  }
  int64_t phases() const { return static_cast<int64_t>(phases_h.size() * phases_w.size()); }
  // Floats per channel of a band of `rows` output rows.
  int64_t channel(int64_t rows) const { return phases() * (rows + halo) * wq; }
  static int64_t slot(const std::vector<int64_t>& phases, int64_t r) {
    return std::lower_bound(phases.begin(), phases.end(), r) - phases.begin();
  }
};

thread_local std::vector<float> t_padded;

// One input row `xr` (iw floats) as the column phases of its padded copy: phase b (column offset phases[b]) at
// dst + b * phase_stride, wq columns, column w' = xr[w' * sw + phases[b] - pw] or 0 in the padding.
void split_row(const float* xr, int64_t iw, int64_t pw, int64_t sw, const std::vector<int64_t>& phases, int64_t wq,
               float* dst, int64_t phase_stride) {
  if (sw == 2 && cpu::avx512()) {
    const bool even = phases.front() == 0, odd = phases.back() == 1;
    avx512::split_row_stride2(xr, iw, pw, even, odd, wq, dst, dst + (even && odd ? phase_stride : 0));
    return;
  }
  for (size_t b = 0; b < phases.size(); ++b) {
    im2col_segment(xr, phases[b] - pw, sw, iw, wq, dst + static_cast<int64_t>(b) * phase_stride);
  }
}

// The copy of output rows [oh0, oh0 + rows) of one image/group (in this thread's storage) and the GEMM operand
// that reads it in place: row k = (c, kh, kw) of the im2col matrix at offsets[k], its columns the band's output
// positions row by row, with wq - ow columns past each row's end that are computed and dropped.
class PaddedBand {
 public:
  // x: the first input channel's plane; x_channel: floats from one channel's plane to the next.
  PaddedBand(const PaddedLayout& l, const float* x, int64_t x_channel, int64_t channels, int64_t oh0, int64_t rows) {
    const Plane2d& p = l.p;
    const int64_t hq = rows + l.halo, block = hq * l.wq, channel = l.channel(rows);
    const auto nw = static_cast<int64_t>(l.phases_w.size());
    // Reads run up to gemm_nr() - 1 floats past the last column (GemmB::offsets): zeros.
    const int64_t total = channels * channel + kernels::gemm_nr();
    std::vector<float>& buf = t_padded;
    if (static_cast<int64_t>(buf.size()) < total) buf.resize(static_cast<size_t>(total));
    float* out = buf.data();
    std::fill(out + channels * channel, out + total, 0.f);
    // Row phases innermost: a channel's input rows are read in memory order (phase by phase, a stride-2 copy read
    // every other row and ran at a third of the speed).
    for (int64_t c = 0; c < channels; ++c) {
      for (int64_t h = 0; h < hq; ++h) {
        for (size_t a = 0; a < l.phases_h.size(); ++a) {
          float* dst = out + c * channel + static_cast<int64_t>(a) * nw * block;
          const int64_t ih = (oh0 + h) * p.sh + l.phases_h[a] - p.ph;
          if (ih < 0 || ih >= p.ih) {
            for (int64_t b = 0; b < nw; ++b) std::fill_n(dst + b * block + h * l.wq, l.wq, 0.f);
          } else {
            split_row(x + c * x_channel + ih * p.iw, p.iw, p.pw, p.sw, l.phases_w, l.wq, dst + h * l.wq, block);
          }
        }
      }
    }
    offsets_.reserve(static_cast<size_t>(channels * p.kh * p.kw));
    for (int64_t c = 0; c < channels; ++c) {
      for (int64_t i = 0; i < p.kh; ++i) {
        const int64_t th = i * p.dh;
        for (int64_t j = 0; j < p.kw; ++j) {
          const int64_t tw = j * p.dw;
          const int64_t phase =
              PaddedLayout::slot(l.phases_h, th % p.sh) * nw + PaddedLayout::slot(l.phases_w, tw % p.sw);
          offsets_.push_back(c * channel + phase * block + (th / p.sh) * l.wq + tw / p.sw);
        }
      }
    }
    operand_.data = out;
    operand_.offsets = offsets_.data();
    operand_.span = l.wq;
    operand_.valid = p.ow;
    columns_ = (rows - 1) * l.wq + p.ow;
  }
  const kernels::GemmB& operand() const { return operand_; }
  int64_t columns() const { return columns_; }

 private:
  std::vector<int64_t> offsets_;
  kernels::GemmB operand_;
  int64_t columns_ = 0;
};

// Floats of copy a band should stay within so that the GEMM finds it in the L2 cache it was written to.
int64_t band_floats() { return cpu::l2_cache_bytes() / 2 / static_cast<int64_t>(sizeof(float)); }

}  // namespace

bool rows_conv_applies(const Geometry& g, int64_t channels) {
  if (g.in.empty() || g.in.size() > 2) return false;
  const PaddedLayout l(g);
  // The columns computed and dropped past each output row (wq - ow of every wq) must stay few: at 7x7 (2 of 9)
  // im2col is faster, at 14x14 (2 of 16) as fast, at 12x16 (2 of 18) 10-20 % faster, from 20 columns on (2 of 22)
  // slower.
  return (l.wq - l.p.ow) * 10 < l.wq && channels * l.channel(1) + kernels::gemm_nr() <= kMaxPaddedFloats;
}

namespace {

// Output rows of a band whose copy fits in half the L2 cache (at least 1, at most all).
int64_t rows_in_band(const PaddedLayout& l, int64_t channels) {
  const int64_t per_row = channels * l.phases() * l.wq;
  return std::clamp<int64_t>(band_floats() / std::max<int64_t>(per_row, 1) - l.halo, 1, l.p.oh);
}

// How conv_by_rows shares its work: `bands` bands of the `oh` output rows, as even as they go (band b is rows
// [first(b), first(b + 1))), each cut into `slices` slices of output channels; item t is band t / slices, slice
// t % slices. Bands of equal rows but the last left the threads unequal shares: 44 rows as 6 bands of 8 gave one
// thread 24 rows and the other 20.
struct RowsSplit {
  int64_t oh = 1, bands = 1, slices = 1;
  int64_t first(int64_t b) const { return b * oh / bands; }
};

// Bands whose copies fit the L2 cache (`fit` output rows at most); with several threads, as many per thread (each
// copies and reads only its own band). With fewer output rows than threads (a 3x1 kernel over 3 rows leaves one),
// every band is cut by output channels instead, each slice's thread copying the band for itself: one row of 330
// columns, 256x768 weights, two threads: 250 -> 350 GFLOP/s against one GEMM split between them (which read one
// thread's copy). Slices where bands would do were slower (6x96 output rows: 5 %).
RowsSplit split_rows(int64_t oh, int64_t fit, int64_t m, int64_t mr, int threads) {
  auto make = [&](int64_t bands, int64_t slices) { return RowsSplit{oh, std::clamp<int64_t>(bands, 1, oh), slices}; };
  const int64_t bands = (oh + fit - 1) / fit;
  if (threads <= 1) return make(bands, 1);
  if (oh >= threads) return make(std::min(oh, (bands + threads - 1) / threads * threads), 1);
  return make(bands, std::clamp<int64_t>((m + mr - 1) / mr, 1, threads));
}

}  // namespace

namespace {

// conv_by_rows over an input whose channel planes are x_channel floats apart, into an output whose channels are
// ldc floats apart (a piece of a 1-D convolution reads and writes inside longer rows).
void conv_by_rows_in(Parallel* pool, int64_t m, const kernels::GemmA& a, const float* x, int64_t x_channel,
                     int64_t channels, const Geometry& g, float beta, float* y, int64_t ldc,
                     const kernels::Epilogue& ep) {
  const PaddedLayout l(g);
  const int64_t oh = l.p.oh, ow = l.p.ow, k = channels * l.p.kh * l.p.kw;
  // Bands of output rows whose copies fit in half the L2 cache; a thread's copy stays in its own cache (a GEMM
  // split between threads that read one copy scaled worse: 3x3 128->128 at 28x28, two threads, 230 against 275
  // GFLOP/s with im2col). See split_rows.
  const int64_t fit = rows_in_band(l, channels);
  const int threads = pool && !pool->in_parallel_region() ? pool->num_threads() : 1;
  const int64_t mr = kernels::panel_rows(a), panels = (m + mr - 1) / mr;
  const RowsSplit s = split_rows(oh, fit, m, mr, threads);
  auto items = [&](int64_t t0, int64_t t1, Parallel* p) {
    std::optional<PaddedBand> in;
    int64_t copied = -1;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t band = t / s.slices, slice = t % s.slices, oh0 = s.first(band);
      if (band != copied) {
        in.reset();
        in.emplace(l, x, x_channel, channels, oh0, s.first(band + 1) - oh0);
        copied = band;
      }
      const int64_t r0 = slice * panels / s.slices * mr, r1 = std::min(m, (slice + 1) * panels / s.slices * mr);
      kernels::Epilogue e = ep;
      if (e.bias_kind == kernels::Epilogue::Bias::kPerRow) e.bias += r0;
      kernels::gemm(p, r1 - r0, in->columns(), k, 1.f, kernels::rows_of(a, r0), in->operand(), beta,
                    y + r0 * ldc + oh0 * ow, ldc, e);
    }
  };
  const int64_t n = s.bands * s.slices;
  if (n == 1) {
    items(0, 1, pool);
    return;
  }
  pool->parallel_for(n, 1, [&](int64_t t0, int64_t t1) { items(t0, t1, nullptr); });
}

// A 1-D convolution has one output row, so one band holds all of it: over a long input (a speech encoder's 512
// channels over 6400 samples: 13 MB) the copy left the L2 cache far behind, and each thread copied all of it for
// its slice of output channels (512 -> 512, stride 2, 3199 outputs: 49 ms, half the speed of the same layer over
// half as many). Such a row is cut into pieces of output columns whose copies fit, each a 1-D convolution of its own
// over the input columns it reads (with the whole row's padding where it reaches an end); the threads share the
// pieces. False where the row fits, or a piece would read padding only.
bool conv_1d_in_pieces(Parallel* pool, int64_t m, const kernels::GemmA& a, const float* x, int64_t channels,
                       const Geometry& g, float beta, float* y, const kernels::Epilogue& ep) {
  if (g.in.size() != 1) return false;
  const PaddedLayout l(g);
  const int64_t iw = g.in[0], ow = g.out[0], sw = g.strides[0], span = (g.kernel[0] - 1) * g.dilations[0];
  const int64_t per_column = channels * l.phases();  // floats of copy per phase column
  const int64_t fit = band_floats() / std::max<int64_t>(per_column, 1) - span / sw - 1;  // output columns a piece fits
  if (channels * l.channel(1) <= band_floats() || fit < 16) return false;
  const int threads = pool && !pool->in_parallel_region() ? pool->num_threads() : 1;
  int64_t pieces = (ow + fit - 1) / fit;
  pieces = (pieces + threads - 1) / threads * threads;
  struct Piece {
    Geometry g;
    int64_t first = 0, start = 0;  // its first output column, its first input column
  };
  std::vector<Piece> parts(static_cast<size_t>(pieces));
  for (int64_t t = 0; t < pieces; ++t) {
    const int64_t j0 = t * ow / pieces, j1 = (t + 1) * ow / pieces;
    const int64_t from = j0 * sw - g.pad_begin[0], to = (j1 - 1) * sw - g.pad_begin[0] + span + 1;
    const int64_t lo = std::clamp<int64_t>(from, 0, iw), hi = std::clamp<int64_t>(to, lo, iw);
    if (j1 <= j0 || hi <= lo) return false;
    Piece& pc = parts[static_cast<size_t>(t)];
    pc.g = g;
    pc.g.in = {hi - lo};
    pc.g.out = {j1 - j0};
    pc.g.pad_begin = {lo - from};
    pc.g.pad_end = {to - hi};
    pc.first = j0;
    pc.start = lo;
  }
  auto piece = [&](int64_t t) {
    const Piece& pc = parts[static_cast<size_t>(t)];
    conv_by_rows_in(nullptr, m, a, x + pc.start, iw, channels, pc.g, beta, y + pc.first, ow, ep);
  };
  if (threads <= 1) {
    for (int64_t t = 0; t < pieces; ++t) piece(t);
  } else {
    pool->parallel_for(pieces, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) piece(t);
    });
  }
  return true;
}

}  // namespace

void conv_by_rows(Parallel* pool, int64_t m, const kernels::GemmA& a, const float* x, int64_t channels,
                  const Geometry& g, float beta, float* y, const kernels::Epilogue& ep) {
  if (conv_1d_in_pieces(pool, m, a, x, channels, g, beta, y, ep)) return;
  conv_by_rows_in(pool, m, a, x, g.in_size(), channels, g, beta, y, g.out_size(), ep);
}

int64_t conv_band_rows(const Geometry& g, int64_t channels) { return rows_in_band(PaddedLayout(g), channels); }

void conv_band(int64_t m, const kernels::GemmA& a, const float* x, int64_t channels, const Geometry& g, int64_t oh0,
               int64_t rows, float* y, int64_t ldc, const kernels::Epilogue& ep) {
  if (is_pointwise(g)) {
    const int64_t ow = g.out.back();
    const kernels::GemmB b{x + oh0 * ow, g.in_size(), false, nullptr, nullptr};
    kernels::gemm(nullptr, m, rows * ow, channels, 1.f, a, b, 0.f, y, ldc, ep);
    return;
  }
  const PaddedLayout l(g);
  const PaddedBand in(l, x, g.in_size(), channels, oh0, rows);
  kernels::gemm(nullptr, m, in.columns(), channels * l.p.kh * l.p.kw, 1.f, a, in.operand(), 0.f, y, ldc, ep);
}

bool convtranspose_tiles(const Geometry& g) {
  if (g.in.size() > 2) return false;
  const auto [oh, ow, ih, iw, kh, kw, sh, sw, dh, dw, ph, pw] = plane2d(g);
  return dh == 1 && dw == 1 && kh == sh && kw == sw && ph == 0 && pw == 0 && oh == ih * sh && ow == iw * sw;
}

void col2im_tiles(const float* col, int64_t mult, const Geometry& g, int64_t i0, int64_t i1, const float* bias,
                  float* y) {
  const auto [oh, ow, ih, iw, kh, kw, sh, sw, dh, dw, ph, pw] = plane2d(g);
  const int64_t ld = (i1 - i0) * iw, ysize = oh * ow;
  for (int64_t m = 0; m < mult; ++m) {
    const float bv = bias ? bias[m] : 0.f;
    for (int64_t i = i0; i < i1; ++i) {
      for (int64_t a = 0; a < kh; ++a) {  // output row i * kh + a interleaves the kw taps of input row i
        float* yr = y + m * ysize + (i * kh + a) * ow;
        const float* c0 = col + (m * kh + a) * kw * ld + (i - i0) * iw;
        if (kw == 2) {
          const float* c1 = c0 + ld;
          for (int64_t j = 0; j < iw; ++j) {
            yr[2 * j] = c0[j] + bv;
            yr[2 * j + 1] = c1[j] + bv;
          }
          continue;
        }
        for (int64_t j = 0; j < iw; ++j) {
          for (int64_t b = 0; b < kw; ++b) yr[j * kw + b] = c0[b * ld + j] + bv;
        }
      }
    }
  }
}

void col2im(const float* col, int64_t mult, const Geometry& g, const float* bias, float* y) {
  const size_t r = g.in.size();
  const int64_t ysize = g.in_size();   // ConvTranspose output plane
  const int64_t xsize = g.out_size();  // ConvTranspose input plane
  const int64_t ksize = g.kernel_size();
  if (r <= 2) {
    // ConvTranspose: the output plane is the convolution's input.
    const auto [oh, ow, ih, iw, kh, kw, sh, sw, dh, dw, ph, pw] = plane2d(g);
    // Windows that tile the plane exactly write every output once and nothing else (col2im_tiles). Windows that
    // never overlap (a stride at least the dilated kernel, on both axes) write each output at most once: an
    // assignment instead of a sum.
    if (convtranspose_tiles(g)) return col2im_tiles(col, mult, g, 0, ih, bias, y);
    const bool disjoint = (kh - 1) * dh + 1 <= sh && (kw - 1) * dw + 1 <= sw;
    for (int64_t m = 0; m < mult; ++m) {
      float* ym = y + m * ysize;
      const float bv = bias ? bias[m] : 0.f;
      std::fill(ym, ym + ysize, bv);
      for (int64_t a = 0; a < kh; ++a) {
        for (int64_t b = 0; b < kw; ++b) {
          const float* cr = col + ((m * kh + a) * kw + b) * xsize;
          int64_t wlo, whi;
          valid_range(b * dw - pw, sw, ow, iw, &wlo, &whi);
          for (int64_t i = 0; i < ih; ++i) {
            const int64_t o = i * sh - ph + a * dh;
            if (o < 0 || o >= oh) continue;
            float* yr = ym + o * ow;
            const int64_t shift = b * dw - pw;
            const float* cri = cr + i * iw;
            if (disjoint) {
              for (int64_t j = wlo; j < whi; ++j) yr[j * sw + shift] = cri[j] + bv;
            } else {
              for (int64_t j = wlo; j < whi; ++j) yr[j * sw + shift] += cri[j];
            }
          }
        }
      }
    }
    return;
  }
  std::vector<int64_t> kidx(r), xidx(r);
  for (int64_t m = 0; m < mult; ++m) {
    float* ym = y + m * ysize;
    std::fill(ym, ym + ysize, bias ? bias[m] : 0.f);
    for (int64_t k = 0; k < ksize; ++k) {
      int64_t rem = k;
      for (size_t i = r; i-- > 0;) {
        kidx[i] = rem % g.kernel[i];
        rem /= g.kernel[i];
      }
      const float* cr = col + (m * ksize + k) * xsize;
      std::fill(xidx.begin(), xidx.end(), 0);
      for (int64_t p = 0; p < xsize; ++p) {
        int64_t off = 0;
        if (g.input_offset(xidx.data(), kidx.data(), r, &off)) ym[off] += cr[p];
        for (size_t i = r; i-- > 0;) {
          if (++xidx[i] < g.out[i]) break;
          xidx[i] = 0;
        }
      }
    }
  }
}

}  // namespace tessera
