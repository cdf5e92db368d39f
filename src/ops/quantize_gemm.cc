#include "ops/quantize_gemm.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "util/cpu_isa.h"
#include "util/parallel.h"

namespace tessera::qgemm {

namespace {

constexpr int64_t kPanelPairs = kQNR * 2;  // int16 values per k pair of a B panel

// Bytes of packed B a tile aims to keep in L2.
constexpr int64_t kBlockBytes = 256 * 1024;

// The portable micro-kernel, vectorised by the compiler for the build's baseline.
void micro_kernel(const int16_t* ap, const int16_t* bp, int64_t kp, int32_t* c, int64_t ldc, int mr, int nr) {
  int32_t acc[kQMR][kQNR] = {};
  for (int64_t q = 0; q < kp; ++q) {
    for (int r = 0; r < kQMR; ++r) {
      const int32_t a0 = ap[2 * r], a1 = ap[2 * r + 1];
      for (int j = 0; j < kQNR; ++j) acc[r][j] += a0 * bp[2 * j] + a1 * bp[2 * j + 1];
    }
    ap += 2 * kQMR;
    bp += kPanelPairs;
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

using MicroKernel = void (*)(const int16_t* ap, const int16_t* bp, int64_t kp, int32_t* c, int64_t ldc, int mr, int nr);

// The CPU's widest micro-kernel (util/cpu_isa.h).
MicroKernel micro_kernel_for_cpu() {
  if (cpu::avx512_vnni()) return &avx512_vnni::micro_kernel;
  if (cpu::avx512()) return &avx512::micro_kernel;
  return &micro_kernel;
}

}  // namespace

QPackedA QPackedA::Pack(Int8Ref a, int64_t lda, int64_t m, int64_t k, ZeroPoints za) {
  QPackedA p;
  p.m_ = m;
  p.k_ = k;
  const int64_t kp = k_pairs(k);
  p.data_.assign(static_cast<size_t>(p.panels() * kp * kQMR * 2), 0);
  for (int64_t i = 0; i < m; ++i) {
    int16_t* dst = p.data_.data() + (i / kQMR) * kp * kQMR * 2 + (i % kQMR) * 2;
    const int32_t z = za.at(i);
    const int64_t row = i * lda;
    for (int64_t kk = 0; kk < k; ++kk) {
      dst[(kk / 2) * kQMR * 2 + (kk & 1)] = static_cast<int16_t>(a.at(row + kk) - z);
    }
  }
  return p;
}

void QMatrixB::pack(int64_t n0, int64_t nc, int16_t* dst) const {
  const int64_t kp = k_pairs(k_);
  const int64_t panels = (nc + kQNR - 1) / kQNR;
  std::memset(dst, 0, sizeof(int16_t) * static_cast<size_t>(panels * kp * kPanelPairs));
  int32_t zb[kQNR];
  for (int64_t p = 0; p < panels; ++p) {
    const int64_t j0 = n0 + p * kQNR;
    const int cols = static_cast<int>(std::min<int64_t>(kQNR, n0 + nc - j0));
    for (int j = 0; j < cols; ++j) zb[j] = zb_.at(j0 + j);
    int16_t* panel = dst + p * kp * kPanelPairs;
    for (int64_t kk = 0; kk < k_; ++kk) {
      int16_t* d = panel + (kk / 2) * kPanelPairs + (kk & 1);
      const int64_t row = kk * ldb_ + j0;
      if (b_.is_signed) {
        const int8_t* s = static_cast<const int8_t*>(b_.data) + row;
        for (int j = 0; j < cols; ++j) d[2 * j] = static_cast<int16_t>(s[j] - zb[j]);
      } else {
        const uint8_t* s = static_cast<const uint8_t*>(b_.data) + row;
        for (int j = 0; j < cols; ++j) d[2 * j] = static_cast<int16_t>(s[j] - zb[j]);
      }
    }
  }
}

QPackedB QPackedB::Pack(const QBSource& src, int64_t k, int64_t n) {
  QPackedB p;
  p.k_ = k;
  p.n_ = n;
  p.data_.assign(static_cast<size_t>(round_up(std::max<int64_t>(n, 1), kQNR) * k_pairs(k) * 2), 0);
  if (n > 0) src.pack(0, n, p.data_.data());
  return p;
}

void QPackedB::pack(int64_t n0, int64_t nc, int16_t* dst) const {
  const int64_t panels = (nc + kQNR - 1) / kQNR;
  std::memcpy(dst, packed(n0), sizeof(int16_t) * static_cast<size_t>(panels * k_pairs(k_) * kPanelPairs));
}

namespace {

// Rows of C a sink receives at once (whole A panels).
constexpr int64_t kSinkPanels = 8;

void qgemm_impl(Parallel* pool, const QPackedA& a, const QBSource& b, int64_t n, int32_t* c, int64_t ldc,
                const QTileSink* sink) {
  const int64_t m = a.m(), kp = k_pairs(a.k());
  if (m == 0 || n == 0) return;
  const int64_t n_panels = (n + kQNR - 1) / kQNR;
  const int64_t panel_bytes = std::max<int64_t>(kp, 1) * kPanelPairs * static_cast<int64_t>(sizeof(int16_t));
  const int64_t block_panels = std::clamp<int64_t>(kBlockBytes / panel_bytes, 1, kQMaxBlockCols / kQNR);
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
    const int16_t* bblock = kp > 0 ? b.packed(n0) : nullptr;
    if (!bblock && kp > 0) {
      thread_local std::vector<int16_t> buf;
      const auto need = static_cast<size_t>(round_up(nc, kQNR) * kp * 2);
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
        const int16_t* bp = bblock + (j0 / kQNR) * kp * kPanelPairs;
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
  for (int64_t j = 0; j < n; ++j) {
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
