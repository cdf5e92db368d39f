// Cost model for cost-based placement. Input: one graph level and a backend.
// Output: estimated microseconds for a node, for a region's launch, for a
// value crossing a region boundary, and for a whole-process effect of the
// backend set (how idle engine threads wait). Method: an analytic model per
// backend (FLOPs at a per-op-class fraction of the FMA peak, bytes at a
// bandwidth, a fixed launch cost), calibrated on this project's benchmark
// models (docs/placement.md lists the figures); a backend that implements the
// ABI's estimate_cost answers for itself instead, and measurements taken by
// `tessera compile --tune` (tune.h) override both.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"

namespace tessera::partition {

// What a node does, for the analytic model.
enum class WorkKind { kConv, kDepthwise, kGemm, kPool, kNorm, kElementwise, kMove, kOther };

struct NodeWork {
  WorkKind kind = WorkKind::kOther;
  double flops = 0;  // multiply-adds count 2
  double bytes = 0;  // inputs (weights included) + outputs
};

// Work of node `n` of `g` from its value infos; unknown shapes count as 0.
NodeWork node_work(const Graph& g, const Node& n);

// Analytic time of `w` on backend `backend` with `threads` threads. Backends
// without a profile (third-party plugins) get native's throughput and a
// higher launch cost, so small regions of them only pay off when measured.
double node_time_us(const NodeWork& w, const std::string& backend, int threads);

// True when the model above is calibrated for `backend` (native, dnnl,
// xnnpack); for others the backend's own estimate_cost is the better guess.
bool has_profile(const std::string& backend);

// Fixed cost of calling one engine of `backend` (descriptors, stream set-up).
double region_launch_us(const std::string& backend);

// Moving a value of `bytes` from a region on `from` to one on `to` (a copy or
// layout reorder on at least one side). 0 when both are the same backend.
double crossing_us(double bytes, const std::string& from, const std::string& to);

// Extra time per node on an OpenMP engine when the process also runs another
// engine with its own thread pool: OpenMP then waits passively and every
// parallel region pays a futex wake-up (set_engine_thread_policy).
double passive_wait_us_per_node(const std::string& backend, const std::vector<std::string>& backend_set,
                                int threads);

// Handing over from a region on `from` to one on `to` in the same run. An
// OpenMP engine's workers keep spinning after a run (the bounded spin a lone
// oneDNN engine gets) and hold cores the next engine's threads need: bert_tiny
// with its 16 MatMuls pinned to native between oneDNN regions ran in 10.0 ms
// against 0.78 ms all on oneDNN (~0.58 ms per hand-over), and an mlp split into
// a oneDNN region and a native Gemm took 1.0 ms instead of 0.01 ms in 3 of 5
// processes. Charged as 500 us; a tail too small to wake the next engine's
// threads pays less (bert_tiny's native pooler after its oneDNN region), which
// the model does not know: it errs towards fewer hand-overs.
double handoff_us(const std::string& from, const std::string& to, const std::vector<std::string>& backend_set,
                  int threads);

// Bytes of one value from its info (0 when the shape is not concrete).
double value_bytes(const Graph& g, const std::string& v);

}  // namespace tessera::partition
