// A fixed pool of worker threads shared by every kernel of a session: the
// runtime's Parallel (util/parallel.h).
// parallel_for may be called from several threads at once (several
// concurrent runs of one session) and from inside a task, where it runs the
// range inline so nesting never deadlocks or oversubscribes.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "util/parallel.h"

namespace tessera {

// The threads a count asks for: `asked` when positive, else every hardware thread (at least one).
int threads_asked_for(int asked);

class ThreadPool final : public Parallel {
 public:
  // num_threads counts the calling thread: 1 means no workers.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const override { return num_threads_; }
  // Whether idle workers (and callers waiting for their chunks) spin briefly
  // before sleeping. On by default; a session whose engines run their own
  // threads (OpenMP, pthreadpool) turns it off, so the pool never competes
  // with them for the cores.
  void set_spin(bool on) { spin_.store(on, std::memory_order_relaxed); }
  bool spins() const override { return spin_.load(std::memory_order_relaxed); }

  // Calls fn(begin, end) on disjoint chunks covering [0, n). Chunks hold at
  // least `grain` iterations; at most about 4 chunks per thread are made.
  // Returns when every chunk has run.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) override;

  // True on a pool worker or inside a parallel_for task (of any pool).
  bool in_parallel_region() const override { return current_thread_in_task(); }
  static bool current_thread_in_task();

 private:
  struct Job;
  void worker_loop(int self);
  static void run_chunks(Job& job, int self);

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::atomic<bool> stop_{false};  // set under mu_, read without it by spinning workers
  std::atomic<int> queued_{0};      // jobs in queue_, likewise
  std::atomic<bool> spin_{true};
};

}  // namespace tessera
