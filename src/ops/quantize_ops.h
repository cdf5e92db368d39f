// Shared pieces of the quantize family: reading scales and zero points, and
// the schemas defined in quantize_matmul.cc and quantize_conv.cc that
// quantize.cc registers.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/op_registry.h"

namespace tessera::quant {

inline bool is_8bit(DType t) { return t == DType::kInt8 || t == DType::kUInt8; }

// Values of an optional int8/uint8/int32 tensor as int32; empty when absent.
std::vector<int32_t> int_values(const Tensor* t);
// Values of a float32/float16/bfloat16/float64 tensor as float32.
std::vector<float> float_values(const Tensor& t);

// Checks that input `i` (named `what`) is present and 8-bit.
Status check_8bit_input(const KernelContext& ctx, int i, const char* what);

// The per-tensor quantization of a unary QLinear op (com.microsoft QLinearSoftmax, QLinearAveragePool): X at input
// 0, its scale and zero point at 1 and 2, Y's at 3 and 4; scales float32 scalars, zero points scalars of X's type
// (absent: 0). X is checked to be 8-bit.
struct UnaryQuant {
  float x_scale = 1.f, y_scale = 1.f;
  int32_t x_zero = 0, y_zero = 0;
};
Expected<UnaryQuant> unary_quant(const KernelContext& ctx);

// QLinearMatMul and MatMulInteger (quantize_matmul.cc).
OpSchema qlinear_matmul_schema();
OpSchema matmul_integer_schema();
// QLinearConv and ConvInteger (quantize_conv.cc).
OpSchema qlinear_conv_schema();
OpSchema conv_integer_schema();

}  // namespace tessera::quant
