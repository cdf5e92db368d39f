// The partitioner's working class, shared by its files (not public API):
//   partitioner.cc   the driver: per graph level, steps 1-6, lowering, recursion
//   pricing.cc       step 1b-1c and every price: node estimates, measuring the
//                    nodes that matter, region estimates and measurements,
//                    boundary crossings
//   plan_search.cc   steps 2-4 under cost-based placement: pruning, relocation,
//                    a plan to a fixed point, the backend-set search, and why
//                    each region went where it did
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "partition/machine.h"
#include "partition/partition_internal.h"
#include "partition/regions.h"
#include "partition/tune.h"

namespace tessera::partition {

// Models given to estimates carry no initializer data above this size: an
// estimate needs shapes (small constants such as axes and shapes keep theirs).
constexpr size_t kEstimateElideAbove = 64 * 1024;

// Heavy ops keep a small region on its engine; data movement alone never
// makes one worth a launch.
bool is_heavy(const std::string& op);
bool is_data_movement(const std::string& op);  // ops that only move, reshape or describe data
std::string join(const std::vector<std::string>& v, const char* sep = ",");

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
    bool cliffs_to_native = false;                  // ... that leaves the engine's cliffs to native
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
  // A region model for estimate_cost/estimate_region, with the backend options attached as its metadata.
  std::string for_estimate(std::string model) const;
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
  // relocation (the plan a single-engine priority placement makes); with
  // `cliffs_to_native`, but for the engine's cliffs (leave_cliffs_to_native).
  Plan plan(Level& lv, std::vector<std::vector<char>>& allowed, bool passive, bool quiet, bool engine_first = false,
            bool cliffs_to_native = false);
  // Disallows an engine on the nodes it is priced (estimated or measured) at over kCliff times native's price: an
  // engine-first plan's second variant gives such a node (oneDNN's reference Softmax over a middle axis: 13.7 ms
  // against native's 0.44) to native and keeps the engine everywhere else. Nodes pinned to the engine by --place stay
  // on it. Both variants are priced, and the end-to-end check times them: the prices are often estimates, and a
  // wrong one (native's QLinearConv at 3 us) would otherwise cut a whole-model region into dozens.
  void leave_cliffs_to_native(Level& lv, std::vector<std::vector<char>>& allowed, bool quiet);
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


}  // namespace tessera::partition
