// Placeholder: the misc family registers no ops yet.
#include "ops/op_registry.h"

namespace tessera {

TSR_REGISTER_OPS(misc) { (void)reg; }

}  // namespace tessera
