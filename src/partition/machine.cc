#include "partition/machine.h"

#include <immintrin.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "ir/graph.h"
#include "onnx/onnx_export.h"
#include "ops/kernels/gemm.h"

namespace tessera::partition {

namespace {

using Clock = std::chrono::steady_clock;

double since_us(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

// ISA features that decide which kernels an engine can use, in this order.
const char* const kIsaFeatures[] = {"sse4_2",      "avx",         "avx2",        "fma",         "f16c",
                                    "avx512f",     "avx512bw",    "avx512vl",    "avx512dq",    "avx512_vnni",
                                    "avx512_bf16", "avx512_fp16", "avx_vnni",    "amx_tile",    "amx_bf16",
                                    "amx_int8"};

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// ---- FMA peak ----------------------------------------------------------------

// Twelve independent FMA chains (more than latency x throughput, so the FMA
// pipes never wait), folded into the result so nothing is optimised away. The
// widest vector the CPU has is chosen at run time.
constexpr int kChains = 12;

__attribute__((target("avx512f"), noinline)) float fma_chains_avx512(long iters) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(1.0f + 0.001f * static_cast<float>(i));
  const __m512 mul = _mm512_set1_ps(0.999999f), add = _mm512_set1_ps(1e-3f);
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], mul, add);
  }
  alignas(64) float t[16];
  __m512 s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_ps(s, acc[i]);
  _mm512_store_ps(t, s);
  float r = 0;
  for (float x : t) r += x;
  return r;
}

__attribute__((target("avx2,fma"), noinline)) float fma_chains_avx2(long iters) {
  __m256 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_ps(1.0f + 0.001f * static_cast<float>(i));
  const __m256 mul = _mm256_set1_ps(0.999999f), add = _mm256_set1_ps(1e-3f);
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], mul, add);
  }
  alignas(32) float t[8];
  __m256 s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm256_add_ps(s, acc[i]);
  _mm256_store_ps(t, s);
  float r = 0;
  for (float x : t) r += x;
  return r;
}

// Scalar fallback: 4-wide SSE-free chains the compiler keeps scalar.
__attribute__((noinline)) float fma_chains_scalar(long iters) {
  float acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = 1.0f + 0.001f * static_cast<float>(i);
  for (long it = 0; it < iters; ++it) {
    for (int i = 0; i < kChains; ++i) acc[i] = acc[i] * 0.999999f + 1e-3f;
  }
  float r = 0;
  for (float x : acc) r += x;
  return r;
}

volatile float g_sink = 0;

}  // namespace

bool has_feature(const std::string& isa, const std::string& f) {
  std::string padded = "," + isa + ",";
  return padded.find("," + f + ",") != std::string::npos;
}

std::string backend_key(const Backend& b) { return b.name() + "|" + b.version(); }

std::string MachineProfile::key() const {
  std::string id = cpu + "|" + isa + "|" + std::to_string(cores) + "|" + std::to_string(threads);
  char hex[24];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(fnv1a(id)));
  return hex;
}

std::string MachineProfile::str() const {
  char buf[400];
  std::snprintf(buf, sizeof(buf),
                "%s, %d cores, %d threads: %.2f GHz, peak %.0f GFLOP/s/thread, SGEMM %.0f GFLOP/s/thread, bandwidth "
                "%.1f GB/s, wake-up %.1f us%s",
                cpu.empty() ? "unknown CPU" : cpu.c_str(), cores, threads, clock_ghz, peak_gflops, gemm_gflops,
                bandwidth_gbps, wake_us, measured ? "" : " (nominal)");
  std::string s = buf;
  for (const auto& [k, us] : launch_us) {
    std::snprintf(buf, sizeof(buf), "; %s launch %.1f us", k.substr(0, k.find('|')).c_str(), us);
    s += buf;
  }
  for (const auto& [k, us] : handoff_us) {
    std::snprintf(buf, sizeof(buf), "; %s hand-over %.0f us", k.substr(0, k.find('|')).c_str(), us);
    s += buf;
  }
  return s;
}

MachineProfile identify_machine(int threads) {
  MachineProfile m;
  m.threads = std::max(1, threads);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  m.cores = n > 0 ? static_cast<int>(n) : 1;
  std::ifstream f("/proc/cpuinfo");
  std::string line, flags;
  while (std::getline(f, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
    std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "model name" && m.cpu.empty()) m.cpu = value;
    if (key == "flags" && flags.empty()) flags = value;
  }
  std::set<std::string> have;
  std::istringstream fs(flags);
  for (std::string w; fs >> w;) have.insert(w);
  for (const char* feat : kIsaFeatures) {
    if (have.count(feat)) m.isa += (m.isa.empty() ? "" : ",") + std::string(feat);
  }
  // Nominal figures until measured: two FMA pipes at a nominal 3 GHz on the
  // widest vector the ISA has; they only need to rank, and are replaced by a
  // calibration on the first compile that measures.
  const double lanes = has_feature(m.isa, "avx512f") ? 16 : has_feature(m.isa, "fma") ? 8 : 4;
  m.peak_gflops = 2 /*pipes*/ * lanes * 2 /*flops per FMA*/ * 3.0;
  m.gemm_gflops = 0.85 * m.peak_gflops;
  m.bandwidth_gbps = 10.0 * std::min(m.threads, m.cores);
  m.wake_us = 8.0;
  m.clock_ghz = 3.0;
  return m;
}

namespace {

// Threads of this process in state R (running or ready) right now.
int own_running_threads() {
  int n = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    std::ifstream f(entry.path() / "stat");
    std::string line;
    if (!std::getline(f, line)) continue;
    auto close = line.rfind(')');  // the name may hold spaces and parentheses
    if (close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'R') ++n;
  }
  return n;
}

}  // namespace

double other_runnable_threads() {
  double sum = 0;
  int samples = 0;
  for (int i = 0; i < 16; ++i) {
    std::ifstream f("/proc/loadavg");
    std::string a, b, c, running;
    if (!(f >> a >> b >> c >> running)) return 0;
    auto slash = running.find('/');
    if (slash == std::string::npos) return 0;
    const double all = std::atof(running.substr(0, slash).c_str());
    sum += std::max(0.0, all - std::max(1, own_running_threads()));
    ++samples;
    std::this_thread::sleep_for(std::chrono::microseconds(600));
  }
  return samples ? sum / samples : 0;
}

double measure_peak_gflops() {
  long iters = 1 << 20;
  float (*fn)(long) = fma_chains_scalar;
  double lanes = 1;
  if (__builtin_cpu_supports("avx512f")) {
    fn = fma_chains_avx512;
    lanes = 16;
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    fn = fma_chains_avx2;
    lanes = 8;
  }
  g_sink = fn(1 << 14);  // warm up (and let the clock ramp)
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = Clock::now();
    g_sink = fn(iters);
    double us = since_us(t0);
    double gflops = static_cast<double>(iters) * kChains * lanes * 2.0 / (us * 1e3);
    best = std::max(best, gflops);
  }
  return best;
}

double measure_clock_ghz() {
  // Eight dependent 64-bit multiplies per iteration, three cycles each on every x86-64 core since Nehalem and Zen;
  // the loop's own counter runs beside them. (A chain of `add $1` is no clock: Golden Cove and later Intel cores
  // fold immediate adds at rename and ran one at 20 "GHz".)
  constexpr long kIters = 1 << 20;
  constexpr double kCyclesPerIter = 8 * 3;
  auto chain = [](long iters) {
    uint64_t x = 3;
    for (long i = 0; i < iters; ++i) {
      asm volatile(
          "imul %0, %0\n\timul %0, %0\n\timul %0, %0\n\timul %0, %0\n\t"
          "imul %0, %0\n\timul %0, %0\n\timul %0, %0\n\timul %0, %0"
          : "+r"(x));
    }
    return x;
  };
  g_sink = static_cast<float>(chain(kIters / 8));  // let the clock ramp
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = Clock::now();
    g_sink = static_cast<float>(chain(kIters));
    best = std::max(best, kCyclesPerIter * kIters / (since_us(t0) * 1e3));
  }
  return best;
}

double measure_gemm_gflops() {
  // Large enough to run at the kernel's steady rate, small enough to take a
  // few milliseconds.
  constexpr int64_t n = 384;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n, 0.f);
  kernels::sgemm(nullptr, false, false, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = Clock::now();
    kernels::sgemm(nullptr, false, false, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
    double us = since_us(t0);
    best = std::max(best, 2.0 * n * n * n / (us * 1e3));
  }
  g_sink = c[7];
  return best;
}

double measure_bandwidth_gbps(int threads) {
  threads = std::max(1, threads);
  // A working set per thread of a few MiB, like an activation an elementwise
  // op reads and writes.
  constexpr size_t kFloats = 1 << 20;
  std::vector<std::vector<float>> a(static_cast<size_t>(threads)), b(a.size()), c(a.size());
  for (size_t t = 0; t < a.size(); ++t) {
    a[t].assign(kFloats, 1.f);
    b[t].assign(kFloats, 2.f);
    c[t].assign(kFloats, 0.f);
  }
  auto pass = [&](size_t t) {
    float* __restrict pc = c[t].data();
    const float* __restrict pa = a[t].data();
    const float* __restrict pb = b[t].data();
    for (size_t i = 0; i < kFloats; ++i) pc[i] = pa[i] + pb[i];
  };
  // Six passes to settle (page faults, clocks), then the median of nine:
  // single passes over a cache-sized set vary by 3x on a shared machine.
  std::vector<double> rates;
  for (int rep = 0; rep < 15; ++rep) {
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> pool;
    Clock::time_point t0;
    for (size_t t = 1; t < a.size(); ++t) {
      pool.emplace_back([&, t] {
        ready.fetch_add(1);
        while (!go.load(std::memory_order_acquire)) {
        }
        pass(t);
      });
    }
    while (ready.load() + 1 < threads) {
    }
    t0 = Clock::now();
    go.store(true, std::memory_order_release);
    pass(0);
    for (auto& th : pool) th.join();
    double us = since_us(t0);
    if (rep >= 6) rates.push_back(3.0 * sizeof(float) * kFloats * static_cast<double>(threads) / (us * 1e3));
  }
  g_sink = c[0][5];
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

double measure_wake_us() {
  std::mutex mu;
  std::condition_variable cv;
  int turn = 0;
  constexpr int kRounds = 400;
  std::thread other([&] {
    for (int i = 0; i < kRounds; ++i) {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return turn == 1; });
      turn = 0;
      cv.notify_one();
    }
  });
  auto t0 = Clock::now();
  for (int i = 0; i < kRounds; ++i) {
    std::unique_lock<std::mutex> lock(mu);
    turn = 1;
    cv.notify_one();
    cv.wait(lock, [&] { return turn == 0; });
  }
  double us = since_us(t0);
  other.join();
  return us / (2.0 * kRounds);
}

namespace {

// A one-node model: y = op(x) on a float tensor of `dims` (MatMul with a
// constant square weight when op is MatMul).
Expected<std::string> tiny_model(const std::string& op, const Dims& dims, Graph* g) {
  g->name = "calibration";
  g->inputs = {"x"};
  g->outputs = {"y"};
  std::vector<Dim> d(dims.begin(), dims.end());
  g->values["x"] = ValueInfo{DType::kFloat32, Shape(d)};
  g->values["y"] = ValueInfo{DType::kFloat32, Shape(d)};
  Node n;
  n.name = "calibration_" + op;
  n.op_type = op;
  n.inputs = {"x"};
  n.outputs = {"y"};
  if (op == "MatMul") {
    const int64_t k = dims.back();
    Tensor w(DType::kFloat32, Dims{k, k});
    float* p = w.data<float>();
    for (int64_t i = 0; i < k * k; ++i) p[i] = (i % 7 == 0) ? 0.01f : 0.f;
    g->constants["w"] = w;
    g->values["w"] = ValueInfo{DType::kFloat32, Shape(std::vector<Dim>{Dim(k), Dim(k)})};
    n.inputs.push_back("w");
  }
  g->nodes.push_back(std::move(n));
  return export_onnx_bytes(*g);
}

struct Loaded {
  std::shared_ptr<const Engine> engine;
  std::vector<Tensor> ins, outs;
  std::vector<const Tensor*> in_ptrs;
  std::vector<Tensor*> out_ptrs;
  Status run() const { return engine->run(in_ptrs, out_ptrs); }
};

Expected<Loaded> load_tiny(const Backend& b, const std::string& op, const Dims& dims, int threads) {
  Graph g;
  std::string model;
  TSR_ASSIGN_OR_RETURN(model, tiny_model(op, dims, &g));
  Blob blob;
  TSR_ASSIGN_OR_RETURN(blob, b.compile(model, ""));
  std::vector<std::pair<std::string, Tensor>> consts(g.constants.begin(), g.constants.end());
  Loaded l;
  TSR_ASSIGN_OR_RETURN(l.engine, b.load(blob, consts, threads, "calibration on " + b.name()));
  l.ins.emplace_back(DType::kFloat32, dims);
  l.outs.emplace_back(DType::kFloat32, dims);
  std::fill(l.ins[0].data<float>(), l.ins[0].data<float>() + l.ins[0].numel(), 0.5f);
  l.in_ptrs = {&l.ins[0]};
  l.out_ptrs = {&l.outs[0]};
  return l;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

Expected<double> measure_launch_us(const Backend& b, int threads) {
  Loaded l;
  TSR_ASSIGN_OR_RETURN(l, load_tiny(b, "Relu", Dims{1, 16}, threads));
  for (int i = 0; i < 20; ++i) TSR_RETURN_IF_ERROR(l.run());
  std::vector<double> t;
  for (int i = 0; i < 200; ++i) {
    auto t0 = Clock::now();
    TSR_RETURN_IF_ERROR(l.run());
    t.push_back(since_us(t0));
  }
  return median(t);
}

Expected<double> measure_handoff_us(const Backend& engine, const Backend& native, int threads) {
  if (threads < 2) return 0.0;
  // Two products big enough that each pool runs them on all its threads
  // (a few hundred microseconds each).
  const Dims dims{128, 128};
  Loaded a, n;
  TSR_ASSIGN_OR_RETURN(a, load_tiny(engine, "MatMul", dims, threads));
  TSR_ASSIGN_OR_RETURN(n, load_tiny(native, "MatMul", dims, threads));
  auto time_of = [](const std::vector<const Loaded*>& seq, int reps) -> Expected<double> {
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) {
      auto t0 = Clock::now();
      for (const Loaded* l : seq) TSR_RETURN_IF_ERROR(l->run());
      t.push_back(since_us(t0));
    }
    return median(t);
  };
  for (int i = 0; i < 10; ++i) {
    TSR_RETURN_IF_ERROR(a.run());
    TSR_RETURN_IF_ERROR(n.run());
  }
  double ta, tn, pair;
  TSR_ASSIGN_OR_RETURN(ta, time_of({&a}, 30));
  TSR_ASSIGN_OR_RETURN(tn, time_of({&n}, 30));
  TSR_ASSIGN_OR_RETURN(pair, time_of({&a, &n}, 30));
  if (std::getenv("TESSERA_DEBUG_HANDOFF")) std::fprintf(stderr, "handoff %s: a %.1f n %.1f pair %.1f\n", engine.name().c_str(), ta, tn, pair);
  // Two hand-overs per pair (engine -> native -> engine).
  return std::max(0.0, pair - ta - tn) / 2;
}

bool calibrate_machine(MachineProfile* m, const std::vector<std::shared_ptr<const Backend>>& backends) {
  bool did = false;
  if (!m->measured) {
    m->peak_gflops = measure_peak_gflops();
    m->gemm_gflops = measure_gemm_gflops();
    // The first pass of a process runs on freshly mapped memory at about
    // 60 % of the steady rate a model's arena sees: take the second.
    measure_bandwidth_gbps(std::min(m->threads, m->cores));
    m->bandwidth_gbps = measure_bandwidth_gbps(std::min(m->threads, m->cores));
    m->wake_us = measure_wake_us();
    m->clock_ghz = measure_clock_ghz();
    m->measured = true;
    did = true;
  }
  std::shared_ptr<const Backend> native;
  for (const auto& b : backends) {
    if (b->is_native()) native = b;
  }
  for (const auto& b : backends) {
    if (b->is_native()) continue;
    const std::string k = backend_key(*b);
    if (!m->launch_us.count(k)) {
      auto us = measure_launch_us(*b, m->threads);
      m->launch_us[k] = us.ok() ? *us : -1.0;  // -1: this backend could not run the probe
      did = true;
    }
    if (b->threading() != Threading::kCaller && native && !m->handoff_us.count(k)) {
      auto us = measure_handoff_us(*b, *native, m->threads);
      m->handoff_us[k] = us.ok() ? *us : -1.0;
      did = true;
    }
  }
  return did;
}

tessera_machine_t machine_abi(const MachineProfile& m, const Backend& b) {
  tessera_machine_t t{};
  t.struct_size = sizeof(t);
  t.num_threads = m.threads;
  t.peak_gflops = m.peak_gflops;
  t.gemm_gflops = m.gemm_gflops;
  t.bandwidth_gbps = m.bandwidth_gbps;
  auto it = m.launch_us.find(backend_key(b));
  t.launch_us = it != m.launch_us.end() ? it->second : -1.0;
  t.wake_us = m.wake_us;
  t.cpu = m.cpu.c_str();
  t.isa = m.isa.c_str();
  t.clock_ghz = m.clock_ghz;
  return t;
}

}  // namespace tessera::partition
