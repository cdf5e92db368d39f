// The arena of one engine: where each intermediate buffer lives.
//
// Input: buffers with a size and a lifetime [first, last] in execution steps
// (a buffer shared by views and in-place sums has one lifetime covering all
// of them). Output: a byte offset per buffer and the arena size, such that
// two buffers alive at the same step never overlap. Method: greedy by size —
// the largest buffers are placed first, each at the lowest 64-byte aligned
// offset that clears every already placed buffer whose lifetime intersects
// its own. Every run context allocates one arena of that size, so runs on
// different contexts share nothing.
#pragma once

#include <cstddef>
#include <vector>

namespace tessera_dnnl {

struct ArenaBuffer {
  size_t bytes = 0;
  int first = -1, last = -1;  // steps; first = -1 means never touched (no space)
  size_t offset = 0;          // filled by plan_arena
};

// Assigns offsets; returns the arena size in bytes.
size_t plan_arena(std::vector<ArenaBuffer>& buffers);

// Sum of the buffers' sizes: what a plan without reuse would need.
size_t unshared_size(const std::vector<ArenaBuffer>& buffers);

// Memory aligned for oneDNN (64 bytes), released with std::free.
struct AlignedBuffer {
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes);
  AlignedBuffer(AlignedBuffer&& o) noexcept : p(o.p), n(o.n) { o.p = nullptr, o.n = 0; }
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer();
  void* p = nullptr;
  size_t n = 0;
};

}  // namespace tessera_dnnl
