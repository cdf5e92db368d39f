// Placeholder: the gather_scatter family registers no ops yet.
#include "ops/op_registry.h"

namespace tessera {

TSR_REGISTER_OPS(gather_scatter) { (void)reg; }

}  // namespace tessera
