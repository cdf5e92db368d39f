// Placeholder: the quantize family registers no ops yet.
#include "ops/op_registry.h"

namespace tessera {

TSR_REGISTER_OPS(quantize) { (void)reg; }

}  // namespace tessera
