// Placeholder: the signal family registers no ops yet.
#include "ops/op_registry.h"

namespace tessera {

TSR_REGISTER_OPS(signal) { (void)reg; }

}  // namespace tessera
