// The oneDNN plugin's price of a region on a machine (dnnl_cost.cc).
#pragma once

#include "dnnl_engine.h"
#include "dnnl_program.h"
#include "plugin_util.h"

namespace tessera_dnnl {

// Microseconds to run the lowered, fused program `p` once on the machine `f`
// describes. `plan` (may be null) is its dry build: which implementation
// oneDNN picked for every primitive, and the reorders it needs.
double region_cost_us(const Program& p, const Plan* plan, const tessera_plugin::MachineFigures& f);

}  // namespace tessera_dnnl
