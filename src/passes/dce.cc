#include "passes/dce.h"

namespace tessera {

std::vector<Graph*> nested_graphs(Node& n) {
  std::vector<Graph*> out;
  for (auto& kv : n.attrs) {
    Attribute& a = kv.second;
    if (a.g) out.push_back(a.g.get());
    for (auto& sg : a.graphs) {
      if (sg) out.push_back(sg.get());
    }
  }
  return out;
}

std::vector<const Graph*> nested_graphs(const Node& n) {
  std::vector<const Graph*> out;
  for (const auto& kv : n.attrs) {
    const Attribute& a = kv.second;
    if (a.g) out.push_back(a.g.get());
    for (const auto& sg : a.graphs) {
      if (sg) out.push_back(sg.get());
    }
  }
  return out;
}

bool defines(const Graph& g, const std::string& name) {
  if (g.constants.count(name)) return true;
  for (const auto& i : g.inputs) {
    if (i == name) return true;
  }
  for (const Node& n : g.nodes) {
    for (const auto& o : n.outputs) {
      if (o == name) return true;
    }
  }
  return false;
}

std::unordered_set<std::string> free_variables(const Graph& g) {
  std::unordered_set<std::string> defined(g.inputs.begin(), g.inputs.end());
  for (const auto& kv : g.constants) defined.insert(kv.first);
  for (const Node& n : g.nodes) {
    for (const auto& o : n.outputs) {
      if (!o.empty()) defined.insert(o);
    }
  }
  std::unordered_set<std::string> free;
  auto read = [&](const std::string& v) {
    if (!v.empty() && !defined.count(v)) free.insert(v);
  };
  for (const Node& n : g.nodes) {
    for (const auto& in : n.inputs) read(in);
    for (const auto& v : nested_reads(n)) read(v);
  }
  for (const auto& o : g.outputs) read(o);
  return free;
}

std::unordered_set<std::string> nested_reads(const Node& n) {
  std::unordered_set<std::string> out;
  for (const Graph* sg : nested_graphs(n)) {
    for (auto& v : free_variables(*sg)) out.insert(v);
  }
  return out;
}

namespace {

// Whether renaming `from` to `to` inside nested graph `sg` (which does not
// define `from`) would be captured by a local definition of `to`.
bool rename_is_captured(const Graph& sg, const std::string& from, const std::string& to) {
  if (defines(sg, from)) return false;  // shadowed: nothing inside refers to the outer `from`
  if (!free_variables(sg).count(from)) return false;
  if (defines(sg, to)) return true;
  for (const Node& n : sg.nodes) {
    for (const Graph* inner : nested_graphs(n)) {
      if (rename_is_captured(*inner, from, to)) return true;
    }
  }
  return false;
}

void rename_reads_unchecked(Graph& g, const std::string& from, const std::string& to, bool rename_outputs) {
  for (Node& n : g.nodes) {
    for (auto& in : n.inputs) {
      if (in == from) in = to;
    }
    for (Graph* sg : nested_graphs(n)) {
      if (defines(*sg, from)) continue;
      rename_reads_unchecked(*sg, from, to, /*rename_outputs=*/true);
    }
  }
  if (rename_outputs) {
    for (auto& o : g.outputs) {
      if (o == from) o = to;
    }
  }
}

void dce_impl(Graph& g, DceStats* stats) {
  std::unordered_set<std::string> live(g.outputs.begin(), g.outputs.end());
  std::vector<bool> keep(g.nodes.size(), false);
  for (size_t i = g.nodes.size(); i-- > 0;) {
    Node& n = g.nodes[i];
    bool is_live = false;
    for (const auto& o : n.outputs) is_live = is_live || (!o.empty() && live.count(o));
    if (!is_live) continue;
    keep[i] = true;
    // Clean nested graphs first so that what they read afterwards is exact.
    for (Graph* sg : nested_graphs(n)) dce_impl(*sg, stats);
    for (const auto& in : n.inputs) {
      if (!in.empty()) live.insert(in);
    }
    for (const auto& v : nested_reads(n)) live.insert(v);
  }

  std::vector<Node> kept;
  kept.reserve(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (keep[i]) {
      kept.push_back(std::move(g.nodes[i]));
      continue;
    }
    for (const auto& o : g.nodes[i].outputs) {
      if (!o.empty()) g.values.erase(o);
    }
    if (stats) ++stats->removed_nodes;
  }
  g.nodes = std::move(kept);

  std::unordered_set<std::string> inputs(g.inputs.begin(), g.inputs.end());
  for (auto it = g.constants.begin(); it != g.constants.end();) {
    if (live.count(it->first) || inputs.count(it->first)) {
      ++it;
      continue;
    }
    g.values.erase(it->first);
    it = g.constants.erase(it);
    if (stats) ++stats->removed_constants;
  }
}

}  // namespace

bool replace_reads(Graph& g, const std::string& from, const std::string& to) {
  if (from == to) return true;
  for (const Node& n : g.nodes) {
    for (const Graph* sg : nested_graphs(n)) {
      if (rename_is_captured(*sg, from, to)) return false;
    }
  }
  rename_reads_unchecked(g, from, to, /*rename_outputs=*/false);
  return true;
}

GraphScope::GraphScope(Graph& g, const GraphScope* parent) : g_(&g), parent_(parent) {
  runtime_.insert(g.inputs.begin(), g.inputs.end());
  for (const Node& n : g.nodes) {
    for (const auto& o : n.outputs) {
      if (!o.empty()) runtime_.insert(o);
    }
  }
}

const Tensor* GraphScope::constant(const std::string& name) const {
  if (runtime_.count(name)) return nullptr;
  if (const Tensor* t = g_->constant(name)) return t;
  return parent_ ? parent_->constant(name) : nullptr;
}

const ValueInfo* GraphScope::info(const std::string& name) const {
  if (const ValueInfo* vi = g_->info(name)) return vi;
  if (runtime_.count(name) || g_->constants.count(name)) return nullptr;
  return parent_ ? parent_->info(name) : nullptr;
}

bool GraphScope::visible(const std::string& name) const {
  if (runtime_.count(name) || g_->constants.count(name)) return true;
  return parent_ && parent_->visible(name);
}

Status dce(Graph& g, DceStats* stats) {
  dce_impl(g, stats);
  return Status::Ok();
}

}  // namespace tessera
