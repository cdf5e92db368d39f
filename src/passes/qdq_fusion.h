// QDQ models as quantized ops: the QuantizeLinear -> DequantizeLinear pairs
// that ONNX Runtime's static quantizer and PyTorch's exporter write around
// float ops are recognised and the quantized core becomes one integer op.
//
// Conv and MatMul, as ONNX Runtime's own QDQ transformer does:
//   Q(Conv(DQ(xq), DQ(wq), DQ(bq)))  ->  QLinearConv(xq, .., wq, .., bq)
//   Q(MatMul(DQ(aq), DQ(bq)))        ->  QLinearMatMul(aq, .., bq, ..)
// The integer op accumulates exactly and requantizes once, so its results are
// ONNX Runtime's (optimised) within a step, where the float path's
// last-bit differences flip roundings that grow layer by layer.
// Conditions: constant per-tensor activation scales and zero points, constant
// weights with per-tensor or per-output-channel scales, a bias (Conv) stored as
// int32 at scale x_scale * w_scale with zero point 0, and the float result read
// only by the QuantizeLinear.
//
// Pointwise sandwiches, exactly (ops/qlinear_lookup.h):
//   Q(pk(..p1(DQ(xq))))              ->  QLinearLookup(xq, table[256])
//   Q(pk(..p1(DQ(aq), DQ(bq))))      ->  QLinearLookup(aq, bq, table[65536])
// Each p is a float elementwise op whose other operands are constants of one
// element (Relu, Clip(0, 6), Sigmoid, Mul by a scalar, ...); the binary form's
// p1 (Add, Mul, Max, ...) reads two dequantized values of one static shape.
// The table is the sandwich's own nodes run by their native kernels on every
// input value (pair), so the lookup gives the unfused graph's bits.
// Conditions: 8-bit data that is not a constant, constant per-tensor scales and
// zero points on both ends, an 8-bit result, and every value between the
// DequantizeLinear(s) and the QuantizeLinear read by the next op alone (the
// DequantizeLinear itself may have other readers; it then stays for them).
#pragma once

#include "ir/graph.h"
#include "util/status.h"

namespace tessera {

// Rewrites `g` (not its nested graphs) in place; returns how many fused ops it made (QLinearConv, QLinearMatMul and
// QLinearLookup together).
Expected<int> fuse_qdq(Graph& g);

}  // namespace tessera
