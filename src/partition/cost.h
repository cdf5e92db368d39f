// Cost model for cost-based placement: the prior. Input: one graph level, a
// backend, and the machine (machine.h: its measured peak, SGEMM rate,
// bandwidth, wake-up latency, and per-backend launch and hand-over costs).
// Output: estimated microseconds for a node, for a region's launch, for a
// value crossing a region boundary, and for the whole-process effects of a
// backend set (how idle OpenMP threads wait). Method: the native backend is
// priced here, by FLOPs at a share of the machine's measured SGEMM rate and
// bytes at its measured bandwidth; every other backend prices its own regions
// through the ABI's estimate_region on the same machine figures (a backend
// without an estimate gets native's throughput and its measured launch). No
// backend is known by name: what differs between engines comes from what they
// declare (threading) or what was measured. Measurements (tune.h) replace
// these estimates wherever they exist.
#pragma once

#include <string>
#include <vector>

#include "backends/backend.h"
#include "ir/graph.h"
#include "partition/machine.h"

namespace tessera::partition {

// What a node does, for the analytic model.
enum class WorkKind { kConv, kDepthwise, kGemm, kRecurrent, kPool, kNorm, kElementwise, kMove, kOther };

struct NodeWork {
  WorkKind kind = WorkKind::kOther;
  double flops = 0;  // multiply-adds count 2
  double bytes = 0;  // inputs (weights included) + outputs
  double tasks = 1;  // independent pieces a direct kernel can spread over threads (depthwise: images x groups)
  bool integer = false;  // an 8-bit product (QLinearConv/MatMul, ConvInteger, MatMulInteger)
  // Native kernels that compute more than they move, known by cycles per
  // element: the elements, and the cycles each costs (0: memory-bound).
  double elements = 0;
  double cycles_per_element = 0;
};

// Work of node `n` of `g` from its value infos; unknown shapes count as 0.
NodeWork node_work(const Graph& g, const Node& n);

// Analytic time of `w` on the native backend with m.threads threads.
double native_node_us(const NodeWork& w, const MachineProfile& m);

// Native time of the graphs nested in `n` (If: its dearer branch; Loop: the
// body times a constant trip count; Scan: the body times the scan length when
// known; once otherwise), node by node, recursively. 0 for other nodes. Body
// nodes reading outer values see the outer graph's types.
double nested_native_us(const Graph& g, const Node& n, const MachineProfile& m);

// The prior for a backend that gives no estimate of its own: native's
// throughput, plus the backend's measured launch (else 5 us) per node.
double prior_node_us(const NodeWork& w, const Backend& b, const MachineProfile& m);

// Fixed cost of calling one engine of `b`: its measured launch (0 for native,
// whose regions run inline; 3 us when not measured).
double region_launch_us(const Backend& b, const MachineProfile& m);

// Moving a value of `bytes` between a region on `from` and one on `to` (null:
// host memory, a graph input or output): a copy or layout reorder on at least
// one side, at the machine's bandwidth. 0 when both are the same backend.
double crossing_us(double bytes, const Backend* from, const Backend* to, const MachineProfile& m);

// True when the backends of `set` make OpenMP wait passively in one process
// (engines_need_passive_wait over their declared threading, native aside).
bool set_waits_passively(const std::vector<const Backend*>& set);

// Handing over from a region on `from` to one on `to` in the same run. An
// engine's workers keep spinning after a run (OpenMP's bounded spin, or
// pthreadpool's) and hold cores the next pool needs, or sleep and must be
// woken: bert_tiny with its 16 MatMuls pinned to native between oneDNN
// regions ran in 10.0 ms against 0.78 ms all on oneDNN, and a voice-activity
// net alternating XNNPACK and native seven times ran 1.6x slower than the sum
// of its regions. Priced at the hand-over measured on this machine between
// each engine and native's pool (machine.h); the dearer side counts. 0 with
// one thread or for engines that run on the caller's thread.
double handoff_us(const Backend& from, const Backend& to, bool passive, const MachineProfile& m);

// Extra time per node of an OpenMP engine when OpenMP waits passively: every
// parallel region pays futex wake-ups, about four per primitive at the
// machine's measured wake-up latency (Zen 4, 2 threads: mobilenet_v2 6.5 vs
// 4.2 ms over ~100 nodes, resnet50 47.0 vs 40.4 ms over 122, with a 7 us
// wake-up).
double passive_wait_us_per_node(const Backend& b, bool passive, const MachineProfile& m);

// Bytes of one value from its info (0 when the shape is not concrete).
double value_bytes(const Graph& g, const std::string& v);

}  // namespace tessera::partition
