// Runs one node eagerly on concrete tensors: inference on the concrete input
// shapes and values, output allocation, kernel creation and execution. Used by
// constant folding, by unit tests of single ops, and by the executor for nodes
// whose output shapes are only known at run time.
#pragma once

#include <vector>

#include "ir/graph.h"
#include "ir/tensor.h"
#include "ops/op_registry.h"
#include "util/status.h"

namespace tessera {

// Infers the concrete output types of `node` given concrete inputs (absent
// optional inputs are undefined Tensors).
Expected<std::vector<ValueInfo>> infer_node_concrete(const Node& node, int64_t opset,
                                                    const std::vector<Tensor>& inputs);

// Runs `node` once. `pool` may be null (runs single-threaded); `subgraphs`
// may be null for ops without nested graphs.
Expected<std::vector<Tensor>> run_node_once(const Node& node, int64_t opset,
                                            const std::vector<Tensor>& inputs,
                                            ThreadPool* pool = nullptr,
                                            SubgraphRunner* subgraphs = nullptr,
                                            const EngineTable* engines = nullptr);

}  // namespace tessera
