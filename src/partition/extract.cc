// Subgraph extraction. Input: a graph level and a set of its nodes (a
// region). Output: the region's boundary (inputs it reads from outside,
// outputs others read, constants it needs) and the region as a standalone,
// fully typed graph that exports to the ONNX model a backend compiles.
// Names are kept from the source graph (unnamed nodes get "<op>_<index>"), so
// the same region always gives the same model.
#include <algorithm>

#include "partition/partition_internal.h"

namespace tessera::partition {

RegionCut cut_region(const Graph& g, std::vector<int> nodes, const std::vector<char>& in_region, const Scope* outer,
                     const std::string& key_prefix) {
  RegionCut cut;
  std::sort(nodes.begin(), nodes.end());
  cut.nodes = nodes;
  std::unordered_set<std::string> produced, seen_in, seen_const;
  // Names this level defines; anything else a node reads comes from outside.
  std::unordered_set<std::string> local(g.inputs.begin(), g.inputs.end());
  for (const Node& n : g.nodes) local.insert(n.outputs.begin(), n.outputs.end());
  for (int i : nodes) {
    const Node& n = g.nodes[static_cast<size_t>(i)];
    for (const auto& r : node_reads(n)) {
      std::string key;
      bool is_const = false;
      if (g.is_constant(r)) {
        is_const = true;
        key = key_prefix + r;
      } else if (!local.count(r) && outer && outer->constant(r, &key)) {
        is_const = true;
      }
      if (is_const) {
        if (seen_const.insert(r).second) {
          cut.constants.push_back(r);
          cut.constant_keys.push_back(key);
        }
      } else if (!produced.count(r) && seen_in.insert(r).second) {
        cut.inputs.push_back(r);
      }
    }
    for (const auto& o : n.outputs) {
      if (!o.empty()) produced.insert(o);
    }
  }
  std::unordered_set<std::string> used_outside(g.outputs.begin(), g.outputs.end());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (in_region[i]) continue;
    for (auto& r : node_reads(g.nodes[i])) used_outside.insert(std::move(r));
  }
  std::unordered_set<std::string> seen_out;
  for (int i : nodes) {
    for (const auto& o : g.nodes[static_cast<size_t>(i)].outputs) {
      if (!o.empty() && used_outside.count(o) && seen_out.insert(o).second) cut.outputs.push_back(o);
    }
  }
  return cut;
}

Graph region_graph(const Graph& g, const RegionCut& cut, const std::string& name, const Scope* outer) {
  Graph r;
  r.name = name;
  r.opset = g.opset;
  r.ir_version = g.ir_version;
  r.producer_name = "tessera";
  r.inputs = cut.inputs;
  r.outputs = cut.outputs;
  auto copy_info = [&](const std::string& v) {
    if (v.empty() || r.values.count(v)) return;
    if (const ValueInfo* vi = g.info(v)) r.values[v] = *vi;
    else if (outer) {
      if (const ValueInfo* ovi = outer->info(v)) r.values[v] = *ovi;
    }
  };
  for (const auto& c : cut.constants) {
    const Tensor* t = g.constant(c);
    if (!t && outer) t = outer->constant(c, nullptr);
    r.constants[c] = *t;
    r.values[c] = ValueInfo{t->dtype(), Shape::FromDims(t->dims())};
  }
  for (int i : cut.nodes) {
    Node n = g.nodes[static_cast<size_t>(i)];
    for (const auto& v : node_reads(n)) copy_info(v);
    for (const auto& o : n.outputs) copy_info(o);
    r.nodes.push_back(std::move(n));
  }
  return r;
}

}  // namespace tessera::partition
