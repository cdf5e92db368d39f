#include "ops/kernels/gemm.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "util/thread_pool.h"

#ifdef __AVX512F__
#include <immintrin.h>
#endif

namespace tessera::kernels {

namespace {

// Register tile: kMR rows x kNR columns, kNR = kNV vectors of 16 floats.
// AVX-512: 8 x 48 keeps 24 accumulators, 3 B vectors and a broadcast in the
// 32 zmm registers.
constexpr int kLanes = 16;
#ifndef TSR_GEMM_MR  // overridable for tuning experiments (bench/gemm_bench.cc)
#ifdef __AVX512F__
#define TSR_GEMM_MR 8
#define TSR_GEMM_NV 3
#else
#define TSR_GEMM_MR 4
#define TSR_GEMM_NV 2
#endif
#endif
#ifndef TSR_GEMM_KC
#define TSR_GEMM_KC 256
#endif
#ifndef TSR_GEMM_NC_PANELS
#define TSR_GEMM_NC_PANELS 16
#endif
constexpr int kMR = TSR_GEMM_MR;
constexpr int kNV = TSR_GEMM_NV;
constexpr int kNR = kNV * kLanes;
// Per K block of kKC, each A panel (kMR x kKC, packed just before use) stays
// in L1 while the micro-kernel sweeps the packed B block (kKC x kNC) held in
// L2.
constexpr int64_t kKC = TSR_GEMM_KC;
constexpr int64_t kNC = TSR_GEMM_NC_PANELS * kNR;
// Below this many flops a GEMM runs on the calling thread. With the pool's
// threads spinning between jobs, handing half of a 0.5 MFLOP product (an LSTM
// step at hidden 256) to the other thread pays: 2.6 -> 1.6 ms over 256 steps;
// when they sleep (beside an engine's threads), waking one costs more.
constexpr double kMinParallelFlops = 2.0e6;
constexpr double kMinParallelFlopsSpinning = 2.5e5;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---- thread-local packing buffers -----------------------------------------

struct Scratch {
  float* ptr = nullptr;
  size_t cap = 0;
  ~Scratch() { std::free(ptr); }
  float* get(size_t n) {
    if (n > cap) {
      std::free(ptr);
      size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
      ptr = static_cast<float*>(std::aligned_alloc(64, bytes));
      cap = n;
    }
    return ptr;
  }
};
thread_local Scratch t_a_scratch;
thread_local Scratch t_b_scratch;

// ---- epilogue ---------------------------------------------------------------

inline float act_scalar(const Epilogue& ep, float x) {
  switch (ep.act) {
    case Activation::kNone: return x;
    case Activation::kRelu: return x > 0.f ? x : 0.f;
    case Activation::kClip: return std::min(std::max(x, ep.lo), ep.hi);
    case Activation::kLeakyRelu: return x < 0.f ? x * ep.alpha : x;
    case Activation::kHardSigmoid: return std::min(std::max(ep.alpha * x + ep.beta, 0.f), 1.f);
    case Activation::kSigmoid: return 1.f / (1.f + std::exp(-x));
    case Activation::kTanh: return std::tanh(x);
  }
  return x;
}

inline bool transcendental(Activation a) { return a == Activation::kSigmoid || a == Activation::kTanh; }

// Arguments of one micro-tile store.
struct TileArgs {
  float alpha;
  float beta;     // effective beta for this K block (1 after the first)
  bool last;      // last K block: apply the epilogue
  const Epilogue* ep;
  const float* bias_row;  // bias at the tile's first row, or null
  const float* bias_col;  // bias at the tile's first column, or null
};

using MicroKernel = void (*)(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int nr,
                             const TileArgs& t);

#ifdef __AVX512F__

inline __m512 act_vec(const Epilogue& ep, __m512 x) {
  switch (ep.act) {
    case Activation::kNone: return x;
    case Activation::kRelu: return _mm512_maskz_max_ps(0xFFFF, x, _mm512_setzero_ps());
    case Activation::kClip:
      return _mm512_maskz_min_ps(0xFFFF, _mm512_maskz_max_ps(0xFFFF, x, _mm512_set1_ps(ep.lo)),
                                 _mm512_set1_ps(ep.hi));
    case Activation::kLeakyRelu: {
      __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
      return _mm512_mask_mul_ps(x, neg, x, _mm512_set1_ps(ep.alpha));
    }
    case Activation::kHardSigmoid: {
      __m512 y = _mm512_fmadd_ps(x, _mm512_set1_ps(ep.alpha), _mm512_set1_ps(ep.beta));
      return _mm512_maskz_min_ps(0xFFFF, _mm512_maskz_max_ps(0xFFFF, y, _mm512_setzero_ps()), _mm512_set1_ps(1.f));
    }
    case Activation::kSigmoid:
    case Activation::kTanh: return x;  // applied after the store (needs exp)
  }
  return x;
}

// R rows (<= kMR) x V vectors; columns past nr are computed but not stored.
template <int R, int V>
void micro_kernel(int64_t kc, const float* __restrict a, const float* __restrict b, float* __restrict c,
                  int64_t ldc, int nr, const TileArgs& t) {
  // C is read (beta != 0) or written after the K loop; fetch its lines now
  // so the tile store does not wait on memory.
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + v * kLanes), _MM_HINT_T0);
  }
  __m512 acc[R][V];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();

#pragma GCC unroll 2
  for (int64_t p = 0; p < kc; ++p) {
    __m512 bv[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) bv[v] = _mm512_load_ps(b + v * kLanes);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      __m512 av = _mm512_set1_ps(a[r]);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
    a += kMR;
    b += kNR;
  }

  const __m512 valpha = _mm512_set1_ps(t.alpha);
  const __m512 vbeta = _mm512_set1_ps(t.beta);
  const bool scale = t.alpha != 1.f;
  const Epilogue& ep = *t.ep;
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    float* cr = c + r * ldc;
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      const int left = nr - v * kLanes;
      const __mmask16 mk = left >= kLanes ? static_cast<__mmask16>(0xFFFF)
                                          : static_cast<__mmask16>((1u << left) - 1u);
      __m512 x = acc[r][v];
      if (scale) x = _mm512_mul_ps(x, valpha);
      if (t.beta != 0.f) {
        __m512 old = _mm512_maskz_loadu_ps(mk, cr + v * kLanes);
        x = t.beta == 1.f ? _mm512_add_ps(x, old) : _mm512_fmadd_ps(old, vbeta, x);
      }
      if (t.last) {
        if (t.bias_row) x = _mm512_add_ps(x, _mm512_set1_ps(t.bias_row[r]));
        if (t.bias_col) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(mk, t.bias_col + v * kLanes));
        x = act_vec(ep, x);
      }
      _mm512_mask_storeu_ps(cr + v * kLanes, mk, x);
    }
    if (t.last && transcendental(ep.act)) {
      for (int j = 0; j < nr; ++j) cr[j] = act_scalar(ep, cr[j]);
    }
  }
}

#else  // portable fallback: same blocking, the compiler vectorises the rows.

template <int R, int V>
void micro_kernel(int64_t kc, const float* __restrict a, const float* __restrict b, float* __restrict c,
                  int64_t ldc, int nr, const TileArgs& t) {
  constexpr int W = V * kLanes;
  float acc[R][W] = {};
  for (int64_t p = 0; p < kc; ++p) {
    for (int r = 0; r < R; ++r) {
      const float av = a[r];
      for (int j = 0; j < W; ++j) acc[r][j] += av * b[j];
    }
    a += kMR;
    b += kNR;
  }
  const Epilogue& ep = *t.ep;
  const int w = std::min(nr, W);
  for (int r = 0; r < R; ++r) {
    float* cr = c + r * ldc;
    for (int j = 0; j < w; ++j) {
      float x = acc[r][j] * t.alpha;
      if (t.beta != 0.f) x += t.beta * cr[j];
      if (t.last) {
        if (t.bias_row) x += t.bias_row[r];
        if (t.bias_col) x += t.bias_col[j];
        x = act_scalar(ep, x);
      }
      cr[j] = x;
    }
  }
}

#endif

template <int R, int... Vs>
constexpr auto kernel_row(std::integer_sequence<int, Vs...>) {
  return std::array<MicroKernel, sizeof...(Vs)>{&micro_kernel<R, Vs + 1>...};
}
template <int... Rs>
constexpr auto kernel_table(std::integer_sequence<int, Rs...>) {
  return std::array<std::array<MicroKernel, kNV>, sizeof...(Rs)>{
      kernel_row<Rs + 1>(std::make_integer_sequence<int, kNV>{})...};
}
// kKernels[rows-1][vectors-1]
const auto kKernels = kernel_table(std::make_integer_sequence<int, kMR>{});

// ---- packing ----------------------------------------------------------------

// op(A) rows [i0, i0+mr) x cols [k0, k0+kc) into one panel: kc groups of kMR
// values (rows past mr are left untouched; the kernel for mr rows never
// reads them).
void pack_a_panel(const GemmA& a, int64_t i0, int mr, int64_t k0, int64_t kc, float* dst) {
  if (!a.trans) {
    const float* src[kMR];
    for (int r = 0; r < mr; ++r) src[r] = a.data + (i0 + r) * a.ld + k0;
    for (int64_t p = 0; p < kc; ++p) {
      float* d = dst + p * kMR;
      for (int r = 0; r < mr; ++r) d[r] = src[r][p];
    }
  } else {
    for (int64_t p = 0; p < kc; ++p) {
      const float* s = a.data + (k0 + p) * a.ld + i0;
      float* d = dst + p * kMR;
      for (int r = 0; r < mr; ++r) d[r] = s[r];
    }
  }
}

// op(B) rows [k0, k0+kc) x cols [n0, n0+nc) into panels of kNR columns.
void pack_b_raw(const float* data, int64_t ld, bool trans, int64_t k0, int64_t kc, int64_t n0, int64_t nc,
                float* dst) {
  for (int64_t j0 = 0; j0 < nc; j0 += kNR) {
    const int w = static_cast<int>(std::min<int64_t>(kNR, nc - j0));
    float* panel = dst + (j0 / kNR) * kNR * kc;
    if (!trans) {
      const float* s = data + k0 * ld + n0 + j0;
      if (w == kNR) {
        for (int64_t p = 0; p < kc; ++p) std::memcpy(panel + p * kNR, s + p * ld, sizeof(float) * kNR);
      } else {
        for (int64_t p = 0; p < kc; ++p) {
          float* d = panel + p * kNR;
          std::memcpy(d, s + p * ld, sizeof(float) * static_cast<size_t>(w));
          std::memset(d + w, 0, sizeof(float) * static_cast<size_t>(kNR - w));
        }
      }
    } else {
      // B is N x K: column n of op(B) is row n of B. Gather in strips of
      // kNR rows so the reads stay sequential.
      if (w < kNR) std::memset(panel, 0, sizeof(float) * static_cast<size_t>(kNR * kc));
      const float* s = data + (n0 + j0) * ld + k0;
      constexpr int64_t kStrip = 64;
      for (int64_t p0 = 0; p0 < kc; p0 += kStrip) {
        const int64_t pe = std::min(kc, p0 + kStrip);
        for (int j = 0; j < w; ++j) {
          const float* sj = s + j * ld;
          for (int64_t p = p0; p < pe; ++p) panel[p * kNR + j] = sj[p];
        }
      }
    }
  }
}

void pack_b_block(const GemmB& b, int64_t k0, int64_t kc, int64_t n0, int64_t nc, float* dst) {
  if (b.source) {
    b.source->pack(k0, kc, n0, nc, dst);
  } else {
    pack_b_raw(b.data, b.ld, b.trans, k0, kc, n0, nc, dst);
  }
}

// ---- driver -----------------------------------------------------------------

struct Job {
  int64_t m, n, k;
  float alpha, beta;
  const GemmA* a;
  const GemmB* b;
  float* c;
  int64_t ldc;
  const Epilogue* ep;
};

// Computes rows [m0, m1) x columns [n0, n1) of C; m0 is a multiple of kMR
// and n0 of kNR.
void run_region(const Job& job, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  const GemmA& a = *job.a;
  const GemmB& b = *job.b;
  const Epilogue& ep = *job.ep;
  float* abuf = a.packed ? nullptr : t_a_scratch.get(static_cast<size_t>(kMR * kKC));
  float* bbuf = b.packed ? nullptr : t_b_scratch.get(static_cast<size_t>(kKC * kNC));
  for (int64_t nb = n0; nb < n1; nb += kNC) {
    const int64_t ne = std::min(n1, nb + kNC);
    const int64_t npan = ceil_div(ne - nb, kNR);
    for (int64_t k0 = 0; k0 < job.k; k0 += kKC) {
      const int64_t kc = std::min(kKC, job.k - k0);
      const float* bblk;
      if (b.packed) {
        bblk = b.packed->data() + k0 * b.packed->padded() + (nb / kNR) * kNR * kc;
      } else {
        pack_b_block(b, k0, kc, nb, ne - nb, bbuf);
        bblk = bbuf;
      }
      TileArgs t{job.alpha, k0 == 0 ? job.beta : 1.f, k0 + kc >= job.k, &ep, nullptr, nullptr};
      for (int64_t i0 = m0; i0 < m1; i0 += kMR) {
        const int mr = static_cast<int>(std::min<int64_t>(kMR, m1 - i0));
        const float* ap;
        if (a.packed) {
          ap = a.packed->data() + k0 * a.packed->padded() + (i0 / kMR) * kMR * kc;
        } else {
          pack_a_panel(a, i0, mr, k0, kc, abuf);
          ap = abuf;
        }
        t.bias_row = ep.bias_kind == Epilogue::Bias::kPerRow ? ep.bias + i0 : nullptr;
        const auto& row = kKernels[static_cast<size_t>(mr - 1)];
        float* crow = job.c + i0 * job.ldc;
        for (int64_t p = 0; p < npan; ++p) {
          const int64_t j0 = nb + p * kNR;
          const int nr = static_cast<int>(std::min<int64_t>(kNR, ne - j0));
          t.bias_col = ep.bias_kind == Epilogue::Bias::kPerCol ? ep.bias + j0 : nullptr;
          row[static_cast<size_t>(ceil_div(nr, kLanes) - 1)](kc, ap, bblk + p * kNR * kc, crow + j0, job.ldc, nr,
                                                              t);
        }
      }
    }
  }
}

void scale_and_epilogue(int64_t m, int64_t n, float beta, float* c, int64_t ldc, const Epilogue& ep);

// ---- matrix-vector (N = 1) ----------------------------------------------------

// Packing a single column into kNR-wide panels would waste kNR-1 lanes of
// every FMA; a product with one column is a set of dot products (A not
// transposed) or a sum of scaled rows (A transposed) instead.
float dot(const float* a, const float* b, int64_t k) {
  int64_t p = 0;
  float s = 0.f;
#ifdef __AVX512F__
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  for (; p + 32 <= k; p += 32) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + p), _mm512_loadu_ps(b + p), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + p + 16), _mm512_loadu_ps(b + p + 16), acc1);
  }
  for (; p + 16 <= k; p += 16) acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + p), _mm512_loadu_ps(b + p), acc0);
  if (p < k) {
    const auto m = static_cast<__mmask16>((1u << (k - p)) - 1u);
    acc1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + p), _mm512_maskz_loadu_ps(m, b + p), acc1);
    p = k;
  }
  s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
#endif
  for (; p < k; ++p) s += a[p] * b[p];
  return s;
}

void gemv(ThreadPool* pool, int64_t m, int64_t k, float alpha, const GemmA& a, const GemmB& b, float beta, float* c,
          int64_t ldc, const Epilogue& ep) {
  // Column 0 of op(B): B[p, 0] (stride ld) or, transposed, row 0 of B.
  std::vector<float> bcol;
  const float* bv = b.data;
  if (!b.trans && b.ld != 1) {
    bcol.resize(static_cast<size_t>(k));
    for (int64_t p = 0; p < k; ++p) bcol[static_cast<size_t>(p)] = b.data[p * b.ld];
    bv = bcol.data();
  }
  auto finish = [&](int64_t i, float acc) {
    float* ci = c + i * ldc;
    float v = alpha * acc;
    if (beta != 0.f) v += beta * *ci;
    if (ep.bias_kind == Epilogue::Bias::kPerRow) v += ep.bias[i];
    if (ep.bias_kind == Epilogue::Bias::kPerCol) v += ep.bias[0];
    *ci = act_scalar(ep, v);
  };
  const bool par = pool && pool->num_threads() > 1 && !ThreadPool::in_parallel_region() &&
                   2.0 * static_cast<double>(m) * static_cast<double>(k) >= kMinParallelFlops;
  auto rows = [&](int64_t begin, int64_t end) {
    if (!a.trans) {
      for (int64_t i = begin; i < end; ++i) finish(i, dot(a.data + i * a.ld, bv, k));
      return;
    }
    // op(A)[i, p] = A[p, i]: accumulate scaled rows of A.
    std::vector<float> acc(static_cast<size_t>(end - begin), 0.f);
    for (int64_t p = 0; p < k; ++p) {
      const float s = bv[p];
      const float* ar = a.data + p * a.ld + begin;
      for (int64_t i = 0; i < end - begin; ++i) acc[static_cast<size_t>(i)] += s * ar[i];
    }
    for (int64_t i = begin; i < end; ++i) finish(i, acc[static_cast<size_t>(i - begin)]);
  };
  if (par) {
    pool->parallel_for(m, 64, rows);
  } else {
    rows(0, m);
  }
}


void scale_and_epilogue(int64_t m, int64_t n, float beta, float* c, int64_t ldc, const Epilogue& ep) {
  for (int64_t i = 0; i < m; ++i) {
    float* row = c + i * ldc;
    if (beta == 0.f) {
      std::fill(row, row + n, 0.f);
    } else if (beta != 1.f) {
      for (int64_t j = 0; j < n; ++j) row[j] *= beta;
    }
  }
  apply_epilogue(ep, m, n, c, ldc);
}

}  // namespace

int gemm_mr() { return kMR; }
int gemm_nr() { return kNR; }
int64_t gemm_kc() { return kKC; }

// ---- PackedMatrix -------------------------------------------------------------

size_t PackedMatrix::bytes() const {
  return static_cast<size_t>(padded_) * static_cast<size_t>(side_ == Side::kA ? cols_ : rows_) * sizeof(float);
}

namespace {
std::shared_ptr<float> alloc_floats(size_t n) {
  size_t bytes = std::max<size_t>(64, (n * sizeof(float) + 63) / 64 * 64);
  auto* p = static_cast<float*>(std::aligned_alloc(64, bytes));
  std::memset(p, 0, bytes);
  return std::shared_ptr<float>(p, [](float* q) { std::free(q); });
}
}  // namespace

PackedMatrix PackedMatrix::PackA(const float* a, int64_t lda, bool trans, int64_t m, int64_t k) {
  PackedMatrix pm;
  pm.side_ = Side::kA;
  pm.rows_ = m;
  pm.cols_ = k;
  pm.padded_ = ceil_div(m, kMR) * kMR;
  pm.data_ = alloc_floats(static_cast<size_t>(pm.padded_ * k));
  GemmA src{a, lda, trans, nullptr};
  for (int64_t k0 = 0; k0 < k; k0 += kKC) {
    const int64_t kc = std::min(kKC, k - k0);
    float* blk = pm.data_.get() + k0 * pm.padded_;
    for (int64_t i0 = 0; i0 < m; i0 += kMR) {
      // Padding rows stay zero from the allocation.
      pack_a_panel(src, i0, static_cast<int>(std::min<int64_t>(kMR, m - i0)), k0, kc, blk + (i0 / kMR) * kMR * kc);
    }
  }
  return pm;
}

PackedMatrix PackedMatrix::PackB(const float* b, int64_t ldb, bool trans, int64_t k, int64_t n) {
  PackedMatrix pm;
  pm.side_ = Side::kB;
  pm.rows_ = k;
  pm.cols_ = n;
  pm.padded_ = ceil_div(n, kNR) * kNR;
  pm.data_ = alloc_floats(static_cast<size_t>(pm.padded_ * k));
  for (int64_t k0 = 0; k0 < k; k0 += kKC) {
    const int64_t kc = std::min(kKC, k - k0);
    pack_b_raw(b, ldb, trans, k0, kc, 0, n, pm.data_.get() + k0 * pm.padded_);
  }
  return pm;
}

// ---- entry points -------------------------------------------------------------

void gemm(ThreadPool* pool, int64_t m, int64_t n, int64_t k, float alpha, const GemmA& a, const GemmB& b,
          float beta, float* c, int64_t ldc, const Epilogue& ep) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    scale_and_epilogue(m, n, beta, c, ldc, ep);
    return;
  }
  if (n == 1 && !a.packed && !b.packed && !b.source) {
    gemv(pool, m, k, alpha, a, b, beta, c, ldc, ep);
    return;
  }
  Job job{m, n, k, alpha, beta, &a, &b, c, ldc, &ep};
  const int64_t pm = ceil_div(m, kMR);
  const int64_t pn = ceil_div(n, kNR);
  const int threads = pool ? pool->num_threads() : 1;
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  if (threads <= 1 || ThreadPool::in_parallel_region() ||
      flops < (pool->spins() ? kMinParallelFlopsSpinning : kMinParallelFlops)) {
    run_region(job, 0, m, 0, n);
    return;
  }
  // Tile the output so every thread gets about two tiles. Splitting M costs
  // one more packing of B (unless B is pre-packed), splitting N one more
  // packing of A: split the cheaper side.
  int64_t tm = 1;
  int64_t tn = std::min(pn, ceil_div(pn * kNR, kNC));
  const int64_t want = 2 * threads;
  while (tm * tn < want) {
    const bool can_m = tm < pm;
    const bool can_n = tn < pn;
    if (!can_m && !can_n) break;
    const double cost_m = b.packed ? 0.0 : static_cast<double>(n) * static_cast<double>(tm + 1) / static_cast<double>(pm);
    const double cost_n = a.packed ? 0.0 : static_cast<double>(m) * static_cast<double>(tn + 1) / static_cast<double>(pn);
    if (can_m && (!can_n || cost_m <= cost_n)) {
      ++tm;
    } else {
      ++tn;
    }
  }
  // Equal tiles balance best when every thread gets the same number.
  while ((tm * tn) % threads != 0 && tm * tn < 8 * threads) {
    if (tn < pn) {
      ++tn;
    } else if (tm < pm) {
      ++tm;
    } else {
      break;
    }
  }
  pool->parallel_for(tm * tn, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t i = t / tn;
      const int64_t j = t % tn;
      const int64_t r0 = (i * pm / tm) * kMR;
      const int64_t r1 = std::min(m, ((i + 1) * pm / tm) * kMR);
      const int64_t c0 = (j * pn / tn) * kNR;
      const int64_t c1 = std::min(n, ((j + 1) * pn / tn) * kNR);
      if (r0 < r1 && c0 < c1) run_region(job, r0, r1, c0, c1);
    }
  });
}

void sgemm(ThreadPool* pool, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
           const Epilogue& ep) {
  GemmA ga{a, lda, trans_a, nullptr};
  GemmB gb{b, ldb, trans_b, nullptr, nullptr};
  gemm(pool, m, n, k, alpha, ga, gb, beta, c, ldc, ep);
}

void apply_activation(const Epilogue& ep, float* x, int64_t n) {
  if (ep.act == Activation::kNone) return;
  int64_t i = 0;
#ifdef __AVX512F__
  if (!transcendental(ep.act))
    for (; i + kLanes <= n; i += kLanes) _mm512_storeu_ps(x + i, act_vec(ep, _mm512_loadu_ps(x + i)));
#endif
  for (; i < n; ++i) x[i] = act_scalar(ep, x[i]);
}

void apply_epilogue(const Epilogue& ep, int64_t m, int64_t n, float* c, int64_t ldc) {
  if (ep.empty()) return;
  for (int64_t i = 0; i < m; ++i) {
    float* row = c + i * ldc;
    if (ep.bias_kind == Epilogue::Bias::kPerRow) {
      const float bv = ep.bias[i];
      for (int64_t j = 0; j < n; ++j) row[j] += bv;
    } else if (ep.bias_kind == Epilogue::Bias::kPerCol) {
      for (int64_t j = 0; j < n; ++j) row[j] += ep.bias[j];
    }
    apply_activation(ep, row, n);
  }
}

}  // namespace tessera::kernels
