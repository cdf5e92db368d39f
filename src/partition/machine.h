// The machine placement runs on. Input: the CPU (its model name and ISA flags
// from /proc/cpuinfo, its online cores), the thread count, and the backends.
// Output: a MachineProfile with what the cost model and the backends'
// estimates need to price work on this machine — the fp32 FMA peak of one
// thread, what the native SGEMM reaches, the streaming bandwidth, the time to
// wake a sleeping thread, and per backend the fixed cost of one engine run and
// (for OpenMP engines) of handing a run over to another pool. Method: each
// figure is a short micro-measurement (best of a few repeats, well under a
// second in all), taken once per machine and kept in the measurement cache
// (tune.h); with measuring off, nominal figures derived from the ISA stand in
// until a calibration is cached. No figure fitted on one CPU is used on
// another: cached figures are keyed by machine_key().
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "tessera/backend.h"
#include "util/status.h"

namespace tessera::partition {

struct MachineProfile {
  // Identity (the key).
  std::string cpu;  // model name
  std::string isa;  // comma-separated features that matter for kernels ("avx2,fma,avx512f,...")
  int cores = 1;    // online CPUs
  int threads = 1;  // threads the figures below are for

  // Figures. `measured` is false while they are nominal.
  bool measured = false;
  double peak_gflops = 0;     // fp32 FMA peak of one thread
  double gemm_gflops = 0;     // native SGEMM on a cache-friendly large product, one thread
  double bandwidth_gbps = 0;  // streaming a + b -> c with `threads` threads
  double wake_us = 0;         // waking a sleeping thread (half a condition-variable round trip)
  double clock_ghz = 0;       // one core's clock under load (a chain of dependent adds)
  // Per backend (backend_key()): fixed cost of one run() of a trivial engine
  // with `threads` threads; and for engines with threads of their own, what
  // one hand-over between them and native's pool costs (half the extra time
  // of alternating runs over each alone: workers that still spin hold cores
  // the other pool needs, and sleeping ones must be woken).
  std::map<std::string, double> launch_us;
  std::map<std::string, double> handoff_us;

  std::string key() const;  // digest of cpu, isa, cores, threads
  // One line: "AMD EPYC 9R14, 2 cores, 2 threads: peak 115 GFLOP/s/thread, ..."
  std::string str() const;
};

// "name|version": calibration figures belong to one build of a backend.
std::string backend_key(const Backend& b);

// Whether `isa` (MachineProfile::isa) names feature `f` ("avx512_vnni").
bool has_feature(const std::string& isa, const std::string& f);

// This CPU, `threads` threads, with nominal figures (measured = false).
MachineProfile identify_machine(int threads);

// Measures every figure `m` lacks for `backends` (the machine-wide ones when
// m->measured is false; launch and hand-over per backend when missing).
// Returns true when it measured anything.
bool calibrate_machine(MachineProfile* m, const std::vector<std::shared_ptr<const Backend>>& backends);

// The ABI's view of `m` for backend `b` (strings point into `m`).
tessera_machine_t machine_abi(const MachineProfile& m, const Backend& b);

// Threads of other processes ready to run right now, averaged over a few
// samples of /proc/loadavg (0 when unknown). Measurements taken while the
// machine is this busy say more about the other processes than about the
// engines: the caller keeps them out of the cache.
double other_runnable_threads();

// The single micro-measurements (exposed for tests and bench/).
double measure_peak_gflops();
double measure_gemm_gflops();
double measure_bandwidth_gbps(int threads);
double measure_wake_us();
double measure_clock_ghz();
Expected<double> measure_launch_us(const Backend& b, int threads);
Expected<double> measure_handoff_us(const Backend& engine, const Backend& native, int threads);

}  // namespace tessera::partition
