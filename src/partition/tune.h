// Measured costs for cost-based placement. A candidate (one node, or a
// region of several) is compiled on a backend, loaded and run on this
// machine; its time per run is kept in a cache file keyed by the candidate's
// content (ops, attributes, wiring, dtypes and shapes — not weight values),
// the backend, its version and the machine (CPU model, ISA flags, cores and
// threads: MachineProfile::key), so every later compile on this machine — of
// this model or of another with the same layer — reuses it. The machine's
// calibration (machine.h) lives in the same file.
//
// Cache file: JSON {"format": "tessera-tune", "version": 2,
//   "entries": {KEY: {"us": time per run, "runs": n}},
//   "machines": {MACHINE_KEY: {"cpu", "isa", "cores", "threads", "peak_gflops", "gemm_gflops",
//                              "bandwidth_gbps", "wake_us", "clock_ghz", "launch_us": {BACKEND: us},
//                              "handoff_us": {..}}},
//   "verdicts": {KEY: plan name}}  (the end-to-end check's, optional).
// Saving merges: under an exclusive lock on FILE.lock it re-reads the file,
// adds what this process measured, writes a temporary file and renames it, so
// processes that measure at the same time all keep their entries. A missing
// file is an empty cache; a damaged one (or one of another format version) is
// ignored with a warning and rewritten on save.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "artifact/program.h"
#include "backends/backend.h"
#include "ir/graph.h"
#include "partition/machine.h"
#include "util/status.h"

namespace tessera::partition {

// Content key of a standalone region graph (hex digest).
std::string region_key(const Graph& rg);

// $TESSERA_TUNE_CACHE, else $XDG_CACHE_HOME/tessera/tune.json, else
// $HOME/.cache/tessera/tune.json ("" when none of them is set).
std::string default_tune_cache_path();

class TuneCache {
 public:
  TuneCache() = default;
  // Reads `path`; `warning` gets a line when an existing file is unusable.
  static TuneCache Open(const std::string& path, std::string* warning);

  struct Hit {
    double us = 0;
    bool from_file = false;  // read from the file, not measured by this process
  };
  std::optional<Hit> get(const std::string& region, const Backend& b, const std::string& machine) const;
  void put(const std::string& region, const Backend& b, const std::string& machine, double us, int runs);

  // The calibration of machine `key`, if cached.
  std::optional<MachineProfile> machine(const std::string& key) const;
  void put_machine(const MachineProfile& m);

  // A verdict of the end-to-end check (which plan of a model ran fastest on
  // this machine), by a key the caller makes.
  std::optional<std::string> verdict(const std::string& key) const;
  void put_verdict(const std::string& key, const std::string& plan);

  // Writes what was added since Open, merged with what the file holds now
  // (creating its directory). No-op when nothing was added.
  Status save();

  const std::string& path() const { return path_; }
  size_t size() const { return entries_.size(); }

 private:
  static std::string entry_key(const std::string& region, const Backend& b, const std::string& machine);
  struct Entry {
    double us = 0;
    int runs = 0;
    bool from_file = false;
  };
  std::string path_;
  std::map<std::string, Entry> entries_;
  std::map<std::string, MachineProfile> machines_;
  std::map<std::string, Entry> added_;              // this process's measurements
  std::map<std::string, MachineProfile> added_machines_;
  std::map<std::string, std::string> verdicts_, added_verdicts_;
  bool rewrite_ = false;  // the file was unusable: replace it
};

// How long measuring may take and how many candidates it may measure, counted
// on a clock that tests replace.
struct MeasureBudget {
  double limit_us = 3e6;          // measuring time, all candidates together
  int max_measurements = 1 << 30;
  std::function<double()> clock;  // microseconds; default: a steady clock
  double spent_us = 0;
  int measurements = 0;

  double now() const;
  bool exhausted() const { return spent_us >= limit_us || measurements >= max_measurements; }
};

struct Measurement {
  double us = 0;         // lower quartile of the timed runs
  int runs = 0;
  bool cut_short = false;  // stopped early: slower than `give_up_us`
};

// How long to time a candidate.
struct MeasureSpec {
  // Warm-up: at least `warmup_runs` runs and `warmup_us`; then at least
  // `min_runs` runs and `min_us` (at most 200 runs or `max_us`).
  int warmup_runs = 3, min_runs = 10;
  double warmup_us = 20e3, min_us = 60e3, max_us = 2e6;
  // Stop as soon as a run past the first warm-up takes longer than this
  // (0: never): a candidate that slow cannot win.
  double give_up_us = 0;

  static MeasureSpec Thorough() { return {}; }  // --tune
  // Measuring by default: warm-up until 2 runs and 2 ms (a freshly loaded
  // engine's first runs fault in its memory and wake its threads), then a
  // long candidate gets three timed runs, a short one as many as 3 ms allow.
  static MeasureSpec Quick() { return {2, 3, 2e3, 3e3, 300e3, 0}; }
};

// Compiles the region model `model` (the serialized `rg`) on `b`, loads it
// with `rg`'s constants and `threads` threads, runs it on random inputs as
// `spec` says and returns the lower quartile. `blob` receives the compiled
// blob so the caller can reuse it.
Expected<Measurement> measure_region(const Backend& b, const Graph& rg, const std::string& model,
                                     const std::string& options, int threads, Blob* blob,
                                     const MeasureSpec& spec = MeasureSpec::Thorough());

}  // namespace tessera::partition
