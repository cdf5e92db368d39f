// Constant folding. Input: a graph whose g.values were filled by
// infer_shapes (only needed for Shape/Size folding). Output: the same graph
// where every deterministic node whose present inputs are all constants has
// been executed once (run_node_once) and replaced by constants of the same
// names, and where Shape/Size of values with fully known shapes are
// constants. Exporter-style Shape -> Gather -> Concat -> Reshape chains thus
// collapse to a constant shape when the input shapes are concrete. When only
// some dims are known (a symbolic batch), a Gather or Slice that picks known
// entries out of Shape(x) still becomes a constant.
//
// Nodes are visited in topological order, so a chain folds in one sweep.
// Nested graphs are folded too (they may read outer constants by name); a
// control-flow node itself is never executed here. A node that cannot be run
// (unknown op, a kernel error) is simply left for run time. Folding is
// skipped when it would materialise a huge tensor from small inputs
// (ConstantOfShape / Expand / Tile blow-ups).
#pragma once

#include <cstdint>

#include "ir/graph.h"
#include "util/status.h"

namespace tessera {

struct ConstantFoldingOptions {
  // Outputs larger than this (all outputs of a node together) are not
  // materialised unless an input was already that large.
  int64_t max_output_bytes = int64_t{16} << 20;
};

struct ConstantFoldingStats {
  int folded_nodes = 0;   // nodes executed (or Constant nodes) turned into constants
  int folded_shapes = 0;  // Shape/Size nodes answered from static shapes
  int skipped_large = 0;  // foldable nodes left alone because of their output size
  bool changed() const { return folded_nodes + folded_shapes > 0; }
  ConstantFoldingStats& operator+=(const ConstantFoldingStats& o) {
    folded_nodes += o.folded_nodes;
    folded_shapes += o.folded_shapes;
    skipped_large += o.skipped_large;
    return *this;
  }
};

Status constant_folding(Graph& g, ConstantFoldingStats* stats = nullptr,
                        const ConstantFoldingOptions& opts = {});

}  // namespace tessera
