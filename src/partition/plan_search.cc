// Steps 2-4 of a graph level under cost-based placement (partitioner_impl.h):
// pruning, relocation of whole regions, a plan to a fixed point, the search
// over backend sets (with each single engine's engine-first plan), and the
// report's account of why each region went where it did.
#include <algorithm>
#include <cstdio>

#include "partition/cost.h"
#include "partition/partitioner_impl.h"

namespace tessera::partition {

bool Partitioner::prune_small(Level& lv, const std::vector<Region>& regions, std::vector<std::vector<char>>& allowed,
                              bool quiet) {
  const Graph& g = *lv.g;
  bool changed = false;
  for (const Region& r : regions) {
    const Backend& be = *opts_.backends[static_cast<size_t>(r.backend)];
    if (be.is_native() || opts_.min_region_nodes <= 0) continue;
    bool heavy = false, compute = false;
    for (int i : r.nodes) {
      heavy = heavy || is_heavy(g.nodes[static_cast<size_t>(i)].op_type);
      compute = compute || !is_data_movement(g.nodes[static_cast<size_t>(i)].op_type);
    }
    std::string why;
    if (!compute) why = "no compute (only data movement)";
    else if (!heavy && static_cast<int>(r.nodes.size()) < opts_.min_region_nodes) {
      why = std::to_string(r.nodes.size()) + " node(s) without a heavy op, below --min-region-nodes " +
            std::to_string(opts_.min_region_nodes);
    }
    if (why.empty()) continue;
    changed = true;
    std::vector<std::string> names;
    for (int i : r.nodes) {
      allowed[static_cast<size_t>(i)][static_cast<size_t>(r.backend)] = 0;
      names.push_back(g.nodes[static_cast<size_t>(i)].name);
      if (quiet) continue;
      report_->refusals.push_back({be.name(), lv.label, g.nodes[static_cast<size_t>(i)].name,
                                   g.nodes[static_cast<size_t>(i)].op_type, "pruned: " + why});
      if (lv.pinned[static_cast<size_t>(i)] == r.backend) {
        report_->events.push_back(lv.label + ": --place for node '" + g.nodes[static_cast<size_t>(i)].name +
                                  "' not applied: its region on " + be.name() + " was pruned");
      }
    }
    if (!quiet) {
      report_->events.push_back(lv.label + ": region of " + std::to_string(r.nodes.size()) + " node(s) on " +
                                be.name() + " pruned (" + why + "): " + join(names));
    }
  }
  return changed;
}

// Region-level correction of the node-by-node choice: a region whose time
// plus boundary crossings is higher than on another backend that may run all
// of its nodes (native always may) moves there — a small external region
// between native ones gives its nodes back, a native reshape between two
// regions of one engine joins them. Pinned regions stay.
bool Partitioner::relocate(Level& lv, const Plan& p, const std::vector<std::vector<char>>& allowed,
                           std::vector<std::vector<int>>& order, bool passive, bool quiet) {
  const Graph& g = *lv.g;
  const size_t nb = opts_.backends.size();
  struct Move {
    size_t region;
    int to;
    CostOption here, there;
  };
  std::vector<Move> moves;
  for (size_t k = 0; k < p.regions.size(); ++k) {
    const Region& r = p.regions[k];
    bool pinned = false;
    for (int i : r.nodes) pinned = pinned || lv.pinned[static_cast<size_t>(i)] >= 0;
    if (pinned) continue;
    CostOption here = option(lv, r.nodes, r.backend, p.pl.backend_of, passive);
    CostOption best = here;
    int best_b = r.backend;
    for (size_t a = 0; a < nb; ++a) {
      if (static_cast<int>(a) == r.backend || !in_set_[a]) continue;
      bool all = true;
      for (int i : r.nodes) all = all && lv.cap.supported[a][static_cast<size_t>(i)] && allowed[static_cast<size_t>(i)][a];
      if (!all) continue;
      CostOption alt = option(lv, r.nodes, static_cast<int>(a), p.pl.backend_of, passive);
      // Ties and near-ties stay: a move must win by more than noise.
      if (alt.us < best.us && alt.us < here.us * 0.98 - 0.5) {
        best = alt;
        best_b = static_cast<int>(a);
      }
    }
    if (best_b != r.backend) moves.push_back({k, best_b, here, best});
  }
  // Each price assumes the neighbours stay put, so two neighbours moving at
  // once can undo each other's reason (and flip back and forth): per round,
  // the biggest savings first, and no move next to a region already moving.
  std::stable_sort(moves.begin(), moves.end(), [](const Move& a, const Move& b) {
    return a.here.us - a.there.us > b.here.us - b.there.us;
  });
  std::vector<int> region_of(g.nodes.size(), -1);
  for (size_t k = 0; k < p.regions.size(); ++k) {
    for (int i : p.regions[k].nodes) region_of[static_cast<size_t>(i)] = static_cast<int>(k);
  }
  std::vector<std::set<int>> neighbours(p.regions.size());
  for (size_t v = 0; v < g.nodes.size(); ++v) {
    for (int u : lv.preds[v]) {
      int a = region_of[static_cast<size_t>(u)], b = region_of[v];
      if (a != b && a >= 0 && b >= 0) {
        neighbours[static_cast<size_t>(a)].insert(b);
        neighbours[static_cast<size_t>(b)].insert(a);
      }
    }
  }
  std::vector<char> moving(p.regions.size(), 0);
  bool changed = false;
  for (const Move& m : moves) {
    bool blocked = false;
    for (int nbr : neighbours[m.region]) blocked = blocked || moving[static_cast<size_t>(nbr)];
    if (blocked) continue;
    moving[m.region] = 1;
    changed = true;
    const Region& r = p.regions[m.region];
    std::vector<std::string> names;
    for (int i : r.nodes) {
      std::vector<int>& o = order[static_cast<size_t>(i)];
      o.erase(std::find(o.begin(), o.end(), m.to));
      o.insert(o.begin(), m.to);
      names.push_back(g.nodes[static_cast<size_t>(i)].name);
    }
    if (!quiet) {
      char buf[200];
      std::snprintf(buf, sizeof(buf), "%s %.1f us on %s vs %.1f us on %s, boundaries included",
                    m.here.measured && m.there.measured ? "measured" : "estimated", m.here.us, m.here.backend.c_str(),
                    m.there.us, m.there.backend.c_str());
      report_->events.push_back(lv.label + ": region of " + std::to_string(r.nodes.size()) + " node(s) moved from " +
                                m.here.backend + " to " + m.there.backend + " (" + buf + "): " + join(names));
    }
  }
  return changed;
}

void Partitioner::leave_cliffs_to_native(Level& lv, std::vector<std::vector<char>>& allowed, bool quiet) {
  constexpr double kCliff = 4.0, kAtLeastUs = 50.0;
  const size_t nb = opts_.backends.size(), native = nb - 1;
  std::vector<std::string> names;
  for (size_t i = 0; i < allowed.size(); ++i) {
    const double here = lv.node_us[i][native];
    for (size_t b = 0; b < native; ++b) {
      const double there = lv.node_us[i][b];
      if (!allowed[i][b] || lv.pinned[i] == static_cast<int>(b) || there <= kCliff * here ||
          there - here < kAtLeastUs) {
        continue;
      }
      allowed[i][b] = 0;
      char buf[160];
      std::snprintf(buf, sizeof(buf), " (%.1f us on %s, %.1f on native)", there, opts_.backends[b]->name().c_str(),
                    here);
      names.push_back(lv.g->nodes[i].name + buf);
    }
  }
  if (!quiet && !names.empty()) {
    report_->events.push_back(lv.label + ": engine-first plan: " + std::to_string(names.size()) +
                              " node(s) left to native, priced over 4x native on the engine: " + join(names));
  }
}

Partitioner::Plan Partitioner::plan(Level& lv, std::vector<std::vector<char>>& allowed, bool passive, bool quiet,
                                    bool engine_first, bool cliffs_to_native) {
  Plan p;
  if (cost_based() && engine_first && cliffs_to_native) leave_cliffs_to_native(lv, allowed, quiet);
  std::vector<std::vector<int>> order = cost_based() && !engine_first ? lv.order : std::vector<std::vector<int>>{};
  // Relocation rounds are bounded: estimates are not additive, so moves
  // could otherwise chase each other.
  constexpr int kMaxRelocations = 32;
  int relocations = 0;
  for (;;) {
    // 2. placement
    p.pl = place_nodes(*lv.g, lv.preds, lv.cap, allowed, lv.pinned, order);
    // 3. regions
    RegionProblem prob;
    prob.num_units = p.pl.num_units;
    prob.succ = p.pl.unit_succ;
    prob.backend = p.pl.unit_backend;
    p.regions = group(*lv.g, p.pl, form_regions(prob));
    // 4. pruning
    if (prune_small(lv, p.regions, allowed, quiet)) continue;
    if (cost_based() && !engine_first && relocations < kMaxRelocations &&
        relocate(lv, p, allowed, order, passive, quiet)) {
      ++relocations;
      continue;
    }
    break;
  }
  if (cost_based()) {
    std::set<std::string> used;
    for (const Region& r : p.regions) used.insert(opts_.backends[static_cast<size_t>(r.backend)]->name());
    std::vector<const Backend*> used_set;
    for (const auto& b : opts_.backends) {
      if (used.count(b->name())) used_set.push_back(b.get());
    }
    const bool used_passive = set_waits_passively(used_set);
    p.us = 0;
    for (const Region& r : p.regions) {
      const Backend& be = *opts_.backends[static_cast<size_t>(r.backend)];
      bool measured = false;
      p.us += region_us(lv, r.nodes, r.backend, &measured) +
              crossings_us(lv, r.nodes, r.backend, p.pl.backend_of, used_passive, /*incoming=*/false) +
              passive_wait_us_per_node(be, used_passive, machine_) * static_cast<double>(r.nodes.size());
    }
  }
  return p;
}

// The main graph's backend set: every subset of the external backends (native
// always in) is planned with estimates (or measurements) and the cheapest
// plan's set is kept. Whole-process effects — OpenMP waiting passively beside
// another pooled engine — only show at this level.
void Partitioner::choose_backend_set(Level& lv, std::vector<std::vector<char>>& allowed, bool report) {
  const size_t nb = opts_.backends.size();
  const size_t ext = nb - 1;  // the external backends are 0..nb-2; native is last
  if (ext == 0) return;
  // A backend some --place pin asks for (and that runs the node) is in every set.
  std::vector<char> required(nb, 0);
  required[nb - 1] = 1;
  for (size_t i = 0; i < lv.pinned.size(); ++i) {
    int b = lv.pinned[i];
    if (b >= 0 && lv.cap.supported[static_cast<size_t>(b)][i]) required[static_cast<size_t>(b)] = 1;
  }
  // Candidates: every subset of up to four plugins, fewer backends first (on
  // a tie the smaller set wins: fewer plugins, fewer thread pools); with more
  // plugins, none, each alone, and all.
  std::vector<std::vector<char>> sets;
  auto add = [&](std::vector<char> set) {
    for (size_t b = 0; b < nb; ++b) set[b] = set[b] || required[b];
    if (std::find(sets.begin(), sets.end(), set) == sets.end()) sets.push_back(std::move(set));
  };
  if (opts_.force) {
    std::vector<char> set(nb, 0);
    for (size_t b = 0; b < nb; ++b) {
      const auto& f = opts_.force->backends;
      set[b] = std::find(f.begin(), f.end(), opts_.backends[b]->name()) != f.end();
    }
    add(std::move(set));
  } else if (ext <= 4) {
    std::vector<unsigned> masks;
    for (unsigned m = 0; m < (1u << ext); ++m) masks.push_back(m);
    std::stable_sort(masks.begin(), masks.end(),
                     [](unsigned a, unsigned b) { return __builtin_popcount(a) < __builtin_popcount(b); });
    for (unsigned m : masks) {
      std::vector<char> set(nb, 0);
      for (size_t k = 0; k < ext; ++k) set[k] = (m >> k) & 1u;
      add(std::move(set));
    }
  } else {
    add(std::vector<char>(nb, 0));
    for (size_t k = 0; k < ext; ++k) {
      std::vector<char> one(nb, 0);
      one[k] = 1;
      add(std::move(one));
    }
    add(std::vector<char>(nb, 1));
  }
  double best_us = 0;
  size_t best = 0;
  std::vector<SetOption> priced;
  std::vector<std::vector<char>> plan_sets;  // the set of each priced plan
  for (size_t k = 0; k < sets.size(); ++k) {
    const std::vector<char>& set = sets[k];
    if (opts_.openmp_spins && !opts_.force && passive(set)) continue;
    auto trial = allowed;
    for (auto& row : trial) {
      for (size_t b = 0; b < nb; ++b) row[b] = row[b] && set[b];
    }
    in_set_ = set;
    int engines = 0;
    for (size_t b = 0; b + 1 < nb; ++b) engines += set[b] ? 1 : 0;
    // With one engine, also the plan in which it takes every node it runs:
    // a whole-model region is priced (and measured) as a whole, where the
    // node-by-node choice may split it at nodes that are cheap only alone.
    // ... and the variant of it that leaves the engine's cliffs to native.
    for (int variant : {0, 1, 2}) {
      const bool engine_first = variant > 0, cliffs = variant == 2;
      if (engine_first && engines != 1) continue;
      if (opts_.force && engines == 1 &&
          (engine_first != opts_.force->engine_first || (engine_first && cliffs != opts_.force->cliffs_to_native))) {
        continue;
      }
      auto trial_copy = trial;
      Plan p = plan(lv, trial_copy, passive(set), /*quiet=*/true, engine_first, cliffs);
      priced.push_back({set_names(set), p.us, false,
                        cliffs         ? kEngineFirstCliffsNative
                        : engine_first ? "engine first"
                                       : "cost"});
      plan_sets.push_back(set);
      // A later (larger) set must win by 1 %: estimates and measurements
      // are not finer than that.
      if (priced.size() == 1 || p.us < best_us * 0.99) {
        best_us = p.us;
        best = priced.size() - 1;
      }
    }
  }
  in_set_ = plan_sets[best];
  priced[best].chosen = true;
  lv.engine_first = priced[best].plan != "cost";
  lv.cliffs_to_native = priced[best].plan == kEngineFirstCliffsNative;
  if (report) {
    report_->sets = priced;
  } else if (sets.size() > 1) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), " (%.1f us)", priced[best].us);
    report_->events.push_back(lv.label + ": backend set " + join(priced[best].backends) + buf);
  }
  for (auto& row : allowed) {
    for (size_t b = 0; b < nb; ++b) row[b] = row[b] && in_set_[b];
  }
}

void Partitioner::explain(Level& lv, const Region& r, const Placement& pl,
                          const std::vector<std::vector<char>>& allowed, RegionInfo& info) {
  const size_t nb = opts_.backends.size();
  may_measure_ = opts_.measure == MeasureMode::kFull;  // --tune measures what it explains, too
  const bool set = passive(in_set_);
  for (size_t a = 0; a < nb; ++a) {
    bool all = true;
    for (int i : r.nodes) all = all && lv.cap.supported[a][static_cast<size_t>(i)];
    if (all) info.considered.push_back(option(lv, r.nodes, static_cast<int>(a), pl.backend_of, set));
  }
  may_measure_ = true;
  std::stable_sort(info.considered.begin(), info.considered.end(),
                   [](const CostOption& x, const CostOption& y) { return x.us < y.us; });
  const std::string& won = opts_.backends[static_cast<size_t>(r.backend)]->name();
  bool pinned = false;
  for (int i : r.nodes) pinned = pinned || lv.pinned[static_cast<size_t>(i)] == r.backend;
  if (pinned) {
    info.decision = "pinned by --place";
  } else if (!cost_based()) {
    info.decision = "first backend in --backends order that runs it";
  } else if (lv.engine_first) {
    info.decision = "the engine-first plan (the engine takes every node it runs) priced cheapest";
  } else if (info.considered.size() == 1) {
    info.decision = "the only backend that runs all of it";
  } else if (!info.considered.empty() && info.considered[0].backend == won) {
    info.decision = std::string("least ") + (info.considered[0].measured ? "measured" : "estimated") + " time";
  } else {
    std::string ruled_out;
    for (const auto& o : info.considered) {
      if (o.backend == won) break;
      size_t a = 0;
      while (a < nb && opts_.backends[a]->name() != o.backend) ++a;
      bool all = true;
      for (int i : r.nodes) all = all && allowed[static_cast<size_t>(i)][a];
      if (!all) ruled_out += (ruled_out.empty() ? "" : ", ") + o.backend;
    }
    info.decision = ruled_out.empty() ? "each node's cheapest backend (placed node by node)"
                                      : "cheaper " + ruled_out + " ruled out (pruned or failed to compile)";
  }
}

}  // namespace tessera::partition
