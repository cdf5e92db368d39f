// Working structures shared by the partitioner's steps (not public API).
#pragma once

#include <functional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "partition/partition.h"

namespace tessera::partition {

using BackendList = std::vector<std::shared_ptr<const Backend>>;

// The graphs enclosing a nested body, innermost first: what a body reads from
// outside resolves here, with the key its constants have in
// Program::constants (the level's key prefix + the name). ONNX forbids a body
// to shadow an outer name, so the first match is the one.
struct Scope {
  const Graph* graph = nullptr;
  std::string key_prefix;
  const Scope* parent = nullptr;

  const ValueInfo* info(const std::string& v) const {
    for (const Scope* s = this; s; s = s->parent) {
      if (const ValueInfo* vi = s->graph->info(v)) return vi;
    }
    return nullptr;
  }
  const Tensor* constant(const std::string& v, std::string* key) const {
    for (const Scope* s = this; s; s = s->parent) {
      if (const Tensor* t = s->graph->constant(v)) {
        if (key) *key = s->key_prefix + v;
        return t;
      }
    }
    return nullptr;
  }
};

// Direct dependencies between the nodes of one graph level: preds[v] lists
// the nodes producing a value v reads, directly or from inside a nested body.
// Sorted, without duplicates.
std::vector<std::vector<int>> node_predecessors(const Graph& g);

// Values node n reads: its inputs plus what its nested bodies capture.
std::vector<std::string> node_reads(const Node& n);

// ---- step 1: capability (capability.cc) --------------------------------

struct CapabilityTable {
  // [backend][node]
  std::vector<std::vector<char>> supported;
  std::vector<std::vector<std::string>> reason;
  // [backend]: composites whose members are all supported and that are convex.
  std::vector<std::vector<CompositePattern>> composites;
};

// A graph level as a standalone model: a nested body's captured outer values
// become extra graph inputs typed by `outer`, or initializers when they are
// constants there. The main graph (outer == null) is returned as is.
Graph standalone_graph(const Graph& g, const Scope* outer);

// Asks every backend about every node of `g` (a standalone graph). Native is
// answered in-process; external backends also get a host-side refusal for
// nodes whose values lack a concrete shape (engines are compiled for fixed
// shapes).
CapabilityTable query_capability(const Graph& g, const BackendList& backends);

// ---- step 2: placement (placement.cc) ----------------------------------

struct Placement {
  std::vector<int> backend_of;              // [node] -> backend index
  std::vector<int> unit_of;                 // [node] -> unit, units in topological order
  int num_units = 0;
  std::vector<std::vector<int>> unit_succ;  // [unit] -> successor units
  std::vector<int> unit_backend;            // [unit]
  std::vector<std::string> unit_pattern;    // composite name, "" for single nodes
  std::vector<std::string> events;          // composites left unused, and why
};

// allowed[node][backend]: not excluded by pruning or failed compiles.
// pinned[node]: backend index a --place rule asks for, or -1.
// order[node]: every backend index, most preferred first; empty means the
// priority order for every node.
Placement place_nodes(const Graph& g, const std::vector<std::vector<int>>& preds, const CapabilityTable& cap,
                      const std::vector<std::vector<char>>& allowed, const std::vector<int>& pinned,
                      const std::vector<std::vector<int>>& order = {});

// ---- extraction and lowering (extract.cc) ------------------------------

struct RegionCut {
  std::vector<int> nodes;             // node indices, in graph order
  std::vector<std::string> inputs;    // boundary inputs (no constants), first-use order
  std::vector<std::string> outputs;   // values used outside or graph outputs, production order
  std::vector<std::string> constants; // constants the region's nodes (and their bodies) read, own or outer
  std::vector<std::string> constant_keys;  // their keys in Program::constants
};

// Computes the boundary of the node set `nodes` (membership in `in_region`)
// of graph `g`, whose level's key prefix is `key_prefix`.
RegionCut cut_region(const Graph& g, std::vector<int> nodes, const std::vector<char>& in_region,
                     const Scope* outer = nullptr, const std::string& key_prefix = "");

// The region as a standalone graph named `name`, every value typed, only the
// constants it reads. `outer` types values captured from enclosing graphs.
Graph region_graph(const Graph& g, const RegionCut& cut, const std::string& name, const Scope* outer);

}  // namespace tessera::partition
