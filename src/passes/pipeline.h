// The graph optimisation pipeline: shape inference, then canonicalisation,
// constant folding and dead-code elimination repeated until nothing changes
// (or max_iterations), with shape inference re-run after every round that
// changed the graph so later rounds see the sharper shapes (a Reshape whose
// shape input just became constant, a Shape whose input became static).
#pragma once

#include "ir/graph.h"
#include "passes/canonicalize.h"
#include "passes/constant_folding.h"
#include "passes/dce.h"
#include "passes/qdq_fusion.h"
#include "passes/widen_float16.h"
#include "util/status.h"

namespace tessera {

struct OptimizeOptions {
  bool widen_float16 = true;  // float16 compute in float32 (passes/widen_float16.h)
  bool fuse_qdq = true;       // QDQ-wrapped Conv/MatMul/elementwise ops as QLinear ops (passes/qdq_fusion.h)
  bool fold_constants = true;
  bool canonicalize = true;
  int max_iterations = 64;
  ConstantFoldingOptions folding;
  CanonicalizeOptions canonicalize_options;
};

struct OptimizeStats {
  int iterations = 0;  // rounds run (the last one changes nothing unless max_iterations was hit)
  WidenStats widen;
  int qdq_fused = 0;
  CanonicalizeStats canonicalize;
  ConstantFoldingStats folding;
  DceStats dce;
};

// Optimises `g` in place. Graph inputs and outputs keep their names and
// order. Nested graphs are deep-copied first, so copies of `g` made earlier
// (which share them) are left untouched. Fails only when shape inference finds the model invalid, or (an
// internal error) when the result no longer verifies.
Status optimize_graph(Graph& g, const OptimizeOptions& opts, OptimizeStats* stats = nullptr);

}  // namespace tessera
