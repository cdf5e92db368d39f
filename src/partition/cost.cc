// The analytic half of the cost model (cost.h). The constants are calibrated
// on the benchmark suite at 2 threads on a Zen 4 core pair (bench/RESULTS.md):
// the convolution efficiencies from resnet50 (oneDNN 211 GFLOP/s = 0.91 of the
// FMA peak, XNNPACK 0.84, native 0.62), the GEMM ones from BERT-base and the
// native SGEMM micro-benchmark (bench/gemm_bench.cc, 0.90 on 1024^3), the
// passive-wait cost from running oneDNN alone under both OpenMP wait policies
// (mobilenet_v2 6.5 vs 4.2 ms over ~100 nodes, resnet50 47.0 vs 40.4 ms over
// 122). They only need to rank placements; `tessera compile --tune` measures.
#include "partition/cost.h"

#include <algorithm>
#include <map>

#include "backends/backend.h"

namespace tessera::partition {

namespace {

// Nominal FMA peak of one thread, flops per microsecond (AVX-512, 2 FMA/cycle
// at ~3.6 GHz: 117 GFLOP/s measured by bench/peak_fma.cc).
constexpr double kPeakPerThread = 1.15e5;
// Memory-bound ops: bytes per microsecond per thread.
constexpr double kBandwidthPerThread = 8.0e3;

struct Profile {
  double conv, depthwise, gemm;  // fraction of the FMA peak
  double memory;                 // multiplier on bandwidth for memory-bound ops
  double fused_elementwise;      // share of an elementwise op's traffic left after fusion
  double launch_us;              // per node
};

const std::map<std::string, Profile>& profiles() {
  static const std::map<std::string, Profile> kProfiles = {
      {"native", {0.62, 0.08, 0.85, 1.0, 1.0, 1.0}},
      {"dnnl", {0.91, 0.25, 0.80, 1.3, 0.3, 2.0}},
      {"xnnpack", {0.84, 0.25, 0.78, 1.3, 0.3, 1.0}},
  };
  return kProfiles;
}

const Profile& profile_of(const std::string& backend) {
  const auto& kProfiles = profiles();
  // A plugin without a profile: native's throughput, a dearer launch.
  static const Profile kUnknown = {0.62, 0.08, 0.85, 1.0, 1.0, 5.0};
  auto it = kProfiles.find(backend);
  return it == kProfiles.end() ? kUnknown : it->second;
}

// Concrete dims of `v` (a constant's, else its value info's); false when unknown.
bool dims_of(const Graph& g, const std::string& v, Dims* out) {
  if (v.empty()) return false;
  if (const Tensor* t = g.constant(v)) {
    *out = t->dims();
    return true;
  }
  const ValueInfo* vi = g.info(v);
  if (!vi || !vi->shape.fully_known()) return false;
  *out = vi->shape.concrete();
  return true;
}

double numel_of(const Graph& g, const std::string& v) {
  Dims d;
  return dims_of(g, v, &d) ? static_cast<double>(numel(d)) : 0.0;
}

int64_t int_attr(const Node& n, const std::string& name, int64_t def) {
  auto it = n.attrs.find(name);
  return it == n.attrs.end() ? def : it->second.i;
}

WorkKind kind_of(const std::string& op) {
  static const std::map<std::string, WorkKind> kKinds = {
      {"Conv", WorkKind::kConv}, {"ConvTranspose", WorkKind::kConv}, {"FusedConv", WorkKind::kConv},
      {"MatMul", WorkKind::kGemm}, {"Gemm", WorkKind::kGemm}, {"FusedGemm", WorkKind::kGemm},
      {"MaxPool", WorkKind::kPool}, {"AveragePool", WorkKind::kPool}, {"GlobalAveragePool", WorkKind::kPool},
      {"GlobalMaxPool", WorkKind::kPool}, {"LpPool", WorkKind::kPool},
      {"BatchNormalization", WorkKind::kNorm}, {"LayerNormalization", WorkKind::kNorm},
      {"InstanceNormalization", WorkKind::kNorm}, {"Softmax", WorkKind::kNorm}, {"LogSoftmax", WorkKind::kNorm},
      {"LRN", WorkKind::kNorm}, {"ReduceMean", WorkKind::kNorm}, {"ReduceSum", WorkKind::kNorm},
      {"Reshape", WorkKind::kMove}, {"Flatten", WorkKind::kMove}, {"Squeeze", WorkKind::kMove},
      {"Unsqueeze", WorkKind::kMove}, {"Identity", WorkKind::kMove}, {"Transpose", WorkKind::kMove},
      {"Concat", WorkKind::kMove}, {"Split", WorkKind::kMove}, {"Slice", WorkKind::kMove},
      {"Gather", WorkKind::kMove}, {"Pad", WorkKind::kMove}, {"Shape", WorkKind::kMove},
      {"Cast", WorkKind::kMove}, {"Expand", WorkKind::kMove}, {"Tile", WorkKind::kMove},
      {"Add", WorkKind::kElementwise}, {"Sub", WorkKind::kElementwise}, {"Mul", WorkKind::kElementwise},
      {"Div", WorkKind::kElementwise}, {"Relu", WorkKind::kElementwise}, {"Clip", WorkKind::kElementwise},
      {"Sigmoid", WorkKind::kElementwise}, {"Tanh", WorkKind::kElementwise}, {"Erf", WorkKind::kElementwise},
      {"Pow", WorkKind::kElementwise}, {"Sqrt", WorkKind::kElementwise}, {"LeakyRelu", WorkKind::kElementwise},
      {"HardSigmoid", WorkKind::kElementwise}, {"HardSwish", WorkKind::kElementwise},
      {"Max", WorkKind::kElementwise}, {"Min", WorkKind::kElementwise}, {"Exp", WorkKind::kElementwise},
      {"Neg", WorkKind::kElementwise}, {"Abs", WorkKind::kElementwise}, {"PRelu", WorkKind::kElementwise},
      {"Sum", WorkKind::kElementwise}, {"Mean", WorkKind::kElementwise}, {"Elu", WorkKind::kElementwise},
      {"Gelu", WorkKind::kElementwise}, {"Softplus", WorkKind::kElementwise}};
  auto it = kKinds.find(op);
  return it == kKinds.end() ? WorkKind::kOther : it->second;
}

}  // namespace

double value_bytes(const Graph& g, const std::string& v) {
  if (v.empty()) return 0;
  if (const Tensor* t = g.constant(v)) return static_cast<double>(t->nbytes());
  const ValueInfo* vi = g.info(v);
  if (!vi || !vi->shape.fully_known()) return 0;
  return static_cast<double>(vi->shape.numel_or(0)) * static_cast<double>(dtype_size(vi->dtype));
}

NodeWork node_work(const Graph& g, const Node& n) {
  NodeWork w;
  w.kind = kind_of(n.op_type);
  for (const auto& v : n.inputs) w.bytes += value_bytes(g, v);
  for (const auto& v : n.outputs) w.bytes += value_bytes(g, v);
  const std::string y = n.outputs.empty() ? std::string() : n.outputs[0];
  switch (w.kind) {
    case WorkKind::kConv: {
      Dims wd;
      if (n.inputs.size() < 2 || !dims_of(g, n.inputs[1], &wd) || wd.size() < 3) break;
      double kernel = 1;
      for (size_t d = 2; d < wd.size(); ++d) kernel *= static_cast<double>(wd[d]);
      int64_t group = int_attr(n, "group", 1);
      if (n.op_type == "ConvTranspose") {
        // Each input element is scattered through Cout/group * kernel weights.
        w.flops = 2.0 * numel_of(g, n.inputs[0]) * static_cast<double>(wd[1]) * kernel;
      } else {
        w.flops = 2.0 * numel_of(g, y) * static_cast<double>(wd[1]) * kernel;
        if (group > 1 && wd[1] == 1) w.kind = WorkKind::kDepthwise;
      }
      break;
    }
    case WorkKind::kGemm: {
      Dims ad;
      if (n.inputs.empty() || !dims_of(g, n.inputs[0], &ad) || ad.empty()) break;
      int64_t k = ad.back();
      if (n.op_type != "MatMul" && int_attr(n, "transA", 0) != 0 && ad.size() == 2) k = ad[0];
      w.flops = 2.0 * numel_of(g, y) * static_cast<double>(k);
      break;
    }
    default:
      w.flops = numel_of(g, y);
      break;
  }
  return w;
}

double node_time_us(const NodeWork& w, const std::string& backend, int threads) {
  const Profile& p = profile_of(backend);
  const double t = std::max(1, threads);
  double compute = 0;
  switch (w.kind) {
    case WorkKind::kConv: compute = w.flops / (p.conv * kPeakPerThread * t); break;
    case WorkKind::kDepthwise: compute = w.flops / (p.depthwise * kPeakPerThread * t); break;
    case WorkKind::kGemm: compute = w.flops / (p.gemm * kPeakPerThread * t); break;
    default: break;
  }
  double memory = w.bytes / (p.memory * kBandwidthPerThread * t);
  if (w.kind == WorkKind::kElementwise) memory *= p.fused_elementwise;
  if (w.kind == WorkKind::kMove) memory *= 0.5;  // often a view or a single copy
  return p.launch_us + std::max(compute, memory);
}

bool has_profile(const std::string& backend) { return profiles().count(backend) != 0; }

double region_launch_us(const std::string& backend) { return backend == "native" ? 0.0 : 3.0; }

double crossing_us(double bytes, const std::string& from, const std::string& to) {
  if (from == to) return 0;
  // A reorder or copy at ~6 GB/s: engines keep their own layouts (blocked for
  // oneDNN, NHWC for XNNPACK) and convert at their boundary.
  return 1.0 + bytes / 6.0e3;
}

double handoff_us(const std::string& from, const std::string& to, const std::vector<std::string>& backend_set,
                  int threads) {
  if (threads < 2 || from == to || !engine_uses_openmp(from) || engines_need_passive_wait(backend_set)) return 0;
  return 500.0;
}

double passive_wait_us_per_node(const std::string& backend, const std::vector<std::string>& backend_set,
                                int threads) {
  if (threads < 2 || !engine_uses_openmp(backend) || !engines_need_passive_wait(backend_set)) return 0;
  return 30.0;
}

}  // namespace tessera::partition
