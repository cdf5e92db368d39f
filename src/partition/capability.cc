// Partition step 1, capability. Input: one graph level and the backends in
// priority order. Output: for every backend and node, supported or refused
// with a reason, and each backend's composite patterns. Method: the graph is
// exported once as a standalone ONNX model (shapes filled in) and every
// external backend answers over the ABI; native answers from the op
// registry. The host adds one refusal of its own for external backends:
// engines are compiled for concrete shapes, so a node touching a value whose
// shape is not fully known cannot go to them.
#include <algorithm>
#include <map>

#include "onnx/onnx_export.h"
#include "ops/op_registry.h"
#include "partition/partition_internal.h"

namespace tessera::partition {

std::vector<std::string> node_reads(const Node& n) {
  std::vector<std::string> reads;
  for (const auto& i : n.inputs) {
    if (!i.empty()) reads.push_back(i);
  }
  std::unordered_set<std::string> caps;
  for (const auto& kv : n.attrs) {
    if (kv.second.g) collect_graph_captures(*kv.second.g, &caps);
    for (const auto& sg : kv.second.graphs) collect_graph_captures(*sg, &caps);
  }
  std::vector<std::string> sorted_caps(caps.begin(), caps.end());
  std::sort(sorted_caps.begin(), sorted_caps.end());
  for (auto& c : sorted_caps) reads.push_back(std::move(c));
  return reads;
}

std::vector<std::vector<int>> node_predecessors(const Graph& g) {
  std::unordered_map<std::string, int> producer;
  std::vector<std::vector<int>> preds(g.nodes.size());
  for (size_t v = 0; v < g.nodes.size(); ++v) {
    for (const auto& r : node_reads(g.nodes[v])) {
      auto it = producer.find(r);
      if (it != producer.end()) preds[v].push_back(it->second);
    }
    std::sort(preds[v].begin(), preds[v].end());
    preds[v].erase(std::unique(preds[v].begin(), preds[v].end()), preds[v].end());
    for (const auto& o : g.nodes[v].outputs) {
      if (!o.empty()) producer[o] = static_cast<int>(v);
    }
  }
  return preds;
}

Graph standalone_graph(const Graph& g, const Scope* outer) {
  Graph s = g;
  if (!outer) return s;
  std::unordered_set<std::string> caps;
  collect_graph_captures(g, &caps);
  std::vector<std::string> sorted(caps.begin(), caps.end());
  std::sort(sorted.begin(), sorted.end());
  for (const auto& c : sorted) {
    if (const Tensor* t = outer->constant(c, nullptr)) {
      s.constants[c] = *t;
      s.values[c] = ValueInfo{t->dtype(), Shape::FromDims(t->dims())};
      continue;
    }
    s.inputs.push_back(c);
    if (const ValueInfo* vi = outer->info(c)) s.values[c] = *vi;
  }
  return s;
}

namespace {

// The first value of `n` (input or output) without a concrete type, or "".
std::string first_dynamic_value(const Graph& g, const Node& n) {
  auto check = [&](const std::string& v) -> bool {
    if (v.empty() || g.is_constant(v)) return true;
    const ValueInfo* vi = g.info(v);
    return vi && vi->dtype != DType::kUndefined && vi->shape.fully_known();
  };
  for (const auto& i : n.inputs) {
    if (!check(i)) return i;
  }
  for (const auto& o : n.outputs) {
    if (!check(o)) return o;
  }
  return "";
}

// Keeps a composite only if it is convex: no path leaves it and re-enters.
bool composite_is_convex(const std::vector<int>& members, const std::vector<std::vector<int>>& preds) {
  if (members.empty()) return false;
  std::vector<char> in(preds.size(), 0);
  for (int m : members) in[static_cast<size_t>(m)] = 1;
  int lo = members.front(), hi = members.back();
  // reach[v]: v is reachable from a member through at least one non-member.
  std::vector<char> outside_reach(preds.size(), 0);
  for (int v = lo; v <= hi; ++v) {
    bool from_member_via_outside = false;
    for (int p : preds[static_cast<size_t>(v)]) {
      if (p < lo) continue;
      if (outside_reach[static_cast<size_t>(p)]) from_member_via_outside = true;
      if (in[static_cast<size_t>(p)] && !in[static_cast<size_t>(v)]) from_member_via_outside = true;
    }
    if (in[static_cast<size_t>(v)]) {
      if (from_member_via_outside) return false;
    } else {
      outside_reach[static_cast<size_t>(v)] = from_member_via_outside;
    }
  }
  return true;
}

}  // namespace

CapabilityTable query_capability(const Graph& g, const BackendList& backends) {
  const size_t n = g.nodes.size();
  CapabilityTable cap;
  cap.supported.assign(backends.size(), std::vector<char>(n, 0));
  cap.reason.assign(backends.size(), std::vector<std::string>(n));
  cap.composites.assign(backends.size(), {});
  std::string model;
  bool exported = false;
  std::string export_error;
  std::vector<std::vector<int>> preds = node_predecessors(g);
  for (size_t b = 0; b < backends.size(); ++b) {
    const Backend& be = *backends[b];
    if (be.is_native()) {
      for (size_t i = 0; i < n; ++i) {
        const Node& node = g.nodes[i];
        bool ok = OpRegistry::instance().find(node.domain, node.op_type) != nullptr;
        cap.supported[b][i] = ok;
        if (!ok) cap.reason[b][i] = "op " + node.op_type + " has no native kernel";
      }
      continue;
    }
    if (!exported) {
      auto bytes = export_onnx_bytes(g);
      if (bytes.ok()) model = std::move(*bytes);
      else export_error = bytes.status().message();
      exported = true;
    }
    Capability c;
    if (export_error.empty()) {
      c = be.capability(model, static_cast<int>(n));
    } else {
      c.nodes.assign(n, NodeVerdict{false, "the graph could not be exported: " + export_error});
    }
    for (size_t i = 0; i < n; ++i) {
      cap.supported[b][i] = c.nodes[i].supported;
      cap.reason[b][i] = c.nodes[i].reason;
      if (c.nodes[i].supported) {
        std::string dyn = first_dynamic_value(g, g.nodes[i]);
        if (!dyn.empty()) {
          const ValueInfo* vi = g.info(dyn);
          cap.supported[b][i] = 0;
          cap.reason[b][i] = "value '" + dyn + "' has no static shape (" +
                             (vi ? std::string(dtype_name(vi->dtype)) + vi->shape.str() : std::string("untyped")) +
                             "); compile with --shape";
        }
      }
    }
    for (auto& comp : c.composites) {
      bool all = !comp.nodes.empty();
      for (int m : comp.nodes) all = all && cap.supported[b][static_cast<size_t>(m)];
      if (all && composite_is_convex(comp.nodes, preds)) cap.composites[b].push_back(std::move(comp));
    }
  }
  return cap;
}

}  // namespace tessera::partition
