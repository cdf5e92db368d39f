// Measured costs for cost-based placement (`tessera compile --tune`). A
// candidate region is compiled on a backend, loaded and run on this machine;
// the median time per run is kept in a cache file keyed by the region's
// content (ops, attributes, wiring, dtypes and shapes — not weight values),
// the backend, its version and the thread count, so a later compile of the
// same model, or of another model with the same region, reuses it.
//
// Cache file: JSON {"format": "tessera-tune", "version": 1, "entries": {KEY:
// {"us": time per run, "runs": n}}}, written atomically (temporary file + rename).
// A missing file is an empty cache; a damaged one is ignored with a warning
// and rewritten on save.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "artifact/program.h"
#include "backends/backend.h"
#include "ir/graph.h"
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
  std::optional<Hit> get(const std::string& region, const Backend& b, int threads) const;
  void put(const std::string& region, const Backend& b, int threads, double us, int runs);
  // Writes the file when something was added (creating its directory).
  Status save() const;

  const std::string& path() const { return path_; }
  size_t size() const { return entries_.size(); }

 private:
  static std::string entry_key(const std::string& region, const Backend& b, int threads);
  struct Entry {
    double us = 0;
    int runs = 0;
    bool from_file = false;
  };
  std::string path_;
  std::map<std::string, Entry> entries_;
  bool dirty_ = false;
};

struct Measurement {
  double us = 0;  // lower quartile of the timed runs
  int runs = 0;
};

// Compiles the region model `model` (the serialized `rg`) on `b`, loads it
// with `rg`'s constants and `threads` threads, runs it on random inputs
// (warm-up, then at least 10 runs and 60 ms) and returns the lower quartile.
// `blob` receives the compiled blob so the caller can reuse it.
Expected<Measurement> measure_region(const Backend& b, const Graph& rg, const std::string& model,
                                     const std::string& options, int threads, Blob* blob);

}  // namespace tessera::partition
