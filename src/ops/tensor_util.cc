// Strided copy engine and inference helpers for the data-movement ops.
//
// strided_copy: input is a list of (size, dst stride, src stride) dims.
// Method: drop unit dims, merge dims that are contiguous in both views, then
// pick the innermost loop:
//   1. rows: the last dim is contiguous in both views -> memcpy per row;
//   2. tiles: the last dim is contiguous in dst only and some other dim is
//      contiguous in src (a transpose) -> move that dim next to the last and
//      copy square tiles so both sides stay in cache;
//   3. scalar: anything else (broadcast, negative steps) -> typed loop.
// The outer dims are walked with an odometer; work is split over the pool by
// outer index (or by tile rows when there is no outer dim).
#include "ops/tensor_util.h"

#include <algorithm>
#include <cstring>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace tessera {

namespace {

struct SDim {
  int64_t n;
  int64_t d;  // dst stride (elements)
  int64_t s;  // src stride (elements)
};

constexpr int64_t kParallelBytes = 1 << 16;

// Offsets of outer index `idx` (row-major over `outer`).
inline void outer_offsets(const std::vector<SDim>& outer, int64_t idx, int64_t* doff, int64_t* soff) {
  int64_t d = 0, s = 0;
  for (size_t k = outer.size(); k-- > 0;) {
    int64_t i = idx % outer[k].n;
    idx /= outer[k].n;
    d += i * outer[k].d;
    s += i * outer[k].s;
  }
  *doff = d;
  *soff = s;
}

// Walks outer indices [begin, end) calling fn(dst_off, src_off) with an
// odometer (one division per chunk, not per row).
template <class Fn>
void walk_outer(const std::vector<SDim>& outer, int64_t begin, int64_t end, Fn&& fn) {
  if (begin >= end) return;
  const size_t r = outer.size();
  std::vector<int64_t> idx(r, 0);
  int64_t t = begin;
  for (size_t k = r; k-- > 0;) {
    idx[k] = t % outer[k].n;
    t /= outer[k].n;
  }
  int64_t doff, soff;
  outer_offsets(outer, begin, &doff, &soff);
  for (int64_t it = begin; it < end; ++it) {
    fn(doff, soff);
    for (size_t k = r; k-- > 0;) {
      if (++idx[k] < outer[k].n) {
        doff += outer[k].d;
        soff += outer[k].s;
        break;
      }
      idx[k] = 0;
      doff -= (outer[k].n - 1) * outer[k].d;
      soff -= (outer[k].n - 1) * outer[k].s;
    }
  }
}

template <class E>
void copy_scalar_loop(E* dst, const E* src, int64_t n, int64_t ds, int64_t ss) {
  if (ss == 0) {
    const E v = *src;
    if (ds == 1) {
      std::fill(dst, dst + n, v);
    } else {
      for (int64_t i = 0; i < n; ++i) dst[i * ds] = v;
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) dst[i * ds] = src[i * ss];
}

// Register transposes of one M x M block: dst[i*dld + j] = src[j*sld + i].
template <class E>
struct Micro {
  static constexpr int64_t kSize = 8;
  static void transpose(E* dst, int64_t dld, const E* src, int64_t sld) {
    for (int64_t i = 0; i < kSize; ++i) {
      for (int64_t j = 0; j < kSize; ++j) dst[i * dld + j] = src[j * sld + i];
    }
  }
};

#if defined(__AVX2__)
template <>
struct Micro<uint32_t> {
  static constexpr int64_t kSize = 8;
  static void transpose(uint32_t* dst, int64_t dld, const uint32_t* src, int64_t sld) {
    __m256 r[8], t[8];
    for (int k = 0; k < 8; ++k) r[k] = _mm256_castsi256_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + k * sld)));
    for (int k = 0; k < 8; k += 2) {
      t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
      t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
    }
    for (int k = 0; k < 8; k += 4) {
      r[k] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(1, 0, 1, 0));
      r[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(3, 2, 3, 2));
      r[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(1, 0, 1, 0));
      r[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int k = 0; k < 4; ++k) {
      t[k] = _mm256_permute2f128_ps(r[k], r[k + 4], 0x20);
      t[k + 4] = _mm256_permute2f128_ps(r[k], r[k + 4], 0x31);
    }
    for (int k = 0; k < 8; ++k) _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + k * dld), _mm256_castps_si256(t[k]));
  }
};

template <>
struct Micro<uint64_t> {
  static constexpr int64_t kSize = 4;
  static void transpose(uint64_t* dst, int64_t dld, const uint64_t* src, int64_t sld) {
    __m256d r[4], t[4];
    for (int k = 0; k < 4; ++k) r[k] = _mm256_castsi256_pd(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + k * sld)));
    t[0] = _mm256_unpacklo_pd(r[0], r[1]);
    t[1] = _mm256_unpackhi_pd(r[0], r[1]);
    t[2] = _mm256_unpacklo_pd(r[2], r[3]);
    t[3] = _mm256_unpackhi_pd(r[2], r[3]);
    r[0] = _mm256_permute2f128_pd(t[0], t[2], 0x20);
    r[1] = _mm256_permute2f128_pd(t[1], t[3], 0x20);
    r[2] = _mm256_permute2f128_pd(t[0], t[2], 0x31);
    r[3] = _mm256_permute2f128_pd(t[1], t[3], 0x31);
    for (int k = 0; k < 4; ++k) _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + k * dld), _mm256_castpd_si256(r[k]));
  }
};
#endif

#if defined(__SSE2__)
template <>
struct Micro<uint16_t> {
  static constexpr int64_t kSize = 8;
  static void transpose(uint16_t* dst, int64_t dld, const uint16_t* src, int64_t sld) {
    __m128i a[8], b[8];
    for (int k = 0; k < 8; ++k) a[k] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k * sld));
    for (int k = 0; k < 8; k += 2) {
      b[k] = _mm_unpacklo_epi16(a[k], a[k + 1]);
      b[k + 1] = _mm_unpackhi_epi16(a[k], a[k + 1]);
    }
    // b: {lo01, hi01, lo23, hi23, lo45, hi45, lo67, hi67}
    a[0] = _mm_unpacklo_epi32(b[0], b[2]);
    a[1] = _mm_unpackhi_epi32(b[0], b[2]);
    a[2] = _mm_unpacklo_epi32(b[1], b[3]);
    a[3] = _mm_unpackhi_epi32(b[1], b[3]);
    a[4] = _mm_unpacklo_epi32(b[4], b[6]);
    a[5] = _mm_unpackhi_epi32(b[4], b[6]);
    a[6] = _mm_unpacklo_epi32(b[5], b[7]);
    a[7] = _mm_unpackhi_epi32(b[5], b[7]);
    for (int k = 0; k < 4; ++k) {
      b[2 * k] = _mm_unpacklo_epi64(a[k], a[k + 4]);
      b[2 * k + 1] = _mm_unpackhi_epi64(a[k], a[k + 4]);
    }
    for (int k = 0; k < 8; ++k) _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + k * dld), b[k]);
  }
};

template <>
struct Micro<uint8_t> {
  static constexpr int64_t kSize = 8;
  static void transpose(uint8_t* dst, int64_t dld, const uint8_t* src, int64_t sld) {
    __m128i a[8];
    for (int k = 0; k < 8; ++k) a[k] = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + k * sld));
    const __m128i b0 = _mm_unpacklo_epi8(a[0], a[1]), b1 = _mm_unpacklo_epi8(a[2], a[3]);
    const __m128i b2 = _mm_unpacklo_epi8(a[4], a[5]), b3 = _mm_unpacklo_epi8(a[6], a[7]);
    const __m128i c0 = _mm_unpacklo_epi16(b0, b1), c1 = _mm_unpackhi_epi16(b0, b1);
    const __m128i c2 = _mm_unpacklo_epi16(b2, b3), c3 = _mm_unpackhi_epi16(b2, b3);
    const __m128i d[4] = {_mm_unpacklo_epi32(c0, c2), _mm_unpackhi_epi32(c0, c2), _mm_unpacklo_epi32(c1, c3),
                          _mm_unpackhi_epi32(c1, c3)};
    for (int k = 0; k < 4; ++k) {
      _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + (2 * k) * dld), d[k]);
      _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + (2 * k + 1) * dld), _mm_unpackhi_epi64(d[k], d[k]));
    }
  }
};
#endif

template <class E>
void run_typed(E* dst, const E* src, std::vector<SDim> v, Parallel* pool) {
  const size_t esize = sizeof(E);
  const size_t r = v.size();
  SDim last = v[r - 1];

  // Tiles: transpose-like, dst contiguous innermost, another dim contiguous
  // in src.
  if (last.d == 1 && last.s != 1 && last.s != 0 && r >= 2) {
    int j = -1;
    for (int k = static_cast<int>(r) - 2; k >= 0; --k) {
      if (v[static_cast<size_t>(k)].s == 1) {
        j = k;
        break;
      }
    }
    if (j >= 0 && v[static_cast<size_t>(j)].n >= 2) {
      SDim a = v[static_cast<size_t>(j)];
      v.erase(v.begin() + j);
      v.pop_back();
      const std::vector<SDim>& outer = v;  // remaining dims
      int64_t outer_n = 1;
      for (const auto& o : outer) outer_n *= o.n;
      // Square tiles keep both sides' lines in cache; inside a tile, full
      // M x M blocks go through the register transpose, the ragged edges
      // element by element.
      constexpr int64_t kTile = sizeof(E) == 1 ? 64 : 32;
      constexpr int64_t M = Micro<E>::kSize;
      const int64_t tiles_a = (a.n + kTile - 1) / kTile;
      const int64_t total = outer_n * tiles_a;
      const int64_t bytes_per = kTile * last.n * static_cast<int64_t>(esize);
      const int64_t grain = std::max<int64_t>(1, kParallelBytes / std::max<int64_t>(1, bytes_per));
      auto body = [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          int64_t o = t / tiles_a, ta = t % tiles_a;
          int64_t doff, soff;
          outer_offsets(outer, o, &doff, &soff);
          const int64_t a0 = ta * kTile, na = std::min(a.n - a0, kTile);
          const int64_t fa = na / M * M;
          for (int64_t b0 = 0; b0 < last.n; b0 += kTile) {
            const int64_t nb = std::min(last.n - b0, kTile);
            const int64_t fb = nb / M * M;
            const E* s0 = src + soff + a0 + b0 * last.s;
            E* d0 = dst + doff + a0 * a.d + b0;
            for (int64_t ia = 0; ia < fa; ia += M) {
              for (int64_t ib = 0; ib < fb; ib += M) {
                Micro<E>::transpose(d0 + ia * a.d + ib, a.d, s0 + ib * last.s + ia, last.s);
              }
            }
            if (fb == 0) {
              // Narrow b (e.g. 3 channels): read source rows contiguously.
              for (int64_t ib = 0; ib < nb; ++ib) {
                const E* srow = s0 + ib * last.s;
                for (int64_t ia = 0; ia < na; ++ia) d0[ia * a.d + ib] = srow[ia];
              }
              continue;
            }
            for (int64_t ia = 0; ia < na; ++ia) {
              E* drow = d0 + ia * a.d;
              const E* scol = s0 + ia;
              for (int64_t ib = ia < fa ? fb : 0; ib < nb; ++ib) drow[ib] = scol[ib * last.s];
            }
          }
        }
      };
      if (pool && total > grain) {
        pool->parallel_for(total, grain, body);
      } else {
        body(0, total);
      }
      return;
    }
  }

  v.pop_back();
  const std::vector<SDim>& outer = v;
  int64_t outer_n = 1;
  for (const auto& o : outer) outer_n *= o.n;
  const int64_t row_bytes = last.n * static_cast<int64_t>(esize);
  const int64_t grain = std::max<int64_t>(1, kParallelBytes / std::max<int64_t>(1, row_bytes));
  const bool contiguous = last.d == 1 && last.s == 1;
  auto body = [&](int64_t begin, int64_t end) {
    walk_outer(outer, begin, end, [&](int64_t doff, int64_t soff) {
      if (contiguous) {
        std::memcpy(dst + doff, src + soff, static_cast<size_t>(row_bytes));
      } else {
        copy_scalar_loop(dst + doff, src + soff, last.n, last.d, last.s);
      }
    });
  };
  if (pool && outer_n > grain) {
    pool->parallel_for(outer_n, grain, body);
  } else if (outer_n == 1 && contiguous && pool && row_bytes > 4 * kParallelBytes) {
    parallel_memcpy(dst, src, static_cast<size_t>(row_bytes), pool);
  } else {
    body(0, outer_n);
  }
}

}  // namespace

void parallel_memcpy(void* dst, const void* src, size_t bytes, Parallel* pool) {
  if (bytes == 0 || dst == src) return;
  constexpr size_t kChunk = 1 << 18;
  if (!pool || bytes <= 2 * kChunk || pool->num_threads() <= 1) {
    std::memcpy(dst, src, bytes);
    return;
  }
  const int64_t chunks = static_cast<int64_t>((bytes + kChunk - 1) / kChunk);
  pool->parallel_for(chunks, 1, [&](int64_t b, int64_t e) {
    size_t lo = static_cast<size_t>(b) * kChunk;
    size_t hi = std::min(bytes, static_cast<size_t>(e) * kChunk);
    std::memcpy(static_cast<char*>(dst) + lo, static_cast<const char*>(src) + lo, hi - lo);
  });
}

void strided_copy(void* dst, const void* src, const Dims& dims, const std::vector<int64_t>& dst_strides,
                  const std::vector<int64_t>& src_strides, size_t esize, Parallel* pool) {
  std::vector<SDim> v;
  v.reserve(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 0) return;
    if (dims[i] == 1) continue;
    v.push_back({dims[i], dst_strides[i], src_strides[i]});
  }
  // Merge dim k into k+1 when both views are contiguous across them.
  std::vector<SDim> m;
  for (const SDim& x : v) {
    if (!m.empty()) {
      SDim& p = m.back();
      // p is the outer of x: merge when p.d == x.d*x.n and p.s == x.s*x.n.
      if (p.d == x.d * x.n && p.s == x.s * x.n) {
        p = {p.n * x.n, x.d, x.s};
        continue;
      }
    }
    m.push_back(x);
  }
  if (m.empty()) {
    std::memcpy(dst, src, esize);
    return;
  }
  switch (esize) {
    case 1: run_typed(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), std::move(m), pool); break;
    case 2: run_typed(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), std::move(m), pool); break;
    case 4: run_typed(static_cast<uint32_t*>(dst), static_cast<const uint32_t*>(src), std::move(m), pool); break;
    case 8: run_typed(static_cast<uint64_t*>(dst), static_cast<const uint64_t*>(src), std::move(m), pool); break;
    default: {
      // No dtype has another size; copy bytes as a trailing contiguous dim.
      for (auto& x : m) {
        x.d *= static_cast<int64_t>(esize);
        x.s *= static_cast<int64_t>(esize);
      }
      m.push_back({static_cast<int64_t>(esize), 1, 1});
      run_typed(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), std::move(m), pool);
    }
  }
}

void transpose_copy(void* dst, const void* src, const Dims& in_dims, const std::vector<int64_t>& perm,
                    size_t esize, Parallel* pool) {
  const size_t r = in_dims.size();
  std::vector<int64_t> in_strides = contiguous_strides(in_dims);
  Dims out_dims(r);
  std::vector<int64_t> src_strides(r);
  for (size_t i = 0; i < r; ++i) {
    out_dims[i] = in_dims[static_cast<size_t>(perm[i])];
    src_strides[i] = in_strides[static_cast<size_t>(perm[i])];
  }
  strided_copy(dst, src, out_dims, contiguous_strides(out_dims), src_strides, esize, pool);
}

Status check_movable(const KernelContext& ctx, DType t) {
  if (dtype_size(t) == 0) return Unsupported(ctx.node().describe() + ": dtype " + dtype_name(t) + " is not supported");
  return Status::Ok();
}

Status run_copy_input0(KernelContext& ctx) {
  const Tensor* in = ctx.input(0);
  Tensor* out = ctx.output(0);
  TSR_RETURN_IF_ERROR(check_movable(ctx, in->dtype()));
  if (out->nbytes() != in->nbytes()) return ctx.error("output size does not match input size");
  parallel_memcpy(out->raw(), in->raw(), in->nbytes(), &ctx.pool());
  return Status::Ok();
}

bool known_ints(const InferContext& ctx, int i, std::vector<int64_t>* out) {
  if (!ctx.has_input(i)) return false;
  const Tensor* t = ctx.in_value(i);
  if (!t || !t->defined()) return false;
  *out = t->to_int64_vector();
  return true;
}

int attr_or_input_ints(const InferContext& ctx, const char* attr, int input, std::vector<int64_t>* out) {
  if (ctx.node().has_attr(attr)) {
    *out = ctx.node().attr_ints(attr);
    return 1;
  }
  if (!ctx.has_input(input)) return 0;
  return known_ints(ctx, input, out) ? 1 : -1;
}

Dim product_dim(const std::vector<Dim>& dims) {
  int64_t p = 1;
  const Dim* sym = nullptr;
  for (const Dim& d : dims) {
    if (d.known()) {
      p *= d.value;
    } else if (!d.symbol.empty() && sym == nullptr) {
      sym = &d;
    } else {
      return p == 0 ? Dim(0) : Dim();
    }
  }
  if (p == 0) return Dim(0);
  if (sym) return p == 1 ? *sym : Dim();
  return Dim(p);
}

bool merge_dim(const Dim& a, const Dim& b, Dim* out) {
  if (a.known() && b.known()) {
    *out = a;
    return a.value == b.value;
  }
  if (a.known()) {
    *out = a;
  } else if (b.known()) {
    *out = b;
  } else {
    *out = a.symbol.empty() ? b : a;
  }
  return true;
}

bool attr_axes(const Node& node, int rank, std::vector<int>* axes, std::string* err) {
  axes->clear();
  const std::vector<int64_t> given = node.attr_ints("axes");
  if (given.empty()) {
    for (int i = 0; i < rank; ++i) axes->push_back(i);
    return true;
  }
  std::vector<bool> seen(static_cast<size_t>(std::max(rank, 0)), false);
  for (int64_t v : given) {
    const int ax = normalize_axis(v, rank);
    if (ax < 0 || seen[static_cast<size_t>(ax)]) {
      *err = "axis " + std::to_string(v) + " is out of range or repeated";
      return false;
    }
    seen[static_cast<size_t>(ax)] = true;
    axes->push_back(ax);
  }
  return true;
}

std::vector<int64_t> input_ints(const KernelContext& ctx, int i) {
  const Tensor* t = ctx.input(i);
  if (!t || !t->defined()) return {};
  return t->to_int64_vector();
}

Shape rank_from_shape_input(const Shape& shape_input) {
  constexpr int64_t kMaxRank = 1024;
  if (shape_input.rank_known && shape_input.rank() == 1 && shape_input[0].known() && shape_input[0].value <= kMaxRank) {
    return Shape::Unknown(static_cast<int>(shape_input[0].value));
  }
  return Shape::Unranked();
}

}  // namespace tessera
