// Placeholder: the training family registers no ops yet.
#include "ops/op_registry.h"

namespace tessera {

TSR_REGISTER_OPS(training) { (void)reg; }

}  // namespace tessera
