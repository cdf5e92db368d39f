// From a model to a session or an artifact, the way `tessera run` and
// `tessera compile` do it: import (a path or bytes), apply shape pins,
// optimise, partition, compile every engine, check the plan end to end. The
// command line and the C API (include/tessera/tessera.h) both build on this,
// so a program gets exactly what the CLI gives.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/accuracy.h"
#include "artifact/program.h"
#include "ir/graph.h"
#include "partition/partition.h"
#include "runtime/session.h"
#include "util/status.h"

namespace tessera::api {

// What to compile for and how; the CLI's flags of the same names.
struct CompileOptions {
  std::string backends;             // --backends: "dnnl,native"; empty: every backend found
  std::vector<std::string> shapes;  // --shape: "NAME=D0,D1,..."
  std::vector<std::string> places;  // --place: "OP_OR_NODE=BACKEND"
  PlacementPolicy policy = PlacementPolicy::kCost;
  MeasureMode measure = MeasureMode::kDefault;  // see default_measure()
  double tune_budget_s = -1;                    // --tune-budget; < 0: the default budget
  std::optional<std::string> tune_cache;        // --tune-cache; unset: the default path; "": none
  int min_region_nodes = -1;                    // --min-region-nodes; < 0: the partitioner's default
  std::string backend_options;                  // --backend-options "K=V;.."
  int threads = 0;                              // --threads; 0: the hardware threads
  size_t max_memory = 0;                        // --max-memory: bytes one run may hold; 0: no limit
  // --precision: what Conv/ConvTranspose/MatMul/Gemm compute in where an engine can (handed to every backend's
  // compile as "precision=bf16"); refused where the CPU lacks the instructions. Below fp32, the compiled model is
  // run beside the float32 model (native) on the same inputs and every output's error goes into the report.
  Precision precision = Precision::kFp32;
  AccuracyBudget accuracy_budget;  // --accuracy-budget: a compile past it fails, naming the output
  std::string accuracy_inputs;     // --input-dir of compile/bench: input_<i>.pb for that check; "": random inputs
  // --input-dir of run/bench: for an ONNX model, each input dim it leaves symbolic takes its size in
  // input_<i>.pb there, as if given with --shape (engines are compiled for the shapes that will run); "": none.
  std::string shapes_from_inputs;
  // Sessions from open_session: a shape the program has no bucket for, once its runs have repaid a compile
  // (SessionOptions::bucket_payback_ms), is compiled as a bucket of its own in the background
  // (SessionOptions::compile_bucket) and kept in the engine cache on disk (engine_cache_dir). false: such shapes
  // get native plans only.
  bool background_buckets = true;
  // Background buckets measure their candidates as `measure` says, as a compile does. false (the default): estimates
  // and the tune cache's measurements only, since measuring beside the session's runs would mislead; true for a
  // caller that waits for them with no runs going on (bench's warm-up). Kept apart in the engine cache.
  bool measure_buckets = false;
  // Set by the session's bucket compiler (not a user option): the compile places a bucket for the process that runs
  // it, whose OpenMP policy is one for the whole process. It takes a single engine's policy (a bounded spin, as a
  // compile does) and no backend set that would need OpenMP to wait passively (PartitionOptions::openmp_spins). Kept
  // apart in the engine cache.
  bool openmp_spins = false;
  // The engine cache's bound in bytes: past it, the entries used longest ago are removed. 0: the environment's
  // TESSERA_ENGINE_CACHE_MAX_MB megabytes, else 4096.
  uint64_t engine_cache_max_bytes = 0;
  // --bucket-step: a model whose one varying input has --shape ranges along spatial dims gets masked buckets
  // (passes/masked_bucket.h), one every this many along each ranged dim, compiled ahead with the backends the
  // largest one is placed on; 0: none. None either where more than kMaxMaskedBuckets would be needed.
  int64_t bucket_step = 32;
  // Progress while compiling (done, total, what); total 0 when unknown.
  std::function<void(int, int, const std::string&)> progress;
  // One-line warnings (the CLI prints them as "tessera: warning: ...").
  std::function<void(const std::string&)> warn;
};

// kOff when TESSERA_TUNE=0 is set, else kDefault.
MeasureMode default_measure();

// A model given by path or by its bytes (an ONNX model or a .tsr artifact,
// told apart by content). `name` names it in messages and provenance.
struct ModelSource {
  std::string path;   // empty when given as bytes
  std::string bytes;  // used when path is empty
  std::string name() const { return path.empty() ? "<memory>" : path; }
};

// True when the model is a compiled artifact.
Expected<bool> is_artifact(const ModelSource& m);

// What `--shape` arguments say per input: one range per dim ("NAME=D0,D1,..", each dim a size or MIN..MAX; an
// input given several times spans them all, so exact shapes may be named beside a range).
using InputRanges = std::map<std::string, std::vector<DimRange>>;
Expected<InputRanges> parse_shapes(const std::vector<std::string>& shapes);

// The `--shape` argument that pins input `name` to exact `dims`: "NAME=D0,D1,..".
std::string shape_spec(const std::string& name, const Dims& dims);

// Applies `--shape` arguments to the graph's inputs: a dim with one size is pinned to it; a dim with a range stays
// symbolic (keeping the model's name for it, so that dims it equates stay equal).
Status apply_shapes(Graph& g, const std::vector<std::string>& shapes);

// Imports an ONNX model (an artifact is refused: `what` says which operation
// needs an ONNX model), applies `shapes` and optimises it.
Expected<Graph> load_graph(const ModelSource& m, const std::vector<std::string>& shapes, const std::string& what);

// Partitions and compiles an optimised graph (measuring, caching and checking
// the plan end to end as CompileOptions say); `report` (optional) receives the
// placement report.
Expected<Program> compile_graph(Graph g, const std::string& source, const CompileOptions& o, PartitionReport* report);

// The buckets `--shape` names: an input given with a range and with exact shapes beside it gets a bucket per exact
// shape (the k-th exact shape of every such input makes bucket k). Each bucket is a list of `--shape` arguments,
// every one exact. No ranges: none.
Expected<std::vector<std::vector<std::string>>> bucket_shapes(const std::vector<std::string>& shapes);

// compile_graph on the model `g` was loaded from (with o.shapes), then, for every bucket o.shapes names, the model
// compiled for the bucket's exact dims and added to the program (add_bucket); `report` gets each bucket's regions.
Expected<Program> compile_model(const ModelSource& m, Graph g, const CompileOptions& o, PartitionReport* report);

// Where compiled buckets are cached: "engines" beside the tune cache ("" when there is none: nothing is cached).
// Entries are .tsr files named by a digest of the model's bytes, the dims, the backends and their versions, the
// compile options and the machine; each is read with the artifact reader's checks, and a damaged one is recompiled.
std::string engine_cache_dir(const CompileOptions& o);

// A session for a model: an artifact is loaded as compiled; an ONNX model runs
// natively when only native is asked for (or found), else it is compiled in
// memory first. `report` (optional) receives the placement report when one is
// made.
Expected<std::unique_ptr<InferenceSession>> open_session(const ModelSource& m, const CompileOptions& o,
                                                         const SessionOptions& so, PartitionReport* report = nullptr);

// Random inputs for models run without data: symbolic dims become 1, floats
// are uniform in [-1, 1), integers are 0 or 1 (valid ids and mask values).
Expected<std::vector<Tensor>> random_inputs(const InferenceSession& s, uint32_t seed);

}  // namespace tessera::api
