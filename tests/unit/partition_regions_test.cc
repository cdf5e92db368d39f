// Region formation: hand-made cases with known answers, and a property test
// over seeded random DAGs checked by a brute-force checker written here
// independently of check_regions().
#include "partition/regions.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <iostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace tessera::partition {
namespace {

RegionProblem make_problem(std::vector<int> backend, const std::vector<std::pair<int, int>>& edges) {
  RegionProblem p;
  p.num_units = static_cast<int>(backend.size());
  p.backend = std::move(backend);
  p.succ.resize(p.num_units);
  for (auto [u, v] : edges) p.succ[u].push_back(v);
  return p;
}

// Brute force over units (at most 64): every unit in a non-empty region of
// its backend, no path leaves a region and returns to it, the quotient has no
// cycle, and every inter-region edge goes from a lower to a higher id.
// Returns "" when valid.
std::string brute_force_check(const RegionProblem& p, const RegionResult& r) {
  const int n = p.num_units;
  if (n > 64) return "brute force handles at most 64 units";
  if (static_cast<int>(r.region_of.size()) != n) return "region_of size";
  if (static_cast<int>(r.region_backend.size()) != r.num_regions) return "region_backend size";
  const int m = r.num_regions;
  std::vector<uint64_t> members(m, 0);
  for (int u = 0; u < n; ++u) {
    const int a = r.region_of[u];
    if (a < 0 || a >= m) return "unit " + std::to_string(u) + " region out of range";
    if (r.region_backend[a] != p.backend[u]) return "unit " + std::to_string(u) + " backend mismatch";
    members[a] |= uint64_t{1} << u;
  }
  for (int a = 0; a < m; ++a) {
    if (members[a] == 0) return "region " + std::to_string(a) + " empty";
  }
  // reach[u]: units reachable from u by a path of length >= 1.
  std::vector<uint64_t> reach(n, 0);
  for (int u = n - 1; u >= 0; --u) {
    for (int v : p.succ[u]) reach[u] |= (uint64_t{1} << v) | reach[v];
  }
  for (int a = 0; a < m; ++a) {
    for (int u = 0; u < n; ++u) {
      if (!((members[a] >> u) & 1)) continue;
      uint64_t outside = reach[u] & ~members[a];
      for (int x = 0; x < n; ++x) {
        if (((outside >> x) & 1) && (reach[x] & members[a]) != 0) {
          return "region " + std::to_string(a) + " not convex via unit " + std::to_string(x);
        }
      }
    }
  }
  // Quotient closure by repeated relaxation (m <= 64).
  std::vector<uint64_t> qreach(m, 0);
  for (int u = 0; u < n; ++u) {
    for (int v : p.succ[u]) {
      const int a = r.region_of[u], b = r.region_of[v];
      if (a == b) continue;
      if (b < a) return "edge against region numbering";
      qreach[a] |= uint64_t{1} << b;
    }
  }
  for (bool grew = true; grew;) {
    grew = false;
    for (int a = 0; a < m; ++a) {
      uint64_t next = qreach[a];
      for (int b = 0; b < m; ++b) {
        if ((qreach[a] >> b) & 1) next |= qreach[b];
      }
      if (next != qreach[a]) {
        qreach[a] = next;
        grew = true;
      }
    }
  }
  for (int a = 0; a < m; ++a) {
    if ((qreach[a] >> a) & 1) return "quotient cycle through region " + std::to_string(a);
  }
  return "";
}

// Smallest valid region count, by enumerating every partition of the units
// into same-backend blocks (restricted growth strings); for tiny graphs only.
int exhaustive_minimum(const RegionProblem& p) {
  const int n = p.num_units;
  std::vector<int> block(n, 0), block_backend;
  int best = n;
  // Blocks are valid together when their quotient is acyclic (which also
  // makes each block convex).
  auto acyclic = [&](int k) {
    std::vector<uint32_t> out(k, 0);
    for (int u = 0; u < n; ++u) {
      for (int v : p.succ[u]) {
        if (block[u] != block[v]) out[block[u]] |= 1u << block[v];
      }
    }
    uint32_t removed = 0;
    for (bool progress = true; progress;) {
      progress = false;
      for (int a = 0; a < k; ++a) {
        if ((removed >> a) & 1) continue;
        bool has_pred = false;
        for (int b = 0; b < k && !has_pred; ++b) {
          has_pred = !((removed >> b) & 1) && ((out[b] >> a) & 1);
        }
        if (!has_pred) {
          removed |= 1u << a;
          progress = true;
        }
      }
    }
    return removed == (k == 32 ? ~0u : (1u << k) - 1);
  };
  auto place = [&](auto&& self, int u, int k) -> void {
    if (k >= best) return;
    if (u == n) {
      if (acyclic(k)) best = k;
      return;
    }
    for (int b = 0; b < k; ++b) {
      if (block_backend[b] != p.backend[u]) continue;
      block[u] = b;
      self(self, u + 1, k);
    }
    block[u] = k;
    block_backend.push_back(p.backend[u]);
    self(self, u + 1, k + 1);
    block_backend.pop_back();
  };
  place(place, 0, 0);
  return best;
}

TEST(PartitionRegions, EmptyGraphHasNoRegions) {
  const RegionProblem p = make_problem({}, {});
  const RegionResult r = form_regions(p);
  EXPECT_EQ(r.num_regions, 0);
  EXPECT_TRUE(r.region_of.empty());
  EXPECT_EQ(check_regions(p, r), "");
  EXPECT_EQ(greedy_baseline_region_count(p), 0);
}

TEST(PartitionRegions, SingleUnitIsOneRegion) {
  const RegionProblem p = make_problem({2}, {});
  const RegionResult r = form_regions(p);
  ASSERT_EQ(r.num_regions, 1);
  EXPECT_EQ(r.region_of, std::vector<int>({0}));
  EXPECT_EQ(r.region_backend, std::vector<int>({2}));
  EXPECT_EQ(check_regions(p, r), "");
}

TEST(PartitionRegions, AllSameBackendIsOneRegion) {
  const RegionProblem p = make_problem({1, 1, 1, 1, 1}, {{0, 1}, {0, 2}, {1, 3}, {2, 3}});
  const RegionResult r = form_regions(p);
  EXPECT_EQ(r.num_regions, 1);
  EXPECT_EQ(r.region_of, std::vector<int>(5, 0));
  EXPECT_EQ(check_regions(p, r), "");
}

TEST(PartitionRegions, AlternatingChainKeepsEveryUnitApart) {
  const RegionProblem p = make_problem({0, 1, 0, 1, 0}, {{0, 1}, {1, 2}, {2, 3}, {3, 4}});
  const RegionResult r = form_regions(p);
  EXPECT_EQ(r.num_regions, 5);
  EXPECT_EQ(r.region_of, std::vector<int>({0, 1, 2, 3, 4}));
  EXPECT_EQ(r.region_backend, std::vector<int>({0, 1, 0, 1, 0}));
  EXPECT_EQ(check_regions(p, r), "");
}

TEST(PartitionRegions, DoesNotMergeAcrossAPathThroughAnotherBackend) {
  // A(b0) -> B(b1) -> C(b0) and A -> C: merging A and C would make a cycle.
  const RegionProblem p = make_problem({0, 1, 0}, {{0, 1}, {1, 2}, {0, 2}});
  const RegionResult r = form_regions(p);
  EXPECT_EQ(r.num_regions, 3);
  EXPECT_NE(r.region_of[0], r.region_of[2]);
  EXPECT_EQ(check_regions(p, r), "");
}

TEST(PartitionRegions, MergesIndependentSameBackendBranches) {
  // Two branches 0 -> 1 -> 2 and 3 -> 4 -> 5 with backends b0, b1, b0 each:
  // index order gives 5 intervals; the best is 3 regions.
  const RegionProblem p = make_problem({0, 1, 0, 0, 1, 0}, {{0, 1}, {1, 2}, {3, 4}, {4, 5}});
  EXPECT_EQ(greedy_baseline_region_count(p), 5);
  const RegionResult r = form_regions(p);
  EXPECT_EQ(r.num_regions, 3);
  EXPECT_EQ(r.region_of, std::vector<int>({0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(check_regions(p, r), "");
}

TEST(PartitionRegions, MergesSameBackendNeighboursAcrossADirectEdge) {
  // 0(b0) -> 1(b1), 0 -> 2(b0), 2 -> 3(b1), 1 -> 3: the index order splits
  // 0 and 2 around 1, but 0 -> 2 is the only path between them.
  const RegionProblem p = make_problem({0, 1, 0, 1}, {{0, 1}, {0, 2}, {2, 3}, {1, 3}});
  const RegionResult r = form_regions(p);
  EXPECT_EQ(r.num_regions, 2);
  EXPECT_EQ(r.region_of, std::vector<int>({0, 1, 0, 1}));
  EXPECT_EQ(check_regions(p, r), "");
}

TEST(PartitionRegions, CheckRejectsNonConvexRegion) {
  const RegionProblem p = make_problem({0, 1, 0}, {{0, 1}, {1, 2}, {0, 2}});
  RegionResult r;
  r.num_regions = 2;
  r.region_of = {0, 1, 0};
  r.region_backend = {0, 1};
  const std::string msg = check_regions(p, r);
  EXPECT_NE(msg.find("region 0 is not convex"), std::string::npos) << msg;
  EXPECT_NE(brute_force_check(p, r), "");
}

TEST(PartitionRegions, CheckRejectsBadNumberingBackendAndRange) {
  const RegionProblem p = make_problem({0, 1}, {{0, 1}});
  RegionResult r;
  r.num_regions = 2;
  r.region_backend = {1, 0};
  r.region_of = {1, 0};  // valid regions, numbered against the edge
  EXPECT_NE(check_regions(p, r).find("topological numbering"), std::string::npos);
  r.region_of = {0, 1};  // backends swapped
  EXPECT_NE(check_regions(p, r).find("backend"), std::string::npos);
  r.region_backend = {0, 1};
  r.region_of = {0, 2};
  EXPECT_NE(check_regions(p, r).find("out of range"), std::string::npos);
  r.region_of = {0, 0};
  EXPECT_NE(check_regions(p, r), "");  // unit 1 on the wrong backend
  r.num_regions = 3;
  r.region_backend = {0, 1, 1};
  r.region_of = {0, 1};
  EXPECT_NE(check_regions(p, r).find("region 2 has no units"), std::string::npos);
}

// A random DAG with units in topological order. Half the graphs connect any
// earlier unit to a later one; the other half only nearby units, like the
// chains and short skips of a real model.
RegionProblem random_problem(std::mt19937& rng, int max_units) {
  const int n = std::uniform_int_distribution<int>(1, max_units)(rng);
  const int num_backends = std::uniform_int_distribution<int>(2, 3)(rng);
  const bool local = std::uniform_int_distribution<int>(0, 1)(rng) == 1;
  const double density = std::uniform_real_distribution<double>(0.0, local ? 0.8 : 0.3)(rng);
  // Per-graph backend weights, so some graphs are mostly one backend.
  std::vector<double> weights(num_backends);
  for (double& w : weights) w = std::uniform_real_distribution<double>(0.05, 1.0)(rng);
  std::discrete_distribution<int> pick_backend(weights.begin(), weights.end());
  std::bernoulli_distribution edge(density);

  RegionProblem p;
  p.num_units = n;
  p.succ.resize(n);
  p.backend.resize(n);
  for (int u = 0; u < n; ++u) p.backend[u] = pick_backend(rng);
  for (int u = 0; u < n; ++u) {
    const int last = local ? std::min(n - 1, u + 4) : n - 1;
    for (int v = u + 1; v <= last; ++v) {
      if (edge(rng)) p.succ[u].push_back(v);
    }
    if (!p.succ[u].empty() && edge(rng)) p.succ[u].push_back(p.succ[u].front());  // duplicate edge
  }
  return p;
}

TEST(PartitionRegions, RandomDagsGiveValidDeterministicRegionsNoMoreThanBaseline) {
  constexpr int kGraphs = 12000;
  std::mt19937 rng(20240611);
  long total_regions = 0, total_baseline = 0, total_units = 0;
  int fewer_than_baseline = 0;
  for (int i = 0; i < kGraphs; ++i) {
    const RegionProblem p = random_problem(rng, 60);
    const RegionResult r = form_regions(p);
    const int baseline = greedy_baseline_region_count(p);
    ASSERT_EQ(brute_force_check(p, r), "") << "graph " << i;
    ASSERT_EQ(check_regions(p, r), "") << "graph " << i;
    ASSERT_LE(r.num_regions, baseline) << "graph " << i;
    const RegionResult again = form_regions(p);
    ASSERT_EQ(again.region_of, r.region_of) << "graph " << i;
    ASSERT_EQ(again.region_backend, r.region_backend) << "graph " << i;
    total_regions += r.num_regions;
    total_baseline += baseline;
    total_units += p.num_units;
    fewer_than_baseline += r.num_regions < baseline;
  }
  std::cout << "[ regions  ] " << kGraphs << " random DAGs, " << total_units << " units: " << total_regions
            << " regions vs " << total_baseline << " for the index-order baseline; fewer on " << fewer_than_baseline
            << " graphs\n";
  RecordProperty("graphs", kGraphs);
  RecordProperty("regions", std::to_string(total_regions));
  RecordProperty("baseline_regions", std::to_string(total_baseline));
}

TEST(PartitionRegions, TinyRandomDagsAreNeverBelowTheExhaustiveMinimum) {
  constexpr int kGraphs = 3000;
  std::mt19937 rng(7);
  long total_regions = 0, total_minimum = 0;
  int optimal = 0;
  for (int i = 0; i < kGraphs; ++i) {
    const RegionProblem p = random_problem(rng, 11);
    const RegionResult r = form_regions(p);
    ASSERT_EQ(brute_force_check(p, r), "") << "graph " << i;
    const int minimum = exhaustive_minimum(p);
    ASSERT_GE(r.num_regions, minimum) << "graph " << i;
    total_regions += r.num_regions;
    total_minimum += minimum;
    optimal += r.num_regions == minimum;
  }
  std::cout << "[ regions  ] " << kGraphs << " tiny DAGs (1..11 units): " << total_regions << " regions vs "
            << total_minimum << " at the exhaustive minimum; optimal on " << optimal << " graphs\n";
  RecordProperty("tiny_optimal", optimal);
}

}  // namespace
}  // namespace tessera::partition
