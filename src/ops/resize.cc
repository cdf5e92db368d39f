// Placeholder: the resize family registers no ops yet.
#include "ops/op_registry.h"

namespace tessera {

TSR_REGISTER_OPS(resize) { (void)reg; }

}  // namespace tessera
