// Placeholder: the random family registers no ops yet.
#include "ops/op_registry.h"

namespace tessera {

TSR_REGISTER_OPS(random) { (void)reg; }

}  // namespace tessera
