// What a region costs on XNNPACK, on the machine the host measured.
//
// Input: the region's lowered program and the machine's figures. Output:
// microseconds per run. Method: convolutions and fully connected layers at
// the share of the machine's FMA peak XNNPACK's f32 GEMM kernels reach (0.8,
// measured on resnet50 at 2 threads), depthwise convolutions and pools by
// their memory traffic or a quarter of the peak, everything else by its bytes
// at the machine's bandwidth; a dispatch per node and per step; the NCHW <->
// NHWC conversions at the region's boundary; the engine's measured launch.
// Slow paths priced as such: the GEMM micro-kernels tile output channels by
// a whole vector (16 floats with AVX-512), so a layer with one output channel
// computes sixteen. Int8 products (this snapshot's kernels widen bytes to
// 16 bits, no VNNI) at 1.5x the fp32 rate, int8 tensors at a byte per
// element, the plugin's own loops (quantization, tables) by their bytes.
// Whatever slower path a kernel takes beyond this, the host measures.
#include "cost.h"

#include <algorithm>

namespace tessera_xnn {

namespace {

struct Shares {
  double gemm = 0.8, light = 0.25;  // of the FMA peak
  // Per node and per step, a multiple of the host's measured launch (one
  // run of a one-node runtime).
  double node_launches = 2.0, step_launches = 4.0;
  double int8_speedup = 1.5;  // int8 convolutions over fp32 (resnet50 and its QDQ twin, 2 threads: 35.9 / 23.5 ms)
};
constexpr Shares kShares;

// XNNPACK's kernels for functions that cost more than their traffic, in
// cycles per output element (single-op models, 2 threads, 1 M elements).
double function_cycles(Op op) {
  switch (op) {
    case Op::kSigmoid: return 1.2;
    case Op::kElu: return 3.0;
    case Op::kSoftmax: return 3.0;
    default: return 0;
  }
}

double padded(int64_t c, int64_t block) {
  return static_cast<double>((c + block - 1) / block * block) / static_cast<double>(std::max<int64_t>(1, c));
}

}  // namespace

double region_cost_us(const Program& p, const tessera_plugin::MachineFigures& f) {
  const double peak = f.flops_per_us * f.threads;
  const int64_t block = f.vector_floats;
  const double launch = std::max(0.1, f.launch_us);
  double us = launch;
  auto bytes = [&](int32_t t) {
    const TensorDef& d = p.tensors[static_cast<size_t>(t)];
    return static_cast<double>(numel(d.dims)) * static_cast<double>(dtype_bytes(d.dtype));
  };
  for (const NodeDef& n : p.nodes) {
    const Dims& x = p.tensors[static_cast<size_t>(n.inputs[0])].dims;
    const double in = static_cast<double>(numel(x));
    const double out = static_cast<double>(numel(p.tensors[static_cast<size_t>(n.output)].dims));
    const double memory = (bytes(n.inputs[0]) + bytes(n.output)) / f.bytes_per_us;
    const double rate = p.tensors[static_cast<size_t>(n.inputs[0])].dtype == DType::kQS8 ? kShares.int8_speedup : 1.0;
    double compute = 0;
    switch (n.op) {
      case Op::kConv2d:  // NHWC: out elements x kernel x group input channels, output channels tiled
        compute = 2 * out * static_cast<double>(n.ints[4] * n.ints[5] * n.ints[11]) * padded(n.ints[12], block) /
                  (kShares.gemm * peak);
        break;
      case Op::kDeconv2d:
        compute = 2 * in * static_cast<double>(n.ints[6] * n.ints[7] * n.ints[14]) * padded(n.ints[14], block) /
                  (kShares.gemm * peak);
        break;
      case Op::kFullyConnected:
        compute = 2 * out * static_cast<double>(x.back()) / (kShares.gemm * peak);
        break;
      case Op::kDepthwiseConv2d:
        compute = 2 * out * static_cast<double>(n.ints[4] * n.ints[5]) / (kShares.light * peak);
        break;
      case Op::kMaxPool2d:
      case Op::kAvgPool2d:
        compute = out * static_cast<double>(n.ints[4] * n.ints[5]) / (kShares.light * peak);
        break;
      default:
        compute = out * function_cycles(n.op) / (f.cycles_per_us * f.threads);
        break;
    }
    us += kShares.node_launches * launch + std::max(compute / rate, memory);
  }
  us += kShares.step_launches * launch * static_cast<double>(p.steps.size());
  for (const Step& s : p.steps) {
    if (s.kind == StepKind::kQuantize || s.kind == StepKind::kLookup) {
      us += (bytes(s.a) + bytes(s.b) + (s.x2 >= 0 ? bytes(s.x2) : 0.0)) / f.bytes_per_us;
    }
  }
  // Layout conversions at the boundary: read and write, strided, at a third
  // of the streaming bandwidth.
  double moved = 0;
  for (const Import& im : p.imports) {
    if (im.transfer == Transfer::kNhwc) moved += bytes(im.tensor);
  }
  for (const Export& e : p.exports) {
    if (e.transfer == Transfer::kNhwc) moved += bytes(e.tensor);
  }
  us += 2.0 * moved / (f.bytes_per_us / 3.0);
  return us;
}

}  // namespace tessera_xnn
