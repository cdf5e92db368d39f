// Integer GEMM for the quantized ops (MatMulInteger, ConvInteger,
// QLinearMatMul, QLinearConv):
//   C[M,N] (int32) = sum_k (A[m,k] - za[m]) * (B[k,n] - zb[n])
// for 8-bit A and B (each int8 or uint8), with zero points per row of A and
// per column of B (a shared zero point is a stride-0 array).
//
// Method: both operands are widened to int16 with their zero points already
// subtracted, which is exact (values lie in [-255, 255]) and lets a signed
// 16x16->32 multiply-add serve every combination of signedness. K is padded
// to even and consecutive k are interleaved, so one 32-bit lane holds the
// pair (k, k+1). A is packed in panels of kQMR rows ([K/2][kQMR] pairs), B in
// panels of kQNR columns ([K/2][kQNR] pairs). The micro-kernel broadcasts one
// A pair and multiply-adds it against kQNR B pairs (vpdpwssd with AVX-512
// VNNI, vpmaddwd + vpaddd with AVX-512BW, a plain loop otherwise), keeping
// kQMR x kQNR int32 accumulators in registers over the whole of K.
//
// The output is cut into tiles of whole panels that run on the thread pool;
// each tile packs its block of B (from a QBSource, so im2col writes straight
// into the panel layout) into a thread-local buffer unless B was packed once
// ahead of time (constant weights). Results go either straight to an int32
// C or, a block of rows at a time while still in cache, to a QTileSink that
// requantizes them (QLinearMatMul / QLinearConv), so no full int32 copy of
// the output is ever made.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/tensor.h"

namespace tessera {
class Parallel;
}

namespace tessera::qgemm {

constexpr int kQMR = 8;   // rows of A per panel
constexpr int kQNR = 32;  // columns of B per panel
constexpr int64_t kQMaxBlockCols = 16 * kQNR;  // widest block of columns a QTileSink receives

inline int64_t k_pairs(int64_t k) { return (k + 1) / 2; }
inline int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// Reads 8-bit values of either signedness as int32.
struct Int8Ref {
  const void* data = nullptr;
  bool is_signed = false;
  int32_t at(int64_t i) const {
    return is_signed ? static_cast<int32_t>(static_cast<const int8_t*>(data)[i])
                     : static_cast<int32_t>(static_cast<const uint8_t*>(data)[i]);
  }
};
// Int8Ref of an int8/uint8 tensor (caller checks the dtype).
inline Int8Ref int8_ref(const Tensor& t) { return Int8Ref{t.raw(), t.dtype() == DType::kInt8}; }

// Zero points: zp[i * stride] for row/column i (stride 0 = one shared value).
struct ZeroPoints {
  const int32_t* values = nullptr;  // null = all zero
  int64_t stride = 0;
  int32_t at(int64_t i) const { return values ? values[i * stride] : 0; }
};

// A (M x K, row-major with row stride lda) packed once in kQMR-row panels.
class QPackedA {
 public:
  QPackedA() = default;
  static QPackedA Pack(Int8Ref a, int64_t lda, int64_t m, int64_t k, ZeroPoints za);
  int64_t m() const { return m_; }
  int64_t k() const { return k_; }
  int64_t panels() const { return (m_ + kQMR - 1) / kQMR; }
  // Panel p: k_pairs(k) * kQMR pairs of int16.
  const int16_t* panel(int64_t p) const { return data_.data() + p * k_pairs(k_) * kQMR * 2; }

 private:
  int64_t m_ = 0, k_ = 0;
  std::vector<int16_t> data_;
};

// Produces packed column blocks of B (K x N) minus its zero points.
class QBSource {
 public:
  virtual ~QBSource() = default;
  // Writes columns [n0, n0+nc) as ceil(nc/kQNR) panels of k_pairs(K) x kQNR
  // pairs; panel i starts at dst + i * k_pairs(K) * kQNR * 2. Columns past
  // nc in the last panel must be zero. n0 is a multiple of kQNR. Called
  // concurrently from several threads.
  virtual void pack(int64_t n0, int64_t nc, int16_t* dst) const = 0;
  // Already-packed panels starting at column n0 (a multiple of kQNR), or
  // null when blocks must be packed with pack().
  virtual const int16_t* packed(int64_t n0) const {
    (void)n0;
    return nullptr;
  }
};

// B as a plain row-major 8-bit matrix (row stride ldb).
class QMatrixB final : public QBSource {
 public:
  QMatrixB(Int8Ref b, int64_t ldb, int64_t k, int64_t n, ZeroPoints zb) : b_(b), ldb_(ldb), k_(k), n_(n), zb_(zb) {}
  void pack(int64_t n0, int64_t nc, int16_t* dst) const override;

 private:
  Int8Ref b_;
  int64_t ldb_, k_, n_;
  ZeroPoints zb_;
};

// B packed once over all of its columns (constant weights).
class QPackedB final : public QBSource {
 public:
  QPackedB() = default;
  static QPackedB Pack(const QBSource& src, int64_t k, int64_t n);
  void pack(int64_t n0, int64_t nc, int16_t* dst) const override;
  const int16_t* packed(int64_t n0) const override { return data_.data() + n0 * k_pairs(k_) * 2; }
  bool empty() const { return data_.empty(); }

 private:
  int64_t k_ = 0, n_ = 0;
  std::vector<int16_t> data_;
};

// Receives finished blocks of C: rows [i0, i0 + mi) and columns [j0, j0 + nj)
// at `c` (row stride ldc). Called concurrently from several threads, on
// disjoint blocks.
class QTileSink {
 public:
  virtual ~QTileSink() = default;
  virtual void consume(int64_t i0, int64_t mi, int64_t j0, int64_t nj, const int32_t* c, int64_t ldc) const = 0;
};

// C[M, N] (row stride ldc) = packed A x B. `pool` may be null.
void qgemm(Parallel* pool, const QPackedA& a, const QBSource& b, int64_t n, int32_t* c, int64_t ldc);
// The same product delivered block by block to `sink`.
void qgemm(Parallel* pool, const QPackedA& a, const QBSource& b, int64_t n, const QTileSink& sink);

// Requantizes a row of int32 accumulators:
//   y[j] = saturate(round_half_even((acc[j] + bias) * scale) + zp)
// for the 8-bit output type T (uint8/int8); `scales` holds one scale per
// element (scale_stride 1) or one for all (scale_stride 0). The bias is added
// in wrapping int32 arithmetic, like the accumulation it extends.
template <class T>
void requantize(const int32_t* acc, int64_t n, int32_t bias, const float* scales, int64_t scale_stride, int32_t zp,
                T* y);

}  // namespace tessera::qgemm
