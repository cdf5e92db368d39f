// Shape inference shared by the matrix-product ops (MatMul, MatMulInteger,
// QLinearMatMul): numpy matmul rules with 1-D promotion and batch
// broadcasting, symbolic-aware.
#pragma once

#include "ops/op_registry.h"

namespace tessera {

// Output 0 of a matmul of input a_index by input b_index, with dtype out_dtype.
Status infer_matmul_output(InferContext& ctx, int a_index, int b_index, DType out_dtype);

}  // namespace tessera
