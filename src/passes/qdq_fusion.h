// QDQ models as quantized ops: the QuantizeLinear -> DequantizeLinear pairs
// that ONNX Runtime's static quantizer and PyTorch's exporter write around
// Conv and MatMul are recognised and the quantized core becomes one integer op,
// as ONNX Runtime's own QDQ transformer does:
//   Q(Conv(DQ(xq), DQ(wq), DQ(bq)))  ->  QLinearConv(xq, .., wq, .., bq)
//   Q(MatMul(DQ(aq), DQ(bq)))        ->  QLinearMatMul(aq, .., bq, ..)
// The integer op accumulates exactly and requantizes once, so its results are
// ONNX Runtime's (optimised) within a step, where the float path's
// last-bit differences flip roundings that grow layer by layer.
// Conditions: constant per-tensor activation scales and zero points, constant
// weights with per-tensor or per-output-channel scales, a bias (Conv) stored as
// int32 at scale x_scale * w_scale with zero point 0, and the float result read
// only by the QuantizeLinear.
#pragma once

#include "ir/graph.h"
#include "util/status.h"

namespace tessera {

// Rewrites `g` (not its nested graphs) in place; returns how many ops were fused.
Expected<int> fuse_qdq(Graph& g);

}  // namespace tessera
