// Helpers for ai.tessera.Region nodes (see region.cc), shared by the
// partitioner that creates them and the op that runs them.
#pragma once

#include <vector>

#include "ir/graph.h"
#include "util/status.h"

namespace tessera {

inline constexpr const char* kRegionDomain = "ai.tessera";
inline constexpr const char* kRegionOp = "Region";

inline bool is_region_node(const Node& n) { return n.op_type == kRegionOp && n.domain == kRegionDomain; }

// Records the (concrete) output types in the node's attributes.
void set_region_output_types(Node& n, const std::vector<ValueInfo>& outs);
// Reads them back, validating every field.
Status region_output_types(const Node& n, std::vector<ValueInfo>* outs);

}  // namespace tessera
