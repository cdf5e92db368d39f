// Sampling operators that live next to Resize: GridSample and RoiAlign.
#pragma once

#include "ops/op_registry.h"

namespace tessera {

// Registers GridSample (opset 16) and RoiAlign (opsets 10, 16); called from
// the resize family's registration.
void register_sampling_ops(OpRegistry& reg);

}  // namespace tessera
