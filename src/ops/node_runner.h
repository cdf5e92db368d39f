// Runs one node eagerly on concrete tensors: inference on the concrete input
// shapes and values, output allocation, kernel creation and execution. Used by
// constant folding, by unit tests of single ops, and by the executor for nodes
// whose output shapes are only known at run time.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "ir/graph.h"
#include "ir/tensor.h"
#include "ops/op_registry.h"
#include "util/status.h"

namespace tessera {

// Infers the concrete output types of `node` given concrete inputs (absent
// optional inputs are undefined Tensors). With `use_values`, only the inputs
// it marks show their values (the others their dtypes and shapes alone): what
// follows from shapes and constants, as a plan made for these shapes knows it.
Expected<std::vector<ValueInfo>> infer_node_concrete(const Node& node, int64_t opset,
                                                    const std::vector<Tensor>& inputs,
                                                    const std::vector<bool>* use_values = nullptr);

// Makes the kernel of a node: the runtime gives Region nodes their engine
// this way (src/runtime/region_kernel.h); null: the op registry's kernel.
using KernelMaker = std::function<Expected<std::unique_ptr<Kernel>>(const OpSchema&, const KernelInit&)>;

// Runs `node` once. `pool` may be null (runs single-threaded); `subgraphs`
// may be null for ops without nested graphs.
Expected<std::vector<Tensor>> run_node_once(const Node& node, int64_t opset,
                                            const std::vector<Tensor>& inputs,
                                            Parallel* pool = nullptr,
                                            SubgraphRunner* subgraphs = nullptr,
                                            const KernelMaker* make_kernel = nullptr);

}  // namespace tessera
