// Placeholder: the detection family registers no ops yet.
#include "ops/op_registry.h"

namespace tessera {

TSR_REGISTER_OPS(detection) { (void)reg; }

}  // namespace tessera
