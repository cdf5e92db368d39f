// Integer GEMM for the quantized ops (MatMulInteger, ConvInteger,
// QLinearMatMul, QLinearConv):
//   C[M,N] (int32) = sum_k (A[m,k] - za[m]) * (B[k,n] - zb[n])
// for 8-bit A and B (each int8 or uint8), with zero points per row of A and
// per column of B (a shared zero point is a stride-0 array).
//
// Operands are packed in one of two layouts, chosen once per process by the
// CPU (layout()); either way each group of consecutive k takes 4 bytes per
// row of A and per column of B, A in panels of kQMR rows and B in panels of
// kQNR columns, and the micro-kernel broadcasts one row's group of A against
// a panel's groups of B, keeping kQMR x kQNR int32 accumulators in registers
// over the whole of K:
// - kQuads (AVX-512 VNNI): groups of 4 k as bytes for vpdpbusd, which
//   multiplies unsigned by signed bytes and sums the four products into int32
//   exactly. A is stored signed, A_s = A - ca (ca = 128 for uint8 A, else 0),
//   and B unsigned, B_u = B - cb (cb = -128 for int8 B, else 0), so with
//   oa = ca - za and ob = cb - zb
//     C = sum A_s B_u + ob * sum_k A_s + oa * (sum_k B_u + K * ob),
//   where each A panel ends with its rows' sum_k A_s and oa, each B panel with
//   its columns' sum_k B_u + K * ob and ob; the kernel adds the corrections
//   once per tile. The arithmetic wraps in int32 like the accumulation, so
//   the result is the exact sum whenever that fits in int32.
// - kPairs (otherwise): both operands widened to int16 with their zero points
//   already subtracted (exact: values lie in [-255, 255]), in groups of 2 k
//   for a signed 16x16->32 multiply-add (vpdpwssd with AVX-512 VNNI, vpmaddwd
//   + vpaddd with AVX-512BW, a plain loop otherwise).
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
#include <functional>
#include <vector>

#include "ir/tensor.h"

namespace tessera {
class Parallel;
}

namespace tessera::qgemm {

constexpr int kQMR = 8;   // rows of A per panel
constexpr int kQNR = 32;  // columns of B per panel
constexpr int64_t kQMaxBlockCols = 16 * kQNR;  // widest block of columns a QTileSink receives

inline int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

enum class Layout { kPairs, kQuads };
// The layout of every packed operand in this process: kQuads where the CPU
// has AVX-512 VNNI (cpu::avx512_vnni()), else kPairs.
Layout layout();
// Values of one k group: 2 int16 (kPairs) or 4 bytes (kQuads).
inline int64_t group_k(Layout l) { return l == Layout::kQuads ? 4 : 2; }
// Groups of K in a panel, K padded with zeros to whole groups.
inline int64_t k_groups(int64_t k, Layout l = layout()) { return (k + group_k(l) - 1) / group_k(l); }
// Bytes of one packed panel of A (kQMR rows) or of B (kQNR columns):
// 4 bytes per group and row/column, and in the kQuads layout two int32 per
// row/column after them (A: sum_k A_s, oa; B: sum_k B_u + K * ob, ob).
inline int64_t a_panel_bytes(int64_t k, Layout l = layout()) {
  return (k_groups(k, l) + (l == Layout::kQuads ? 2 : 0)) * kQMR * 4;
}
inline int64_t b_panel_bytes(int64_t k, Layout l = layout()) {
  return (k_groups(k, l) + (l == Layout::kQuads ? 2 : 0)) * kQNR * 4;
}

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
  // Panel p: a_panel_bytes(k) bytes.
  const uint8_t* panel(int64_t p) const { return data_.data() + p * a_panel_bytes(k_); }

 private:
  int64_t m_ = 0, k_ = 0;
  std::vector<uint8_t> data_;
};

// Writes the B panels of columns [0, nc) of a K-row matrix, given row by row:
// fill(kk, row) writes row kk's nc values, encoded for the layout (E =
// int16_t: B - zb, for kPairs; E = uint8_t: B_u = B - cb, for kQuads, with
// ob[j] = cb - zb[j] of column j). Columns past nc in the last panel are
// zero. The QBSources below build on it.
// Instantiated for the two element types only.
template <class E>
void pack_b_rows(int64_t k, int64_t nc, ZeroPoints ob, uint8_t* dst, const std::function<void(int64_t, E*)>& fill);

// Produces packed column blocks of B (K x N) minus its zero points.
class QBSource {
 public:
  virtual ~QBSource() = default;
  // Writes columns [n0, n0+nc) as ceil(nc/kQNR) panels of layout(); panel
  // i starts at dst + i * b_panel_bytes(K). Columns past nc in the last
  // panel must be zero. n0 is a multiple of kQNR. Called concurrently from
  // several threads.
  virtual void pack(int64_t n0, int64_t nc, uint8_t* dst) const = 0;
  // Already-packed panels starting at column n0 (a multiple of kQNR), or
  // null when blocks must be packed with pack().
  virtual const uint8_t* packed(int64_t n0) const {
    (void)n0;
    return nullptr;
  }
};

// B as a plain row-major 8-bit matrix (row stride ldb).
class QMatrixB final : public QBSource {
 public:
  QMatrixB(Int8Ref b, int64_t ldb, int64_t k, int64_t n, ZeroPoints zb) : b_(b), ldb_(ldb), k_(k), n_(n), zb_(zb) {}
  void pack(int64_t n0, int64_t nc, uint8_t* dst) const override;

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
  void pack(int64_t n0, int64_t nc, uint8_t* dst) const override;
  const uint8_t* packed(int64_t n0) const override { return data_.data() + n0 / kQNR * b_panel_bytes(k_); }
  bool empty() const { return data_.empty(); }

 private:
  int64_t k_ = 0, n_ = 0;
  std::vector<uint8_t> data_;
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
