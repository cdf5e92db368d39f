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
#include <optional>
#include <set>

#include "onnx/onnx_export.h"
#include "ops/region_attrs.h"
#include "partition/cost.h"
#include "partition/machine.h"
#include "partition/partition_internal.h"
#include "partition/regions.h"
#include "partition/tune.h"

namespace tessera {

using partition::MeasureBudget;
using partition::MeasureSpec;

// Models given to estimates carry no initializer data above this size: an
// estimate needs shapes (small constants such as axes and shapes keep theirs).
constexpr size_t kEstimateElideAbove = 64 * 1024;

using namespace partition;

namespace {

bool is_heavy(const std::string& op) {
  static const std::set<std::string> kHeavy = {
      "Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "FusedConv", "MatMul", "MatMulInteger",
      "QLinearMatMul", "Gemm", "FusedGemm", "Einsum", "LSTM", "GRU", "RNN", "MaxPool", "AveragePool", "LpPool",
      "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "LayerNormalization", "BatchNormalization",
      "InstanceNormalization", "Softmax", "LogSoftmax", "LRN", "Attention"};
  return kHeavy.count(op) != 0;
}

// Ops that only move, reshape or describe data.
bool is_data_movement(const std::string& op) {
  static const std::set<std::string> kMove = {
      "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Shape", "Size", "Dropout", "Cast", "CastLike",
      "Expand", "Transpose", "Concat", "Split", "Slice", "Gather", "Tile", "Pad", "DepthToSpace", "SpaceToDepth",
      "ConstantOfShape"};
  return kMove.count(op) != 0;
}

std::string join(const std::vector<std::string>& v, const char* sep = ",") {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

class Partitioner {
 public:
  Partitioner(const PartitionOptions& opts, PartitionReport* report, Program* program)
      : opts_(opts),
        report_(report),
        program_(program),
        in_set_(opts.backends.size(), 1),
        machine_(opts.machine ? *opts.machine : identify_machine(opts.num_threads)),
        budget_(opts.budget ? opts.budget : &default_budget_) {
    report_->machine = machine_.str();
  }

  // Partitions `g` in place: on return it is the level's glue graph.
  Status run_level(Graph& g, const std::string& label, const Scope* outer, const std::string& key_prefix);

 private:
  struct Region {
    int backend = 0;
    std::vector<int> nodes;
  };
  using RegionKey = std::pair<int, std::vector<int>>;  // (backend, nodes)

  // What the steps of one graph level share.
  struct Level {
    const Graph* g = nullptr;
    std::string label;
    const Scope* outer = nullptr;
    std::string key_prefix;
    std::vector<std::vector<int>> preds;
    CapabilityTable cap;
    std::vector<int> pinned;
    std::vector<std::vector<double>> prior_us;  // [node][backend], estimates before any measurement
    std::vector<std::vector<double>> node_us;   // [node][backend], measured where measured, else prior
    std::vector<std::vector<double>> delta_us;  // [node][backend], measured - prior (0 when not measured)
    double total_us = 0;                        // every node at its cheapest: what "a share" is of
    std::vector<std::vector<int>> order;        // [node] backends, preferred first (empty: priority)
    std::map<RegionKey, Blob> blobs;           // compiled (trial compile or tuning)
    std::map<RegionKey, RegionCut> cuts;
    std::map<std::vector<int>, std::string> keys;  // region content keys by node set
    std::map<RegionKey, bool> measure_failed;
    std::map<RegionKey, double> plugin_estimates;  // from the ABI's estimate_region / estimate_cost
    std::map<RegionKey, double> region_priors;     // estimate before any measurement
    std::set<RegionKey> recorded;                   // measurements already in the report
    bool engine_first = false;                      // the chosen plan is an engine-first one
    std::unordered_map<std::string, int> producer;  // value -> the node writing it
  };

  // One pass of steps 2-4 to a fixed point.
  struct Plan {
    Placement pl;
    std::vector<Region> regions;
    double us = 0;  // cost-based: the plan's estimated (or measured) time
  };

  std::vector<int> pins_for(const Graph& g) const;
  std::vector<Region> group(const Graph& g, const Placement& pl, const RegionResult& rr) const;
  bool cost_based() const { return opts_.policy == PlacementPolicy::kCost; }
  std::vector<std::string> set_names(const std::vector<char>& in_set) const;
  // True when the backends of `in_set` make OpenMP wait passively.
  bool passive(const std::vector<char>& in_set) const;

  void estimate_nodes(Level& lv);
  // Step 1c: measures the nodes that matter on every backend that claims
  // them (or takes their times from the cache), and corrects the estimates.
  void measure_nodes(Level& lv);
  void rank_backends(Level& lv) const;
  bool can_measure() const;
  MeasureSpec measure_spec(double give_up_us) const;
  // Measures (or finds in the cache) `nodes` on `b`; records it in the report.
  std::optional<double> measure_candidate(Level& lv, const RegionKey& key, const std::string& content_key,
                                          const Graph& rg, double prior_us, double give_up_us, bool allow_measuring);
  // `engine_first`: the backends' list order for every node and no
  // relocation (the plan a single-engine priority placement makes).
  Plan plan(Level& lv, std::vector<std::vector<char>>& allowed, bool passive, bool quiet, bool engine_first = false);
  bool prune_small(Level& lv, const std::vector<Region>& regions, std::vector<std::vector<char>>& allowed, bool quiet);
  bool relocate(Level& lv, const Plan& p, const std::vector<std::vector<char>>& allowed,
                std::vector<std::vector<int>>& order, bool passive, bool quiet);
  // `report`: list the sets priced in the report (the main graph's);
  // a body's choice becomes an event.
  void choose_backend_set(Level& lv, std::vector<std::vector<char>>& allowed, bool report);

  // The time of `nodes` as one region on backend `b` (launch included, the
  // passive-wait penalty not): measured when known (or, with --tune,
  // measurable now), else the sum of the node estimates.
  double region_us(Level& lv, const std::vector<int>& nodes, int b, bool* measured);
  // What the values crossing the boundary of `nodes` cost if the region sits
  // on `b` and everything else stays where `backend_of` puts it.
  // `incoming`: also the values other regions send in (a region priced on
  // its own); without it, only what it sends out and reads from the graph
  // inputs (a whole plan, where each crossing is paid once).
  double crossings_us(const Level& lv, const std::vector<int>& nodes, int b, const std::vector<int>& backend_of,
                      bool passive, bool incoming) const;
  // The estimate of a region before any measurement: the backend's own
  // (estimate_region on this machine's figures), else the sum of the node
  // priors plus a launch.
  double prior_region_us(Level& lv, const RegionKey& key);
  // The prior corrected by what node measurements showed: measured native
  // nodes replace their priors; for other backends each measured node's
  // error (measured - prior, alone) is added to the region's estimate.
  double estimate_region_us(Level& lv, const RegionKey& key);
  // Cut, standalone graph and serialized model of a region (cached cut).
  Expected<std::string> region_model(Level& lv, const RegionKey& key, Graph* rg);
  CostOption option(Level& lv, const std::vector<int>& nodes, int b, const std::vector<int>& backend_of,
                    bool passive);
  const RegionCut& cut_of(Level& lv, const RegionKey& key) const;
  // Fills the report's view of why region `r` went where it did.
  void explain(Level& lv, const Region& r, const Placement& pl, const std::vector<std::vector<char>>& allowed,
               RegionInfo& info);

  const PartitionOptions& opts_;
  PartitionReport* report_;
  Program* program_;
  std::vector<char> in_set_;  // backends the current level's cost search kept
  int next_region_id_ = 0;
  int next_body_ = 0;
  int compiled_ = 0;
  bool may_measure_ = true;  // off while only explaining
  std::set<std::pair<std::string, int>> counted_hits_;  // (region key, backend) read from the cache file
  MachineProfile machine_;
  MeasureBudget default_budget_;
  MeasureBudget* budget_;
};

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
      if (be.is_native() || !be.has_estimate_cost() || !lv.cap.supported[b][i]) continue;
      if (!model) {
        std::vector<char> in_region(n, 0);
        in_region[i] = 1;
        RegionCut cut = cut_region(g, {static_cast<int>(i)}, in_region, lv.outer, lv.key_prefix);
        auto bytes = export_onnx_bytes(region_graph(g, cut, "node", lv.outer), kEstimateElideAbove);
        model = bytes.ok() ? *bytes : std::string();
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
  if (auto hit = opts_.tune_cache->get(content_key, be, mkey)) {
    if (hit->from_file) counted_hits_.insert(std::make_pair(content_key, key.first));
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
  opts_.tune_cache->put(content_key, be, mkey, m->us, m->runs);
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
  for (const auto& [cheapest, i] : candidates) {
    (void)cheapest;
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
    Expected<double> us = bytes.ok() ? be.estimate_cost(*bytes, machine_abi(machine_, be))
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
  // Measured now: with --tune every region priced; by default the regions
  // of several nodes that hold at least kRegionShare of the level's time
  // (a single node was measured, or not, in step 1c).
  constexpr double kRegionShare = 0.02;
  const bool want = !cut_of(lv, key).outputs.empty() &&
                    (opts_.measure == MeasureMode::kFull ||
                     (nodes.size() > 1 && est >= kRegionShare * lv.total_us));
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

Partitioner::Plan Partitioner::plan(Level& lv, std::vector<std::vector<char>>& allowed,
                                    bool passive, bool quiet, bool engine_first) {
  Plan p;
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
    for (bool engine_first : {false, true}) {
      if (engine_first && engines != 1) continue;
      if (opts_.force && engines == 1 && engine_first != opts_.force->engine_first) continue;
      auto trial_copy = trial;
      Plan p = plan(lv, trial_copy, passive(set), /*quiet=*/true, engine_first);
      priced.push_back({set_names(set), p.us, false, engine_first ? "engine first" : "cost"});
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
  lv.engine_first = priced[best].plan == "engine first";
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
    p = plan(lv, allowed, passive(in_set_), /*quiet=*/false, lv.engine_first);
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
        blob = bytes.ok() ? be.compile(*bytes, opts_.backend_options) : Expected<Blob>(bytes.status());
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

}  // namespace

Expected<PlaceRule> parse_place_rule(const std::string& arg) {
  size_t eq = arg.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == arg.size()) {
    return InvalidInput("--place '" + arg + "': expected OP_OR_NODE=BACKEND");
  }
  return PlaceRule{arg.substr(0, eq), arg.substr(eq + 1)};
}

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
