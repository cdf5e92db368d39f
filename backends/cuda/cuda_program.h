// A region lowered for the GPU: values (where each lives) and steps (what is
// enqueued, in order). Made by Lowering (cuda_lower.cc, cuda_lower_tensor.cc)
// from the region model, at compile (to validate), at load (to run) and at
// estimate (to price). The program holds no data: device constants name the
// initializers (or derive from them, as BatchNormalization's scale and shift)
// and are uploaded by the engine at load.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cuda_kernels.h"
#include "plugin_util.h"

namespace tessera_cuda {

// Where a value lives during a run.
enum class Home : int32_t {
  kInput,   // run()'s inputs[index]
  kOutput,  // run()'s outputs[index]
  kConst,   // the engine's uploaded constant consts[index]
  kTemp,    // the per-(engine, thread) scratch at `offset`
  kAlias,   // the same bytes as value `index` (Reshape and friends)
};

struct Value {
  std::string name;
  int32_t dtype = 1;
  std::vector<int64_t> dims;
  Home home = Home::kTemp;
  int32_t index = -1;
  int64_t offset = 0;
  int64_t bytes() const {
    return tessera_plugin::numel(dims) * static_cast<int64_t>(tessera_plugin::dtype_size(dtype));
  }
};

// A device constant: an initializer uploaded as it is, or a derived array.
struct DeviceConst {
  enum Kind : int32_t {
    kInitializer,  // `name` as given (float32 or int64)
    kBnScale,      // scale / sqrt(var + eps) of BatchNormalization node `node`
    kBnShift,      // bias - mean * scale / sqrt(var + eps)
    kScaled,       // `name` times `factor` (Gemm's C as a bias, with beta)
    kZeros,        // `count` zeros (a bias cuDNN requires)
  };
  Kind kind = kInitializer;
  std::string name;
  int32_t node = -1;
  float factor = 1;
  int64_t count = 0;
  int32_t dtype = 1;
};

enum class Epilogue : int32_t { kNone, kRelu, kBias, kReluBias, kGeluTanhBias };

// D[batch] = alpha * op(A[batch]) op(B[batch]) (+ beta * C) (+ bias, activation), row-major.
struct GemmParams {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  int64_t stride_a = 0, stride_b = 0;  // batch strides in elements (batch > 1)
  float alpha = 1, beta = 0;
  Epilogue epilogue = Epilogue::kNone;
  int32_t a = -1, b = -1, bias = -1, d = -1;
  // Gemm's C, broadcast into D before the GEMM (beta != 0 and not folded into a bias).
  int32_t c = -1;
  StridedCopy c_copy;
};

struct ConvParams {
  bool transpose = false;              // ConvTranspose: cudnnConvolutionBackwardData
  int64_t n = 0, c = 0, h = 0, w = 0;  // input
  int64_t k = 0, oh = 0, ow = 0;       // output channels and size
  int64_t kh = 1, kw = 1, group = 1;
  int64_t pad_h = 0, pad_w = 0, stride_h = 1, stride_w = 1, dil_h = 1, dil_w = 1;
  int32_t x = -1, w_value = -1, bias = -1, z = -1, y = -1;
  bool relu = false;  // fused: cudnnConvolutionBiasActivationForward
};

struct CopyPiece {
  int32_t src = -1, dst = -1;
  StridedCopy copy;
};

enum class StepKind : int32_t {
  kGemm,
  kConv,
  kChain,
  kMemcpy,
  kStrided,
  kGather,
  kSoftmax,
  kLayerNorm,
  kReduce,
  kPool,
  kResize
};

struct Step {
  StepKind kind = StepKind::kChain;
  std::vector<std::string> nodes;  // region node names whose work this is (profiles)
  std::string what;                // short name for profiles ("cublasLt gemm")
  int32_t node = -1;               // the node messages name (the first)
  std::string where;               // "node 'fc1' (MatMul)"
  GemmParams gemm;
  ConvParams conv;
  // Chain: operands by value id; the chain's operand pointers are filled per run.
  Chain chain;
  int32_t chain_operands[kMaxOperands] = {};
  int32_t in = -1, out = -1;    // single input / output of the simple steps
  int32_t aux = -1, aux2 = -1;  // gather indices; layernorm gamma, beta
  // Strided: optional fill of `out` with fill_value, then the pieces.
  bool fill = false;
  float fill_value = 0;
  std::vector<CopyPiece> pieces;
  // Gather, softmax, layernorm, reduce: [outer, len, inner] views.
  int64_t outer = 1, len = 1, inner = 1, count = 0;
  int32_t code = 0;
  float eps = 0;
  Pool2d pool;
  Resize2d resize;
  // Estimate.
  double flops = 0, bytes = 0;
};

struct Program {
  std::vector<Value> values;
  std::vector<DeviceConst> consts;
  std::vector<Step> steps;
  std::vector<int32_t> inputs, outputs;  // value ids, in graph order
  int64_t scratch_bytes = 0;
};

}  // namespace tessera_cuda
