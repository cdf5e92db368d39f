// The pooling family: MaxPool (with optional Indices, storage_order,
// dilations, ceil_mode), AveragePool (count_include_pad), LpPool, their
// Global* forms, and MaxUnpool. Windows follow the same geometry as Conv
// (conv_util.h). Kernels run one (image, channel) plane per task; 1-D and
// 2-D pools run as 3-D with unit leading axes.
#include <immintrin.h>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "ops/conv_util.h"
#include "ops/kernels/lane_fold.h"
#include "ops/op_registry.h"
#include "ops/pool_plane.h"
#include "ops/quantize_ops.h"
#include "ops/tensor_util.h"
#include "util/cpu_isa.h"

namespace tessera {

namespace {

enum class PoolKind { kMax, kAvg, kLp };

PoolKind pool_kind(const std::string& op) {
  if (op == "MaxPool" || op == "GlobalMaxPool") return PoolKind::kMax;
  if (op == "AveragePool" || op == "GlobalAveragePool") return PoolKind::kAvg;
  return PoolKind::kLp;
}

bool pool_dtype_ok(PoolKind kind, DType t) {
  if (t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16 || t == DType::kBFloat16) return true;
  return kind == PoolKind::kMax && (t == DType::kInt8 || t == DType::kUInt8);
}

// ---- inference ------------------------------------------------------------------

Status infer_pool(InferContext& ctx) {
  const Shape& x = ctx.in_shape(0);
  const DType dt = ctx.in_dtype(0);
  const bool has_indices = ctx.num_outputs() > 1;
  if (!x.rank_known) {
    ctx.set_output(0, dt, Shape::Unranked());
    if (has_indices) ctx.set_output(1, DType::kInt64, Shape::Unranked());
    return Status::Ok();
  }
  if (x.rank() < 3) return ctx.error("input must have rank >= 3, got " + x.str());
  SpatialAttrs a;
  TSR_RETURN_IF_ERROR(read_spatial_attrs(ctx.node(), x.rank() - 2, {}, true, &a));
  std::vector<Dim> out = {x[0], x[1]};
  for (const Dim& d : conv_output_dims(x, a)) out.push_back(d);
  ctx.set_output(0, dt, Shape(out));
  if (has_indices) ctx.set_output(1, DType::kInt64, Shape(out));
  return Status::Ok();
}

Status infer_global_pool(InferContext& ctx) {
  const Shape& x = ctx.in_shape(0);
  if (!x.rank_known) {
    ctx.set_output(0, ctx.in_dtype(0), Shape::Unranked());
    return Status::Ok();
  }
  if (x.rank() < 3) return ctx.error("input must have rank >= 3, got " + x.str());
  std::vector<Dim> out = {x[0], x[1]};
  for (int i = 2; i < x.rank(); ++i) out.push_back(Dim(1));
  ctx.set_output(0, ctx.in_dtype(0), Shape(out));
  return Status::Ok();
}

// ---- windowed pools -------------------------------------------------------------

// Geometry padded to three spatial axes (leading unit axes for 1-D/2-D).
struct Pool3 {
  int64_t in[3], out[3], k[3], s[3], d[3], pb[3], pe[3];
  int64_t in_size() const { return in[0] * in[1] * in[2]; }
  int64_t out_size() const { return out[0] * out[1] * out[2]; }
};

Pool3 to_pool3(const Geometry& g) {
  Pool3 p;
  const int r = static_cast<int>(g.in.size());
  for (int i = 0; i < 3; ++i) {
    const int j = i - (3 - r);
    if (j < 0) {
      p.in[i] = p.out[i] = p.k[i] = p.s[i] = p.d[i] = 1;
      p.pb[i] = p.pe[i] = 0;
    } else {
      const auto u = static_cast<size_t>(j);
      p.in[i] = g.in[u];
      p.out[i] = g.out[u];
      p.k[i] = g.kernel[u];
      p.s[i] = g.strides[u];
      p.d[i] = g.dilations[u];
      p.pb[i] = g.pad_begin[u];
      p.pe[i] = g.pad_end[u];
    }
  }
  return p;
}

// Taps j in [lo, hi) of a window starting at `start` that fall inside [0, in).
inline void tap_range(int64_t start, int64_t d, int64_t k, int64_t in, int64_t* lo, int64_t* hi) {
  int64_t l = start >= 0 ? 0 : (-start + d - 1) / d;
  int64_t h = in - 1 - start < 0 ? 0 : (in - 1 - start) / d + 1;
  *lo = std::min(l, k);
  *hi = std::max(std::min(h, k), *lo);
}

template <class T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

struct PoolOptions {
  PoolKind kind;
  bool count_include_pad = false;
  bool full_kernel_count = false;  // count_include_pad counts the whole window, past the padding too (ceil_mode)
  int64_t p = 2;  // LpPool
  bool column_major = false;  // MaxPool storage_order
};

// Pools one plane. `idx_base` is the plane's offset in the flattened input
// (for Indices).
template <class T>
void pool_plane(const T* x, const Pool3& g, const PoolOptions& o, T* y, int64_t* indices, int64_t idx_base) {
  using A = Acc<T>;
  const int64_t in_hw = g.in[1] * g.in[2];
  for (int64_t a = 0; a < g.out[0]; ++a) {
    const int64_t sa = a * g.s[0] - g.pb[0];
    int64_t alo, ahi;
    tap_range(sa, g.d[0], g.k[0], g.in[0], &alo, &ahi);
    for (int64_t b = 0; b < g.out[1]; ++b) {
      const int64_t sb = b * g.s[1] - g.pb[1];
      int64_t blo, bhi;
      tap_range(sb, g.d[1], g.k[1], g.in[1], &blo, &bhi);
      T* yrow = y + (a * g.out[1] + b) * g.out[2];
      int64_t* irow = indices ? indices + (a * g.out[1] + b) * g.out[2] : nullptr;
      for (int64_t c = 0; c < g.out[2]; ++c) {
        const int64_t sc = c * g.s[2] - g.pb[2];
        int64_t clo, chi;
        tap_range(sc, g.d[2], g.k[2], g.in[2], &clo, &chi);
        if (o.kind == PoolKind::kMax) {
          A best = std::numeric_limits<A>::lowest();
          int64_t arg = -1;
          for (int64_t i = alo; i < ahi; ++i) {
            const int64_t pa = sa + i * g.d[0];
            for (int64_t j = blo; j < bhi; ++j) {
              const int64_t pbb = sb + j * g.d[1];
              const T* xr = x + pa * in_hw + pbb * g.in[2];
              for (int64_t l = clo; l < chi; ++l) {
                const int64_t pc = sc + l * g.d[2];
                const A v = static_cast<A>(xr[pc]);
                if (v > best || arg < 0) {
                  best = v;
                  arg = o.column_major ? pa + pbb * g.in[0] + pc * g.in[0] * g.in[1] : (pa * g.in[1] + pbb) * g.in[2] + pc;
                }
              }
            }
          }
          yrow[c] = static_cast<T>(best);
          if (irow) irow[c] = idx_base + arg;
        } else {
          A sum = 0;
          for (int64_t i = alo; i < ahi; ++i) {
            const int64_t pa = sa + i * g.d[0];
            for (int64_t j = blo; j < bhi; ++j) {
              const T* xr = x + pa * in_hw + (sb + j * g.d[1]) * g.in[2];
              for (int64_t l = clo; l < chi; ++l) {
                const A v = static_cast<A>(xr[sc + l * g.d[2]]);
                if (o.kind == PoolKind::kAvg) {
                  sum += v;
                } else if (o.p == 1) {
                  sum += std::abs(v);
                } else if (o.p == 2) {
                  sum += v * v;
                } else {
                  sum += std::pow(std::abs(v), static_cast<A>(o.p));
                }
              }
            }
          }
          A r;
          if (o.kind == PoolKind::kAvg) {
            int64_t count;
            if (o.count_include_pad && o.full_kernel_count) {
              count = g.k[0] * g.k[1] * g.k[2];
            } else if (o.count_include_pad) {
              // Taps inside the padded extent [-pb, in + pe).
              auto padded = [&](int axis, int64_t start) {
                int64_t lo, hi;
                tap_range(start + g.pb[axis], g.d[axis], g.k[axis], g.in[axis] + g.pb[axis] + g.pe[axis], &lo, &hi);
                return hi - lo;
              };
              count = padded(0, sa) * padded(1, sb) * padded(2, sc);
            } else {
              count = (ahi - alo) * (bhi - blo) * (chi - clo);
            }
            r = count > 0 ? sum / static_cast<A>(count) : A(0);
          } else {
            r = o.p == 1 ? sum : o.p == 2 ? std::sqrt(sum) : std::pow(sum, A(1) / static_cast<A>(o.p));
          }
          yrow[c] = static_cast<T>(r);
        }
      }
    }
  }
}

TSR_AVX512_BEGIN
namespace avx512 {

// p[0], p[2], ..., p[30] (never reads p[31]).
inline __m512 load_even(const float* p) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  return _mm512_permutex2var_ps(_mm512_loadu_ps(p), even, _mm512_maskz_loadu_ps(0x7FFF, p + 16));
}

// Lanes j of p[j * S] for j in `lanes`, others `fill`.
template <int S>
inline __m512 load_masked(const float* p, __mmask16 lanes, __m512 fill) {
  if constexpr (S == 1) {
    return _mm512_mask_loadu_ps(fill, lanes, p);
  } else {
    const uint32_t spread = _pdep_u32(lanes, 0x55555555u);  // lane j -> position 2j
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512 lo = _mm512_mask_loadu_ps(fill, static_cast<__mmask16>(spread & 0xFFFF), p);
    const __m512 hi = _mm512_mask_loadu_ps(fill, static_cast<__mmask16>(spread >> 16), p + 16);
    return _mm512_permutex2var_ps(lo, even, hi);
  }
}

// Max/average pooling of one plane with horizontal stride S = 1 or 2: blocks
// of V x 16 output columns of a row keep their accumulators in registers
// across all taps; vectors partly outside a tap's valid columns use masked
// loads.
template <bool kMax, int S, int V>
void pool_block_avx512(const float* x, int64_t iw, int64_t row0, int64_t nrows, int64_t dh, int64_t kw, int64_t dw,
                       int64_t pw, const int64_t* col_lo, const int64_t* col_hi, int64_t c0, int64_t ow,
                       float inv_rows, const float* inv_cols, float* yr) {
  const __m512 fill = kMax ? _mm512_set1_ps(-std::numeric_limits<float>::infinity()) : _mm512_setzero_ps();
  __m512 acc[V];
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v) acc[v] = fill;
  for (int64_t a = 0; a < nrows; ++a) {
    const float* xr = x + (row0 + a * dh) * iw;
    for (int64_t b = 0; b < kw; ++b) {
      const int64_t lo = col_lo[b], hi = col_hi[b];
      const float* base = xr + b * dw - pw;  // base[c * S] for output column c
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) {
        const int64_t c = c0 + 16 * v;
        __m512 xv;
        if (c >= lo && c + 16 <= hi) {
          xv = S == 1 ? _mm512_loadu_ps(base + c) : load_even(base + 2 * c);
        } else {
          const int64_t l = std::clamp<int64_t>(lo - c, 0, 16), h = std::clamp<int64_t>(hi - c, 0, 16);
          if (h <= l) continue;
          const auto m = static_cast<__mmask16>(((1u << h) - 1u) & ~((1u << l) - 1u));
          xv = load_masked<S>(base + c * S, m, fill);
        }
        acc[v] = kMax ? _mm512_maskz_max_ps(0xFFFF, acc[v], xv) : _mm512_add_ps(acc[v], xv);
      }
    }
  }
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v) {
    const int64_t c = c0 + 16 * v;
    const int64_t left = ow - c;
    const auto m = left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1u);
    __m512 r = acc[v];
    if (!kMax) r = _mm512_mul_ps(_mm512_mul_ps(r, _mm512_set1_ps(inv_rows)), _mm512_maskz_loadu_ps(m, inv_cols + c));
    _mm512_mask_storeu_ps(yr + c, m, r);
  }
}

template <bool kMax, int S>
void pool2d_plane(const float* x, const Pool3& g, bool include_pad, const int64_t* col_lo, const int64_t* col_hi,
                  const float* inv_cols, float* y, int64_t r0, int64_t r1) {
  const int64_t ih = g.in[1], iw = g.in[2], ow = g.out[2];
  const int64_t kh = g.k[1], kw = g.k[2], sh = g.s[1], dh = g.d[1], dw = g.d[2];
  const int64_t ph = g.pb[1], pw = g.pb[2];
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t start = r * sh - ph;
    int64_t alo, ahi;
    tap_range(start, dh, kh, ih, &alo, &ahi);
    int64_t rows = ahi - alo;
    if (!kMax && include_pad) {
      int64_t plo, phi;
      tap_range(start + ph, dh, kh, ih + ph + g.pe[1], &plo, &phi);
      rows = phi - plo;
    }
    const float inv_rows = rows > 0 ? 1.f / static_cast<float>(rows) : 0.f;
    const int64_t row0 = start + alo * dh;
    float* yr = y + r * ow;
    int64_t c0 = 0;
    for (; c0 + 64 < ow; c0 += 64) {
      pool_block_avx512<kMax, S, 4>(x, iw, row0, ahi - alo, dh, kw, dw, pw, col_lo, col_hi, c0, ow, inv_rows,
                                    inv_cols, yr);
    }
    switch ((ow - c0 + 15) / 16) {
      case 4: pool_block_avx512<kMax, S, 4>(x, iw, row0, ahi - alo, dh, kw, dw, pw, col_lo, col_hi, c0, ow, inv_rows, inv_cols, yr); break;
      case 3: pool_block_avx512<kMax, S, 3>(x, iw, row0, ahi - alo, dh, kw, dw, pw, col_lo, col_hi, c0, ow, inv_rows, inv_cols, yr); break;
      case 2: pool_block_avx512<kMax, S, 2>(x, iw, row0, ahi - alo, dh, kw, dw, pw, col_lo, col_hi, c0, ow, inv_rows, inv_cols, yr); break;
      case 1: pool_block_avx512<kMax, S, 1>(x, iw, row0, ahi - alo, dh, kw, dw, pw, col_lo, col_hi, c0, ow, inv_rows, inv_cols, yr); break;
      default: break;
    }
  }
}

// Max pooling over windows that tile the plane: kh rows x KW (1 or 2) columns, strides equal to the window, no
// padding or dilation, every window inside. Each row of the window is read as whole vectors; a pair of columns is
// split into its even and odd lanes with two permutes (2x2 over 32 planes of 48x1320, 2 threads: 0.31 -> 0.21 ms).
template <int KW>
void max_pool_tiles(const float* x, int64_t iw, int64_t kh, int64_t r0, int64_t r1, int64_t ow, float* y) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (int64_t r = r0; r < r1; ++r) {
    const float* x0 = x + r * kh * iw;
    float* yr = y + r * ow;
    for (int64_t c = 0; c < ow; c += 16) {
      const int64_t n = std::min<int64_t>(16, ow - c);  // outputs of this vector
      const __mmask16 out = static_cast<__mmask16>((1u << n) - 1u);
      if constexpr (KW == 1) {
        __m512 m = _mm512_maskz_loadu_ps(out, x0 + c);
        for (int64_t a = 1; a < kh; ++a) m = _mm512_max_ps(m, _mm512_maskz_loadu_ps(out, x0 + a * iw + c));
        _mm512_mask_storeu_ps(yr + c, out, m);
      } else {
        const int64_t in = 2 * n;  // inputs: lanes of two vectors
        const __mmask16 lo = static_cast<__mmask16>(in >= 16 ? 0xFFFFu : (1u << in) - 1u);
        const __mmask16 hi = static_cast<__mmask16>(in >= 32 ? 0xFFFFu : in > 16 ? (1u << (in - 16)) - 1u : 0u);
        const float* p = x0 + 2 * c;
        __m512 m0 = _mm512_maskz_loadu_ps(lo, p), m1 = _mm512_maskz_loadu_ps(hi, p + 16);
        for (int64_t a = 1; a < kh; ++a) {
          m0 = _mm512_max_ps(m0, _mm512_maskz_loadu_ps(lo, p + a * iw));
          m1 = _mm512_max_ps(m1, _mm512_maskz_loadu_ps(hi, p + a * iw + 16));
        }
        const __m512 m = _mm512_max_ps(_mm512_permutex2var_ps(m0, even, m1), _mm512_permutex2var_ps(m0, odd, m1));
        _mm512_mask_storeu_ps(yr + c, out, m);
      }
    }
  }
}

}  // namespace avx512
TSR_AVX512_END

namespace {
// Whether a 2-D pool's windows tile its plane (max_pool_tiles): strides equal to the window, one or two columns,
// no padding or dilation, every window inside.
bool windows_tile_plane(const Pool3& g) {
  return g.in[0] == 1 && g.k[0] == 1 && (g.k[2] == 1 || g.k[2] == 2) && g.s[1] == g.k[1] && g.s[2] == g.k[2] &&
         g.d[1] == 1 && g.d[2] == 1 && g.pb[1] == 0 && g.pb[2] == 0 && g.out[1] * g.k[1] <= g.in[1] &&
         g.out[2] * g.k[2] <= g.in[2];
}
}  // namespace

// Fast path for float 2-D (and 1-D) pools without Indices: one output row
// at a time into a row accumulator, iterating over kernel taps with the
// valid output columns of each tap precomputed, so the inner loops are
// bounds-check free and vectorise. Window counts are separable (rows x
// columns).
void pool2d_plane_f32(const float* __restrict x, const Pool3& g, const PoolOptions& o, float* __restrict y,
                      float* __restrict acc, const int64_t* col_lo, const int64_t* col_hi, const float* col_count,
                      int64_t r0, int64_t r1) {
  const int64_t ih = g.in[1], iw = g.in[2], ow = g.out[2];
  const int64_t kh = g.k[1], kw = g.k[2], sh = g.s[1], sw = g.s[2], dh = g.d[1], dw = g.d[2];
  const int64_t ph = g.pb[1], pw = g.pb[2];
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t start = r * sh - ph;
    int64_t alo, ahi;
    tap_range(start, dh, kh, ih, &alo, &ahi);
    if (o.kind == PoolKind::kMax) {
      std::fill(acc, acc + ow, -std::numeric_limits<float>::infinity());
    } else {
      std::fill(acc, acc + ow, 0.f);
    }
    for (int64_t a = alo; a < ahi; ++a) {
      const float* xr = x + (start + a * dh) * iw;
      for (int64_t b = 0; b < kw; ++b) {
        const float* xs = xr + b * dw - pw;  // xs[c * sw] for output column c
        const int64_t lo = col_lo[b], hi = col_hi[b];
        if (o.kind == PoolKind::kMax) {
          if (sw == 1) {
            for (int64_t c = lo; c < hi; ++c) acc[c] = std::max(acc[c], xs[c]);
          } else {
            int64_t c = lo;
            for (; c < hi; ++c) acc[c] = std::max(acc[c], xs[c * sw]);
          }
        } else if (o.kind == PoolKind::kAvg || o.p == 1) {
          const bool absv = o.kind == PoolKind::kLp;
          if (sw == 1 && !absv) {
            for (int64_t c = lo; c < hi; ++c) acc[c] += xs[c];
          } else if (!absv) {
            int64_t c = lo;
            for (; c < hi; ++c) acc[c] += xs[c * sw];
          } else {
            for (int64_t c = lo; c < hi; ++c) acc[c] += std::abs(xs[c * sw]);
          }
        } else if (o.p == 2) {
          for (int64_t c = lo; c < hi; ++c) acc[c] += xs[c * sw] * xs[c * sw];
        } else {
          const float p = static_cast<float>(o.p);
          for (int64_t c = lo; c < hi; ++c) acc[c] += std::pow(std::abs(xs[c * sw]), p);
        }
      }
    }
    float* yr = y + r * ow;
    if (o.kind == PoolKind::kMax) {
      std::copy(acc, acc + ow, yr);
    } else if (o.kind == PoolKind::kAvg) {
      int64_t rows;
      if (o.count_include_pad) {
        int64_t plo, phi;
        tap_range(start + ph, dh, kh, ih + ph + g.pe[1], &plo, &phi);
        rows = phi - plo;
      } else {
        rows = ahi - alo;
      }
      const float inv_rows = rows > 0 ? 1.f / static_cast<float>(rows) : 0.f;
      for (int64_t c = 0; c < ow; ++c) yr[c] = col_count[c] > 0 ? acc[c] * inv_rows / col_count[c] : 0.f;
    } else if (o.p == 1) {
      std::copy(acc, acc + ow, yr);
    } else if (o.p == 2) {
      for (int64_t c = 0; c < ow; ++c) yr[c] = std::sqrt(acc[c]);
    } else {
      const float inv = 1.f / static_cast<float>(o.p);
      for (int64_t c = 0; c < ow; ++c) yr[c] = std::pow(acc[c], inv);
    }
  }
}

// The float fast path's rows of one 2-D (or 1-D) plane without Indices: per-column tap ranges and counts, made once
// and shared by every plane, and the kernel chosen for the geometry and the CPU. Windows not far wider than the input
// only (fast_path_applies): a window of 2^31 columns over padding would ask for 16 GB of tables.
class FloatPlaneRows {
 public:
  static bool fast_path_applies(const Pool3& g) { return g.in[0] == 1 && g.k[0] == 1 && g.k[2] <= 2 * g.in[2] + 64; }

  FloatPlaneRows(const Pool3& g, const PoolOptions& o) : FloatPlaneRows(g, o, g) {}
  // A band of the plane `whole` (MaxPoolBand): the kernel the whole plane would run, so that the bits are its own.
  FloatPlaneRows(const Pool3& g, const PoolOptions& o, const Pool3& whole) : g_(g), o_(o) {
    const int64_t ow = g.out[2];
    col_lo_.resize(static_cast<size_t>(g.k[2]));
    col_hi_.resize(static_cast<size_t>(g.k[2]));
    for (int64_t b = 0; b < g.k[2]; ++b) {
      // Output columns c with 0 <= c*s - pb + b*d < in.
      const int64_t off = b * g.d[2] - g.pb[2];
      int64_t lo = off >= 0 ? 0 : (-off + g.s[2] - 1) / g.s[2];
      int64_t hi = g.in[2] - 1 - off < 0 ? 0 : (g.in[2] - 1 - off) / g.s[2] + 1;
      lo = std::min(lo, ow);
      col_lo_[static_cast<size_t>(b)] = lo;
      col_hi_[static_cast<size_t>(b)] = std::max(lo, std::min(hi, ow));
    }
    col_count_.resize(static_cast<size_t>(ow));
    inv_cols_.resize(static_cast<size_t>(ow));
    for (int64_t c = 0; c < ow; ++c) {
      const int64_t start = c * g.s[2] - g.pb[2];
      int64_t lo, hi;
      if (o.count_include_pad) {
        tap_range(start + g.pb[2], g.d[2], g.k[2], g.in[2] + g.pb[2] + g.pe[2], &lo, &hi);
      } else {
        tap_range(start, g.d[2], g.k[2], g.in[2], &lo, &hi);
      }
      const auto n = static_cast<float>(hi - lo);
      col_count_[static_cast<size_t>(c)] = n;
      inv_cols_[static_cast<size_t>(c)] = n > 0 ? 1.f / n : 0.f;
    }
    const bool mx = o.kind == PoolKind::kMax;
    if (cpu::avx512() && mx && windows_tile_plane(whole)) {
      kind_ = Kernel::kTiles;
    } else if (cpu::avx512() && o.kind != PoolKind::kLp && (g.s[2] == 1 || g.s[2] == 2)) {
      kind_ = Kernel::kRowsAvx512;
    }
  }

  // Output rows [r0, r1) of the plane at x into y (at output row 0); acc: out[2] floats of scratch.
  void operator()(const float* x, float* y, float* acc, int64_t r0, int64_t r1) const {
    const Pool3& g = g_;
    const bool mx = o_.kind == PoolKind::kMax;
    switch (kind_) {
      case Kernel::kTiles:
        (g.k[2] == 1 ? &avx512::max_pool_tiles<1> : &avx512::max_pool_tiles<2>)(x, g.in[2], g.k[1], r0, r1, g.out[2],
                                                                                y);
        return;
      case Kernel::kRowsAvx512: {
        auto rows = mx ? (g.s[2] == 1 ? &avx512::pool2d_plane<true, 1> : &avx512::pool2d_plane<true, 2>)
                       : (g.s[2] == 1 ? &avx512::pool2d_plane<false, 1> : &avx512::pool2d_plane<false, 2>);
        rows(x, g, o_.count_include_pad, col_lo_.data(), col_hi_.data(), inv_cols_.data(), y, r0, r1);
        return;
      }
      case Kernel::kRows:
        pool2d_plane_f32(x, g, o_, y, acc, col_lo_.data(), col_hi_.data(), col_count_.data(), r0, r1);
        return;
    }
  }

 private:
  enum class Kernel { kRows, kRowsAvx512, kTiles };
  Pool3 g_;
  PoolOptions o_;
  std::vector<int64_t> col_lo_, col_hi_;
  std::vector<float> col_count_, inv_cols_;
  Kernel kind_ = Kernel::kRows;
};

Status run_pool(KernelContext& ctx) {
  const Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  Tensor& y = *ctx.output(0);
  Tensor* ind = ctx.output(1);
  const PoolKind kind = pool_kind(node.op_type);
  if (!pool_dtype_ok(kind, x.dtype())) {
    return Unsupported(node.describe() + ": " + node.op_type + " on " + dtype_name(x.dtype()));
  }
  if (x.rank() < 3 || x.rank() > 5) {
    return Unsupported(node.describe() + ": pooling supports 1 to 3 spatial axes, got input " + dims_str(x.dims()));
  }
  SpatialAttrs a;
  TSR_RETURN_IF_ERROR(read_spatial_attrs(node, x.rank() - 2, {}, true, &a));
  TSR_ASSIGN_OR_RETURN(Geometry geo, conv_geometry(Dims(x.dims().begin() + 2, x.dims().end()), a, node.describe()));
  Dims yd = {x.dim(0), x.dim(1)};
  yd.insert(yd.end(), geo.out.begin(), geo.out.end());
  if (y.dims() != yd) return ctx.error("output is " + dims_str(y.dims()) + ", expected " + dims_str(yd));
  if (y.numel() == 0) return Status::Ok();
  const Pool3 g = to_pool3(geo);
  PoolOptions o;
  o.kind = kind;
  o.count_include_pad = node.attr_int("count_include_pad", 0) != 0;
  o.p = node.attr_int("p", 2);
  o.column_major = node.attr_int("storage_order", 0) != 0;
  const int64_t planes = x.dim(0) * x.dim(1);
  const int64_t isz = g.in_size(), osz = g.out_size();
  int64_t* ip = ind && ind->defined() ? ind->data<int64_t>() : nullptr;
  // The 2-D fast path (FloatPlaneRows); windows far wider than the input take the general loop.
  // 8-bit max pooling (what the QDQ pass leaves of DQ -> MaxPool -> Q at one scale) takes the float path a plane at a
  // time: bytes widen to floats exactly, and the max of them narrows back exactly.
  const bool bytes = x.dtype() == DType::kUInt8 || x.dtype() == DType::kInt8;
  if ((x.dtype() == DType::kFloat32 || (bytes && kind == PoolKind::kMax)) && !ip &&
      FloatPlaneRows::fast_path_applies(g)) {
    const FloatPlaneRows plane(g, o);
    const int64_t ow = g.out[2];
    if (!bytes) {
      const float* xp = x.data<float>();
      float* yp = y.data<float>();
      parallel_plane_rows(ctx.pool(), planes, g.out[1], [&](int64_t p, int64_t r0, int64_t r1) {
        thread_local std::vector<float> acc;
        acc.resize(static_cast<size_t>(ow));
        plane(xp + p * isz, yp + p * osz, acc.data(), r0, r1);
      });
      return Status::Ok();
    }
    const bool s8 = x.dtype() == DType::kInt8;
    const auto* xb = static_cast<const uint8_t*>(x.raw());
    auto* yb = static_cast<uint8_t*>(y.raw());
    ctx.pool().parallel_for(planes, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> acc(static_cast<size_t>(ow)), xi(static_cast<size_t>(isz)), yo(static_cast<size_t>(osz));
      for (int64_t i = begin; i < end; ++i) {
        const uint8_t* src = xb + i * isz;
        for (int64_t k = 0; k < isz; ++k) xi[k] = s8 ? static_cast<float>(static_cast<int8_t>(src[k])) : src[k];
        plane(xi.data(), yo.data(), acc.data(), 0, g.out[1]);
        uint8_t* dst = yb + i * osz;
        for (int64_t k = 0; k < osz; ++k) {
          dst[k] = s8 ? static_cast<uint8_t>(static_cast<int8_t>(yo[k])) : static_cast<uint8_t>(yo[k]);
        }
      }
    });
    return Status::Ok();
  }
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Float16> ||
                  std::is_same_v<T, BFloat16> || std::is_same_v<T, int8_t> || std::is_same_v<T, uint8_t>) {
      const T* xp = x.data<T>();
      T* yp = y.data<T>();
      ctx.pool().parallel_for(planes, 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          pool_plane<T>(xp + i * isz, g, o, yp + i * osz, ip ? ip + i * osz : nullptr, i * isz);
        }
      });
    }
  });
  return Status::Ok();
}

}  // namespace

struct MaxPoolBand::Impl {
  FloatPlaneRows rows;
};

MaxPoolBand::MaxPoolBand(const MaxPoolWindow& w, int64_t ih, int64_t iw, int64_t oh, int64_t ow, int64_t r0, int64_t r1)
    : rows_(r1 - r0), ow_(ow) {
  // The band is a plane of its own: the input rows its windows reach, and the padding they reach above and below.
  const int64_t start = r0 * w.sh - w.pad_top, end = (r1 - 1) * w.sh - w.pad_top + w.kh;
  in_begin_ = std::clamp<int64_t>(start, 0, ih);
  in_end_ = std::clamp<int64_t>(end, in_begin_, ih);
  const int64_t above = in_begin_ - start, below = std::max<int64_t>(0, end - in_end_);
  const Pool3 whole{{1, ih, iw},
                    {1, oh, ow},
                    {1, w.kh, w.kw},
                    {1, w.sh, w.sw},
                    {1, 1, 1},
                    {0, w.pad_top, w.pad_left},
                    {0, w.pad_bottom, w.pad_right}};
  const Pool3 band{{1, in_end_ - in_begin_, iw}, {1, rows_, ow},         {1, w.kh, w.kw}, {1, w.sh, w.sw}, {1, 1, 1},
                   {0, above, w.pad_left},       {0, below, w.pad_right}};
  PoolOptions o;
  o.kind = PoolKind::kMax;
  impl_ = std::make_unique<Impl>(Impl{FloatPlaneRows(band, o, whole)});
}

MaxPoolBand::~MaxPoolBand() = default;

void MaxPoolBand::run(const float* x, float* y) const {
  thread_local std::vector<float> acc;
  acc.resize(static_cast<size_t>(ow_));
  impl_->rows(x, y, acc.data(), 0, rows_);
}

namespace {

// ---- com.microsoft QLinearAveragePool ---------------------------------------------------------------------------
//
// (X, x_scale, x_zero_point, y_scale, y_zero_point; AveragePool's attributes) as ONNX Runtime computes it: its
// default level also fuses DequantizeLinear -> AveragePool -> QuantizeLinear into it (passes/qdq_fusion.cc). Its
// kernel dequantizes X (x_scale * (x - zero point)), sums each window in order (rows, then columns) in float, divides
// by the count (the whole window under count_include_pad) and quantizes y / y_scale + y_zero_point, rounded half to
// even, saturated. Probed on 1.31.1 (uint8, 3x3 pads 1): equal everywhere, where dequantize, pool, quantize differs
// at 86 of 16384 elements. channels_last=1 is refused.
Status infer_qlinear_average_pool(InferContext& ctx) {
  if (ctx.node().attr_int("channels_last", 0) != 0) return ctx.error("channels_last=1 is not supported");
  if (ctx.node().num_inputs() < 4) return ctx.error("takes X, x_scale, x_zero_point, y_scale and y_zero_point");
  const DType t = ctx.in_dtype(0);
  if (t != DType::kUndefined && t != DType::kUInt8 && t != DType::kInt8) {
    return ctx.error(std::string("X must be uint8 or int8, got ") + dtype_name(t));
  }
  return infer_pool(ctx);
}

template <class T>
void quantize_pooled(const float* y, int64_t n, float scale, float zero, T* out) {
  constexpr float kLo = std::numeric_limits<T>::min(), kHi = std::numeric_limits<T>::max();
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(std::clamp(std::nearbyint(y[i] / scale + zero), kLo, kHi));
}

Status run_qlinear_average_pool(KernelContext& ctx) {
  const Node& node = ctx.node();
  TSR_ASSIGN_OR_RETURN(quant::UnaryQuant q, quant::unary_quant(ctx));
  const Tensor& x = *ctx.input(0);
  if (node.attr_int("channels_last", 0) != 0)
    return Unsupported(node.describe() + ": channels_last=1 is not supported");
  if (x.rank() < 3 || x.rank() > 5) {
    return Unsupported(node.describe() + ": pooling supports 1 to 3 spatial axes, got input " + dims_str(x.dims()));
  }
  SpatialAttrs a;
  TSR_RETURN_IF_ERROR(read_spatial_attrs(node, x.rank() - 2, {}, true, &a));
  TSR_ASSIGN_OR_RETURN(Geometry geo, conv_geometry(Dims(x.dims().begin() + 2, x.dims().end()), a, node.describe()));
  Tensor& y = *ctx.output(0);
  if (y.numel() == 0) return Status::Ok();
  const Pool3 g = to_pool3(geo);
  PoolOptions o;
  o.kind = PoolKind::kAvg;
  o.count_include_pad = node.attr_int("count_include_pad", 0) != 0;
  o.full_kernel_count = true;
  const float y_zero = static_cast<float>(q.y_zero);
  const int64_t planes = x.dim(0) * x.dim(1), isz = g.in_size(), osz = g.out_size();
  ctx.pool().parallel_for(planes, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> xf(static_cast<size_t>(isz)), yf(static_cast<size_t>(osz));
    for (int64_t p = begin; p < end; ++p) {
      for (int64_t i = 0; i < isz; ++i) {
        const int32_t v = x.dtype() == DType::kUInt8 ? x.data<uint8_t>()[p * isz + i] : x.data<int8_t>()[p * isz + i];
        xf[static_cast<size_t>(i)] = q.x_scale * static_cast<float>(v - q.x_zero);
      }
      pool_plane<float>(xf.data(), g, o, yf.data(), nullptr, 0);
      if (x.dtype() == DType::kUInt8) {
        quantize_pooled(yf.data(), osz, q.y_scale, y_zero, y.data<uint8_t>() + p * osz);
      } else {
        quantize_pooled(yf.data(), osz, q.y_scale, y_zero, y.data<int8_t>() + p * osz);
      }
    }
  });
  return Status::Ok();
}

// ---- global pools -------------------------------------------------------------

// Global average pools of float planes [p0, p1), each of `sz` floats: each plane's four lanes (element j in lane
// j % 4) sum in order and fold (0 + 2) + (1 + 3), then the tail in order, as fold_lanes<4> (ONNX Runtime's
// summation, MLAS's global pool). One plane alone is a chain of dependent adds (3-4 cycles each); kChains planes
// side by side fill the adder.
void global_average_planes(const float* x, int64_t sz, int64_t p0, int64_t p1, float* y) {
  constexpr int kChains = 8;
  const int64_t body = sz / 4 * 4;
  auto finish = [&](__m128 acc, int64_t p) {
    const __m128 t = _mm_add_ps(acc, _mm_movehl_ps(acc, acc));  // lanes 0 + 2, 1 + 3
    float r = _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
    const float* v = x + p * sz;
    for (int64_t j = body; j < sz; ++j) r += v[j];
    y[p] = r / static_cast<float>(sz);
  };
  int64_t p = p0;
  for (; p + kChains <= p1; p += kChains) {
    __m128 acc[kChains];
    for (__m128& a : acc) a = _mm_setzero_ps();
    const float* v = x + p * sz;
    for (int64_t j = 0; j < body; j += 4) {
      for (int c = 0; c < kChains; ++c) acc[c] = _mm_add_ps(acc[c], _mm_loadu_ps(v + c * sz + j));
    }
    for (int c = 0; c < kChains; ++c) finish(acc[c], p + c);
  }
  for (; p < p1; ++p) {
    __m128 acc = _mm_setzero_ps();
    for (int64_t j = 0; j < body; j += 4) acc = _mm_add_ps(acc, _mm_loadu_ps(x + p * sz + j));
    finish(acc, p);
  }
}

Status run_global_pool(KernelContext& ctx) {
  const Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  Tensor& y = *ctx.output(0);
  const PoolKind kind = pool_kind(node.op_type);
  if (!pool_dtype_ok(kind, x.dtype()) || x.dtype() == DType::kInt8 || x.dtype() == DType::kUInt8) {
    return Unsupported(node.describe() + ": " + node.op_type + " on " + dtype_name(x.dtype()));
  }
  if (x.rank() < 3) return ctx.error("input must have rank >= 3");
  const int64_t planes = x.dim(0) * x.dim(1);
  const int64_t sz = planes == 0 ? 0 : x.numel() / planes;
  const int64_t p = node.attr_int("p", 2);
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Float16> ||
                  std::is_same_v<T, BFloat16>) {
      using A = Acc<T>;
      const T* xp = x.data<T>();
      T* yp = y.data<T>();
      const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(sz, 1));
      if constexpr (std::is_same_v<T, float>) {
        if (kind == PoolKind::kAvg && sz > 0) {
          ctx.pool().parallel_for(planes, grain,
                                  [&](int64_t begin, int64_t end) { global_average_planes(xp, sz, begin, end, yp); });
          return;
        }
      }
      ctx.pool().parallel_for(planes, grain, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const T* v = xp + i * sz;
          A r;
          if constexpr (std::is_same_v<T, float>) {
            if (kind == PoolKind::kMax && sz > 0) {
              yp[i] = kernels::fold_lanes<32>(sz, v[0], [v](int64_t j) { return v[j]; },
                                              [](float a, float b) { return std::max(a, b); });
              continue;
            }
          }
          if (kind == PoolKind::kMax) {
            r = sz > 0 ? static_cast<A>(v[0]) : A(0);
            for (int64_t j = 1; j < sz; ++j) r = std::max(r, static_cast<A>(v[j]));
          } else if (kind == PoolKind::kAvg) {
            A s = 0;
            for (int64_t j = 0; j < sz; ++j) s += static_cast<A>(v[j]);
            r = sz > 0 ? s / static_cast<A>(sz) : A(0);
          } else {
            A s = 0;
            for (int64_t j = 0; j < sz; ++j) {
              const A e = std::abs(static_cast<A>(v[j]));
              s += p == 1 ? e : p == 2 ? e * e : std::pow(e, static_cast<A>(p));
            }
            r = p == 1 ? s : p == 2 ? std::sqrt(s) : std::pow(s, A(1) / static_cast<A>(p));
          }
          yp[i] = static_cast<T>(r);
        }
      });
    }
  });
  return Status::Ok();
}

// ---- MaxUnpool -------------------------------------------------------------------

Status infer_maxunpool(InferContext& ctx) {
  const Shape& x = ctx.in_shape(0);
  const DType dt = ctx.in_dtype(0);
  if (ctx.has_input(2)) {
    if (const Tensor* os = ctx.in_value(2)) {
      ctx.set_output(0, dt, Shape::FromDims(os->to_int64_vector()));
    } else {
      const Shape& s = ctx.in_shape(2);
      if (s.rank_known && s.rank() == 1 && s[0].known()) {
        ctx.set_output(0, dt, rank_from_shape_input(s));
      } else {
        ctx.set_output(0, dt, x.rank_known ? Shape::Unknown(x.rank()) : Shape::Unranked());
      }
    }
    return Status::Ok();
  }
  if (!x.rank_known) {
    ctx.set_output(0, dt, Shape::Unranked());
    return Status::Ok();
  }
  if (x.rank() < 3) return ctx.error("input must have rank >= 3, got " + x.str());
  SpatialAttrs a;
  TSR_RETURN_IF_ERROR(read_spatial_attrs(ctx.node(), x.rank() - 2, {}, false, &a));
  std::vector<Dim> out = {x[0], x[1]};
  for (int i = 0; i < a.rank; ++i) {
    const auto u = static_cast<size_t>(i);
    const Dim& d = x[i + 2];
    out.push_back(d.known() ? Dim((d.value - 1) * a.strides[u] + a.kernel[u] - a.pads[u] - a.pads[u + a.pads.size() / 2])
                            : Dim());
  }
  ctx.set_output(0, dt, Shape(out));
  return Status::Ok();
}

Status run_maxunpool(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  const Tensor& idx = *ctx.input(1);
  Tensor& y = *ctx.output(0);
  if (idx.numel() != x.numel()) return ctx.error("I must have the shape of X");
  const size_t es = dtype_size(x.dtype());
  if (es == 0 || y.dtype() != x.dtype() || x.rank() < 3 || y.rank() != x.rank()) {
    return ctx.error("unsupported input " + x.str() + " or output " + y.str());
  }
  // Indices address the default unpooled shape ((in-1)*stride + kernel -
  // pads); an explicit output_shape places the same coordinates into a
  // larger tensor.
  SpatialAttrs a;
  TSR_RETURN_IF_ERROR(read_spatial_attrs(ctx.node(), x.rank() - 2, {}, false, &a));
  Dims def = {x.dim(0), x.dim(1)};
  for (int i = 0; i < a.rank; ++i) {
    const auto u = static_cast<size_t>(i);
    def.push_back((x.dim(i + 2) - 1) * a.strides[u] + a.kernel[u] - a.pads[u] - a.pads[u + a.pads.size() / 2]);
  }
  const bool remap = def != y.dims();
  std::memset(y.raw(), 0, y.nbytes());
  const auto* src = static_cast<const char*>(x.raw());
  auto* dst = static_cast<char*>(y.raw());
  const int64_t total = numel(def);
  const Dims& yd = y.dims();
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t t = idx.as_int64(i);
    if (t < 0 || t >= total) {
      return ctx.error("index " + std::to_string(t) + " out of range for unpooled shape " + dims_str(def));
    }
    if (remap) {
      int64_t off = 0, stride = 1;
      for (size_t d = def.size(); d-- > 0;) {
        const int64_t c = t % def[d];
        t /= def[d];
        if (c >= yd[d]) return ctx.error("index does not fit output_shape " + dims_str(yd));
        off += c * stride;
        stride *= yd[d];
      }
      t = off;
    }
    std::memcpy(dst + static_cast<size_t>(t) * es, src + static_cast<size_t>(i) * es, es);
  }
  return Status::Ok();
}

}  // namespace

TSR_REGISTER_OPS(pool) {
  reg.add(OpSchema{"MaxPool", "", infer_pool, nullptr, run_pool, {}});
  reg.add(OpSchema{"AveragePool", "", infer_pool, nullptr, run_pool, {}});
  reg.add(OpSchema{"LpPool", "", infer_pool, nullptr, run_pool, {}});
  reg.add(OpSchema{"GlobalMaxPool", "", infer_global_pool, nullptr, run_global_pool, {}});
  reg.add(OpSchema{"GlobalAveragePool", "", infer_global_pool, nullptr, run_global_pool, {}});
  reg.add(OpSchema{"GlobalLpPool", "", infer_global_pool, nullptr, run_global_pool, {}});
  reg.add(OpSchema{"MaxUnpool", "", infer_maxunpool, nullptr, run_maxunpool, {2}});
  reg.add(OpSchema{
      "QLinearAveragePool", "com.microsoft", infer_qlinear_average_pool, nullptr, run_qlinear_average_pool, {}});
}

}  // namespace tessera
