// ArgMax / ArgMin, registered by the reduce family.
#pragma once

namespace tessera {

class OpRegistry;
void register_arg_reduce_ops(OpRegistry& reg);

}  // namespace tessera
