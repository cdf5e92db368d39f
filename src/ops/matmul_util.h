// Shape inference shared by the matrix-product ops (MatMul, MatMulInteger,
// QLinearMatMul): numpy matmul rules with 1-D promotion and batch
// broadcasting, symbolic-aware.
#pragma once

#include "ops/op_registry.h"

namespace tessera {

// Output 0 of a matmul of input a_index by input b_index, with dtype out_dtype.
Status infer_matmul_output(InferContext& ctx, int a_index, int b_index, DType out_dtype);

// Concrete layout of a (possibly batched) matrix product after 1-D promotion:
// [batch..., m, k] x [batch..., k, n] with numpy batch broadcasting.
struct MatMulDims {
  int64_t m = 0, n = 0, k = 0;
  Dims batch;                               // broadcast batch dims
  std::vector<int64_t> a_stride, b_stride;  // per batch dim, in matrices (0 = broadcast)
  int64_t batch_count = 1;
  int64_t a_matrices = 1, b_matrices = 1;

  // Matrix indices into A and B of batch entry `idx`.
  void offsets(int64_t idx, int64_t* ai, int64_t* bi) const;
};

// Checks the concrete dims of A and B; bad shapes are the caller's input error.
Expected<MatMulDims> matmul_dims(const Node& node, const Dims& a_in, const Dims& b_in);

}  // namespace tessera
