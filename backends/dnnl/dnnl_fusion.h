// Post-op fusion and the composite patterns capability reports.
//
// fuse() rewrites a lowered program: an op whose result has a single reader
// absorbs that reader when oneDNN can apply it as a post-op, repeatedly, so
// that Conv -> Add(residual) -> Relu becomes one convolution with post-ops
// [sum, relu] and MatMul -> Add(bias) -> Gelu one matmul with
// [binary add, gelu]. Producers: Conv, ConvTranspose, MatMul (and Gemm) and
// Binary. Readers absorbed:
//   Eltwise                         -> eltwise post-op
//   Add of a same-shaped value      -> sum post-op (the value is copied into,
//                                      or aliased as, the destination)
//   Binary with a broadcast operand -> binary post-op (the producer's result
//                                      on the left, or a commutative op)
// A Transpose read only by a MatMul becomes that operand's strided view.
// Every fusion is confirmed with oneDNN (probe) before it is kept. The fused
// op takes the reader's place in the order, where all its operands exist.
//
// find_composites() finds the same chains at the ONNX level, so that the
// host keeps them in one region.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <string>
#include <vector>

#include "dnnl_program.h"
#include "plugin_util.h"

namespace tessera_dnnl {

void fuse(Program& p, const dnnl::engine& eng);

struct Composite {
  std::string pattern;  // "Conv+Add+Relu"
  std::vector<int32_t> nodes;
};

// Chains of supported nodes from a Conv/ConvTranspose/MatMul/Gemm through
// single-consumer activations and Add/Mul/Sub/Div nodes.
std::vector<Composite> find_composites(const tessera_plugin::ModelView& m, const std::vector<bool>& supported);

}  // namespace tessera_dnnl
