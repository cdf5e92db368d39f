// The XNNPACK plugin's price of a region on a machine (cost.cc).
#pragma once

#include "plugin_util.h"
#include "program.h"

namespace tessera_xnn {

// Microseconds to run the lowered program `p` once on the machine `f`
// describes.
double region_cost_us(const Program& p, const tessera_plugin::MachineFigures& f);

}  // namespace tessera_xnn
