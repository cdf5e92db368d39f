// Placeholder: the matmul family registers no ops yet.
#include "ops/op_registry.h"

namespace tessera {

TSR_REGISTER_OPS(matmul) { (void)reg; }

}  // namespace tessera
