#include "util/thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>

namespace tessera {

namespace {
thread_local bool t_in_parallel = false;

// Workers spin this long for the next job, and a caller this long for its
// chunks to finish, before sleeping on a condition variable: waking a
// sleeping thread costs 5-20 us, more than the work a parallel_for of a
// small kernel (one LSTM step, one elementwise op) hands each thread.
constexpr auto kSpin = std::chrono::microseconds(50);

// Spins until done() or kSpin passes (not at all unless `spin`); true when
// done() held.
template <class Done>
bool spin_until(bool spin, Done done) {
  if (!spin) return done();
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      _mm_pause();
    }
    if (std::chrono::steady_clock::now() >= until) return done();
  }
}
}  // namespace

// The range is cut into one contiguous block of items per thread of the pool (the caller's is block 0, worker i's
// block i), and every thread runs its own block, chunk by chunk, before it takes chunks from the others'. So a thread
// gets the same part of every range (the same output rows of each convolution, the same planes of each elementwise
// op) from one kernel to the next, and mostly reads what it wrote itself rather than what the other core's cache
// holds (native models on two threads of a two-core VM: crnn, mobilenet_v2, DBNet, resnet50 3-6 % faster; YOLOv8n
// unchanged). Blocks are cut in items, not chunks: cut in chunks, 10 bands of a convolution made 5 chunks of 2, one
// thread's block 3 of them and the other's 2, and the second thread idled for a third of the run (3x3 64->32 at
// 128x128, two threads: 322 -> 362 GFLOP/s).
struct ThreadPool::Job {
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  int64_t n = 0;
  int64_t chunk = 1;
  int blocks = 1;
  std::unique_ptr<std::atomic<int64_t>[]> next;  // per block: its next item (past its end once all are claimed)
  std::atomic<int64_t> claimed{0};               // items
  std::atomic<int64_t> done{0};                  // items
  std::mutex mu;
  std::condition_variable cv;

  int64_t block_begin(int b) const { return b * n / blocks; }
  bool all_claimed() const { return claimed.load(std::memory_order_acquire) >= n; }
};

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

bool ThreadPool::current_thread_in_task() { return t_in_parallel; }

int threads_asked_for(int asked) {
  return std::max(1, asked > 0 ? asked : static_cast<int>(std::thread::hardware_concurrency()));
}

void ThreadPool::run_chunks(Job& job, int self) {
  bool was = t_in_parallel;
  t_in_parallel = true;
  int64_t finished = 0;
  for (int k = 0; k < job.blocks; ++k) {  // its own block first, then the others' in turn
    const int b = (self + k) % job.blocks;
    const int64_t end = job.block_begin(b + 1);
    for (;;) {
      const int64_t begin = job.next[static_cast<size_t>(b)].fetch_add(job.chunk, std::memory_order_relaxed);
      if (begin >= end) break;
      const int64_t stop = std::min(end, begin + job.chunk);
      job.claimed.fetch_add(stop - begin, std::memory_order_release);
      (*job.fn)(begin, stop);
      finished += stop - begin;
    }
  }
  t_in_parallel = was;
  if (finished > 0 && job.done.fetch_add(finished) + finished == job.n) {
    std::lock_guard<std::mutex> lock(job.mu);
    job.cv.notify_all();
  }
}

void ThreadPool::worker_loop(int self) {
  for (;;) {
    std::shared_ptr<Job> job;
    const bool queued = spin_until(spin_.load(std::memory_order_relaxed), [this] {
      return queued_.load(std::memory_order_acquire) > 0 || stop_.load(std::memory_order_relaxed);
    });
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Sleep only when spinning found nothing: a job seen queued may be gone by now (its caller took it off once
      // every chunk was claimed), and the next one should find this worker spinning, not asleep.
      if (!queued) cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (stop_ && queue_.empty()) return;
      // Jobs stay queued until all their chunks are claimed so that every
      // idle worker can join in; drop the ones that are.
      while (!queue_.empty() && queue_.front()->all_claimed()) {
        queue_.pop_front();
        queued_.fetch_sub(1, std::memory_order_release);
      }
      if (queue_.empty()) continue;
      job = queue_.front();
    }
    run_chunks(*job, self);
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (num_threads_ == 1 || t_in_parallel || n <= grain) {
    fn(0, n);
    return;
  }
  auto job = std::make_shared<Job>();
  job->fn = &fn;
  job->n = n;
  // About four chunks per block: few enough atomics for ranges of many cheap items, enough to steal from.
  const int64_t max_chunks = static_cast<int64_t>(num_threads_) * 4;
  job->chunk = std::max(grain, (n + max_chunks - 1) / max_chunks);
  job->blocks = num_threads_;
  job->next = std::make_unique<std::atomic<int64_t>[]>(static_cast<size_t>(job->blocks));
  for (int b = 0; b < job->blocks; ++b) job->next[static_cast<size_t>(b)].store(job->block_begin(b));
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(job);
    queued_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  run_chunks(*job, 0);
  // Every chunk is claimed now: off the queue while the workers still run theirs, so that a worker finishing its
  // chunk finds nothing queued and keeps spinning rather than taking mu_ when this thread does. Taking it together
  // made one of them sleep in the kernel: 3 us of a parallel_for's 7 on a two-core VM.
  {
    std::lock_guard<std::mutex> qlock(mu_);
    auto it = std::find(queue_.begin(), queue_.end(), job);
    if (it != queue_.end()) {
      queue_.erase(it);
      queued_.fetch_sub(1, std::memory_order_release);
    }
  }
  if (!spin_until(spin_.load(std::memory_order_relaxed),
                  [&] { return job->done.load(std::memory_order_acquire) == job->n; })) {
    std::unique_lock<std::mutex> lock(job->mu);
    job->cv.wait(lock, [&] { return job->done.load() == job->n; });
  }
}

}  // namespace tessera
