#include "dnnl_memory_plan.h"

#include <algorithm>
#include <cstdlib>
#include <new>
#include <numeric>

namespace tessera_dnnl {

namespace {
constexpr size_t kAlign = 64;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

size_t plan_arena(std::vector<ArenaBuffer>& buffers) {
  std::vector<size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), 0);
  // Largest first; ties by first use, so the plan is deterministic.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (buffers[a].bytes != buffers[b].bytes) return buffers[a].bytes > buffers[b].bytes;
    return buffers[a].first < buffers[b].first;
  });
  std::vector<size_t> placed;
  size_t total = 0;
  for (size_t i : order) {
    ArenaBuffer& b = buffers[i];
    if (b.first < 0 || b.bytes == 0) continue;
    // Address ranges of the placed buffers alive at the same time, by offset.
    std::vector<std::pair<size_t, size_t>> busy;
    for (size_t j : placed) {
      const ArenaBuffer& o = buffers[j];
      if (o.first <= b.last && b.first <= o.last) busy.emplace_back(o.offset, o.offset + align_up(o.bytes));
    }
    std::sort(busy.begin(), busy.end());
    size_t at = 0;
    const size_t need = align_up(b.bytes);
    for (const auto& [lo, hi] : busy) {
      if (at + need <= lo) break;  // fits in the gap before this one
      at = std::max(at, hi);
    }
    b.offset = at;
    total = std::max(total, at + need);
    placed.push_back(i);
  }
  return total;
}

size_t unshared_size(const std::vector<ArenaBuffer>& buffers) {
  size_t n = 0;
  for (const ArenaBuffer& b : buffers) {
    if (b.first >= 0) n += align_up(b.bytes);
  }
  return n;
}

AlignedBuffer::AlignedBuffer(size_t bytes) : n(bytes) {
  if (bytes == 0) return;
  p = std::aligned_alloc(kAlign, align_up(bytes));
  if (!p) throw std::bad_alloc();
}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& o) noexcept {
  if (this != &o) {
    std::free(p);
    p = o.p, n = o.n;
    o.p = nullptr, o.n = 0;
  }
  return *this;
}

AlignedBuffer::~AlignedBuffer() { std::free(p); }

}  // namespace tessera_dnnl
