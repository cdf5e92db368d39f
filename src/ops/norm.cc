// Placeholder: the norm family registers no ops yet.
#include "ops/op_registry.h"

namespace tessera {

TSR_REGISTER_OPS(norm) { (void)reg; }

}  // namespace tessera
