// Seeing inside a run: `bench --profile` (time per op type, slowest nodes,
// also as JSON under "profile") and `run --trace` / `bench --trace` (a
// Chrome-trace file). Schemas and formats: docs/profiling.md.
//
// A profiled run (InferenceSession::run with a RunProfile) gives one entry
// per glue-graph node. A Region node whose backend implements run_profiled
// also carries the engine's steps, each naming the region model's nodes it
// computed — the source graph's node names — so engine time maps back to the
// model's nodes: each step becomes an item of the profile. A region whose
// backend gives no profile stays one item.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "partition/partition.h"
#include "runtime/session.h"

namespace tessera::api {

// What is known about the nodes inside engine regions, from the placement
// report when the model was compiled in this process (an artifact records
// neither): op types by node name, node counts by engine index.
struct RegionNodes {
  std::map<std::string, std::string> op_type;
  std::map<int, int> count;
};
RegionNodes region_nodes_of(const PartitionReport& report);

// One line of a profile.
struct ProfileItem {
  enum class Kind {
    kNode,      // a node the native backend ran
    kStep,      // a step an engine reported (run_profiled)
    kRegion,    // a region whose backend gives no per-node profile
    kOverhead,  // a profiled region's time outside its steps (the call, descriptor checks)
  };
  Kind kind = Kind::kNode;
  std::string name;                // "conv1", "conv1+relu1", "reorder of 'x' jit:uni", "region 3 (xnnpack, 12 nodes)"
  std::vector<std::string> nodes;  // source-graph nodes it covers
  std::string op_type;             // "Conv", "Conv+Relu", "dnnl:reorder" (no node, or op types unknown), "Region"
  std::string backend;             // "native", "dnnl", ...
  std::string what;                // the engine's name for a step ("convolution jit:avx512_core")
  int engine = -1;                 // engine index for steps, regions and overheads
  std::string region;              // "region 3 (dnnl, 30 nodes)" for items of a region
  int region_nodes = -1;           // nodes in that region; -1: unknown
  double start_us = 0, us = 0;     // within the run
};
const char* item_kind_name(ProfileItem::Kind k);  // "node", "step", "region", "overhead"

// The items of one profiled run, in execution order.
std::vector<ProfileItem> profile_items(const InferenceSession& s, const RunProfile& p, const RegionNodes& nodes);

// Medians over profiled runs.
struct ProfileSummary {
  struct OpType {
    std::string op_type, backend;
    double us = 0;  // sum of its items' medians
    int nodes = 0;  // distinct nodes its items cover
    int items = 0;
  };
  struct Region {
    int engine = -1;
    std::string name, backend;
    int nodes = -1;  // -1: unknown
    bool profiled = false;
    int steps = 0;
    double us = 0, outside_us = 0;  // medians: the whole region, the part outside its steps
  };
  int runs = 0;
  double total_us = 0;
  std::vector<ProfileItem> items;  // execution order; `us` is the median over the runs, start_us the first run's
  std::vector<OpType> op_types;    // slowest first
  std::vector<Region> regions;     // engine order
};
ProfileSummary summarize(const std::vector<std::vector<ProfileItem>>& runs);

std::string profile_text(const ProfileSummary& p);
// The "profile" object of `bench --json`.
std::string profile_json(const ProfileSummary& p);

// --trace FILE is refused before anything runs when FILE cannot be written:
// a directory, or in a directory that does not exist.
Status check_trace_path(const std::string& path);

// Writes the profiled runs as a Chrome trace (traceEvents, "ph":"X" slices in
// microseconds): one track, a slice per run, per glue-graph node and per
// region, the steps of a region nested in it. `label` names the process.
Status write_trace(const std::string& path, const std::string& label, const std::vector<RunProfile>& runs,
                   const std::vector<std::vector<ProfileItem>>& items, const InferenceSession& s);

}  // namespace tessera::api
