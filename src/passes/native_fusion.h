// Operator fusion for what the native backend executes.
//
// Input: a graph shape-inferred with concrete input shapes, as the session
// hands it to ExecutionPlan::Build (after partitioning: Region nodes are left
// alone). Output: the same graph with groups of nodes replaced by one fused
// node each, so the group's intermediates are never written to memory:
//   Conv [-> Add(same-shape Z)] [-> activation]  => com.microsoft FusedConv
//   Conv [-> activation] -> MaxPool (2-D, one group; no dilation or ceil mode)
//                                                 => ai.tessera FusedConvMaxPool
//   Gemm -> activation                            => com.microsoft FusedGemm
//   MatMul(constant [K,N] B) [-> Add(bias [N])] [-> activation]
//                                                 => ai.tessera FusedMatMul
//   chains of float32 elementwise ops             => ai.tessera.FusedElementwise
// A group is only formed through intermediates that are float32, have
// exactly one consumer (a nested graph reading a value counts as one), and
// are not graph outputs; the fused node takes the place of the group's last
// node, where all its inputs are already computed.
//
// This runs per plan, never in the graph optimisation before partitioning:
// engine plugins claim plain Conv/Gemm, and artifacts store unfused graphs.
#pragma once

#include "ir/graph.h"
#include "util/status.h"

namespace tessera {

struct NativeFusionStats {
  int conv = 0;                // FusedConv nodes made
  int gemm = 0;                // FusedGemm nodes made
  int matmul = 0;              // FusedMatMul nodes made
  int elementwise_chains = 0;  // FusedElementwise nodes made
  int nodes_removed = 0;       // node count before minus after

  bool changed() const { return nodes_removed > 0; }
};

// True when the environment variable TESSERA_NO_FUSION is set to a value
// other than "" or "0" (for comparing fused and unfused runs).
bool native_fusion_disabled_by_env();

// Fuses in `g` and in its nested If/Loop/Scan bodies (run by the eager
// subgraph runner, which finds the fused ops in the same registry). Nested
// graphs must not be shared with other graphs (unshare_nested_graphs).
Status fuse_for_native(Graph& g, NativeFusionStats* stats = nullptr);

}  // namespace tessera
