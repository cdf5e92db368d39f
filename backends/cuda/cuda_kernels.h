// Tessera's own CUDA kernels for the cuda plugin (cuda_kernels.cu): what
// cuBLASLt and cuDNN do not do. Every function enqueues its work on `stream`
// and returns the launch's error (cudaSuccess, or what cudaGetLastError says
// after the launch); nothing here synchronizes. Pointers are device pointers;
// float data is float32 unless a parameter says otherwise. Element counts are
// int64; a launch with nothing to do enqueues nothing and succeeds.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tessera_cuda {

constexpr int kMaxRank = 8;
constexpr int kMaxOperands = 8;
constexpr int kMaxChainOps = 16;

// ---- elementwise chains ---------------------------------------------------
//
// out[i] = op_k(... op_1(op_0(operand_0[i])) ...), where each op is unary, or
// binary with another operand. Every operand is read through its own element
// strides in the output's index space (0 along a broadcast dim), so one
// kernel covers numpy broadcasting. An operand may be the output buffer only
// when it is operand 0 and its strides are the output's own.

enum ChainCode : int32_t {
  // binary: v = v (op) x, or x (op) v when ChainOp::swap is set; x = operand value
  kAdd = 0,
  kSub,
  kMul,
  kDiv,
  kPow,
  kMax,
  kMin,
  kPRelu,  // v < 0 ? v * x : v (swap ignored)
  // unary (ChainOp::operand is -1)
  kRelu = 32,
  kSigmoid,
  kTanh,
  kExp,
  kLog,
  kSqrt,
  kNeg,
  kAbs,
  kErf,
  kGeluErf,      // 0.5 v (1 + erf(v / sqrt 2))
  kGeluTanh,     // 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3)))
  kLeakyRelu,    // alpha
  kClip,         // min alpha, max beta
  kHardSigmoid,  // max(0, min(1, alpha v + beta))
  kHardSwish,    // v * max(0, min(1, v / 6 + 1 / 2))
  kSoftplus,
  kReciprocal,
  kFloor,
  kCeil,
  kSin,
  kCos,
  kElu,   // alpha
  kSelu,  // alpha, beta = gamma
  kSign,
  kRound,  // Round: half to even
  kSoftsign,
  kMish,
  kAffine,  // alpha v + beta
};

struct ChainOp {
  int32_t code = kAdd;
  int32_t operand = -1;  // operand index for a binary op, -1 for a unary one
  int32_t swap = 0;      // binary: the operand is the left-hand side
  float alpha = 0, beta = 0;
};

struct Chain {
  int32_t rank = 0;             // of the output, <= kMaxRank (0 = scalar)
  int64_t dims[kMaxRank] = {};  // output dims
  int32_t num_operands = 0;     // >= 1; operand 0 starts the chain
  const float* operands[kMaxOperands] = {};
  int64_t strides[kMaxOperands][kMaxRank] = {};  // element strides per output axis (0 = broadcast)
  int32_t num_ops = 0;                           // <= kMaxChainOps; 0 = a (broadcasting) copy of operand 0
  ChainOp ops[kMaxChainOps];
};

cudaError_t launch_chain(const Chain& chain, float* out, cudaStream_t stream);

// ---- data movement --------------------------------------------------------
//
// dst[dst_offset + sum_k i_k * dst_strides[k]] = src[src_offset + sum_k i_k * src_strides[k]]
// for every index i in dims (rank <= kMaxRank; strides and offsets in
// elements, a src stride may be 0 or negative). `elem_size` is 1, 2, 4 or 8.
// Serves Transpose, Slice, Concat (one call per input), Split, Expand, Tile.
struct StridedCopy {
  int32_t rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t src_strides[kMaxRank] = {};
  int64_t dst_strides[kMaxRank] = {};
  int64_t src_offset = 0, dst_offset = 0;
  int32_t elem_size = 4;
};
cudaError_t launch_strided_copy(const StridedCopy& c, const void* src, void* dst, cudaStream_t stream);

// out[o, j, i] = data[o, indices[j], i] for o < outer, j < num_indices, i < inner;
// a negative index counts from axis_len; indices out of range write 0 and set
// *bad_index (device int32, may be null) to 1. `elem_size` as above.
cudaError_t launch_gather(const void* data, const int64_t* indices, void* out, int64_t outer, int64_t axis_len,
                          int64_t inner, int64_t num_indices, int32_t elem_size, int32_t* bad_index,
                          cudaStream_t stream);

// ---- normalisations and reductions ---------------------------------------

// Softmax over the middle axis of x viewed as [outer, len, inner]; `log`
// gives LogSoftmax. Max-subtracted, accumulated in float.
cudaError_t launch_softmax(const float* x, float* y, int64_t outer, int64_t len, int64_t inner, bool log,
                           cudaStream_t stream);

// LayerNormalization over the last `cols` elements of each of `rows` rows:
// y = (x - mean) / sqrt(var + eps) * gamma + beta; gamma and beta (length
// cols) may be null (1 and 0). Statistics in float, two-pass or Welford.
cudaError_t launch_layernorm(const float* x, const float* gamma, const float* beta, float* y, int64_t rows,
                             int64_t cols, float eps, cudaStream_t stream);

enum ReduceCode : int32_t { kReduceSum = 0, kReduceMean, kReduceMax, kReduceMin, kReduceSumSquare, kReduceL2 };
// y[o, i] = reduce_j x[o, j, i] over x viewed as [outer, len, inner].
cudaError_t launch_reduce(const float* x, float* y, int64_t outer, int64_t len, int64_t inner, int32_t code,
                          cudaStream_t stream);

// ---- windows ----------------------------------------------------------------

enum PoolCode : int32_t { kPoolMax = 0, kPoolAvgIncludePad, kPoolAvgExcludePad };
// 2-D pooling over NCHW: y[n, c, oh, ow] from the window starting at
// (oh * stride_h - pad_top, ow * stride_w - pad_left) with dilations; padded
// positions are skipped (max) or counted per `code` (avg). The caller gives
// OH/OW (ceil_mode already applied); a window that holds no real position
// gives 0 for avg and -inf for max.
struct Pool2d {
  int64_t n = 0, c = 0, h = 0, w = 0, oh = 0, ow = 0;
  int32_t kh = 1, kw = 1, stride_h = 1, stride_w = 1, pad_top = 0, pad_left = 0, dil_h = 1, dil_w = 1;
  int32_t code = kPoolMax;
};
cudaError_t launch_pool2d(const Pool2d& p, const float* x, float* y, cudaStream_t stream);

// ONNX Resize over the last two axes of an NCHW tensor (N and C unscaled).
enum ResizeMode : int32_t { kResizeNearest = 0, kResizeLinear };
enum ResizeCoord : int32_t { kCoordHalfPixel = 0, kCoordAsymmetric, kCoordAlignCorners, kCoordPytorchHalfPixel };
enum ResizeNearest : int32_t { kNearestRoundPreferFloor = 0, kNearestRoundPreferCeil, kNearestFloor, kNearestCeil };
struct Resize2d {
  int64_t n = 0, c = 0, h = 0, w = 0, oh = 0, ow = 0;
  float scale_h = 1, scale_w = 1;  // output / input, as ONNX's scales (or oh / h when sizes were given)
  int32_t mode = kResizeNearest, coord = kCoordHalfPixel, nearest = kNearestRoundPreferFloor;
};
cudaError_t launch_resize2d(const Resize2d& r, const float* x, float* y, cudaStream_t stream);

// Fills n floats with `value`.
cudaError_t launch_fill(float* y, int64_t n, float value, cudaStream_t stream);

}  // namespace tessera_cuda
