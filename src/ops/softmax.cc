// Placeholder: the softmax family registers no ops yet.
#include "ops/op_registry.h"

namespace tessera {

TSR_REGISTER_OPS(softmax) { (void)reg; }

}  // namespace tessera
