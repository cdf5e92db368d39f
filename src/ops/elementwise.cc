// Placeholder: the elementwise family registers no ops yet.
#include "ops/op_registry.h"

namespace tessera {

TSR_REGISTER_OPS(elementwise) { (void)reg; }

}  // namespace tessera
