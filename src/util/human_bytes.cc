#include "util/human_bytes.h"

#include <cstdio>

namespace tessera {

std::string human_bytes(uint64_t n) {
  char buf[32];
  if (n < 1024) return std::to_string(n) + " B";
  if (n < (1u << 20)) {
    std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(n) / 1024.0);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(n) / (1024.0 * 1024.0));
  }
  return buf;
}

}  // namespace tessera
