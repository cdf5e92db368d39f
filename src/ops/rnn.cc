// Placeholder: the rnn family registers no ops yet.
#include "ops/op_registry.h"

namespace tessera {

TSR_REGISTER_OPS(rnn) { (void)reg; }

}  // namespace tessera
