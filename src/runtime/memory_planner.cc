#include "runtime/memory_planner.h"

#include <algorithm>
#include <numeric>

namespace tessera {

MemoryPlan plan_memory(const std::vector<BufferRequest>& requests, size_t alignment) {
  MemoryPlan plan;
  plan.offsets.assign(requests.size(), 0);
  auto align = [&](size_t v) { return (v + alignment - 1) / alignment * alignment; };
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return requests[a].size > requests[b].size; });

  struct Placed {
    size_t offset, size;
    int first, last;
  };
  std::vector<Placed> placed;
  for (size_t idx : order) {
    const BufferRequest& r = requests[idx];
    size_t size = align(std::max<size_t>(r.size, 1));
    plan.naive_bytes += size;
    // Intervals of placed buffers that are live at the same time, by offset.
    std::vector<std::pair<size_t, size_t>> busy;
    for (const Placed& p : placed) {
      if (p.first <= r.last_step && r.first_step <= p.last) busy.emplace_back(p.offset, p.offset + p.size);
    }
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (const auto& b : busy) {
      if (b.first >= offset + size) break;  // fits in the gap before b
      offset = std::max(offset, b.second);
    }
    plan.offsets[idx] = offset;
    placed.push_back({offset, size, r.first_step, r.last_step});
    plan.arena_bytes = std::max(plan.arena_bytes, offset + size);
  }
  return plan;
}

}  // namespace tessera
