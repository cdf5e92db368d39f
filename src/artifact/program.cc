#include "artifact/program.h"

#include <cstring>

namespace tessera {

Blob Blob::Copy(const void* data, size_t size) {
  Blob b;
  b.size = size;
  if (size == 0) return b;
  std::shared_ptr<void> storage = aligned_alloc_shared(size, 64);
  std::memcpy(storage.get(), data, size);
  b.data = static_cast<const uint8_t*>(storage.get());
  b.keep = std::move(storage);
  return b;
}

}  // namespace tessera
