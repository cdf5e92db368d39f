// A byte count for people: "40 B", "3.0 KiB", "12.5 MiB". Shared by `inspect` and the runtime's memory-limit
// messages.
#pragma once

#include <cstdint>
#include <string>

namespace tessera {

std::string human_bytes(uint64_t n);

}  // namespace tessera
