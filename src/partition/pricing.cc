// Prices for cost-based placement (partitioner_impl.h): every node's estimate
// on every backend (step 1b), the nodes that matter measured on this machine
// (step 1c), a region's estimate (the backend's own, corrected by what its
// nodes measured) or measurement, and what its boundary costs.
#include <algorithm>
#include <cstdio>

#include "onnx/onnx_export.h"
#include "partition/cost.h"
#include "partition/partitioner_impl.h"

namespace tessera::partition {

std::vector<std::string> Partitioner::set_names(const std::vector<char>& in_set) const {
  std::vector<std::string> names;
  for (size_t b = 0; b < opts_.backends.size(); ++b) {
    if (in_set[b]) names.push_back(opts_.backends[b]->name());
  }
  return names;
}

bool Partitioner::passive(const std::vector<char>& in_set) const {
  std::vector<const Backend*> set;
  for (size_t b = 0; b < opts_.backends.size(); ++b) {
    if (in_set[b]) set.push_back(opts_.backends[b].get());
  }
  return set_waits_passively(set);
}

// ---- costs -------------------------------------------------------------

// Step 1b: every node's prior on every backend. Native is priced by the
// host's model; another backend prices the node as a one-node region itself
// (estimate_region on this machine's figures), else it gets the prior.
std::string Partitioner::for_estimate(std::string model) const {
  if (opts_.backend_options.empty() || model.empty()) return model;
  return with_model_metadata(std::move(model), "tessera.backend_options", opts_.backend_options);
}

void Partitioner::estimate_nodes(Level& lv) {
  const Graph& g = *lv.g;
  const size_t n = g.nodes.size(), nb = opts_.backends.size();
  lv.prior_us.assign(n, std::vector<double>(nb, 0.0));
  lv.delta_us.assign(n, std::vector<double>(nb, 0.0));
  for (size_t i = 0; i < n; ++i) {
    NodeWork w = node_work(g, g.nodes[i]);
    std::optional<std::string> model;  // the one-node region, serialized once for every backend
    for (size_t b = 0; b < nb; ++b) {
      const Backend& be = *opts_.backends[b];
      lv.prior_us[i][b] = prior_node_us(w, be, machine_);
      if (be.is_native()) lv.prior_us[i][b] += nested_native_us(g, g.nodes[i], machine_);
      if (be.is_native() || !be.has_estimate_cost() || !lv.cap.supported[b][i]) continue;
      if (!model) {
        std::vector<char> in_region(n, 0);
        in_region[i] = 1;
        RegionCut cut = cut_region(g, {static_cast<int>(i)}, in_region, lv.outer, lv.key_prefix);
        auto bytes = export_onnx_bytes(region_graph(g, cut, "node", lv.outer), kEstimateElideAbove);
        model = bytes.ok() ? for_estimate(*bytes) : std::string();
      }
      if (model->empty()) continue;
      auto us = be.estimate_cost(*model, machine_abi(machine_, be));
      if (us.ok() && *us >= 0) lv.prior_us[i][b] = *us;
    }
  }
  lv.node_us = lv.prior_us;
  lv.total_us = 0;
  for (size_t i = 0; i < n; ++i) {
    double cheapest = lv.prior_us[i][nb - 1];  // native runs everything
    for (size_t b = 0; b < nb; ++b) {
      if (lv.cap.supported[b][i]) cheapest = std::min(cheapest, lv.prior_us[i][b]);
    }
    lv.total_us += cheapest;
  }
}

void Partitioner::rank_backends(Level& lv) const {
  const size_t n = lv.g->nodes.size(), nb = opts_.backends.size();
  lv.order.assign(n, {});
  for (size_t i = 0; i < n; ++i) {
    std::vector<int>& o = lv.order[i];
    for (size_t b = 0; b < nb; ++b) o.push_back(static_cast<int>(b));
    std::stable_sort(o.begin(), o.end(), [&](int a, int b) {
      return lv.node_us[i][static_cast<size_t>(a)] < lv.node_us[i][static_cast<size_t>(b)];
    });
  }
}

bool Partitioner::can_measure() const {
  if (!opts_.tune_cache || !may_measure_ || opts_.measure == MeasureMode::kOff) return false;
  if (opts_.measure == MeasureMode::kFull) return true;
  if (budget_->exhausted()) {
    report_->budget_exhausted = true;
    return false;
  }
  return true;
}

MeasureSpec Partitioner::measure_spec(double give_up_us) const {
  MeasureSpec spec = opts_.measure == MeasureMode::kFull ? MeasureSpec::Thorough() : MeasureSpec::Quick();
  spec.give_up_us = give_up_us;
  return spec;
}

std::optional<double> Partitioner::measure_candidate(Level& lv, const RegionKey& key, const std::string& content_key,
                                                     const Graph& rg, double prior_us, double give_up_us,
                                                     bool allow_measuring) {
  const Backend& be = *opts_.backends[static_cast<size_t>(key.first)];
  auto record = [&](double us, bool from_cache, bool cut_short) {
    if (!lv.recorded.insert(key).second) return;
    MeasurementInfo m;
    m.graph = lv.label;
    m.backend = be.name();
    m.nodes = static_cast<int>(key.second.size());
    m.kind = key.second.size() == 1 ? "node" : "region";
    if (key.second.size() == 1) {
      const Node& node = lv.g->nodes[static_cast<size_t>(key.second[0])];
      m.what = node.name + " (" + node.op_type + ")";
    } else {
      std::map<std::string, int> ops;
      for (int i : key.second) ops[lv.g->nodes[static_cast<size_t>(i)].op_type]++;
      for (const auto& [op, count] : ops) m.what += (m.what.empty() ? "" : " ") + op + "x" + std::to_string(count);
    }
    m.estimated_us = prior_us;
    m.measured_us = us;
    m.from_cache = from_cache;
    m.cut_short = cut_short;
    report_->measurements.push_back(std::move(m));
  };
  const std::string mkey = machine_.key();
  // Engines compiled with other options (precision=bf16) are other engines: their times are kept apart.
  const std::string ckey =
      be.is_native() || opts_.backend_options.empty() ? content_key : content_key + "\noptions " + opts_.backend_options;
  if (auto hit = opts_.tune_cache->get(ckey, be, mkey)) {
    if (hit->from_file) counted_hits_.insert(std::make_pair(ckey, key.first));
    report_->cache_hits = static_cast<int>(counted_hits_.size());
    record(hit->us, hit->from_file, false);
    return hit->us;
  }
  if (!allow_measuring || !can_measure() || lv.measure_failed.count(key)) return std::nullopt;
  auto model = export_onnx_bytes(rg);
  if (!model.ok()) return std::nullopt;
  if (opts_.progress) {
    opts_.progress(report_->measured + 1, 0,
                   lv.label + ": measuring " +
                       (key.second.size() == 1 ? "node '" + lv.g->nodes[static_cast<size_t>(key.second[0])].name + "'"
                                               : std::to_string(key.second.size()) + " nodes") +
                       " on " + be.name());
  }
  Blob blob;
  const double t0 = budget_->now();
  auto m = measure_region(be, rg, *model, opts_.backend_options, opts_.num_threads, &blob, measure_spec(give_up_us));
  const double spent = budget_->now() - t0;
  budget_->spent_us += spent;
  budget_->measurements += 1;
  report_->measure_seconds += spent / 1e6;
  if (!m.ok()) {
    lv.measure_failed[key] = true;
    report_->events.push_back(lv.label + ": could not measure " + std::to_string(key.second.size()) + " node(s) on " +
                              be.name() + ", using the estimate: " + m.status().message());
    return std::nullopt;
  }
  ++report_->measured;
  if (!be.is_native()) lv.blobs.emplace(key, blob);
  opts_.tune_cache->put(ckey, be, mkey, m->us, m->runs);
  record(m->us, false, m->cut_short);
  return m->us;
}

// Step 1c. Which nodes matter: by their cheapest estimate, largest first,
// every node until those taken hold kCoverage of the level's total, and
// beyond that every node still at least kNodeShare of it (a small node that
// hides a slow path costs little; a large one decides the placement). They
// are taken largest first,
// each on every backend that claims it, cheapest estimate first; a backend
// whose run is more than four times slower than the best measured so far is
// cut short (it cannot win). Identical nodes share one measurement (the
// cache key is their content). Native's measured times replace its priors;
// for other backends the error of a node measured alone (measured - prior)
// is carried into every region that holds it (estimate_region_us), since an
// engine alone also converts layouts at its boundary.
void Partitioner::measure_nodes(Level& lv) {
  if (!opts_.tune_cache || !cost_based()) return;
  constexpr double kNodeShare = 0.01, kCoverage = 0.9;
  const Graph& g = *lv.g;
  const size_t n = g.nodes.size(), nb = opts_.backends.size();
  std::vector<std::pair<double, size_t>> candidates;
  for (size_t i = 0; i < n; ++i) {
    const Node& node = g.nodes[i];
    bool nested = false;
    for (const auto& kv : node.attrs) nested = nested || kv.second.g || !kv.second.graphs.empty();
    if (nested) continue;  // its body is placed on its own
    bool shapes = true;
    for (const auto& v : node.inputs) {
      if (v.empty() || g.is_constant(v)) continue;
      const ValueInfo* vi = g.info(v);
      if (!vi && lv.outer) vi = lv.outer->info(v);
      shapes = shapes && vi && vi->shape.fully_known();
    }
    for (const auto& v : node.outputs) {
      const ValueInfo* vi = g.info(v);
      shapes = shapes && (v.empty() || (vi && vi->shape.fully_known()));
    }
    if (!shapes) continue;
    double cheapest = lv.prior_us[i][nb - 1];
    for (size_t b = 0; b < nb; ++b) {
      if (lv.cap.supported[b][i]) cheapest = std::min(cheapest, lv.prior_us[i][b]);
    }
    candidates.emplace_back(cheapest, i);
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  double covered = 0;
  size_t keep = 0;
  while (keep < candidates.size() &&
         (covered < kCoverage * lv.total_us || candidates[keep].first >= kNodeShare * lv.total_us)) {
    covered += candidates[keep++].first;
  }
  candidates.resize(keep);
  for (const auto& candidate : candidates) {
    const size_t i = candidate.second;  // a plain variable: lambdas below capture it (clang 14 cannot capture bindings)
    std::vector<char> in_region(n, 0);
    in_region[i] = 1;
    std::vector<int> nodes{static_cast<int>(i)};
    std::optional<Graph> rg;
    std::string content_key;
    std::vector<size_t> by_prior;
    for (size_t b = 0; b < nb; ++b) {
      if (lv.cap.supported[b][i] && lv.pinned[i] < 0) by_prior.push_back(b);
      else if (lv.cap.supported[b][i] && lv.pinned[i] == static_cast<int>(b)) by_prior.push_back(b);
    }
    std::stable_sort(by_prior.begin(), by_prior.end(),
                     [&](size_t a, size_t b) { return lv.prior_us[i][a] < lv.prior_us[i][b]; });
    // A backend estimated at more than kHopeless times the cheapest would
    // need its estimate to be that far off to win: not worth a measurement.
    constexpr double kHopeless = 3.0;
    while (by_prior.size() > 1 && lv.prior_us[i][by_prior.back()] > kHopeless * lv.prior_us[i][by_prior.front()]) {
      by_prior.pop_back();
    }
    double best = 0;
    for (size_t b : by_prior) {
      if (!rg) {
        RegionKey any{static_cast<int>(b), nodes};
        rg = region_graph(g, cut_of(lv, any), "region", lv.outer);
        auto kit = lv.keys.find(nodes);
        if (kit == lv.keys.end()) kit = lv.keys.emplace(nodes, region_key(*rg)).first;
        content_key = kit->second;
      }
      RegionKey key{static_cast<int>(b), nodes};
      auto us = measure_candidate(lv, key, content_key, *rg, lv.prior_us[i][b], best > 0 ? 4 * best : 0, true);
      if (!us) continue;
      lv.node_us[i][b] = *us;
      lv.delta_us[i][b] = *us - lv.prior_us[i][b];
      best = best > 0 ? std::min(best, *us) : *us;
    }
  }
}

const RegionCut& Partitioner::cut_of(Level& lv, const RegionKey& key) const {
  auto it = lv.cuts.find(key);
  if (it == lv.cuts.end()) {
    std::vector<char> in_region(lv.g->nodes.size(), 0);
    for (int i : key.second) in_region[static_cast<size_t>(i)] = 1;
    it = lv.cuts.emplace(key, cut_region(*lv.g, key.second, in_region, lv.outer, lv.key_prefix)).first;
  }
  return it->second;
}

Expected<std::string> Partitioner::region_model(Level& lv, const RegionKey& key, Graph* rg) {
  *rg = region_graph(*lv.g, cut_of(lv, key), "region", lv.outer);
  return export_onnx_bytes(*rg);
}

double Partitioner::prior_region_us(Level& lv, const RegionKey& key) {
  auto known = lv.region_priors.find(key);
  if (known != lv.region_priors.end()) return known->second;
  const Backend& be = *opts_.backends[static_cast<size_t>(key.first)];
  double est = -1;
  if (!be.is_native() && be.has_estimate_cost()) {
    auto bytes = export_onnx_bytes(region_graph(*lv.g, cut_of(lv, key), "region", lv.outer), kEstimateElideAbove);
    Expected<double> us = bytes.ok() ? be.estimate_cost(for_estimate(*bytes), machine_abi(machine_, be))
                                     : Expected<double>(bytes.status());
    if (us.ok() && *us >= 0) est = *us;
  }
  if (est < 0) {
    est = region_launch_us(be, machine_);
    for (int i : key.second) est += lv.prior_us[static_cast<size_t>(i)][static_cast<size_t>(key.first)];
  }
  lv.region_priors[key] = est;
  return est;
}

double Partitioner::estimate_region_us(Level& lv, const RegionKey& key) {
  const double prior = prior_region_us(lv, key);
  double correction = 0;
  for (int i : key.second) correction += lv.delta_us[static_cast<size_t>(i)][static_cast<size_t>(key.first)];
  // A node much faster inside a region than alone (its layout conversions
  // gone) must not make the region free.
  return std::max(prior + correction, 0.1 * prior);
}

double Partitioner::region_us(Level& lv, const std::vector<int>& nodes, int b, bool* measured) {
  *measured = false;
  RegionKey key{b, nodes};
  const double est = estimate_region_us(lv, key);
  if (!opts_.tune_cache || lv.measure_failed.count(key)) return est;
  // The standalone region graph, built at most once here: its content key,
  // and the model to measure.
  Graph rg = region_graph(*lv.g, cut_of(lv, key), "region", lv.outer);
  auto kit = lv.keys.find(nodes);
  if (kit == lv.keys.end()) kit = lv.keys.emplace(nodes, region_key(rg)).first;
  // Measured now: with --tune every region priced; by default an engine's
  // regions of several nodes that hold at least kRegionShare of the level's
  // time (a single node was measured, or not, in step 1c; native's regions
  // are the sums of their nodes, which step 1c measured: native fuses no
  // further and converts no layout at a boundary).
  constexpr double kRegionShare = 0.02;
  const bool want = !cut_of(lv, key).outputs.empty() &&
                    (opts_.measure == MeasureMode::kFull ||
                     (nodes.size() > 1 && !opts_.backends[static_cast<size_t>(b)]->is_native() &&
                      est >= kRegionShare * lv.total_us));
  auto us = measure_candidate(lv, key, kit->second, rg, prior_region_us(lv, key), 0, want);
  if (!us) return est;
  *measured = true;
  return *us;
}

double Partitioner::crossings_us(const Level& lv, const std::vector<int>& nodes, int b,
                                 const std::vector<int>& backend_of, bool passive, bool incoming) const {
  const Graph& g = *lv.g;
  const Backend& here = *opts_.backends[static_cast<size_t>(b)];
  std::vector<char> in_region(g.nodes.size(), 0);
  for (int i : nodes) in_region[static_cast<size_t>(i)] = 1;
  const std::unordered_map<std::string, int>& producer = lv.producer;
  auto other = [&](int node) -> const Backend& {
    return *opts_.backends[static_cast<size_t>(backend_of[static_cast<size_t>(node)])];
  };
  double us = 0;
  std::set<std::string> seen, handed_from, handed_to;
  // Values read from outside.
  for (int i : nodes) {
    for (const auto& v : g.nodes[static_cast<size_t>(i)].inputs) {
      if (v.empty() || g.is_constant(v) || !seen.insert(v).second) continue;
      auto p = producer.find(v);
      if (p != producer.end() && in_region[static_cast<size_t>(p->second)]) continue;
      if (p == producer.end()) {
        us += crossing_us(value_bytes(g, v), nullptr, &here, machine_);  // a graph input: host memory
      } else if (incoming) {
        const Backend& from = other(p->second);
        us += crossing_us(value_bytes(g, v), &from, &here, machine_);
        if (from.name() != here.name() && handed_from.insert(from.name()).second) {
          us += handoff_us(from, here, passive, machine_);
        }
      }
    }
  }
  // Values read outside (each consuming backend once) or returned.
  std::set<std::string> outs(g.outputs.begin(), g.outputs.end());
  std::set<std::string> charged;
  for (size_t j = 0; j < g.nodes.size(); ++j) {
    if (in_region[j]) continue;
    const Backend& to = other(static_cast<int>(j));
    for (const auto& v : g.nodes[j].inputs) {
      auto p = producer.find(v);
      if (v.empty() || p == producer.end() || !in_region[static_cast<size_t>(p->second)]) continue;
      if (charged.insert(v + "|" + to.name()).second) us += crossing_us(value_bytes(g, v), &here, &to, machine_);
      if (to.name() != here.name() && handed_to.insert(to.name()).second) us += handoff_us(here, to, passive, machine_);
    }
  }
  for (int i : nodes) {
    for (const auto& o : g.nodes[static_cast<size_t>(i)].outputs) {
      if (outs.count(o)) us += crossing_us(value_bytes(g, o), &here, nullptr, machine_);
    }
  }
  return us;
}

CostOption Partitioner::option(Level& lv, const std::vector<int>& nodes, int b, const std::vector<int>& backend_of,
                               bool passive) {
  CostOption o;
  const Backend& be = *opts_.backends[static_cast<size_t>(b)];
  o.backend = be.name();
  o.us = region_us(lv, nodes, b, &o.measured) + crossings_us(lv, nodes, b, backend_of, passive, /*incoming=*/true) +
         passive_wait_us_per_node(be, passive, machine_) * static_cast<double>(nodes.size());
  return o;
}

// ---- steps 2-4 ---------------------------------------------------------

}  // namespace tessera::partition
