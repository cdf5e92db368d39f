// The analytic half of the cost model (cost.h): the native backend's prior,
// and what crossing between backends costs, on the measured figures of this
// machine (machine.h). The per-op-class shares below are properties of
// Tessera's own kernels, not of a CPU: native convolutions run im2col into
// its SGEMM (about 0.75 of what that SGEMM reaches on a plain product),
// depthwise ones a direct loop (about 0.1 of the FMA peak, one task per
// channel group), products the SGEMM itself.
#include "partition/cost.h"

#include <algorithm>
#include <map>
#include <unordered_set>

namespace tessera::partition {

namespace {

struct NativeShares {
  double conv = 0.75, gemm = 0.95;  // of the measured SGEMM rate
  // Integer products (QLinearConv/MatMul, ConvInteger, MatMulInteger): native's u8s8 kernels multiply four byte
  // pairs per 32-bit lane with VNNI (measured 2.2x its SGEMM on BERT-base's 128 x 768 x 3072 QLinearMatMul), and
  // widen bytes to 16 bits without it.
  double int8_vnni = 2.0, int8 = 1.0;
  double depthwise = 0.10;          // of the FMA peak, per task
  double recurrent = 0.25;          // of the SGEMM rate, one thread (batch-1 products per step)
  double launch_us = 0.8;           // per node: the executor's dispatch, and a hand-off to the pool
};
constexpr NativeShares kNative;

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
  static const std::map<std::string, WorkKind> kKinds = {{"Conv", WorkKind::kConv},
                                                         {"ConvTranspose", WorkKind::kConv},
                                                         {"FusedConv", WorkKind::kConv},
                                                         {"MatMul", WorkKind::kGemm},
                                                         {"Gemm", WorkKind::kGemm},
                                                         {"FusedGemm", WorkKind::kGemm},
                                                         {"QLinearConv", WorkKind::kConv},
                                                         {"ConvInteger", WorkKind::kConv},
                                                         {"QLinearMatMul", WorkKind::kGemm},
                                                         {"MatMulInteger", WorkKind::kGemm},
                                                         {"MaxPool", WorkKind::kPool},
                                                         {"AveragePool", WorkKind::kPool},
                                                         {"GlobalAveragePool", WorkKind::kPool},
                                                         {"GlobalMaxPool", WorkKind::kPool},
                                                         {"LpPool", WorkKind::kPool},
                                                         {"BatchNormalization", WorkKind::kNorm},
                                                         {"LayerNormalization", WorkKind::kNorm},
                                                         {"InstanceNormalization", WorkKind::kNorm},
                                                         {"Softmax", WorkKind::kNorm},
                                                         {"LogSoftmax", WorkKind::kNorm},
                                                         {"LRN", WorkKind::kNorm},
                                                         {"ReduceMean", WorkKind::kNorm},
                                                         {"ReduceSum", WorkKind::kNorm},
                                                         {"Reshape", WorkKind::kMove},
                                                         {"Flatten", WorkKind::kMove},
                                                         {"Squeeze", WorkKind::kMove},
                                                         {"Unsqueeze", WorkKind::kMove},
                                                         {"Identity", WorkKind::kMove},
                                                         {"Transpose", WorkKind::kMove},
                                                         {"Concat", WorkKind::kMove},
                                                         {"Split", WorkKind::kMove},
                                                         {"Slice", WorkKind::kMove},
                                                         {"Gather", WorkKind::kMove},
                                                         {"Pad", WorkKind::kMove},
                                                         {"Shape", WorkKind::kMove},
                                                         {"Cast", WorkKind::kMove},
                                                         {"Expand", WorkKind::kMove},
                                                         {"Tile", WorkKind::kMove},
                                                         {"Add", WorkKind::kElementwise},
                                                         {"Sub", WorkKind::kElementwise},
                                                         {"Mul", WorkKind::kElementwise},
                                                         {"Div", WorkKind::kElementwise},
                                                         {"Relu", WorkKind::kElementwise},
                                                         {"Clip", WorkKind::kElementwise},
                                                         {"Sigmoid", WorkKind::kElementwise},
                                                         {"Tanh", WorkKind::kElementwise},
                                                         {"Erf", WorkKind::kElementwise},
                                                         {"Pow", WorkKind::kElementwise},
                                                         {"Sqrt", WorkKind::kElementwise},
                                                         {"LeakyRelu", WorkKind::kElementwise},
                                                         {"HardSigmoid", WorkKind::kElementwise},
                                                         {"HardSwish", WorkKind::kElementwise},
                                                         {"Max", WorkKind::kElementwise},
                                                         {"Min", WorkKind::kElementwise},
                                                         {"Exp", WorkKind::kElementwise},
                                                         {"Neg", WorkKind::kElementwise},
                                                         {"Abs", WorkKind::kElementwise},
                                                         {"PRelu", WorkKind::kElementwise},
                                                         {"Sum", WorkKind::kElementwise},
                                                         {"Mean", WorkKind::kElementwise},
                                                         {"Elu", WorkKind::kElementwise},
                                                         {"Gelu", WorkKind::kElementwise},
                                                         {"Softplus", WorkKind::kElementwise},
                                                         {"LSTM", WorkKind::kRecurrent},
                                                         {"GRU", WorkKind::kRecurrent},
                                                         {"RNN", WorkKind::kRecurrent}};
  auto it = kKinds.find(op);
  return it == kKinds.end() ? WorkKind::kOther : it->second;
}

// Native kernels whose cost is their arithmetic, not their traffic, in cycles
// per element (single-op models of 1 M elements, 2 threads, timed with
// `tessera bench` on an AVX-512 core): properties of the kernels, priced on
// the machine's measured clock. The elements counted are the
// output's, or the input's for a global reduction.
void native_kernel_cycles(const Graph& g, const Node& n, NodeWork* w) {
  static const std::map<std::string, double> kCycles = {
      {"Exp", 2.8},  {"Log", 2.8},      {"Sigmoid", 2.8},  {"Elu", 2.8},       {"Selu", 2.8},   {"Celu", 2.8},
      {"Erf", 4.8},  {"Tanh", 4.8},     {"Pow", 4.8},      {"Gelu", 5.5},      {"Mish", 9.0},   {"Softplus", 8.6},
      {"Sin", 4.8},  {"Cos", 4.8},      {"Atan", 4.8},     {"Transpose", 2.3}, {"Softmax", 2.3}, {"LogSoftmax", 2.6},
      {"LayerNormalization", 1.8},      {"GlobalAveragePool", 2.5},            {"GlobalMaxPool", 2.5}};
  const std::string y = n.outputs.empty() ? std::string() : n.outputs[0];
  if (n.op_type == "Resize" || n.op_type == "Upsample") {
    const std::string mode = n.attrs.count("mode") ? n.attrs.at("mode").s : "nearest";
    w->cycles_per_element = mode == "nearest" ? 2.7 : 4.5;
    w->elements = numel_of(g, y);
    return;
  }
  auto it = kCycles.find(n.op_type);
  if (it == kCycles.end()) return;
  w->cycles_per_element = it->second;
  const bool global = n.op_type == "GlobalAveragePool" || n.op_type == "GlobalMaxPool";
  w->elements = global && !n.inputs.empty() ? numel_of(g, n.inputs[0]) : numel_of(g, y);
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
      const size_t wi = n.op_type == "QLinearConv" ? 3 : 1;  // the weights' input
      if (n.inputs.size() <= wi || !dims_of(g, n.inputs[wi], &wd) || wd.size() < 3) break;
      double kernel = 1;
      for (size_t d = 2; d < wd.size(); ++d) kernel *= static_cast<double>(wd[d]);
      int64_t group = int_attr(n, "group", 1);
      if (n.op_type == "ConvTranspose") {
        // Each input element is scattered through Cout/group * kernel weights.
        w.flops = 2.0 * numel_of(g, n.inputs[0]) * static_cast<double>(wd[1]) * kernel;
      } else {
        w.flops = 2.0 * numel_of(g, y) * static_cast<double>(wd[1]) * kernel;
        if (group > 1 && wd[1] == 1) {
          // Native's direct loop, one task per (image, group).
          w.kind = WorkKind::kDepthwise;
          Dims xd;
          w.tasks = static_cast<double>(group) * (dims_of(g, n.inputs[0], &xd) && !xd.empty() ? xd[0] : 1);
        }
      }
      break;
    }
    case WorkKind::kRecurrent: {
      // W is [directions, gates*hidden, input], R [directions, gates*hidden,
      // hidden]; every step multiplies both with one batch of vectors.
      Dims xd, wd, rd;
      if (n.inputs.size() < 3 || !dims_of(g, n.inputs[0], &xd) || xd.size() != 3 || !dims_of(g, n.inputs[1], &wd) ||
          wd.size() != 3 || !dims_of(g, n.inputs[2], &rd) || rd.size() != 3) {
        break;
      }
      const double steps = static_cast<double>(int_attr(n, "layout", 0) == 0 ? xd[0] : xd[1]);
      const double batch = static_cast<double>(int_attr(n, "layout", 0) == 0 ? xd[1] : xd[0]);
      w.flops = 2.0 * steps * batch * static_cast<double>(wd[0] * wd[1]) * static_cast<double>(wd[2] + rd[2]);
      w.tasks = steps;  // sequential: one small product per step
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
  w.integer = n.domain.empty() && (n.op_type == "QLinearConv" || n.op_type == "ConvInteger" ||
                                   n.op_type == "QLinearMatMul" || n.op_type == "MatMulInteger");
  native_kernel_cycles(g, n, &w);
  return w;
}

namespace {

// The body's node-by-node native time; the types of the outer values it reads
// (its captures, nested bodies' included) are copied in beside its own.
double body_native_us(const Graph& outer, const Graph& body, const MachineProfile& m) {
  Graph typed;
  std::unordered_set<std::string> captures;
  collect_graph_captures(body, &captures);
  for (const auto& name : captures) {
    if (const ValueInfo* vi = outer.info(name)) typed.values[name] = *vi;
  }
  for (const auto& kv : body.values) typed.values[kv.first] = kv.second;
  for (const auto& kv : body.constants) {
    typed.values[kv.first] = ValueInfo{kv.second.dtype(), Shape::FromDims(kv.second.dims())};
  }
  typed.constants = body.constants;
  double us = 0;
  for (const Node& bn : body.nodes) us += native_node_us(node_work(typed, bn), m) + nested_native_us(typed, bn, m);
  return us;
}

}  // namespace

double nested_native_us(const Graph& g, const Node& n, const MachineProfile& m) {
  if (n.domain.empty() && n.op_type == "If") {
    double us = 0;
    for (const char* branch : {"then_branch", "else_branch"}) {
      if (auto b = n.attr_graph(branch)) us = std::max(us, body_native_us(g, *b, m));
    }
    return us;
  }
  auto body = n.attr_graph("body");
  if (!body || !n.domain.empty() || (n.op_type != "Loop" && n.op_type != "Scan")) return 0;
  double times = 1;
  if (n.op_type == "Loop") {
    const Tensor* trips = n.has_input(0) ? g.constant(n.inputs[0]) : nullptr;
    if (trips && trips->numel() == 1) times = static_cast<double>(std::clamp<int64_t>(trips->as_int64(0), 0, 1 << 20));
  } else {
    // The first scan input's length along its axis (axis 0 unless scan_input_axes says otherwise; opset 8's batch
    // axis aside).
    const int first_scan = static_cast<int>(n.inputs.size()) - static_cast<int>(n.attr_int("num_scan_inputs", 0));
    if (first_scan >= 0 && first_scan < static_cast<int>(n.inputs.size())) {
      const ValueInfo* vi = g.info(n.inputs[static_cast<size_t>(first_scan)]);
      std::vector<int64_t> axes = n.attr_ints("scan_input_axes");
      int64_t axis = axes.empty() ? 0 : axes[0];
      if (vi && vi->shape.rank_known && axis < 0) axis += vi->shape.rank();
      if (vi && vi->shape.rank_known && axis >= 0 && axis < vi->shape.rank() && vi->shape[static_cast<int>(axis)].known()) {
        times = static_cast<double>(vi->shape[static_cast<int>(axis)].value);
      }
    }
  }
  return times * body_native_us(g, *body, m);
}

double native_node_us(const NodeWork& w, const MachineProfile& m) {
  const double t = std::max(1, m.threads);
  double gemm_rate = std::max(1e-6, m.gemm_gflops) * 1e3;  // flops per us per thread
  if (w.integer) {
    const bool vnni = has_feature(m.isa, "avx512_vnni") || has_feature(m.isa, "avx_vnni");
    gemm_rate *= vnni ? kNative.int8_vnni : kNative.int8;
  }
  const double peak = std::max(1e-6, m.peak_gflops) * 1e3;
  double compute = 0;
  switch (w.kind) {
    case WorkKind::kConv: compute = w.flops / (kNative.conv * gemm_rate * t); break;
    case WorkKind::kDepthwise:
      compute = w.flops / (kNative.depthwise * peak * std::min(t, std::max(1.0, w.tasks)));
      break;
    case WorkKind::kGemm: compute = w.flops / (kNative.gemm * gemm_rate * t); break;
    case WorkKind::kRecurrent:
      // Matrix-vector products per step: a small share of the SGEMM rate, on
      // one thread, plus a dispatch per step.
      compute = w.flops / (kNative.recurrent * gemm_rate) + w.tasks * kNative.launch_us;
      break;
    default: break;
  }
  if (w.cycles_per_element > 0) {
    compute = std::max(compute, w.elements * w.cycles_per_element / (std::max(0.1, m.clock_ghz) * 1e3 * t));
  }
  const double bw = std::max(0.1, m.bandwidth_gbps) * 1e3;  // bytes per us, all threads
  double memory = w.bytes / bw;
  if (w.kind == WorkKind::kMove) memory *= 0.5;  // often a view or a single copy
  const double work = std::max(compute, memory);
  // Work worth splitting wakes the pool's sleeping workers (a condition
  // variable), about half a measured wake-up round trip.
  const double wake = t > 1 && work > 3.0 ? 0.5 * m.wake_us : 0.0;
  return kNative.launch_us + wake + work;
}

double prior_node_us(const NodeWork& w, const Backend& b, const MachineProfile& m) {
  if (b.is_native()) return native_node_us(w, m);
  auto it = m.launch_us.find(backend_key(b));
  const double launch = it != m.launch_us.end() && it->second >= 0 ? it->second : 5.0;
  return native_node_us(w, m) - kNative.launch_us + launch;
}

double region_launch_us(const Backend& b, const MachineProfile& m) {
  if (b.is_native()) return 0.0;
  auto it = m.launch_us.find(backend_key(b));
  return it != m.launch_us.end() && it->second >= 0 ? it->second : 3.0;
}

double crossing_us(double bytes, const Backend* from, const Backend* to, const MachineProfile& m) {
  const bool same = (from == nullptr && to == nullptr) || (from && to && from->name() == to->name());
  const bool host_both = (!from || from->is_native()) && (!to || to->is_native());
  if (same || host_both) return 0;
  // A device backend prices the copies across its boundary in its own estimate (it knows its link), and a
  // measured region's time includes them (Engine::run stages host tensors): only the hand-over is left.
  if ((from && from->on_device()) || (to && to->on_device())) return 1.0;
  // A reorder or copy on one side: engines keep their own layouts (blocked,
  // NHWC) and convert at their boundary, at about a third of the streaming
  // bandwidth (strided reads, one thread per side).
  const double bw = std::max(0.1, m.bandwidth_gbps) * 1e3 / 3.0;
  return 1.0 + bytes / bw;
}

bool set_waits_passively(const std::vector<const Backend*>& set) {
  std::vector<Threading> t;
  for (const Backend* b : set) {
    if (b && !b->is_native()) t.push_back(b->threading());
  }
  return engines_need_passive_wait(t);
}

namespace {

// One engine's side of a hand-over to or from native's pool.
double handoff_side_us(const Backend& b, bool passive, const MachineProfile& m) {
  if (b.is_native() || b.threading() == Threading::kCaller) return 0;
  auto it = m.handoff_us.find(backend_key(b));
  double us;
  if (it != m.handoff_us.end() && it->second >= 0) {
    us = it->second;
  } else if (b.threading() == Threading::kOpenMP) {
    // Not measured: libgomp's bounded spin of 10000 rounds, about 0.5 ms on
    // the Zen 4 cores it was seen on.
    us = 500.0;
  } else {
    us = 2 * std::max(1.0, m.wake_us);  // a sleeping pool woken, each way
  }
  // OpenMP waiting passively sleeps at once: a wake-up instead of the spin.
  if (passive && b.threading() == Threading::kOpenMP) us = std::min(us, 2 * std::max(1.0, m.wake_us));
  return us;
}

}  // namespace

double handoff_us(const Backend& from, const Backend& to, bool passive, const MachineProfile& m) {
  if (m.threads < 2 || from.name() == to.name()) return 0;
  return std::max(handoff_side_us(from, passive, m), handoff_side_us(to, passive, m));
}

double passive_wait_us_per_node(const Backend& b, bool passive, const MachineProfile& m) {
  if (m.threads < 2 || !passive || b.threading() != Threading::kOpenMP) return 0;
  return 4.0 * std::max(1.0, m.wake_us);
}

}  // namespace tessera::partition
