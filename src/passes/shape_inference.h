// Shape and type inference over a whole graph, driven by each op's InferFn.
// Symbolic dims are kept where an op can propagate them; constant inputs are
// handed to inference functions so shape-computing subgraphs resolve.
#pragma once

#include "ir/graph.h"
#include "util/status.h"

namespace tessera {

// Fills g.values for every node output (and nested graphs). Values already
// typed keep the more precise of the two shapes. Fails on an op the registry
// does not know, or an op whose inputs are definitely invalid.
Status infer_shapes(Graph& g);

}  // namespace tessera
