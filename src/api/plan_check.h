// The end-to-end check after placement.
//
// Input: the program cost-based placement chose, its report, the graph and
// options it came from. Output: the program to keep, and the timings in the
// report. Method: the plans a single backend gives — native alone, or one
// engine taking every node it runs (as `--backends ENGINE,native --placement
// priority` would) — the cheapest of them and any priced within 1.25x of the
// chosen plan are built too (by now every measurement they need is cached, so this compiles but
// hardly measures), and every distinct program is run end to end on random
// inputs, in warmed blocks, on this machine. A chosen plan that mixes backends
// (not one of those single-backend plans) stays only when it beats the
// fastest of them by 5 %; a chosen single-backend plan yields to another
// only when that one is faster by 3 %. What region-by-region
// measurements cannot see — hand-overs between engines' threads, caches
// between regions, the glue graph's own work — is in these times, so the
// default placement is never knowingly slower than the best single backend.
#pragma once

#include "artifact/program.h"
#include "ir/graph.h"
#include "partition/partition.h"
#include "util/status.h"

namespace tessera::api {

// `g` is the optimised graph `chosen` was partitioned from with `po`.
// Runs only for cost-based placement that may measure; spends at most
// `budget_us` timing (at least two runs of each program).
Expected<Program> check_plan(Program chosen, const Graph& g, const PartitionOptions& po, PartitionReport* report,
                             double budget_us);

}  // namespace tessera::api
