// The partitioner's driver. Input: an optimised, shape-inferred graph and the
// backends in priority order. Output: a Program (glue graph + compiled
// engines + constants, each stored once) and a report of every decision.
//
// Per graph level (the main graph, then every If/Loop/Scan body left on the
// native backend, recursively):
//   1. capability: every backend's verdict on every node (capability.cc);
//   2. placement: a backend per node or composite, honouring --place pins
//      (placement.cc);
//   3. regions: maximal convex same-backend regions, acyclic between them
//      (regions.cc);
//   4. pruning: an external region without compute, or smaller than
//      --min-region-nodes without a heavy op, gives its nodes back: they are
//      placed again without that backend (back to 2);
//   5. trial compile: every external region is compiled now; a failure is
//      never an error — the region's nodes are placed again without that
//      backend (back to 2) and the failure is reported;
//   6. lowering: native regions stay as nodes of the glue graph, external
//      ones become Region nodes bound to their compiled engine.
// Steps 2-5 repeat until nothing changes; each repetition removes at least
// one (node, backend) pair, so it ends.
#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "ops/region_attrs.h"
#include "partition/cost.h"
#include "partition/partitioner_impl.h"

namespace tessera {

namespace partition {

bool is_heavy(const std::string& op) {
  static const std::set<std::string> kHeavy = {
      "Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "FusedConv", "MatMul", "MatMulInteger",
      "QLinearMatMul", "Gemm", "FusedGemm", "Einsum", "LSTM", "GRU", "RNN", "MaxPool", "AveragePool", "LpPool",
      "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "LayerNormalization", "BatchNormalization",
      "InstanceNormalization", "Softmax", "LogSoftmax", "LRN", "Attention"};
  return kHeavy.count(op) != 0;
}

bool is_data_movement(const std::string& op) {
  static const std::set<std::string> kMove = {
      "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Shape", "Size", "Dropout", "Cast", "CastLike",
      "Expand", "Transpose", "Concat", "Split", "Slice", "Gather", "Tile", "Pad", "DepthToSpace", "SpaceToDepth",
      "ConstantOfShape"};
  return kMove.count(op) != 0;
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

std::vector<int> Partitioner::pins_for(const Graph& g) const {
  std::vector<int> pinned(g.nodes.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    int by_op = -1, by_name = -1;
    for (const auto& rule : opts_.place) {
      int b = -1;
      for (size_t k = 0; k < opts_.backends.size(); ++k) {
        if (opts_.backends[k]->name() == rule.backend) b = static_cast<int>(k);
      }
      if (rule.key == g.nodes[i].name && !g.nodes[i].name.empty()) by_name = b;
      else if (rule.key == g.nodes[i].op_type) by_op = b;
    }
    pinned[i] = by_name >= 0 ? by_name : by_op;
  }
  return pinned;
}

std::vector<Partitioner::Region> Partitioner::group(const Graph& g, const Placement& pl,
                                                    const RegionResult& rr) const {
  std::vector<Region> regions(static_cast<size_t>(rr.num_regions));
  for (int r = 0; r < rr.num_regions; ++r) regions[static_cast<size_t>(r)].backend = rr.region_backend[static_cast<size_t>(r)];
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    regions[static_cast<size_t>(rr.region_of[static_cast<size_t>(pl.unit_of[i])])].nodes.push_back(static_cast<int>(i));
  }
  return regions;
}

Status Partitioner::run_level(Graph& g, const std::string& label, const Scope* outer,
                              const std::string& key_prefix) {
  const size_t n = g.nodes.size();
  const size_t nb = opts_.backends.size();
  const bool is_main = label == "main";
  if (n == 0) return Status::Ok();
  // Every node gets a name no other node has, so reports and region models
  // can refer to it.
  {
    std::unordered_set<std::string> names;
    for (Node& node : g.nodes) {
      if (node.name.empty() || !names.insert(node.name).second) {
        node.name = g.unique_name(node.op_type.empty() ? "node" : node.op_type);
        names.insert(node.name);
      }
    }
  }

  Level lv;
  lv.g = &g;
  lv.label = label;
  lv.outer = outer;
  lv.key_prefix = key_prefix;
  // 1. capability
  Graph standalone = standalone_graph(g, outer);
  lv.cap = query_capability(standalone, opts_.backends);
  const CapabilityTable& cap = lv.cap;
  for (size_t b = 0; b < nb; ++b) {
    if (opts_.backends[b]->is_native()) continue;
    for (size_t i = 0; i < n; ++i) {
      if (!cap.supported[b][i]) {
        report_->refusals.push_back(
            {opts_.backends[b]->name(), label, g.nodes[i].name, g.nodes[i].op_type, cap.reason[b][i]});
      }
    }
  }
  lv.pinned = pins_for(g);
  const std::vector<int>& pinned = lv.pinned;
  for (size_t i = 0; i < n; ++i) {
    if (pinned[i] >= 0 && !cap.supported[static_cast<size_t>(pinned[i])][i]) {
      report_->events.push_back(label + ": --place for node '" + g.nodes[i].name + "' not applied: " +
                                opts_.backends[static_cast<size_t>(pinned[i])]->name() + " refuses it (" +
                                cap.reason[static_cast<size_t>(pinned[i])][i] + ")");
    }
  }
  lv.preds = node_predecessors(g);
  const std::vector<std::vector<int>>& preds = lv.preds;
  for (size_t i = 0; i < n; ++i) {
    for (const auto& o : g.nodes[i].outputs) lv.producer[o] = static_cast<int>(i);
  }
  std::vector<std::vector<char>> allowed(n, std::vector<char>(nb, 1));
  // 1b. costs; 1c. measurements of the nodes that matter; the backend set
  estimate_nodes(lv);
  measure_nodes(lv);
  rank_backends(lv);
  if (cost_based()) {
    // Every level chooses its own set: a main graph that is an If around the
    // whole model cannot speak for its branches.
    in_set_.assign(nb, 1);
    choose_backend_set(lv, allowed, /*report=*/is_main);
    for (size_t i = 0; i < n; ++i) {
      for (size_t b = 0; b < nb; ++b) allowed[i][b] = allowed[i][b] && in_set_[b];
    }
  }

  Plan p;
  std::map<RegionKey, Blob>& blobs = lv.blobs;
  std::set<RegionKey> compiled_ok;
  for (;;) {
    p = plan(lv, allowed, passive(in_set_), /*quiet=*/false, lv.engine_first, lv.cliffs_to_native);
    const std::vector<Region>& regions = p.regions;

    // 5. trial compile
    bool changed = false;
    int total = 0, done = 0;
    for (const Region& r : regions) total += opts_.backends[static_cast<size_t>(r.backend)]->is_native() ? 0 : 1;
    for (const Region& r : regions) {
      const Backend& be = *opts_.backends[static_cast<size_t>(r.backend)];
      if (be.is_native()) continue;
      RegionKey key{r.backend, r.nodes};
      ++done;
      if (compiled_ok.count(key)) continue;
      if (cut_of(lv, key).outputs.empty()) continue;  // dead code: dropped at lowering, never compiled
      std::string rname = "region on " + be.name() + " (" + std::to_string(r.nodes.size()) + " nodes)";
      Expected<Blob> blob = InternalError("not compiled");
      if (blobs.count(key)) {
        blob = blobs.at(key);
      } else {
        Graph rg;
        auto bytes = region_model(lv, key, &rg);
        if (opts_.progress) {
          opts_.progress(compiled_ + 1, compiled_ + 1 + (total - done), label + ": compiling " + rname);
        }
        blob =
            bytes.ok() ? be.compile(*bytes, opts_.backend_options, opts_.num_threads) : Expected<Blob>(bytes.status());
        ++compiled_;
      }
      if (blob.ok()) {
        blobs[key] = std::move(*blob);
        compiled_ok.insert(key);
        continue;
      }
      changed = true;
      std::vector<std::string> names;
      for (int i : r.nodes) {
        allowed[static_cast<size_t>(i)][static_cast<size_t>(r.backend)] = 0;
        names.push_back(g.nodes[static_cast<size_t>(i)].name);
        report_->refusals.push_back({be.name(), label, g.nodes[static_cast<size_t>(i)].name,
                                     g.nodes[static_cast<size_t>(i)].op_type,
                                     "compile failed: " + blob.status().message()});
      }
      report_->events.push_back(label + ": " + rname + " failed to compile, placed again without it: " +
                                blob.status().message());
    }
    if (!changed) break;
  }
  const Placement& pl = p.pl;
  const std::vector<Region>& regions = p.regions;
  std::map<RegionKey, RegionCut>& cuts = lv.cuts;
  for (const auto& e : pl.events) report_->events.push_back(label + ": " + e);
  if (is_main && cost_based()) report_->estimated_us = p.us;

  // 6. lowering
  Graph glue = g;
  glue.nodes.clear();
  std::vector<int> region_of_node(n, -1);
  const size_t first_info = report_->regions.size();
  for (const Region& r : regions) {
    const Backend& be = *opts_.backends[static_cast<size_t>(r.backend)];
    RegionInfo info;
    info.id = next_region_id_++;
    info.graph = label;
    info.backend = be.name();
    std::vector<char> in_region(n, 0);
    for (int i : r.nodes) {
      in_region[static_cast<size_t>(i)] = 1;
      region_of_node[static_cast<size_t>(i)] = info.id;
      const Node& node = g.nodes[static_cast<size_t>(i)];
      info.nodes.push_back(node.name);
      info.op_histogram[node.op_type]++;
    }
    explain(lv, r, pl, allowed, info);
    if (be.is_native()) {
      RegionCut cut = cut_region(g, r.nodes, in_region, outer, key_prefix);
      info.inputs = cut.inputs;
      info.outputs = cut.outputs;
      for (int i : r.nodes) glue.nodes.push_back(g.nodes[static_cast<size_t>(i)]);
      report_->regions.push_back(std::move(info));
      continue;
    }
    auto key = std::make_pair(r.backend, r.nodes);
    if (!cuts.count(key) || cuts.at(key).outputs.empty()) {
      report_->events.push_back(label + ": region " + std::to_string(info.id) + " on " + be.name() +
                                " dropped: none of its " + std::to_string(r.nodes.size()) +
                                " node(s) produces a value anyone reads");
      report_->regions.push_back(std::move(info));
      continue;
    }
    const RegionCut& cut = cuts.at(key);
    EngineSpec spec;
    spec.region = "region " + std::to_string(info.id) + " (" + be.name() + ")";
    spec.backend = be.name();
    spec.backend_version = be.version();
    spec.options = opts_.backend_options;
    spec.inputs = cut.inputs;
    spec.outputs = cut.outputs;
    spec.blob = blobs.at(key);
    for (size_t k = 0; k < cut.constants.size(); ++k) {
      const std::string& c = cut.constants[k];
      const Tensor* t = g.constant(c);
      if (!t && outer) t = outer->constant(c, nullptr);
      spec.constants.push_back(ConstantRef{cut.constant_keys[k], c});
      program_->constants.emplace(cut.constant_keys[k], *t);
    }
    Node rn;
    rn.name = g.unique_name("region_" + std::to_string(info.id));
    rn.op_type = kRegionOp;
    rn.domain = kRegionDomain;
    rn.inputs = cut.inputs;
    rn.outputs = cut.outputs;
    rn.attrs["engine"] = Attribute::Int(static_cast<int64_t>(program_->engines.size()));
    rn.attrs["backend"] = Attribute::String(be.name());
    std::vector<ValueInfo> out_types;
    for (const auto& o : cut.outputs) out_types.push_back(*g.info(o));
    set_region_output_types(rn, out_types);
    info.engine = static_cast<int>(program_->engines.size());
    info.inputs = cut.inputs;
    info.outputs = cut.outputs;
    info.blob_bytes = spec.blob.size;
    program_->engines.push_back(std::move(spec));
    glue.nodes.push_back(std::move(rn));
    report_->regions.push_back(std::move(info));
  }

  // What device regions move across per run (as the runtime keeps values on a device: execution_plan.h).
  const auto on_device = [&](const Region& r) { return opts_.backends[static_cast<size_t>(r.backend)]->on_device(); };
  if (std::any_of(regions.begin(), regions.end(), on_device)) {
    std::map<std::string, std::vector<int>> readers;
    for (size_t i = 0; i < n; ++i) {
      for (const auto& v : g.nodes[i].inputs) {
        if (!v.empty()) readers[v].push_back(static_cast<int>(i));
      }
    }
    const std::set<std::string> returned(g.outputs.begin(), g.outputs.end());
    for (size_t k = 0; k < regions.size(); ++k) {
      if (!on_device(regions[k])) continue;
      const std::string& name = opts_.backends[static_cast<size_t>(regions[k].backend)]->name();
      RegionInfo& info = report_->regions[first_info + k];
      auto on_same = [&](int node) {
        return opts_.backends[static_cast<size_t>(pl.backend_of[static_cast<size_t>(node)])]->name() == name;
      };
      for (const auto& v : info.inputs) {
        auto it = lv.producer.find(v);
        if (it == lv.producer.end() || !on_same(it->second)) info.crossing_bytes += value_bytes(g, v);
      }
      for (const auto& v : info.outputs) {
        bool host = returned.count(v) > 0;
        for (int c : readers[v]) host = host || !on_same(c);
        if (host) info.crossing_bytes += value_bytes(g, v);
      }
    }
  }

  if (is_main) {
    report_->num_nodes = static_cast<int>(n);
    for (size_t i = 0; i < n; ++i) {
      PlacedNode p;
      p.name = g.nodes[i].name;
      p.op_type = g.nodes[i].op_type;
      p.backend = opts_.backends[static_cast<size_t>(pl.backend_of[i])]->name();
      p.region = region_of_node[i];
      p.preds = preds[i];
      report_->placed.push_back(std::move(p));
    }
  }

  // Bodies of control-flow nodes left on native, recursively.
  Scope level{&g, key_prefix, outer};
  for (Node& node : glue.nodes) {
    if (is_region_node(node)) continue;
    for (auto& kv : node.attrs) {
      std::vector<std::shared_ptr<Graph>*> bodies;
      if (kv.second.g) bodies.push_back(&kv.second.g);
      for (auto& sg : kv.second.graphs) bodies.push_back(&sg);
      for (auto* body : bodies) {
        auto copy = std::make_shared<Graph>(**body);
        std::string body_label = "node '" + node.name + "' " + kv.first;
        TSR_RETURN_IF_ERROR(
            run_level(*copy, body_label, &level, key_prefix + "body" + std::to_string(next_body_++) + "/"));
        *body = std::move(copy);
      }
    }
  }

  // The glue graph keeps only the constants its own nodes read.
  std::unordered_set<std::string> glue_reads(glue.outputs.begin(), glue.outputs.end());
  for (const Node& node : glue.nodes) {
    for (auto& r : node_reads(node)) glue_reads.insert(std::move(r));
  }
  for (auto it = glue.constants.begin(); it != glue.constants.end();) {
    if (!glue_reads.count(it->first)) it = glue.constants.erase(it);
    else ++it;
  }
  g = std::move(glue);
  return Status::Ok();
}

}  // namespace partition


Expected<PlaceRule> parse_place_rule(const std::string& arg) {
  size_t eq = arg.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == arg.size()) {
    return InvalidInput("--place '" + arg + "': expected OP_OR_NODE=BACKEND");
  }
  return PlaceRule{arg.substr(0, eq), arg.substr(eq + 1)};
}

using partition::Partitioner;

Expected<Program> partition_and_compile(Graph g, const PartitionOptions& opts, PartitionReport* report) {
  PartitionReport local;
  if (!report) report = &local;
  if (opts.backends.empty() || !opts.backends.back()->is_native()) {
    return InternalError("partition: the backend list must end with native");
  }
  for (const auto& rule : opts.place) {
    bool known = false;
    for (const auto& b : opts.backends) known = known || b->name() == rule.backend;
    if (!known) {
      return InvalidInput("--place " + rule.key + "=" + rule.backend + ": backend '" + rule.backend +
                          "' is not in the backend list");
    }
  }
  for (const auto& b : opts.backends) {
    report->backends.push_back(b->name());
    report->colors[b->name()] = b->color();
  }
  report->policy = opts.policy == PlacementPolicy::kCost ? "cost" : "priority";
  Program program;
  program.meta.producer_version = TESSERA_VERSION;
  for (const auto& b : opts.backends) {
    program.meta.backends.push_back({b->name(), b->version(), opts.backend_options, threading_name(b->threading())});
  }
  Partitioner p(opts, report, &program);
  TSR_RETURN_IF_ERROR(p.run_level(g, "main", nullptr, ""));
  // Constants: the glue graph's own plus those engines read, each once.
  for (const auto& kv : g.constants) program.constants.emplace(kv.first, kv.second);
  program.graph = std::move(g);
  return program;
}

}  // namespace tessera
