// What a region costs on oneDNN, on the machine the host measured.
//
// Input: the region's lowered, fused program (what compile builds: a post-op
// costs nothing extra) and the machine's figures. Output: microseconds per
// run. Method: each primitive's work at the share of the machine's FMA peak
// oneDNN's kernels reach (convolutions 0.85, products 0.8 — measured on
// resnet50 and BERT at 2 threads), or its bytes at the machine's bandwidth
// for memory-bound primitives, plus a dispatch per primitive; reorders where
// plain data enters or leaves a blocked chain; the engine's measured launch.
// Slow paths priced as such:
//   - oneDNN is asked: the program's primitive descriptors are created (as
//     compile does, without weights) and a primitive whose implementation is
//     a reference kernel ("binary ref:any": a division with a broadcast add
//     fused after it, 2.1 ms for 65k elements where the fused MatMul epilogue
//     is free) is priced at reference speed, 1 GFLOP/s or 20 M elements/s
//     per thread; the reorders the plan holds are priced one by one;
//   - blocked kernels pad channels to whole vector blocks (16 with AVX-512):
//     a convolution with 1 or 24 channels on a side computes 16 or 32;
//   - grouped convolutions whose groups are not whole blocks (and are not
//     depthwise) fall back to oneDNN's generic kernels, about a tenth of the
//     blocked rate;
//   - deconvolution runs as a backward-data convolution, with the padding
//     above on its (often small) output channels; a strided one with channels
//     that are not whole blocks runs at reference speed (oneDNN 2.6's jit
//     kernel on padded blocked layouts: DBNet's head, 2x2 stride 2, 24 -> 24
//     channels at 160x160 in 86 ms and 24 -> 1 at 320x320 in 125 ms, inside
//     its region; 1.4 GFLOP/s).
// Whatever slower path a kernel takes beyond this, the host measures.
#include "dnnl_cost.h"
#include "dnnl_engine.h"  // own_avx512_loops

#include <algorithm>
#include <cmath>
#include <set>

namespace tessera_dnnl {

namespace {

struct Shares {
  double conv = 0.85, deconv = 0.6, matmul = 0.8;  // of the FMA peak
  double depthwise = 0.25, generic_group = 0.08;
  // Per primitive: argument set-up, OpenMP fork and join. The host's
  // measured launch is one run of a one-primitive engine, so each primitive
  // costs about that much; without a measurement, 1 us.
};
constexpr Shares kShares;

// oneDNN's jit kernels, in cycles per element where the work costs more
// than the traffic (measured on single-op models, 2 threads, 1 M elements:
// logistic and tanh 1.0, soft_relu 1.7, a global average pool 2.0 per input
// element, a transpose 1.5); an eltwise applies to a standalone eltwise and
// to an eltwise post-op alike.
double eltwise_cycles(int32_t alg) {
  switch (alg) {
    case dnnl_eltwise_logistic:
    case dnnl_eltwise_exp:
    case dnnl_eltwise_log:
    case dnnl_eltwise_swish:
    case dnnl_eltwise_elu:
    case dnnl_eltwise_logsigmoid:
    case dnnl_eltwise_tanh:
    case dnnl_eltwise_gelu_tanh:
    case dnnl_eltwise_pow:
      return 1.0;
    case dnnl_eltwise_soft_relu:
    case dnnl_eltwise_mish:
      return 1.7;
    case dnnl_eltwise_gelu_erf:
      return 2.5;
    default:
      return 0;
  }
}
constexpr double kReduceCycles = 2.0;     // per input element
constexpr double kTransposeCycles = 1.5;  // per element

double dispatch_us(const tessera_plugin::MachineFigures& f) { return f.launch_us >= 0 ? std::max(0.2, f.launch_us) : 1.0; }

double blocks(int64_t c, int64_t block) {
  return static_cast<double>((c + block - 1) / block * block);
}

double bytes_of(const Value& v) {
  return static_cast<double>(tessera_plugin::dtype_size(v.dtype)) * static_cast<double>(numel(v.dims));
}

// Reference kernels: scalar loops with index arithmetic per element.
constexpr double kRefFlopsPerUs = 1.0e3;    // per thread
constexpr double kRefElementsPerUs = 20.0;  // per thread

// A convolution or deconvolution: its FLOPs on the padded channels, at the
// rate its kernel class reaches.
double conv_us(const Op& op, const std::vector<Value>& v, const tessera_plugin::MachineFigures& f) {
  const Dims& x = v[static_cast<size_t>(op.in[0])].dims;
  const Dims& w = v[static_cast<size_t>(op.in[1])].dims;
  const Dims& y = v[static_cast<size_t>(op.out)].dims;
  const int64_t group = std::max<int64_t>(1, op.ints.back());
  double kernel = 1;
  for (size_t d = 2; d < w.size(); ++d) kernel *= static_cast<double>(w[d]);
  const bool deconv = op.kind == OpKind::kDeconv;
  const int64_t ic = x[1] / group;                       // input channels per group
  const int64_t oc = (deconv ? w[1] * group : w[0]) / group;  // output channels per group
  double spatial_in = 1, spatial_out = 1;
  for (size_t d = 2; d < x.size(); ++d) spatial_in *= static_cast<double>(x[d]);
  for (size_t d = 2; d < y.size(); ++d) spatial_out *= static_cast<double>(y[d]);
  const double batch = static_cast<double>(x[0]);
  const double threads = f.threads;
  const int64_t block = f.vector_floats;
  const double peak = f.flops_per_us * threads;
  if (group > 1 && ic == 1 && oc == 1) {  // depthwise
    const double flops = 2.0 * batch * static_cast<double>(group) * spatial_out * kernel;
    // oneDNN 2.6 has no depthwise kernel over one spatial axis: `gemm:jit` runs it at about a reference kernel's
    // speed (a Conformer's 31 taps over 256 channels and 200 frames: 0.6-0.8 ms, native 0.035).
    if (x.size() == 3) return flops / (kRefFlopsPerUs * threads);
    return flops / (kShares.depthwise * peak);
  }
  const double points = deconv ? spatial_in : spatial_out;
  const double flops = 2.0 * batch * static_cast<double>(group) * points * static_cast<double>(ic * oc) * kernel;
  bool strided = false;
  for (size_t d = 0; d + 2 < x.size(); ++d) strided = strided || op.ints[1 + d] > 1;
  if (deconv && strided && (ic % block != 0 || oc % block != 0)) return flops / (kRefFlopsPerUs * threads);
  if (group > 1 && (ic % block != 0 || oc % block != 0)) return flops / (kShares.generic_group * peak);
  // A plain image source (few channels) is read as it is: no padding there.
  const double in_pad = (!deconv && ic <= 4) ? 1.0 : blocks(ic, block) / static_cast<double>(ic);
  const double out_pad = blocks(oc, block) / static_cast<double>(oc);
  return flops * in_pad * out_pad / ((deconv ? kShares.deconv : kShares.conv) * peak);
}

double op_us(const Op& op, const std::vector<Value>& v, const tessera_plugin::MachineFigures& f, bool reference) {
  if (op.kind == OpKind::kView) return 0;
  if (reference) {
    double elements = static_cast<double>(numel(v[static_cast<size_t>(op.out)].dims));
    double flops = 0;
    if (op.kind == OpKind::kConv || op.kind == OpKind::kDeconv || op.kind == OpKind::kQConv ||
        op.kind == OpKind::kDynConv) {
      flops = conv_us(op, v, f) * kShares.conv * f.flops_per_us * f.threads;  // undo the rate: its FLOPs
    } else if (op.kind == OpKind::kMatMul) {
      MatMulOperands mo;
      if (matmul_operands(op, &mo)) flops = 2.0 * elements * static_cast<double>(mo.read[0].back());
    }
    return dispatch_us(f) +
           std::max(flops / kRefFlopsPerUs, elements / kRefElementsPerUs) / static_cast<double>(f.threads);
  }
  double bytes = bytes_of(v[static_cast<size_t>(op.out)]);
  for (int32_t in : op.in) {
    if (in >= 0) bytes += bytes_of(v[static_cast<size_t>(in)]);
  }
  const double memory = bytes / f.bytes_per_us;
  const double elements = static_cast<double>(numel(v[static_cast<size_t>(op.out)].dims));
  double compute = 0;
  // Functions computed on the way: the op's own, and its eltwise post-ops.
  double cycles = op.kind == OpKind::kEltwise ? eltwise_cycles(op.alg) : 0;
  for (const PostOp& post : op.post) {
    if (post.kind == PostKind::kEltwise) cycles += eltwise_cycles(post.alg);
  }
  double function_us = elements * cycles / (f.cycles_per_us * f.threads);
  if (op.kind == OpKind::kTranspose) function_us += elements * kTransposeCycles / (f.cycles_per_us * f.threads);
  // A bilinear Resize: four loads, four products and three sums per element.
  if (op.kind == OpKind::kResize && !op.floats.empty()) function_us += elements * 1.0 / (f.cycles_per_us * f.threads);
  // A table lookup per element: a byte load, and for two operands a gather from a 64 KiB table.
  if (op.kind == OpKind::kQuantize) function_us += elements * 0.5 / (f.cycles_per_us * f.threads);  // a vector division
  if (op.kind == OpKind::kQuantParams) {  // a min and a max per element of its input
    function_us += static_cast<double>(numel(v[static_cast<size_t>(op.in[0])].dims)) * 0.25 / (f.cycles_per_us * f.threads);
  }
  // A binary table costs a dependent load per element; QLinearAdd's arithmetic (floats set; AVX-512 only, as the run
  // does) 16 lanes at a time.
  if (op.kind == OpKind::kLookup) {
    const double cycles = op.in.size() == 3 ? (op.floats.size() >= 3 && own_avx512_loops() ? 0.25 : 2.0) : 1.0;
    function_us += elements * cycles / (f.cycles_per_us * f.threads);
  }
  if (op.kind == OpKind::kReduce || (op.kind == OpKind::kPool && elements * 16 < bytes / 4)) {
    // A reduction, or a pooling whose window covers most of its input.
    const double in = static_cast<double>(numel(v[static_cast<size_t>(op.in[0])].dims));
    function_us += in * kReduceCycles / (f.cycles_per_us * f.threads);
  }
  switch (op.kind) {
    case OpKind::kConv:
    case OpKind::kDeconv:
      compute = conv_us(op, v, f);
      break;
    case OpKind::kQMatMul:  // as kQConv below: the int8 rate
    case OpKind::kDynMatMul:
      compute = 2.0 * static_cast<double>(op.ints[0]) * static_cast<double>(op.ints[1]) *
                static_cast<double>(op.ints[2]) / (kShares.matmul * f.flops_per_us * f.threads) / 2;
      break;
    case OpKind::kQConv:
    case OpKind::kDynConv:
      // int8 dot products (vpdpbusd) do four multiply-adds per 32-bit lane where an FMA does one; oneDNN's kernel
      // with a source zero point reaches about half that ratio.
      compute = conv_us(op, v, f) / 2;
      break;
    case OpKind::kMatMul: {
      MatMulOperands mo;
      const int64_t k = matmul_operands(op, &mo) ? mo.read[0].back() : 0;
      const double out = static_cast<double>(numel(v[static_cast<size_t>(op.out)].dims));
      compute = 2.0 * out * static_cast<double>(k) / (kShares.matmul * f.flops_per_us * f.threads);
      break;
    }
    default:
      break;
  }
  // bf16 dot products (vdpbf16ps) do two multiply-adds per lane where an FMA does one: the instruction set's
  // ratio, which oneDNN's bf16 kernels reach about as well as its fp32 ones reach the FMA peak.
  if (op.bf16) compute /= 2;
  return dispatch_us(f) + std::max(compute + function_us, memory);
}

}  // namespace

double region_cost_us(const Program& p, const Plan* plan, const tessera_plugin::MachineFigures& f) {
  double us = 0;  // the engine's own call is in its first primitive's dispatch
  // The nodes oneDNN runs on a reference kernel.
  std::set<std::string> reference;
  if (plan) {
    for (const Step& s : plan->steps) {
      const auto space = s.impl.rfind(' ');
      if (space != std::string::npos && s.impl.compare(space + 1, 3, "ref") == 0) {
        reference.insert(s.nodes.begin(), s.nodes.end());
      }
    }
  }
  for (const Op& op : p.ops) {
    // A reference concatenation, transpose or slice is a plain copy: priced by its
    // traffic like any other.
    bool ref = false;
    for (const auto& n : op.nodes) {
      ref = ref || (reference.count(n) != 0 && op.kind != OpKind::kConcat && op.kind != OpKind::kTranspose &&
                    op.kind != OpKind::kSlice &&
                    op.kind != OpKind::kView);
    }
    us += op_us(op, p.values, f, ref);
  }
  if (plan) {
    // The reorders the plan holds: read and write, strided, at a third of
    // the streaming bandwidth.
    for (const Step& s : plan->steps) {
      if (!s.nodes.empty()) continue;
      for (const auto& [arg, mem] : s.args) {
        if (arg == DNNL_ARG_TO) {
          us += dispatch_us(f) +
                2.0 * static_cast<double>(plan->mems[static_cast<size_t>(mem)].md.get_size()) / (f.bytes_per_us / 3.0);
        }
      }
    }
    return us;
  }
  // Without a plan: plain data enters and leaves blocked chains, a reorder of every region
  // input and output of rank 3 or more that a convolution, deconvolution or
  // pooling touches (read, write, at a third of the streaming bandwidth).
  std::vector<char> blocked(p.values.size(), 0);
  for (const Op& op : p.ops) {
    if (op.kind != OpKind::kConv && op.kind != OpKind::kDeconv && op.kind != OpKind::kPool) continue;
    blocked[static_cast<size_t>(op.out)] = 1;
    if (op.in[0] >= 0) blocked[static_cast<size_t>(op.in[0])] = 1;
  }
  for (const auto* list : {&p.inputs, &p.outputs}) {
    for (int32_t id : *list) {
      const Value& val = p.values[static_cast<size_t>(id)];
      if (blocked[static_cast<size_t>(id)] && val.dims.size() >= 3 && !(list == &p.inputs && val.dims[1] <= 4)) {
        us += 2.0 * bytes_of(val) / (f.bytes_per_us / 3.0);
      }
    }
  }
  return us;
}

}  // namespace tessera_dnnl
