// Measures this machine's fp32 fused-multiply-add peak, the ceiling against which bench/run_suite.sh states the
// models' achieved GFLOP/s.
//
// Input: none (--seconds S sets the time per measurement, default 0.3). Output: one JSON line
//   {"gflops_1t": .., "gflops_2t": .., "isa": "avx512"|"avx2", "chains": 12}
// Method: each thread runs independent FMA chains on vector registers -- 12 accumulators, more than FMA latency (4-5
// cycles) times throughput (up to 2 per cycle), so the FMA pipes never wait for a result -- for a trip count fixed up
// front. Threads are pinned to cores 0 and 1 (sched_setaffinity) and start together behind a spin barrier; the
// 2-thread figure is total FMAs over the slowest thread's time. Each figure is the best of several measurements, so a
// momentary interruption does not count against the peak. One FMA is 2 FLOPs per lane.
#include <immintrin.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

#if defined(__AVX512F__)
using Vec = __m512;
constexpr int kLanes = 16;
constexpr const char* kIsa = "avx512";
inline Vec vset(float v) { return _mm512_set1_ps(v); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline Vec vadd(Vec a, Vec b) { return _mm512_add_ps(a, b); }
inline float vsum(Vec v) {  // through memory: GCC 12's _mm512_reduce_add_ps trips -Wuninitialized
  alignas(64) float t[16];
  _mm512_store_ps(t, v);
  float s = 0;
  for (float x : t) s += x;
  return s;
}
#elif defined(__AVX2__) && defined(__FMA__)
using Vec = __m256;
constexpr int kLanes = 8;
constexpr const char* kIsa = "avx2";
inline Vec vset(float v) { return _mm256_set1_ps(v); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline Vec vadd(Vec a, Vec b) { return _mm256_add_ps(a, b); }
inline float vsum(Vec v) {
  alignas(32) float t[8];
  _mm256_store_ps(t, v);
  float s = 0;
  for (float x : t) s += x;
  return s;
}
#else
#error "peak_fma needs AVX2+FMA or AVX-512 (build with -march=native on such a machine)"
#endif

constexpr int kChains = 12;

// Runs `iters` iterations of kChains independent FMA chains and folds every accumulator into the result, so the
// compiler cannot drop the work. The multiplier is just under 1 and the addend small, so values stay finite and normal
// (denormals would slow the FMAs down on some cores).
__attribute__((noinline)) float fma_chains(long iters, float seed) {
  Vec acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = vset(seed + 0.001f * static_cast<float>(i));
  const Vec mul = vset(0.999999f);
  const Vec add = vset(1e-3f);
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) acc[i] = vfma(acc[i], mul, add);
  }
  Vec s = acc[0];
  for (int i = 1; i < kChains; ++i) s = vadd(s, acc[i]);
  return vsum(s);
}

bool pin_to_cpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof(set), &set) == 0;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::atomic<float> g_sink{0};

// One measurement on `threads` pinned threads, each running `iters` iterations; returns GFLOP/s.
double measure(int threads, long iters) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<double> elapsed(static_cast<size_t>(threads), 0.0);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      pin_to_cpu(t % static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) {
      }
      const double t0 = now_s();
      const float r = fma_chains(iters, 1.0f + static_cast<float>(t));
      elapsed[static_cast<size_t>(t)] = now_s() - t0;
      g_sink.store(g_sink.load(std::memory_order_relaxed) + r, std::memory_order_relaxed);
    });
  }
  while (ready.load() < threads) {
  }
  go.store(true, std::memory_order_release);
  for (auto& th : pool) th.join();
  const double slowest = *std::max_element(elapsed.begin(), elapsed.end());
  const double flops = 2.0 * kLanes * kChains * static_cast<double>(iters) * threads;
  return flops / slowest / 1e9;
}

// Best of `reps` measurements of about `seconds` each; the trip count is calibrated on one thread first.
double peak(int threads, double seconds, int reps) {
  long iters = 1 << 16;
  for (;;) {  // grow the trip count until one run takes a measurable time, then scale it to `seconds`
    const double t0 = now_s();
    g_sink.store(g_sink.load() + fma_chains(iters, 1.0f));
    const double dt = now_s() - t0;
    if (dt > 0.02) {
      iters = static_cast<long>(static_cast<double>(iters) * seconds / dt);
      break;
    }
    iters *= 4;
  }
  double best = 0;
  for (int r = 0; r < reps; ++r) best = std::max(best, measure(threads, iters));
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 0.3;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: peak_fma [--seconds S]\n");
      return 2;
    }
  }
  if (!(seconds > 0)) seconds = 0.3;
  const double g1 = peak(1, seconds, 5);
  const double g2 = peak(2, seconds, 5);
  std::printf("{\"gflops_1t\": %.1f, \"gflops_2t\": %.1f, \"isa\": \"%s\", \"chains\": %d}\n", g1, g2, kIsa,
              kChains);
  return 0;
}
