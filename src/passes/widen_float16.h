// Float16 models computed in float32: every float16 value inside the graph
// becomes float32, its float16 weights are converted once, and only the graph's
// float16 inputs and outputs stay float16, behind a Cast at each. ONNX Runtime's
// CPU provider runs such models the same way (Casts to float around the ops
// that have no float16 kernel), and it lets every backend that computes in
// float32 take them at float32 speed. The result equals the float32 model
// with float16-rounded weights, up to the float16 rounding of the outputs;
// intermediate values are no longer rounded to float16.
#pragma once

#include "ir/graph.h"
#include "util/status.h"

namespace tessera {

struct WidenStats {
  int constants = 0;  // float16 weights converted
  int casts = 0;      // Casts added at graph inputs and outputs
  bool changed() const { return constants > 0 || casts > 0; }
};

// Rewrites `g` (and its nested graphs) as above; nothing when it holds no float16 value. Graph inputs and outputs
// keep their names, order and types.
Status widen_float16(Graph& g, WidenStats* stats = nullptr);

}  // namespace tessera
