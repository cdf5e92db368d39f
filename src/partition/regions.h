// Region formation (partition step 3): given a DAG of placement units (single
// nodes or composites contracted to one unit), each already assigned to a
// backend, group same-backend units into regions such that
//   * every unit is in exactly one region,
//   * every region is convex (no path leaves the region and comes back),
//   * the quotient graph of regions is acyclic,
//   * there are as few regions as the heuristic finds, and never more than
//     the interval baseline (greedy_baseline_region_count).
// Pure and deterministic: the same problem always gives the same answer.
#pragma once

#include <string>
#include <vector>

namespace tessera::partition {

struct RegionProblem {
  // Units are numbered 0..n-1 in a topological order: every edge u -> v has
  // u < v.
  int num_units = 0;
  // succ[u]: units that consume something unit u produces (duplicates allowed).
  std::vector<std::vector<int>> succ;
  // backend[u]: backend id (any small non-negative int) the unit is placed on.
  std::vector<int> backend;
};

struct RegionResult {
  // region_of[u]: region id of unit u. Regions are numbered 0..num_regions-1
  // in a topological order of the quotient graph (every edge between regions
  // goes from a lower id to a higher one).
  std::vector<int> region_of;
  std::vector<int> region_backend;  // per region
  int num_regions = 0;
};

RegionResult form_regions(const RegionProblem& p);

// The simple baseline: walk units in index order and start a new region
// whenever the backend changes. Its regions are intervals of a topological
// order, hence convex with an acyclic quotient.
int greedy_baseline_region_count(const RegionProblem& p);

// Checks used by tests and by debug assertions: each region convex and the
// quotient acyclic. Returns an empty string when valid, else what is wrong.
std::string check_regions(const RegionProblem& p, const RegionResult& r);

}  // namespace tessera::partition
