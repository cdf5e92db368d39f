// Placeholder: the conv family registers no ops yet.
#include "ops/op_registry.h"

namespace tessera {

TSR_REGISTER_OPS(conv) { (void)reg; }

}  // namespace tessera
