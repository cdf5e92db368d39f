// Placeholder: the control_flow family registers no ops yet.
#include "ops/op_registry.h"

namespace tessera {

TSR_REGISTER_OPS(control_flow) { (void)reg; }

}  // namespace tessera
