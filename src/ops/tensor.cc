// Placeholder: the tensor family registers no ops yet.
#include "ops/op_registry.h"

namespace tessera {

TSR_REGISTER_OPS(tensor) { (void)reg; }

}  // namespace tessera
