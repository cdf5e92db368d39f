// A compiled model: what `tessera compile` produces, what a .tsr artifact
// stores, and what the runtime loads.
//
//   graph      the glue graph: the nodes placed on the native backend, plus
//              one node of op type "Region" (domain "ai.tessera") per
//              external region; its attribute `engine` indexes `engines`.
//   constants  every top-level constant, each stored once, whether the glue
//              graph, one engine or several read it. graph.constants holds
//              the glue graph's own subset (sharing storage).
//   engines    one compiled blob per external region, with the value names it
//              exchanges with the glue graph and the constants it is loaded
//              with.
//   buckets    glue graphs compiled for exact input shapes inside the ranges
//              the main graph serves (`--shape x=1,3,48,32..2048 --shape
//              x=1,3,48,320`): engines need static shapes, so a range runs on
//              native while each bucket has engines of its own. Their Region
//              nodes index the same engine table; their constants are the
//              program's.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/tensor.h"
#include "util/status.h"

namespace tessera {

// Bytes that are either owned or borrowed from a mapping kept alive by `keep`.
struct Blob {
  const uint8_t* data = nullptr;
  size_t size = 0;
  std::shared_ptr<const void> keep;

  static Blob Copy(const void* data, size_t size);
  std::string_view view() const { return {reinterpret_cast<const char*>(data), size}; }
};

struct ConstantRef {
  std::string key;   // key in Program::constants
  std::string name;  // the initializer name inside the region model
};

struct EngineSpec {
  std::string region;           // "region_3" (report and error messages)
  std::string backend;          // backend name ("dnnl")
  std::string backend_version;  // tessera_backend_t::version() at compile time ("" if none)
  std::string options;          // options string given to compile
  std::vector<std::string> inputs;   // glue-graph value names, in the region model's input order
  std::vector<std::string> outputs;  // glue-graph value names, in the region model's output order
  std::vector<ConstantRef> constants;
  Blob blob;
};

struct BackendRecord {
  std::string name, version, options;
  std::string threading;  // the backend's declared threading ("openmp", "pool", "caller"; "" or "unknown")
};

// The value of `key` in "key=value;key=value" backend options, or "".
std::string backend_option(const std::string& options, const std::string& key);
// `options` with "key=value" appended.
std::string with_backend_option(const std::string& options, const std::string& key, const std::string& value);

struct ProgramMeta {
  std::string producer = "tessera";
  std::string producer_version;                  // TESSERA_VERSION
  std::string source_model;                      // file name the program was compiled from
  std::vector<BackendRecord> backends;           // the --backends list, with versions
  std::vector<std::string> shape_overrides;      // the --shape arguments, verbatim
  // The end-to-end check's thread verdict: asked for `threads_measured` threads (the compile's), the program ran
  // fastest here on `threads_best`, fewer (its work too small to pay for waking the other threads). A session asked
  // for threads_measured threads runs on threads_best. 0: no verdict.
  int threads_measured = 0;
  int threads_best = 0;

  // The precision the program was compiled at (every backend's "precision" option; "" for fp32).
  std::string precision() const {
    return backends.empty() ? "" : backend_option(backends.front().options, "precision");
  }
};

// A glue graph specialised for exact input dims, or for every dims from `lower` to `inputs` (a masked bucket,
// passes/masked_bucket.h: its engines compiled at `inputs`, a request padded to them and its results sliced back).
struct ProgramBucket {
  std::vector<Dims> inputs;  // per graph input, in order
  Graph graph;
  std::vector<Dims> lower;  // a masked bucket: per graph input, the least dims it serves; empty: `inputs` alone
};

struct Program {
  Graph graph;
  std::map<std::string, Tensor> constants;
  std::vector<EngineSpec> engines;
  ProgramMeta meta;
  std::vector<ProgramBucket> buckets;
};

// Adds `bucket` (a program compiled from the same model at the exact input dims `inputs`) to `main` as a bucket:
// its engines join main's table (its Region nodes renumbered, regions named "bucketN/region_K"), its constants join
// main's (a key main holds with other contents is renamed).
Status add_bucket(Program& main, Program bucket, std::vector<Dims> inputs, std::vector<Dims> lower = {});

// The engine indices the Region nodes of `g` (bodies included) name, in order, each once.
std::vector<int64_t> engines_used(const Graph& g);

// "[1,3,48,320], [1,7]": a bucket's input dims; with `lower`, a masked bucket's: "[1,3,48,289..320], [1,7]".
std::string bucket_str(const std::vector<Dims>& inputs, const std::vector<Dims>& lower = {});

}  // namespace tessera
