// The native backend: Tessera's own kernels behind the same C table as the
// plugins (include/tessera/backend.h), running each region as a session. It
// sits above the runtime because it runs graphs; the backend host (below the
// runtime) gets its table through set_native_backend_table, installed when
// this file is linked and by the library layer before it resolves backends.
#pragma once

#include "tessera/backend.h"

namespace tessera {

const tessera_backend_t* native_backend_table();

// Hands the table to the backend host (idempotent, thread-safe).
void install_native_backend();

}  // namespace tessera
