// ai.tessera.FusedElementwise: a chain of float32 elementwise ops evaluated in
// one pass, block by block, so the chain's intermediates never reach memory.
// The native fusion pass (src/passes/native_fusion.cc) writes it; this header
// is the contract between the pass and the kernel.
//
// Inputs: input 0 is the chain's head operand and has the output's shape;
// inputs 1.. are side operands. Attributes, one entry per instruction:
//   ops    (strings) ONNX op type: Add Sub Mul Div Pow Relu LeakyRelu Sigmoid
//                    HardSigmoid Tanh Erf Exp Log Sqrt Neg Abs Reciprocal
//                    Clip Gelu
//   args   (ints)    side input index of a binary op, -1 for a unary one
//   swap   (ints)    1 when the side operand is the left one (s - v, s / v)
//   p0, p1 (floats)  parameters: LeakyRelu alpha; HardSigmoid alpha, beta;
//                    Clip min, max; Pow's constant exponent; Gelu 1 = tanh
// The first instruction may be Cast (no side input, no parameters): input 0 is
// then int32 and is converted to float32 as the Cast kernel converts it.
// The value starts as input 0 and every instruction replaces it. A side
// operand must broadcast onto the output as one contiguous block of the
// output's dims (see block_broadcast): a scalar, a same-shape tensor, a
// trailing vector such as a bias [C] on [..., C], or [N, S, 1] on [N, S, H].
#pragma once

#include <cstdint>
#include <string>

#include "ir/tensor.h"

namespace tessera {

// Whether the kernel implements `op_type` (default ONNX domain) as an
// instruction, with the unfused kernel's arithmetic.
bool fused_elementwise_supports(const std::string& op_type);

// True when `side` broadcasts onto `out` with every non-1 dim (right-aligned)
// in one contiguous run that equals out's dims there; then element i of the
// output reads side element (i / *inner) % numel(side).
inline bool block_broadcast(const Dims& side, const Dims& out, int64_t* inner) {
  if (side.size() > out.size()) return false;
  const size_t off = out.size() - side.size();
  int64_t first = -1, last = -1;
  for (size_t d = 0; d < side.size(); ++d) {
    if (side[d] != 1 && side[d] != out[off + d]) return false;
    if (side[d] != 1) {
      if (first < 0) first = static_cast<int64_t>(d);
      last = static_cast<int64_t>(d);
    }
  }
  *inner = 1;
  if (first < 0) return true;
  for (int64_t d = first; d <= last; ++d) {
    if (side[static_cast<size_t>(d)] != out[off + static_cast<size_t>(d)]) return false;
  }
  for (size_t d = off + static_cast<size_t>(last) + 1; d < out.size(); ++d) *inner *= out[d];
  return true;
}

}  // namespace tessera
