// The com.microsoft ops that ONNX Runtime's transformer optimizer writes into "optimized" models, lowered on import
// to default-domain ops that Tessera runs (and fuses) natively:
//   FastGelu(X, bias?)                 -> [Add] Gelu(approximate="tanh")
//   BiasGelu(A, B)                     -> Add, Gelu
//   QuickGelu(X; alpha=1.702)          -> X * Sigmoid(alpha * X)
//   SkipLayerNormalization(input, skip, gamma, beta?, bias?; epsilon)
//                                      -> Add [, Add bias], LayerNormalization(axis -1) with its mean / inv-std
//                                         outputs and the sum as the fourth output
//   FusedMatMul(A, B; alpha, transA, transB)
//                                      -> Einsum ("...ij,...jk->...ik" with the transposes) [, Mul alpha]
// and the quantized ops of ONNX Runtime's QOperator format and dynamic quantization, each as the float op between a
// DequantizeLinear of every input and a QuantizeLinear of its output (which is their definition):
//   QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearGlobalAveragePool, QLinearConcat, QGemm (float
//   output without y_scale); channels_last pooling is refused
// (QLinearSoftmax and QLinearAveragePool are not lowered: their ONNX Runtime kernels are no dequantize-op-quantize,
// and Tessera runs those kernels' arithmetic, ops/softmax.cc and ops/pool.cc.)
//   DynamicQuantizeMatMul(A, B, b_scale, b_zp?, bias?) -> DynamicQuantizeLinear(A), MatMulInteger, Cast, Mul by
//                                         a_scale * b_scale [, Add bias]   (ONNX Runtime's quantize_dynamic pattern)
//   MatMulIntegerToFloat(A, B, a_scale, b_scale, a_zp?, b_zp?, bias?) -> the same on an A already quantized
// (Gelu itself is registered in com.microsoft directly.)
#pragma once

#include <vector>

#include "util/status.h"

namespace onnx {
class NodeProto;
}

namespace tessera {

// True when `node` is one of the ops above; its lowering is appended to `out`. An attribute the lowering cannot
// honour (FusedMatMul's transBatchA/B) is an error naming the node.
Expected<bool> lower_contrib_op(const onnx::NodeProto& node, std::vector<onnx::NodeProto>* out);

}  // namespace tessera
