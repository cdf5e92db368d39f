// Partition step 2, placement. Input: one graph level, the capability table,
// which (node, backend) pairs earlier rounds excluded (pruning, failed
// compiles) and --place pins. Output: a backend per node and the placement
// units (single nodes, or composites contracted to one unit) in topological
// order, ready for region formation. Method:
//   a. each node takes its pinned backend when that backend may run it, else
//      the first backend in its preference order that may (priority order,
//      or cheapest first under cost-based placement);
//   b. composites, backend by backend in priority order: when a member's
//      choice is the composite's backend, every member moves there and the
//      members become one unit (a node joins at most one composite; a
//      composite touching a pin to another backend is skipped; so is one
//      that, contracted together with those already taken, would close a
//      cycle — each composite is convex, but two can still depend on each
//      other — and the placement says so);
//   c. units are numbered by a topological sort of the contracted graph
//      (ties by smallest node index, so the result is deterministic).
#include <algorithm>
#include <queue>

#include "partition/partition_internal.h"

namespace tessera::partition {

namespace {

// True when contracting every group (group[i] >= 0) to one vertex leaves the
// graph acyclic.
bool contraction_is_acyclic(const std::vector<std::vector<int>>& preds, const std::vector<int>& group, int num_groups) {
  const size_t n = preds.size();
  // Vertices: nodes outside groups keep their index; group k is n + k.
  auto vert = [&](size_t i) { return group[i] >= 0 ? n + static_cast<size_t>(group[i]) : i; };
  std::vector<std::vector<size_t>> succ(n + static_cast<size_t>(num_groups));
  std::vector<int> indeg(succ.size(), 0);
  for (size_t v = 0; v < n; ++v) {
    for (int u : preds[v]) {
      size_t a = vert(static_cast<size_t>(u)), b = vert(v);
      if (a != b) {
        succ[a].push_back(b);
        ++indeg[b];
      }
    }
  }
  std::vector<size_t> ready;
  size_t alive = 0, seen = 0;
  std::vector<char> present(succ.size(), 0);
  for (size_t i = 0; i < n; ++i) present[vert(i)] = 1;
  for (size_t v = 0; v < succ.size(); ++v) {
    if (!present[v]) continue;
    ++alive;
    if (indeg[v] == 0) ready.push_back(v);
  }
  while (!ready.empty()) {
    size_t v = ready.back();
    ready.pop_back();
    ++seen;
    for (size_t w : succ[v]) {
      if (--indeg[w] == 0) ready.push_back(w);
    }
  }
  return seen == alive;
}

}  // namespace

Placement place_nodes(const Graph& g, const std::vector<std::vector<int>>& preds, const CapabilityTable& cap,
                      const std::vector<std::vector<char>>& allowed, const std::vector<int>& pinned,
                      const std::vector<std::vector<int>>& order) {
  const size_t n = g.nodes.size();
  const size_t nb = cap.supported.size();
  Placement p;
  p.backend_of.assign(n, static_cast<int>(nb) - 1);
  auto may_run = [&](size_t node, size_t b) { return cap.supported[b][node] && allowed[node][b]; };

  // a. first choice
  for (size_t i = 0; i < n; ++i) {
    int pin = pinned[i];
    if (pin >= 0 && may_run(i, static_cast<size_t>(pin))) {
      p.backend_of[i] = pin;
      continue;
    }
    for (size_t k = 0; k < nb; ++k) {
      size_t b = order.empty() ? k : static_cast<size_t>(order[i][k]);
      if (may_run(i, b)) {
        p.backend_of[i] = static_cast<int>(b);
        break;
      }
    }
  }

  // b. composites
  std::vector<int> group(n, -1);
  std::vector<std::string> group_pattern;
  for (size_t b = 0; b < nb; ++b) {
    for (const auto& comp : cap.composites[b]) {
      bool ok = true, wanted = false;
      for (int m : comp.nodes) {
        size_t mi = static_cast<size_t>(m);
        ok = ok && group[mi] < 0 && may_run(mi, b) && (pinned[mi] < 0 || pinned[mi] == static_cast<int>(b));
        wanted = wanted || p.backend_of[mi] == static_cast<int>(b);
      }
      if (!ok || !wanted) continue;
      int gid = static_cast<int>(group_pattern.size());
      for (int m : comp.nodes) group[static_cast<size_t>(m)] = gid;
      if (!contraction_is_acyclic(preds, group, gid + 1)) {
        for (int m : comp.nodes) group[static_cast<size_t>(m)] = -1;
        std::string names;
        for (int m : comp.nodes) names += (names.empty() ? "" : ",") + g.nodes[static_cast<size_t>(m)].name;
        p.events.push_back("composite " + comp.pattern + " (" + names +
                           ") not used: with the composites already placed it would make the placement cyclic");
        continue;
      }
      group_pattern.push_back(comp.pattern);
      for (int m : comp.nodes) p.backend_of[static_cast<size_t>(m)] = static_cast<int>(b);
    }
  }

  // c. units in topological order
  std::vector<int> rep(n);  // provisional unit key: the group's smallest node, or the node
  std::vector<int> group_rep(group_pattern.size(), -1);
  for (size_t i = 0; i < n; ++i) {
    if (group[i] >= 0) {
      int& gr = group_rep[static_cast<size_t>(group[i])];
      if (gr < 0) gr = static_cast<int>(i);
      rep[i] = gr;
    } else {
      rep[i] = static_cast<int>(i);
    }
  }
  // Contracted graph over representatives.
  std::vector<std::vector<int>> succ(n);
  std::vector<int> indeg(n, 0);
  std::vector<char> is_rep(n, 0);
  for (size_t i = 0; i < n; ++i) is_rep[static_cast<size_t>(rep[i])] = 1;
  for (size_t v = 0; v < n; ++v) {
    for (int u : preds[v]) {
      int a = rep[static_cast<size_t>(u)], c = rep[v];
      if (a != c) succ[static_cast<size_t>(a)].push_back(c);
    }
  }
  for (auto& s : succ) {
    std::sort(s.begin(), s.end());
    s.erase(std::unique(s.begin(), s.end()), s.end());
    for (int c : s) ++indeg[static_cast<size_t>(c)];
  }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (size_t i = 0; i < n; ++i) {
    if (is_rep[i] && indeg[i] == 0) ready.push(static_cast<int>(i));
  }
  std::vector<int> unit_of_rep(n, -1);
  while (!ready.empty()) {
    int r = ready.top();
    ready.pop();
    unit_of_rep[static_cast<size_t>(r)] = p.num_units++;
    p.unit_backend.push_back(p.backend_of[static_cast<size_t>(r)]);
    p.unit_pattern.push_back(group[static_cast<size_t>(r)] >= 0
                                 ? group_pattern[static_cast<size_t>(group[static_cast<size_t>(r)])]
                                 : "");
    for (int c : succ[static_cast<size_t>(r)]) {
      if (--indeg[static_cast<size_t>(c)] == 0) ready.push(c);
    }
  }
  p.unit_of.assign(n, 0);
  for (size_t i = 0; i < n; ++i) p.unit_of[i] = unit_of_rep[static_cast<size_t>(rep[i])];
  p.unit_succ.assign(static_cast<size_t>(p.num_units), {});
  for (size_t r = 0; r < n; ++r) {
    if (!is_rep[r]) continue;
    for (int c : succ[r]) {
      p.unit_succ[static_cast<size_t>(unit_of_rep[r])].push_back(unit_of_rep[static_cast<size_t>(c)]);
    }
  }
  return p;
}

}  // namespace tessera::partition
