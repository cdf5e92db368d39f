// What the kernels need from a thread pool: a parallel-for. Kernels (src/ops)
// take a Parallel, never a particular pool, so that whoever runs them -- the
// runtime's ThreadPool, a caller's own threads, or one thread -- decides how
// the chunks run.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>

namespace tessera {

class Parallel {
 public:
  virtual ~Parallel() = default;

  // Threads a parallel_for may use, the calling thread included (1: chunks run
  // on the caller).
  virtual int num_threads() const = 0;

  // Calls fn(begin, end) on disjoint chunks covering [0, n), each of at least
  // `grain` iterations (the last may be shorter), and returns when every chunk
  // has run. Callable from several threads at once and from inside a chunk,
  // where it may run the range inline.
  virtual void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) = 0;

  // True when the calling thread runs a chunk of a parallel_for: a kernel then
  // stays on it rather than splitting its work further.
  virtual bool in_parallel_region() const = 0;

  // Whether idle threads wait spinning, so that handing them a chunk costs
  // little: kernels then split smaller work.
  virtual bool spins() const { return false; }
};

// Calls fn(plane, begin, end) for rows [begin, end) of each of `planes` planes of `rows` rows, every thread of the
// pool taking the same block of rows in every plane (the ThreadPool gives thread b block b of each range). That is how
// a convolution by rows shares its output (a band of rows of every channel per thread), so an op that follows one
// reads what its own core wrote. Split by planes instead, each thread read half its input from the other core: a 2x2
// max pool after a 3->32 convolution at 48x1278 took 0.33 ms there, 0.08 ms alone (on a two-core VM whose cores read
// each other's writes at half the speed of their own).
inline void parallel_plane_rows(Parallel& pool, int64_t planes, int64_t rows,
                                const std::function<void(int64_t, int64_t, int64_t)>& fn) {
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(pool.num_threads(), rows));
  pool.parallel_for(planes * parts, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t part = i / planes, plane = i % planes;
      fn(plane, rows * part / parts, rows * (part + 1) / parts);
    }
  });
}

// Runs every chunk on the calling thread.
class SerialParallel final : public Parallel {
 public:
  int num_threads() const override { return 1; }
  void parallel_for(int64_t n, int64_t /*grain*/, const std::function<void(int64_t, int64_t)>& fn) override {
    if (n > 0) fn(0, n);
  }
  bool in_parallel_region() const override { return false; }
};

}  // namespace tessera
