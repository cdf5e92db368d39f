// Static memory planning. Input: buffers with a size and a live interval
// [first_step, last_step] over the execution order. Output: an offset for each
// buffer inside one arena such that buffers whose intervals overlap never
// share bytes, and the arena's size. Method: greedy by size (largest first),
// each buffer placed at the lowest aligned offset that fits between the
// already placed buffers it overlaps in time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tessera {

struct BufferRequest {
  size_t size = 0;
  int first_step = 0;
  int last_step = 0;
};

struct MemoryPlan {
  std::vector<size_t> offsets;  // one per request
  size_t arena_bytes = 0;       // peak
  size_t naive_bytes = 0;       // sum of all sizes (no reuse), for reporting
};

MemoryPlan plan_memory(const std::vector<BufferRequest>& requests, size_t alignment = 64);

}  // namespace tessera
