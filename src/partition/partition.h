// The partitioner: cuts a model into regions, places each on a backend,
// compiles every external region ahead of time and returns the Program the
// runtime loads (and the artifact stores), plus a report of every decision.
//
// Steps (one file each, numbered in partitioner.cc):
//   1. capability   ask every backend about every node (capability.cc)
//   1b. costs       every node's estimated time on every backend (cost.cc),
//                   and, for the main graph under cost-based placement, the
//                   set of backends whose plan costs least
//   2. placement    choose a backend per node or composite (placement.cc)
//   3. regions      maximal convex same-backend regions (regions.cc)
//   4. pruning      regions too small, without compute, or (cost-based)
//                   slower with their boundary than elsewhere fall back
//   5. trial compile a region its backend fails on goes to the next candidate
//   6. lowering     external regions become Region nodes of the glue graph
//                   (extract.cc); If/Loop/Scan bodies are partitioned the same
//                   way, recursively
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "artifact/program.h"
#include "backends/backend.h"
#include "ir/graph.h"
#include "util/status.h"

namespace tessera {

namespace partition {
class TuneCache;
struct MeasureBudget;
struct MachineProfile;
}

// How a node's backend is chosen among those that can run it.
enum class PlacementPolicy {
  kCost,      // least estimated (or measured) time, boundaries included
  kPriority,  // the first in --backends order
};

// What cost-based placement may measure on this machine (tune.h).
enum class MeasureMode {
  kOff,      // nothing: estimates, and measurements already in the cache
  kDefault,  // the nodes and regions that matter, within a budget
  kFull,     // every candidate region it prices (--tune), thoroughly
};

struct PlaceRule {
  std::string key;      // an op type ("Conv") or a node name; node names win
  std::string backend;
};

struct PartitionOptions {
  // Priority order; native last (resolve_backends guarantees it).
  std::vector<std::shared_ptr<const Backend>> backends;
  std::vector<PlaceRule> place;
  // An external region with fewer nodes than this falls back unless it holds
  // a heavy op (Conv, MatMul, Gemm, pooling, RNNs...). 0 keeps every region.
  // Regions without any compute (only reshapes, casts, shape arithmetic)
  // always fall back when this is > 0.
  int min_region_nodes = 2;
  std::string backend_options;  // passed to every compile, recorded in the artifact
  int num_threads = 1;          // for cost estimates and measurements
  PlacementPolicy policy = PlacementPolicy::kCost;
  // Measurements to use in place of estimates (may be null: nothing is read
  // or measured). `measure` says what is measured now and added to it.
  partition::TuneCache* tune_cache = nullptr;
  MeasureMode measure = MeasureMode::kOff;
  // kDefault's limit (null: MeasureBudget's defaults).
  partition::MeasureBudget* budget = nullptr;
  // The machine's figures for estimates (null: this CPU's nominal figures).
  const partition::MachineProfile* machine = nullptr;
  // Called as regions compile: (done, total, what).
  std::function<void(int, int, const std::string&)> progress;
  // Cost-based: at every graph level, take this backend set's plan instead
  // of choosing one (the end-to-end check builds the alternatives it times
  // this way). Backends not in the list are ignored; native is always in.
  struct ForcedPlan {
    std::vector<std::string> backends;
    bool engine_first = false;
    bool cliffs_to_native = false;  // with engine_first: the variant that leaves the engine's cliffs to native
  };
  std::optional<ForcedPlan> force;
  // The process's OpenMP engines spin between primitives, whatever this placement picks (a bucket compiled at run
  // time, in the process that runs it, after libgomp read its policy or in its stead): backend sets that need OpenMP
  // to wait passively beside another pooled engine are not candidates, since they would run beside spinning workers.
  bool openmp_spins = false;
};

// One backend a region could have gone to, with its cost there.
struct CostOption {
  std::string backend;
  double us = 0;          // region time plus its boundary crossings
  bool measured = false;  // from --tune (or its cache), else estimated
};

// One region of the final placement.
struct RegionInfo {
  int id = 0;                 // global, in report order
  std::string graph;          // "main" or "node 'loop' body"
  std::string backend;
  int engine = -1;            // index into Program::engines, -1 for native
  std::vector<std::string> nodes;             // node names
  std::map<std::string, int> op_histogram;    // op type -> count
  std::vector<std::string> inputs, outputs;   // boundary values
  size_t blob_bytes = 0;
  // A device backend's region: bytes copied between host and device per run (its inputs made anywhere but on
  // its device, its outputs read anywhere else or returned); values passing between regions of one device stay.
  double crossing_bytes = 0;
  std::vector<CostOption> considered;  // cheapest first; the winner is `backend`
  std::string decision;                // why the winner won
};

// A backend set the cost-based placer priced for the main graph.
struct SetOption {
  std::vector<std::string> backends;
  double us = 0;
  bool chosen = false;
  // The plan: "cost" (each node's cheapest backend, then relocation),
  // "engine first" (the one engine takes every node it runs, as
  // `--backends ENGINE,native --placement priority` would) or
  // kEngineFirstCliffsNative (that, but for the nodes priced over 4x native
  // on the engine).
  std::string plan = "cost";
};
inline constexpr const char* kEngineFirstCliffsNative = "engine first, cliffs native";

// One measured candidate: a node alone, or a region, on one backend.
struct MeasurementInfo {
  std::string graph, backend;
  std::string kind;          // "node" or "region"
  std::string what;          // the node's name, or the region's op histogram
  int nodes = 0;
  double estimated_us = 0;   // the estimate made before any measurement
  double measured_us = 0;
  bool from_cache = false;   // measured by an earlier compile on this machine
  bool cut_short = false;    // stopped early: much slower than an alternative
};

struct Refusal {
  std::string backend, graph, node, op_type, reason;
};

// A drawable view of the main graph: nodes with their backend and region.
struct PlacedNode {
  std::string name, op_type, backend;
  int region = -1;
  std::vector<int> preds;  // indices into PartitionReport::placed
};

// A whole program timed end to end against the chosen one (the CLI's check
// after placement, tools/tessera/plan_check.cc).
struct PlanTiming {
  std::string plan;  // "chosen", or "dnnl,native engine first", ...
  double ms = 0;     // lower quartile of its timed runs
  bool kept = false;
};

// A bucket's placement (a program compiled for exact input dims beside the ranges; Program::buckets): its regions,
// their engine indices in the whole program's table.
struct BucketReport {
  std::string shapes;  // its --shape arguments: "x=1,3,48,320"
  std::vector<RegionInfo> regions;
  double estimated_us = 0;
};

// One output of a reduced-precision compile against float32 on the same inputs (api/accuracy.h).
struct OutputAccuracy {
  std::string name;
  int64_t elements = 0;
  double max_abs = 0;    // max |got - want|
  double max_rel = 0;    // max_abs / max |want| (relative to the output's range, not per element)
  double cosine = 1;     // <got, want> / (|got| |want|); 1 when both are zero
  bool compared = true;  // false: not floating point (then max_abs counts any mismatch)
};

struct PartitionReport {
  std::vector<std::string> backends;        // priority order
  std::map<std::string, std::string> colors;  // backend -> its declared colour for pictures
  std::vector<RegionInfo> regions;
  std::vector<Refusal> refusals;            // capability refusals, pins, pruning, compile failures
  std::vector<std::string> events;          // what the placer did, in order ("region 3 (dnnl) pruned: ...")
  std::vector<PlacedNode> placed;
  int num_nodes = 0;                        // main graph nodes
  std::string policy;                       // "cost" or "priority"
  std::vector<SetOption> sets;              // cost-based: backend sets priced, in order tried
  double estimated_us = 0;                  // cost-based: the chosen plan's cost (main graph)
  int measured = 0, cache_hits = 0;         // candidates measured now, measurements reused from the cache
  std::vector<MeasurementInfo> measurements;  // every measurement used, in the order taken
  double measure_seconds = 0;               // time spent measuring
  bool budget_exhausted = false;            // kDefault stopped measuring at its budget
  std::string machine;                      // MachineProfile::str() of the machine priced for
  std::vector<PlanTiming> plan_timings;     // the end-to-end check, when one ran
  double check_seconds = 0;                 // what the check took (building the alternatives included)
  int threads_best = 0, threads_asked = 0;  // the check's thread verdict (ProgramMeta::threads_best), 0: none
  std::vector<BucketReport> buckets;        // one per bucket, in the program's order
  std::string precision = "fp32";           // --precision
  std::vector<OutputAccuracy> accuracy;     // reduced precision: every output against float32
  std::string accuracy_inputs;              // what the accuracy check ran on ("random", or a directory)
};

// `g` must be optimised and shape-inferred. The returned Program's engines
// are compiled; its graph is the glue graph.
Expected<Program> partition_and_compile(Graph g, const PartitionOptions& opts, PartitionReport* report);

// Renderings of a report (report.cc).
std::string report_text(const PartitionReport& r);
std::string report_json(const PartitionReport& r);
std::string report_dot(const PartitionReport& r);

// Parses "--place KEY=BACKEND".
Expected<PlaceRule> parse_place_rule(const std::string& arg);

}  // namespace tessera
