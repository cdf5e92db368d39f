// Single-precision GEMM for the native backend:
//   C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, then an optional
//   epilogue (bias per row or per column, then an activation),
// all row-major with arbitrary leading dimensions.
//
// Method (Goto/BLIS style): K is cut into blocks of kc; op(B) is packed per
// block into panels of NR columns (kc x NR, contiguous), op(A) into panels of
// MR rows; a register-blocked MR x NR micro-kernel (AVX-512 when available,
// a portable blocked C++ kernel otherwise) accumulates one panel pair in
// registers and writes C once per K block, applying alpha/beta and, on the
// last block, the epilogue while the tile is still in registers. The output
// is split into tiles of whole panels that run on the thread pool; every tile
// packs what it needs into thread-local buffers sized for L1/L2.
//
// Either operand can instead be packed once ahead of time (PackedMatrix, used
// for constant weights), and B can come from a BPackSource that writes packed
// panels directly (Conv's im2col packs straight into the panel layout).
//
// bf16 products: a constant packed for Products::kBf16 (where the CPU has
// AVX-512 BF16; elsewhere it is packed in fp32 and nothing changes) holds its
// values rounded to bf16 (nearest even), consecutive k in pairs, one pair per
// 32-bit slot. A GEMM with such an operand rounds the other one to bf16 too as
// it packs its blocks, and multiplies pairs with vdpbf16ps into fp32 sums;
// alpha, beta and the epilogue are applied in fp32 as always.
//
// fp16 products: a constant packed for Products::kFp16 (where the CPU has
// AVX512-FP16) holds fp16 values (nearest even) in the same pair slots, and
// the other operand is rounded to fp16 as its blocks are packed. AVX512-FP16
// has no dot product into fp32: a broadcast pair times a slot vector with
// vfmadd231ph sums even and odd k in separate fp16 lanes, which are widened
// and added into fp32 sums every kFp16Run pairs, so that each fp16 sum holds
// at most kFp16Run products (gemm_impl.inc); the pairs are added at the end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

namespace tessera {
class Parallel;
}

namespace tessera::kernels {

enum class Activation : uint8_t {
  kNone,
  kRelu,         // max(x, 0)
  kClip,         // min(max(x, lo), hi)
  kLeakyRelu,    // x < 0 ? alpha * x : x
  kHardSigmoid,  // max(0, min(1, alpha * x + beta))
  kHardSwish,    // x * max(0, min(1, alpha * x + beta))
  kSigmoid,      // the Sigmoid operator's logistic (ops/elementwise_math.h)
  kTanh,
  kSwish,  // x * Sigmoid(x) (SiLU)
};

// Applied to each output element after alpha/beta, in this order: bias, then
// activation.
struct Epilogue {
  enum class Bias : uint8_t { kNone, kPerRow, kPerCol };
  Bias bias_kind = Bias::kNone;
  const float* bias = nullptr;  // M values (per row) or N values (per column)
  Activation act = Activation::kNone;
  float lo = 0.f;     // Clip min
  float hi = 0.f;     // Clip max
  float alpha = 0.f;  // LeakyRelu slope, HardSigmoid alpha
  float beta = 0.f;   // HardSigmoid beta

  bool empty() const { return bias_kind == Bias::kNone && act == Activation::kNone; }
};

// What products of a packed constant multiply in (see above): fp32, bf16 pairs into fp32 sums, or fp16 pairs into
// short fp16 sums added in fp32.
enum class Products : uint8_t { kFp32, kBf16, kFp16 };
// The products this CPU computes when `asked` for: kFp32 where it lacks the instructions.
Products products_here(Products asked);
// The products worth computing when `asked` for: products_here(asked), unless those measure no faster than fp32
// ones on this machine (timed once per process: a 64 x 384 x 768 product with B packed each way, best of 7 on one
// thread, the narrow one kept where it takes under 0.95 of the fp32 time). A bf16 dot product runs at half the rate
// of an fp32 FMA on some CPUs that have it: products of the same operands in fp32 are then faster and exact.
Products products_worth(Products asked);
// The products a precision's name asks for ("bf16", "fp16"; anything else fp32).
Products products_named(std::string_view precision);

// Register-tile and block sizes of the micro-kernel this process runs, and its
// instruction set ("avx512" or "avx2", chosen at run time: gemm_isa.h).
const char* gemm_isa_name();
int gemm_mr();
int gemm_nr();
int64_t gemm_kc();
// Rows per panel of an A packed wide (PackConstantAWide), or 0 where this instruction set has no wide kernel.
int gemm_wide_rows();

// An operand packed once in the micro-kernel's panel layout. Immutable after
// creation; copies share storage.
class PackedMatrix {
 public:
  enum class Side : uint8_t { kA, kB };
  PackedMatrix() = default;

  // op(A) is M x K; op(A) = A (M x K, row stride lda) or A^T (A is K x M).
  static PackedMatrix PackA(const float* a, int64_t lda, bool trans, int64_t m, int64_t k);
  // op(B) is K x N; op(B) = B (K x N, row stride ldb) or B^T (B is N x K).
  static PackedMatrix PackB(const float* b, int64_t ldb, bool trans, int64_t k, int64_t n);
  // The same for a model's constant (weights), shared: every kernel that packs the same values the same way (the
  // plans one session builds for its input shapes) gets one copy, which lives while one of them holds it.
  // products: packed for bf16 or fp16 products where the CPU can (see above; products_here), else in fp32.
  static PackedMatrix PackConstantA(const float* a, int64_t lda, bool trans, int64_t m, int64_t k,
                                    Products products = Products::kFp32);
  static PackedMatrix PackConstantB(const float* b, int64_t ldb, bool trans, int64_t k, int64_t n,
                                    Products products = Products::kFp32);
  // A constant A packed wide, for products with a B read in place (GemmB::offsets: convolutions by rows): panels of
  // gemm_wide_rows() rows, K whole, so that the kernel keeps output channels in its vectors and broadcasts B's
  // values, which it reads without splitting a cache line, and sums all of K before it stores. Empty where
  // gemm_wide_rows() is 0. Shared like PackConstantA.
  static PackedMatrix PackConstantAWide(const float* a, int64_t lda, bool trans, int64_t m, int64_t k);

  bool empty() const { return data_ == nullptr; }
  Side side() const { return side_; }
  int64_t rows() const { return rows_; }  // M for A, K for B
  int64_t cols() const { return cols_; }  // K for A, N for B
  int64_t padded() const { return padded_; }  // M or N rounded up to whole panels
  Products products() const { return products_; }
  bool pairs() const { return products_ != Products::kFp32; }  // bf16 or fp16 pairs, not floats
  bool wide() const { return wide_; }         // A packed wide (PackConstantAWide)
  const float* data() const { return data_.get(); }
  const std::shared_ptr<float>& shared_data() const { return data_; }
  size_t bytes() const;
  // For the packers of each instruction set (gemm_impl.inc).
  static PackedMatrix Make(Side side, int64_t rows, int64_t cols, int64_t padded, std::shared_ptr<float> data,
                           Products products = Products::kFp32, bool wide = false);

 private:
  Products products_ = Products::kFp32;
  bool wide_ = false;
  Side side_ = Side::kA;
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  int64_t padded_ = 0;
  std::shared_ptr<float> data_;
};

// Produces packed blocks of op(B) on demand.
class BPackSource {
 public:
  virtual ~BPackSource() = default;
  // Writes rows [k0, k0+kc) and columns [n0, n0+nc) of op(B) into `dst` as
  // ceil(nc/NR) panels; panel p (columns n0+p*NR ...) is kc rows of NR floats
  // starting at dst + p*NR*kc. Columns past nc in the last panel must be zero.
  // n0 is a multiple of NR. Called concurrently from several threads.
  virtual void pack(int64_t k0, int64_t kc, int64_t n0, int64_t nc, float* dst) const = 0;
};

// Operand descriptions: exactly one of data/packed (/source for B) is set.
struct GemmA {
  const float* data = nullptr;
  int64_t ld = 0;
  bool trans = false;
  const PackedMatrix* packed = nullptr;
  int64_t row0 = 0;  // with packed: op(A) starts at this row of it (a multiple of panel_rows; rows_of)
};

// Rows [r0, r0 + m) of op(A) as an operand of their own; r0 a multiple of panel_rows(a) when `a` is packed.
GemmA rows_of(const GemmA& a, int64_t r0);
// The rows of one panel of a packed A: gemm_mr(), or gemm_wide_rows() for one packed wide.
int64_t panel_rows(const GemmA& a);
struct GemmB {
  const float* data = nullptr;
  int64_t ld = 0;
  bool trans = false;
  const PackedMatrix* packed = nullptr;
  const BPackSource* source = nullptr;
  // B read in place by rows (with data set; ld and trans unused): op(B)[k][j] = data[offsets[k] + j]. The columns
  // j come in rows of `span`, of which the first `valid` are results: column j = r * span + q is stored in C at
  // column r * valid + q when q < valid, and not at all otherwise (n counts every column, those not stored too, up
  // to the last one stored). Reads may run up to gemm_nr() - 1 floats past data[offsets[k] + n - 1]. A per-column
  // bias is not supported with it. An A packed wide needs a B read so. A convolution reads its padded input so
  // (conv_im2col.h: conv_by_rows).
  const int64_t* offsets = nullptr;
  int64_t span = 0;
  int64_t valid = 0;
};

// The general entry point. `pool` may be null (single-threaded); inside a
// parallel region the pool runs inline, so callers may parallelise over
// batches and call gemm per item. `products`: what a product of two operands
// neither of which is packed multiplies in, where the CPU can (products_here;
// both are rounded as their blocks are packed); a packed operand decides for
// itself.
void gemm(Parallel* pool, int64_t m, int64_t n, int64_t k, float alpha, const GemmA& a, const GemmB& b, float beta,
          float* c, int64_t ldc, const Epilogue& ep = {}, Products products = Products::kFp32);

// BLAS-like convenience wrapper.
void sgemm(Parallel* pool, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
           const Epilogue& ep = {});

// Applies an epilogue to an M x N row-major matrix in place (for kernels that
// compute outside gemm, e.g. depthwise convolution).
void apply_epilogue(const Epilogue& ep, int64_t m, int64_t n, float* c, int64_t ldc);
// Applies only the activation of `ep` to `n` contiguous values.
void apply_activation(const Epilogue& ep, float* x, int64_t n);

}  // namespace tessera::kernels
