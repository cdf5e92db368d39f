// Placeholder: the reduce family registers no ops yet.
#include "ops/op_registry.h"

namespace tessera {

TSR_REGISTER_OPS(reduce) { (void)reg; }

}  // namespace tessera
