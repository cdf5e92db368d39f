// Canonicalisation: local rewrites that keep exact ONNX semantics and leave
// backends fewer, larger ops.
//   * identity-like nodes disappear: Identity, inference-mode Dropout (mask
//     unused), Cast to the same type, Transpose by the identity permutation,
//     Reshape/Expand/Flatten/Squeeze/Unsqueeze to the very same static shape. Consumers read the input
//     instead; when the output is a graph output its name survives by renaming
//     the producer's output (the node stays when that is impossible).
//   * BatchNormalization (inference) after a Conv/ConvTranspose whose output
//     it alone reads, with constant weights and statistics, folds into the
//     convolution's weights and bias.
//   * Add / Mul of a constant per-channel (or scalar) tensor after such a
//     convolution folds into its bias / weights, when broadcasting cannot
//     change the output shape.
//   * Transpose of a Transpose becomes one Transpose (composed permutation);
//     a Reshape to a constant shape skips a Reshape/Flatten/Squeeze/Unsqueeze
//     before it.
//   * MatMul(A 2-D, B 2-D) + Add(constant C broadcastable to [M, N]) becomes
//     Gemm.
//   * an If whose condition is a constant is replaced by the branch it takes.
//   * LayerNorm and Gelu written out as elementwise ops and ReduceMeans (exports before opsets 17 and 20) become
//     LayerNormalization and Gelu where ONNX Runtime fuses them (the chains it recognises, nothing more), so that
//     their results round as ONNX Runtime's do.
//   * scalar factors of a MatMul's operands (Mul or Div by a one-element constant, maybe through a Transpose) move
//     onto its product, as ONNX Runtime folds them into FusedMatMul's alpha.
// Rewrites apply inside nested graphs too. Values a nested graph reads are
// renamed consistently or left alone; graph outputs keep their names.
#pragma once

#include "ir/graph.h"
#include "util/status.h"

namespace tessera {

struct CanonicalizeOptions {
  bool fold_batchnorm = true;
  bool fold_conv_bias = true;      // Conv + Add/Mul by per-channel constants
  bool matmul_add_to_gemm = true;
  bool inline_constant_if = true;
  bool fuse_decompositions = true;  // decomposed LayerNorm and Gelu; MatMul operand scales
};

struct CanonicalizeStats {
  int removed_identities = 0;
  int folded_batchnorms = 0;
  int folded_conv_affines = 0;  // Add/Mul folded into a convolution
  int fused_gemms = 0;
  int merged_layout_ops = 0;    // Transpose pairs and Reshape chains merged
  int inlined_ifs = 0;
  int fused_layernorms = 0;
  int fused_gelus = 0;
  int folded_matmul_scales = 0;  // scalar factors of a MatMul's operands moved onto its product
  bool changed() const {
    return removed_identities + folded_batchnorms + folded_conv_affines + fused_gemms + merged_layout_ops +
               inlined_ifs + fused_layernorms + fused_gelus + folded_matmul_scales >
           0;
  }
  CanonicalizeStats& operator+=(const CanonicalizeStats& o) {
    removed_identities += o.removed_identities;
    folded_batchnorms += o.folded_batchnorms;
    folded_conv_affines += o.folded_conv_affines;
    fused_gemms += o.fused_gemms;
    merged_layout_ops += o.merged_layout_ops;
    inlined_ifs += o.inlined_ifs;
    fused_layernorms += o.fused_layernorms;
    fused_gelus += o.fused_gelus;
    folded_matmul_scales += o.folded_matmul_scales;
    return *this;
  }
};

Status canonicalize(Graph& g, CanonicalizeStats* stats = nullptr, const CanonicalizeOptions& opts = {});

}  // namespace tessera
