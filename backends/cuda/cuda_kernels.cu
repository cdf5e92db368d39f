// Tessera's own CUDA kernels (see cuda_kernels.h). Written to be simple and
// obviously correct first: int64 indexing, grid-stride loops, one thread per
// output element for elementwise chains, copies, gathers, pools and resizes;
// one block per row with a warp-shuffle + shared-memory reduction for
// softmax, layernorm and reductions over contiguous rows, and a plain
// per-output loop over `len` when inner > 1.
//
// Numerics follow ONNX (and Tessera's CPU kernels in src/ops): accurate libm
// functions (expf, expm1f, log1pf, erff, erfcf, tanhf; never the __expf-style
// intrinsics; do not build with --use_fast_math), float accumulation.
#include "cuda_kernels.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>

namespace tessera_cuda {
namespace {

constexpr int kThreads = 256;                  // threads per block, every kernel
constexpr int64_t kMaxBlocks = 65535LL * 8LL;  // grid cap; kernels loop over the rest

int grid_for(int64_t n, int threads = kThreads) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > kMaxBlocks) b = kMaxBlocks;
  return static_cast<int>(b);
}

int rows_grid(int64_t rows) { return static_cast<int>(rows < kMaxBlocks ? rows : kMaxBlocks); }

__device__ __forceinline__ int64_t global_tid() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t grid_threads() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// ---- small float helpers ------------------------------------------------

__device__ __forceinline__ bool is_nan(float v) { return v != v; }

// Max/Min propagating NaN as numpy's maximum/minimum (and Tessera's CPU Max/Min).
__device__ __forceinline__ float max_nan(float a, float b) { return (a > b || is_nan(a)) ? a : b; }
__device__ __forceinline__ float min_nan(float a, float b) { return (a < b || is_nan(a)) ? a : b; }

// alpha * v + beta without contraction into an fma (as ONNX Runtime and the CPU kernels compute it).
__device__ __forceinline__ float affine_unfused(float v, float alpha, float beta) {
  return __fadd_rn(__fmul_rn(alpha, v), beta);
}

__device__ __forceinline__ float hard_sigmoid(float v, float alpha, float beta) {
  float r = affine_unfused(v, alpha, beta);
  r = r > 1.0f ? 1.0f : r;
  return r < 0.0f ? 0.0f : r;  // NaN passes through
}

// log(1 + exp(v)) without overflow: max(v, 0) + log1p(exp(-|v|)).
__device__ __forceinline__ float softplus(float v) { return (v > 0.0f ? v : 0.0f) + log1pf(expf(-fabsf(v))); }

__device__ __forceinline__ float sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }

__device__ float apply_unary(int32_t code, float v, float alpha, float beta) {
  switch (code) {
    case kRelu:
      return v < 0.0f ? 0.0f : v;  // NaN passes through
    case kSigmoid:
      return sigmoid(v);
    case kTanh:
      return tanhf(v);
    case kExp:
      return expf(v);
    case kLog:
      return logf(v);
    case kSqrt:
      return sqrtf(v);
    case kNeg:
      return -v;
    case kAbs:
      return fabsf(v);
    case kErf:
      return erff(v);
    // 0.5 v (1 + erf(v / sqrt 2)) = 0.5 v erfc(-v / sqrt 2): no cancellation for negative v.
    case kGeluErf:
      return 0.5f * v * erfcf(-v * 0.70710678118654752f);
    // 0.5 v (1 + tanh(y)) = v * sigmoid(2 y): no cancellation for negative v.
    case kGeluTanh: {
      float y = 0.7978845608028654f * (v + 0.044715f * v * v * v);
      return v / (1.0f + expf(-2.0f * y));
    }
    case kLeakyRelu:
      return v < 0.0f ? alpha * v : v;
    case kClip: {  // NaN passes through; min wins over max when min > max is not a concern here (ONNX leaves it)
      float r = v < alpha ? alpha : v;
      return r > beta ? beta : r;
    }
    case kHardSigmoid:
      return hard_sigmoid(v, alpha, beta);
    case kHardSwish:
      return v * hard_sigmoid(v, 1.0f / 6.0f, 0.5f);
    case kSoftplus:
      return softplus(v);
    case kReciprocal:
      return 1.0f / v;
    case kFloor:
      return floorf(v);
    case kCeil:
      return ceilf(v);
    case kSin:
      return sinf(v);
    case kCos:
      return cosf(v);
    case kElu:
      return v < 0.0f ? alpha * expm1f(v) : v;
    case kSelu:
      return beta * (v <= 0.0f ? alpha * expm1f(v) : v);
    case kSign:
      return v > 0.0f ? 1.0f : (v < 0.0f ? -1.0f : (v == 0.0f ? 0.0f : v));  // Sign(0) = 0, NaN -> NaN
    case kRound:
      return rintf(v);  // half to even (default rounding mode)
    case kSoftsign:
      return v / (1.0f + fabsf(v));
    case kMish:
      return v * tanhf(softplus(v));
    case kAffine:
      return affine_unfused(v, alpha, beta);
    default:
      return v;
  }
}

__device__ float apply_binary(int32_t code, float v, float x, bool swap) {
  if (code == kPRelu) return v < 0.0f ? v * x : v;
  const float a = swap ? x : v, b = swap ? v : x;
  switch (code) {
    case kAdd:
      return a + b;
    case kSub:
      return a - b;
    case kMul:
      return a * b;
    case kDiv:
      return a / b;
    case kPow:
      return powf(a, b);
    case kMax:
      return max_nan(a, b);
    case kMin:
      return min_nan(a, b);
    default:
      return v;
  }
}

// ---- elementwise chains -------------------------------------------------------

enum OperandKind : int32_t { kOperandContiguous = 0, kOperandScalar = 1, kOperandGeneral = 2 };

struct ChainArgs {
  Chain chain;
  int32_t kind[kMaxOperands];
  int32_t any_general;
  int64_t n;
};
static_assert(sizeof(Chain) < 4000, "Chain must fit in the kernel parameter space");
static_assert(sizeof(ChainArgs) < 4000, "ChainArgs must fit in the kernel parameter space");

__global__ void __launch_bounds__(kThreads) chain_kernel(const ChainArgs a, float* __restrict__ out) {
  const Chain& c = a.chain;
  const int rank = c.rank;
  const int nops = c.num_operands;
  for (int64_t i = global_tid(); i < a.n; i += grid_threads()) {
    // The output's multi-index, only when some operand has general strides.
    int64_t idx[kMaxRank];
#pragma unroll
    for (int d = 0; d < kMaxRank; ++d) idx[d] = 0;
    if (a.any_general) {
      int64_t rem = i;
#pragma unroll
      for (int d = kMaxRank - 1; d >= 0; --d) {
        if (d < rank) {
          const int64_t dim = c.dims[d];
          idx[d] = rem % dim;
          rem /= dim;
        }
      }
    }
    // Every operand's value at this element, held in registers.
    float vals[kMaxOperands];
#pragma unroll
    for (int k = 0; k < kMaxOperands; ++k) {
      vals[k] = 0.0f;
      if (k < nops) {
        int64_t off;
        if (a.kind[k] == kOperandContiguous) {
          off = i;
        } else if (a.kind[k] == kOperandScalar) {
          off = 0;
        } else {
          off = 0;
#pragma unroll
          for (int d = 0; d < kMaxRank; ++d) {
            if (d < rank) off += idx[d] * c.strides[k][d];
          }
        }
        vals[k] = c.operands[k][off];
      }
    }
    float v = vals[0];
    for (int j = 0; j < c.num_ops; ++j) {
      const ChainOp op = c.ops[j];
      if (op.operand >= 0) {
        float x = 0.0f;
#pragma unroll
        for (int k = 0; k < kMaxOperands; ++k) {
          if (k == op.operand) x = vals[k];
        }
        v = apply_binary(op.code, v, x, op.swap != 0);
      } else {
        v = apply_unary(op.code, v, op.alpha, op.beta);
      }
    }
    out[i] = v;
  }
}

// ---- data movement --------------------------------------------------------

template <class T>
__global__ void __launch_bounds__(kThreads)
    strided_copy_kernel(const StridedCopy c, int64_t n, const T* __restrict__ src, T* __restrict__ dst) {
  const int rank = c.rank;
  for (int64_t i = global_tid(); i < n; i += grid_threads()) {
    int64_t rem = i;
    int64_t so = c.src_offset, d_o = c.dst_offset;
#pragma unroll
    for (int d = kMaxRank - 1; d >= 0; --d) {
      if (d < rank) {
        const int64_t dim = c.dims[d];
        const int64_t id = rem % dim;
        rem /= dim;
        so += id * c.src_strides[d];
        d_o += id * c.dst_strides[d];
      }
    }
    dst[d_o] = src[so];
  }
}

// True when `strides` are the row-major contiguous strides of dims (dims of
// extent 1 may have any stride).
bool is_contiguous(int rank, const int64_t* dims, const int64_t* strides) {
  int64_t expect = 1;
  for (int d = rank - 1; d >= 0; --d) {
    if (dims[d] != 1 && strides[d] != expect) return false;
    expect *= dims[d];
  }
  return true;
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    gather_kernel(const T* __restrict__ data, const int64_t* __restrict__ indices, T* __restrict__ out, int64_t outer,
                  int64_t axis_len, int64_t inner, int64_t num_indices, int32_t* bad_index) {
  const int64_t n = outer * num_indices * inner;
  for (int64_t e = global_tid(); e < n; e += grid_threads()) {
    const int64_t i = e % inner;
    const int64_t t = e / inner;
    const int64_t j = t % num_indices;
    const int64_t o = t / num_indices;
    int64_t k = indices[j];
    if (k < 0) k += axis_len;
    if (k < 0 || k >= axis_len) {
      out[e] = T(0);
      if (bad_index != nullptr) *bad_index = 1;
    } else {
      out[e] = data[(o * axis_len + k) * inner + i];
    }
  }
}

// ---- block reductions -----------------------------------------------------

struct SumOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return max_nan(a, b); }
};
struct MinOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return min_nan(a, b); }
};
// Max that ignores NaN (fmaxf): softmax's row maximum; a NaN input still turns its row to NaN through exp.
struct MaxIgnoreNanOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

template <class Op>
__device__ __forceinline__ float warp_reduce(float v, Op op) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// Reduces v over the block (blockDim.x a multiple of 32, at most 1024) and
// returns the result to every thread. `sh` holds 33 floats; calls may follow
// each other directly (the leading barrier protects the previous result).
template <class Op>
__device__ float block_reduce(float v, Op op, float identity, float* sh) {
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
  const int nwarps = (blockDim.x + 31) >> 5;
  v = warp_reduce(v, op);
  __syncthreads();
  if (lane == 0) sh[wid] = v;
  __syncthreads();
  if (wid == 0) {
    float w = lane < nwarps ? sh[lane] : identity;
    w = warp_reduce(w, op);
    if (lane == 0) sh[32] = w;
  }
  __syncthreads();
  return sh[32];
}

// ---- softmax ------------------------------------------------------------------

__global__ void __launch_bounds__(kThreads)
    softmax_rows_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t rows, int64_t len, bool log) {
  __shared__ float sh[33];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * len;
    float* yr = y + r * len;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) m = fmaxf(m, xr[j]);
    m = block_reduce(m, MaxIgnoreNanOp{}, -INFINITY, sh);
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) s += expf(xr[j] - m);
    s = block_reduce(s, SumOp{}, 0.0f, sh);
    if (log) {
      const float ls = logf(s);
      for (int64_t j = threadIdx.x; j < len; j += blockDim.x) yr[j] = (xr[j] - m) - ls;
    } else {
      for (int64_t j = threadIdx.x; j < len; j += blockDim.x) yr[j] = expf(xr[j] - m) / s;
    }
  }
}

__global__ void __launch_bounds__(kThreads)
    softmax_strided_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t outer, int64_t len,
                           int64_t inner, bool log) {
  const int64_t n = outer * inner;
  for (int64_t t = global_tid(); t < n; t += grid_threads()) {
    const int64_t o = t / inner, i = t % inner;
    const float* xp = x + o * len * inner + i;
    float* yp = y + o * len * inner + i;
    float m = -INFINITY;
    for (int64_t j = 0; j < len; ++j) m = fmaxf(m, xp[j * inner]);
    float s = 0.0f;
    for (int64_t j = 0; j < len; ++j) s += expf(xp[j * inner] - m);
    if (log) {
      const float ls = logf(s);
      for (int64_t j = 0; j < len; ++j) yp[j * inner] = (xp[j * inner] - m) - ls;
    } else {
      for (int64_t j = 0; j < len; ++j) yp[j * inner] = expf(xp[j * inner] - m) / s;
    }
  }
}

// ---- layer normalization ------------------------------------------------------

__global__ void __launch_bounds__(kThreads)
    layernorm_kernel(const float* __restrict__ x, const float* __restrict__ gamma, const float* __restrict__ beta,
                     float* __restrict__ y, int64_t rows, int64_t cols, float eps) {
  __shared__ float sh[33];
  const float inv_cols = 1.0f / static_cast<float>(cols);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += xr[j];
    const float mean = block_reduce(s, SumOp{}, 0.0f, sh) * inv_cols;
    float q = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float d = xr[j] - mean;
      q += d * d;
    }
    const float var = block_reduce(q, SumOp{}, 0.0f, sh) * inv_cols;
    const float rstd = 1.0f / sqrtf(var + eps);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      float v = (xr[j] - mean) * rstd;
      if (gamma != nullptr) v *= gamma[j];
      if (beta != nullptr) v += beta[j];
      yr[j] = v;
    }
  }
}

// ---- reductions ---------------------------------------------------------------

// The reduction of a [len] line read with stride `step`, by one thread.
__device__ float reduce_line(const float* p, int64_t len, int64_t step, int32_t code) {
  switch (code) {
    case kReduceMax: {
      float m = -INFINITY;
      for (int64_t j = 0; j < len; ++j) m = max_nan(m, p[j * step]);
      return m;
    }
    case kReduceMin: {
      float m = INFINITY;
      for (int64_t j = 0; j < len; ++j) m = min_nan(m, p[j * step]);
      return m;
    }
    case kReduceSumSquare:
    case kReduceL2: {
      float s = 0.0f;
      for (int64_t j = 0; j < len; ++j) {
        const float v = p[j * step];
        s += v * v;
      }
      return code == kReduceL2 ? sqrtf(s) : s;
    }
    default: {  // kReduceSum, kReduceMean
      float s = 0.0f;
      for (int64_t j = 0; j < len; ++j) s += p[j * step];
      return code == kReduceMean ? s / static_cast<float>(len) : s;  // len 0: 0/0 = NaN for mean
    }
  }
}

__global__ void __launch_bounds__(kThreads)
    reduce_rows_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t rows, int64_t len, int32_t code) {
  __shared__ float sh[33];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * len;
    float res;
    if (code == kReduceMax) {
      float m = -INFINITY;
      for (int64_t j = threadIdx.x; j < len; j += blockDim.x) m = max_nan(m, xr[j]);
      res = block_reduce(m, MaxOp{}, -INFINITY, sh);
    } else if (code == kReduceMin) {
      float m = INFINITY;
      for (int64_t j = threadIdx.x; j < len; j += blockDim.x) m = min_nan(m, xr[j]);
      res = block_reduce(m, MinOp{}, INFINITY, sh);
    } else if (code == kReduceSumSquare || code == kReduceL2) {
      float s = 0.0f;
      for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
        const float v = xr[j];
        s += v * v;
      }
      res = block_reduce(s, SumOp{}, 0.0f, sh);
      if (code == kReduceL2) res = sqrtf(res);
    } else {
      float s = 0.0f;
      for (int64_t j = threadIdx.x; j < len; j += blockDim.x) s += xr[j];
      res = block_reduce(s, SumOp{}, 0.0f, sh);
      if (code == kReduceMean) res = res / static_cast<float>(len);
    }
    if (threadIdx.x == 0) y[r] = res;
  }
}

__global__ void __launch_bounds__(kThreads)
    reduce_strided_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t outer, int64_t len, int64_t inner,
                          int32_t code) {
  const int64_t n = outer * inner;
  for (int64_t t = global_tid(); t < n; t += grid_threads()) {
    const int64_t o = t / inner, i = t % inner;
    y[t] = reduce_line(x + o * len * inner + i, len, inner, code);
  }
}

// ---- pooling ------------------------------------------------------------------

// Average pooling with count_include_pad divides by the number of window
// positions inside the padded input, i.e. the window clipped to
// [-pad_top, h + pad_top) x [-pad_left, w + pad_left): a ceil_mode window
// that runs past the padded extent does not count its overhang (as ONNX
// Runtime and the reference). Pool2d carries no bottom/right pads, so this
// assumes symmetric pads (pad_bottom == pad_top, pad_right == pad_left),
// which the plugin guarantees before it calls launch_pool2d.
__global__ void __launch_bounds__(kThreads)
    pool2d_kernel(const Pool2d p, const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  for (int64_t e = global_tid(); e < n; e += grid_threads()) {
    const int64_t ow = e % p.ow;
    int64_t t = e / p.ow;
    const int64_t oh = t % p.oh;
    const int64_t plane = t / p.oh;  // n * c + c
    const float* xp = x + plane * p.h * p.w;
    const int64_t h0 = oh * p.stride_h - p.pad_top;
    const int64_t w0 = ow * p.stride_w - p.pad_left;
    float acc = p.code == kPoolMax ? -INFINITY : 0.0f;
    int64_t real = 0, padded = 0;
    for (int ki = 0; ki < p.kh; ++ki) {
      const int64_t ih = h0 + static_cast<int64_t>(ki) * p.dil_h;
      const bool h_in = ih >= 0 && ih < p.h;
      const bool h_pad = ih >= -p.pad_top && ih < p.h + p.pad_top;
      for (int kj = 0; kj < p.kw; ++kj) {
        const int64_t iw = w0 + static_cast<int64_t>(kj) * p.dil_w;
        const bool w_in = iw >= 0 && iw < p.w;
        const bool w_pad = iw >= -p.pad_left && iw < p.w + p.pad_left;
        if (h_pad && w_pad) ++padded;
        if (h_in && w_in) {
          ++real;
          const float v = xp[ih * p.w + iw];
          if (p.code == kPoolMax) {
            acc = acc < v ? v : acc;  // as std::max(acc, v)
          } else {
            acc += v;
          }
        }
      }
    }
    float r;
    if (p.code == kPoolMax) {
      r = acc;  // -inf when the window holds no real position
    } else if (real == 0) {
      r = 0.0f;
    } else {
      const int64_t div = p.code == kPoolAvgIncludePad ? padded : real;
      r = acc / static_cast<float>(div);
    }
    y[e] = r;
  }
}

// ---- resize ---------------------------------------------------------------------

// The input coordinate of output position `o` along one axis, in double as
// the CPU kernel and the ONNX reference compute it. As in the reference, the
// "output length" in align_corners and pytorch_half_pixel is scale * in
// (which equals the output size when sizes were given).
__device__ double resize_coord(int64_t o, double scale, int64_t in, int32_t coord) {
  const double xr = static_cast<double>(o);
  const double in_len = static_cast<double>(in);
  const double out_len = scale * in_len;
  switch (coord) {
    case kCoordAsymmetric:
      return xr / scale;
    case kCoordAlignCorners:
      return out_len == 1.0 ? 0.0 : xr * (in_len - 1.0) / (out_len - 1.0);
    case kCoordPytorchHalfPixel:
      return out_len > 1.0 ? (xr + 0.5) / scale - 0.5 : 0.0;
    default:
      return (xr + 0.5) / scale - 0.5;  // kCoordHalfPixel
  }
}

__device__ __forceinline__ int64_t clamp_index(int64_t i, int64_t in) { return i < 0 ? 0 : (i >= in ? in - 1 : i); }

__device__ int64_t nearest_index(double x, int64_t in, int32_t mode) {
  const double fl = floor(x);
  const double ratio = x - fl;
  int64_t n = static_cast<int64_t>(fl);
  if (ratio != 0.0) {
    switch (mode) {
      case kNearestRoundPreferCeil:
        n = ratio < 0.5 ? n : n + 1;
        break;
      case kNearestFloor:
        break;
      case kNearestCeil:
        n = n + 1;
        break;
      default:
        n = ratio <= 0.5 ? n : n + 1;
        break;  // kNearestRoundPreferFloor
    }
  }
  return clamp_index(n, in);
}

__global__ void __launch_bounds__(kThreads)
    resize2d_kernel(const Resize2d r, const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const double sh = static_cast<double>(r.scale_h), sw = static_cast<double>(r.scale_w);
  for (int64_t e = global_tid(); e < n; e += grid_threads()) {
    const int64_t ow = e % r.ow;
    int64_t t = e / r.ow;
    const int64_t oh = t % r.oh;
    const int64_t plane = t / r.oh;
    const float* xp = x + plane * r.h * r.w;
    const double yh = resize_coord(oh, sh, r.h, r.coord);
    const double xw = resize_coord(ow, sw, r.w, r.coord);
    float v;
    if (r.mode == kResizeNearest) {
      v = xp[nearest_index(yh, r.h, r.nearest) * r.w + nearest_index(xw, r.w, r.nearest)];
    } else {
      // Linear: neighbours floor(x) and floor(x) + 1 clamped to the input (edge
      // replication), weights from the fractional part of the unclamped x;
      // the same as clamping x to [0, in - 1] first.
      const double fh = floor(yh), fw = floor(xw);
      const float rh = static_cast<float>(yh - fh), rw = static_cast<float>(xw - fw);
      const int64_t h0 = clamp_index(static_cast<int64_t>(fh), r.h),
                    h1 = clamp_index(static_cast<int64_t>(fh) + 1, r.h);
      const int64_t w0 = clamp_index(static_cast<int64_t>(fw), r.w),
                    w1 = clamp_index(static_cast<int64_t>(fw) + 1, r.w);
      const float a = xp[h0 * r.w + w0], b = xp[h0 * r.w + w1];
      const float c = xp[h1 * r.w + w0], d = xp[h1 * r.w + w1];
      const float top = (1.0f - rw) * a + rw * b;
      const float bot = (1.0f - rw) * c + rw * d;
      v = (1.0f - rh) * top + rh * bot;
    }
    y[e] = v;
  }
}

// ---- fill -------------------------------------------------------------------------

__global__ void __launch_bounds__(kThreads) fill_kernel(float* __restrict__ y, int64_t n, float value) {
  for (int64_t i = global_tid(); i < n; i += grid_threads()) y[i] = value;
}

}  // namespace

// ===== launchers ===================================================================

cudaError_t launch_chain(const Chain& chain, float* out, cudaStream_t stream) {
  if (chain.rank < 0 || chain.rank > kMaxRank || chain.num_operands < 1 || chain.num_operands > kMaxOperands ||
      chain.num_ops < 0 || chain.num_ops > kMaxChainOps) {
    return cudaErrorInvalidValue;
  }
  int64_t n = 1;
  for (int d = 0; d < chain.rank; ++d) n *= chain.dims[d];
  if (n <= 0) return cudaSuccess;
  ChainArgs a;
  std::memcpy(&a.chain, &chain, sizeof(Chain));
  a.n = n;
  a.any_general = 0;
  int64_t contig[kMaxRank] = {};
  {
    int64_t s = 1;
    for (int d = chain.rank - 1; d >= 0; --d) {
      contig[d] = s;
      s *= chain.dims[d];
    }
  }
  for (int k = 0; k < kMaxOperands; ++k) {
    a.kind[k] = kOperandContiguous;
    if (k >= chain.num_operands) continue;
    // Axes of extent 1 contribute nothing to an offset whatever their stride.
    bool same = true, zero = true;
    for (int d = 0; d < chain.rank; ++d) {
      if (chain.dims[d] == 1) continue;
      const int64_t st = chain.strides[k][d];
      if (st != 0) zero = false;
      if (st != contig[d]) same = false;
    }
    if (zero) {
      a.kind[k] = kOperandScalar;
    } else if (same) {
      a.kind[k] = kOperandContiguous;
    } else {
      a.kind[k] = kOperandGeneral;
      a.any_general = 1;
    }
  }
  chain_kernel<<<grid_for(n), kThreads, 0, stream>>>(a, out);
  return cudaGetLastError();
}

cudaError_t launch_strided_copy(const StridedCopy& c, const void* src, void* dst, cudaStream_t stream) {
  if (c.rank < 0 || c.rank > kMaxRank) return cudaErrorInvalidValue;
  int64_t n = 1;
  for (int d = 0; d < c.rank; ++d) n *= c.dims[d];
  if (n <= 0) return cudaSuccess;
  const int64_t es = c.elem_size;
  if (es != 1 && es != 2 && es != 4 && es != 8) return cudaErrorInvalidValue;
  if (is_contiguous(c.rank, c.dims, c.src_strides) && is_contiguous(c.rank, c.dims, c.dst_strides)) {
    const char* s = static_cast<const char*>(src) + c.src_offset * es;
    char* d = static_cast<char*>(dst) + c.dst_offset * es;
    return cudaMemcpyAsync(d, s, static_cast<size_t>(n * es), cudaMemcpyDeviceToDevice, stream);
  }
  const int g = grid_for(n);
  switch (es) {
    case 1:
      strided_copy_kernel<uint8_t>
          <<<g, kThreads, 0, stream>>>(c, n, static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst));
      break;
    case 2:
      strided_copy_kernel<uint16_t>
          <<<g, kThreads, 0, stream>>>(c, n, static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst));
      break;
    case 4:
      strided_copy_kernel<uint32_t>
          <<<g, kThreads, 0, stream>>>(c, n, static_cast<const uint32_t*>(src), static_cast<uint32_t*>(dst));
      break;
    default:
      strided_copy_kernel<uint64_t>
          <<<g, kThreads, 0, stream>>>(c, n, static_cast<const uint64_t*>(src), static_cast<uint64_t*>(dst));
      break;
  }
  return cudaGetLastError();
}

cudaError_t launch_gather(const void* data, const int64_t* indices, void* out, int64_t outer, int64_t axis_len,
                          int64_t inner, int64_t num_indices, int32_t elem_size, int32_t* bad_index,
                          cudaStream_t stream) {
  if (outer <= 0 || inner <= 0 || num_indices <= 0) return cudaSuccess;
  const int64_t n = outer * num_indices * inner;
  const int g = grid_for(n);
  switch (elem_size) {
    case 1:
      gather_kernel<uint8_t><<<g, kThreads, 0, stream>>>(static_cast<const uint8_t*>(data), indices,
                                                         static_cast<uint8_t*>(out), outer, axis_len, inner,
                                                         num_indices, bad_index);
      break;
    case 2:
      gather_kernel<uint16_t><<<g, kThreads, 0, stream>>>(static_cast<const uint16_t*>(data), indices,
                                                          static_cast<uint16_t*>(out), outer, axis_len, inner,
                                                          num_indices, bad_index);
      break;
    case 4:
      gather_kernel<uint32_t><<<g, kThreads, 0, stream>>>(static_cast<const uint32_t*>(data), indices,
                                                          static_cast<uint32_t*>(out), outer, axis_len, inner,
                                                          num_indices, bad_index);
      break;
    case 8:
      gather_kernel<uint64_t><<<g, kThreads, 0, stream>>>(static_cast<const uint64_t*>(data), indices,
                                                          static_cast<uint64_t*>(out), outer, axis_len, inner,
                                                          num_indices, bad_index);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t launch_softmax(const float* x, float* y, int64_t outer, int64_t len, int64_t inner, bool log,
                           cudaStream_t stream) {
  if (outer <= 0 || len <= 0 || inner <= 0) return cudaSuccess;
  if (inner == 1) {
    softmax_rows_kernel<<<rows_grid(outer), kThreads, 0, stream>>>(x, y, outer, len, log);
  } else {
    softmax_strided_kernel<<<grid_for(outer * inner), kThreads, 0, stream>>>(x, y, outer, len, inner, log);
  }
  return cudaGetLastError();
}

cudaError_t launch_layernorm(const float* x, const float* gamma, const float* beta, float* y, int64_t rows,
                             int64_t cols, float eps, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  layernorm_kernel<<<rows_grid(rows), kThreads, 0, stream>>>(x, gamma, beta, y, rows, cols, eps);
  return cudaGetLastError();
}

cudaError_t launch_reduce(const float* x, float* y, int64_t outer, int64_t len, int64_t inner, int32_t code,
                          cudaStream_t stream) {
  if (outer <= 0 || inner <= 0) return cudaSuccess;
  if (code < kReduceSum || code > kReduceL2) return cudaErrorInvalidValue;
  if (len < 0) return cudaErrorInvalidValue;
  // len == 0 takes the strided kernel, whose empty loops give the identities:
  // 0 for Sum/SumSquare/L2, NaN (0/0) for Mean, -inf for Max, +inf for Min.
  if (inner == 1 && len > 0) {
    reduce_rows_kernel<<<rows_grid(outer), kThreads, 0, stream>>>(x, y, outer, len, code);
  } else {
    reduce_strided_kernel<<<grid_for(outer * inner), kThreads, 0, stream>>>(x, y, outer, len, inner, code);
  }
  return cudaGetLastError();
}

cudaError_t launch_pool2d(const Pool2d& p, const float* x, float* y, cudaStream_t stream) {
  const int64_t n = p.n * p.c * p.oh * p.ow;
  if (p.n <= 0 || p.c <= 0 || p.oh <= 0 || p.ow <= 0) return cudaSuccess;
  if (p.code < kPoolMax || p.code > kPoolAvgExcludePad) return cudaErrorInvalidValue;
  pool2d_kernel<<<grid_for(n), kThreads, 0, stream>>>(p, x, y, n);
  return cudaGetLastError();
}

cudaError_t launch_resize2d(const Resize2d& r, const float* x, float* y, cudaStream_t stream) {
  const int64_t n = r.n * r.c * r.oh * r.ow;
  if (r.n <= 0 || r.c <= 0 || r.oh <= 0 || r.ow <= 0) return cudaSuccess;
  if (r.h <= 0 || r.w <= 0) return cudaErrorInvalidValue;
  resize2d_kernel<<<grid_for(n), kThreads, 0, stream>>>(r, x, y, n);
  return cudaGetLastError();
}

cudaError_t launch_fill(float* y, int64_t n, float value, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  fill_kernel<<<grid_for(n), kThreads, 0, stream>>>(y, n, value);
  return cudaGetLastError();
}

}  // namespace tessera_cuda
