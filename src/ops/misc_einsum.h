// Einsum: registered by the misc family (misc.cc).
#pragma once

#include "ops/op_registry.h"

namespace tessera {

void register_einsum(OpRegistry& reg);

}  // namespace tessera
