// Placeholder: the pool family registers no ops yet.
#include "ops/op_registry.h"

namespace tessera {

TSR_REGISTER_OPS(pool) { (void)reg; }

}  // namespace tessera
