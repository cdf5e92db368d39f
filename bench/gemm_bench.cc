// Micro-benchmark of the native SGEMM: prints GFLOP/s for a few shapes with
// 1 and 2 threads (median of several runs). Not built by CMake; build against the build's libraries with
//   g++ -std=c++20 -O3 -march=native -Isrc bench/gemm_bench.cc build/libtessera_ops.a build/libtessera_util.a
//       -lpthread -o /tmp/gemm_bench
// TESSERA_ISA=avx2 runs the AVX2 kernel on an AVX-512 machine.
// Usage: gemm_bench [M N K ...]   (defaults to a fixed list; PACKED_B=1: B packed once ahead, as for
// constant weights; with PRODUCTS=bf16 or fp16, packed for those products where the CPU has them)
// Prints the best of several runs (BENCH_MEDIAN=1: the median).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <vector>

#include "ops/kernels/gemm.h"
#include "util/thread_pool.h"

using tessera::ThreadPool;
namespace k = tessera::kernels;

namespace {

struct Shape {
  int64_t m, n, k;
  bool ta, tb, packed_b;
};

double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// GFLOP/s by wall time, or (cpu_time) by the calling thread's CPU time, which
// leaves out time slices lost to other processes on a shared machine.
double bench(ThreadPool* pool, const Shape& s, int runs, bool cpu_time = false) {
  std::vector<float> a(static_cast<size_t>(s.m * s.k)), b(static_cast<size_t>(s.k * s.n)),
      c(static_cast<size_t>(s.m * s.n));
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  for (auto& x : a) x = d(rng);
  for (auto& x : b) x = d(rng);
  const int64_t lda = s.ta ? s.m : s.k;
  const int64_t ldb = s.tb ? s.k : s.n;
  k::PackedMatrix pb;
  const char* products = std::getenv("PRODUCTS");
  if (s.packed_b) {
    pb = k::PackedMatrix::PackConstantB(b.data(), ldb, s.tb, s.k, s.n, k::products_named(products ? products : ""));
  }
  auto once = [&] {
    if (s.packed_b) {
      k::GemmA ga{a.data(), lda, s.ta, nullptr};
      k::GemmB gb{nullptr, 0, false, &pb, nullptr};
      k::gemm(pool, s.m, s.n, s.k, 1.f, ga, gb, 0.f, c.data(), s.n);
    } else {
      k::sgemm(pool, s.ta, s.tb, s.m, s.n, s.k, 1.f, a.data(), lda, b.data(), ldb, std::getenv("BETA") ? 1.f : 0.f, c.data(), s.n);
    }
  };
  once();
  std::vector<double> times;
  // GEMM_BENCH_EVICT=1: 64 MiB touched before each run, so that A, B and C come from memory as in a model whose
  // other layers ran in between.
  static std::vector<float> evict(std::getenv("GEMM_BENCH_EVICT") ? size_t{16} << 20 : 0);
  for (int r = 0; r < runs; ++r) {
    for (float& v : evict) v += 1.f;
    if (cpu_time) {
      const double t0 = thread_cpu_seconds();
      once();
      times.push_back(thread_cpu_seconds() - t0);
      continue;
    }
    auto t0 = std::chrono::steady_clock::now();
    once();
    auto t1 = std::chrono::steady_clock::now();
    times.push_back(std::chrono::duration<double>(t1 - t0).count());
  }
  std::sort(times.begin(), times.end());
  const double flops = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
  // The machine is shared: report the best run unless BENCH_MEDIAN is set.
  const double t = std::getenv("BENCH_MEDIAN") ? times[times.size() / 2] : times[0];
  return flops / t / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<Shape> shapes;
  if (argc >= 4) {
    for (int i = 1; i + 2 < argc; i += 3) {
      shapes.push_back({std::atoll(argv[i]), std::atoll(argv[i + 1]), std::atoll(argv[i + 2]), false, false,
                        std::getenv("PACKED_B") != nullptr});
    }
  } else {
    shapes = {{1024, 1024, 1024, false, false, false}, {1024, 1024, 1024, false, false, true},
              {1024, 1024, 1024, true, true, false},   {64, 3136, 2304, false, false, false},
              {256, 3136, 64, false, false, false},    {128, 768, 768, false, false, true},
              {1, 1000, 2048, false, true, true},      {333, 555, 777, false, false, false}};
  }
  ThreadPool p1(1), p2(2);
  std::printf("%6s %6s %6s %3s %3s %4s %10s %10s %10s\n", "M", "N", "K", "tA", "tB", "pkB", "GF/s 1t", "1t cpu", "GF/s 2t");
  for (const Shape& s : shapes) {
    // About a second per measurement at 100 GFLOP/s.
    const double work = 2.0 * static_cast<double>(s.m * s.n * s.k);
    const int r = std::clamp(static_cast<int>(1e11 / std::max(work, 1.0)), 5, 2000);
    double g1 = bench(&p1, s, r);
    double c1 = bench(&p1, s, r, true);
    double g2 = bench(&p2, s, r);
    std::printf("%6lld %6lld %6lld %3d %3d %4d %10.1f %10.1f %10.1f\n", static_cast<long long>(s.m),
                static_cast<long long>(s.n), static_cast<long long>(s.k), s.ta, s.tb, s.packed_b, g1, c1, g2);
  }
  return 0;
}
