// Multi-node patterns that oneDNN runs as one primitive, found in the ONNX
// graph before lowering: exporters spell some operators out in pieces.
//
//   Gelu(erf)          y = x * 0.5 * (1 + Erf(x / sqrt(2)))   (Div by sqrt(2) or Mul by 1/sqrt(2); the two Muls in
//                      either order)                          -> one eltwise gelu_erf
//   LayerNorm          mean = ReduceMean(x), d = x - mean, var = ReduceMean(d^2), n = d / Sqrt(var + eps),
//   (decomposed)       y = n * gamma + beta (gamma, beta optional; d^2 as Pow(d, 2) or Mul(d, d))
//                                                             -> one layer normalization over the trailing axes
//   ConvInteger,       q = DynamicQuantizeLinear(x) (outside the pattern: one may feed several), s =
//   MatMulInteger      Mul(q.scale, w_scale), y = Mul(Cast(ConvInteger(q.y, W, q.zero_point)), s), or MatMulInteger
//   (dynamic)          in its place       -> one int8 convolution (kDynConv) or matmul (kDynMatMul) with the scale
//                                            as a post-op (the DynamicQuantizeLinear is its own op)
// Every intermediate has a single reader inside the pattern and leaves
// neither the pattern nor the region. Capability reports each match as a
// composite (so the host keeps it together) and claims its nodes — Erf among
// them, which this backend cannot run alone. Lowering emits nothing for the
// inner nodes and the whole op at the pattern's last node.
#pragma once

#include <string>
#include <vector>

#include "plugin_util.h"

namespace tessera_dnnl {

struct Pattern {
  enum class Kind { kGelu, kLayerNorm, kDynConv, kDynMatMul } kind;
  std::vector<int> nodes;  // node indices, ascending; the last one emits the op
  std::string x, y;        // the pattern's input and output values
  std::string gamma, beta; // LayerNorm: constant scale and shift ("" when absent)
  int64_t axes = 0;        // LayerNorm: how many trailing axes are normalized
  float epsilon = 0.f;
  int conv = -1;           // DynConv/DynMatMul: the ConvInteger or MatMulInteger node and the weights' scale
  std::string w_scale;
  const char* name() const {
    return kind == Kind::kGelu        ? "Gelu(erf)"
           : kind == Kind::kLayerNorm ? "LayerNormalization(decomposed)"
           : kind == Kind::kDynConv   ? "ConvInteger(dynamic)"
                                      : "MatMulInteger(dynamic)";
  }
};

// Matches in node order; no node belongs to two.
std::vector<Pattern> find_patterns(const tessera_plugin::ModelView& m);

}  // namespace tessera_dnnl
