// Switches read from the environment.
#pragma once

#include <cstdlib>
#include <cstring>

namespace tessera {

// True when the variable `name` is set to a value other than "" or "0".
inline bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}

}  // namespace tessera
