// ai.tessera.QLinearLookup: an elementwise function of 8-bit values as a table
// of its results. QDQ models wrap float elementwise ops in DequantizeLinear and
// QuantizeLinear (DQ -> Relu -> Q, DQ -> Clip -> Q, Add(DQ, DQ) -> Q); with an
// 8-bit input the whole sandwich is a function of 256 values (65536 pairs for
// a binary op), so the QDQ fusion pass (src/passes/qdq_fusion.cc) evaluates
// the sandwich once on every input and writes the results here. This header
// is the contract between the pass and the kernel.
//
// Inputs:
//   X      uint8 or int8, any shape
//   X2     (binary form only) uint8 or int8, exactly X's shape (no broadcasting)
//   Table  the last input: a constant 1-D uint8 or int8 tensor of 256 elements
//          (unary) or 65536 elements (binary)
// Output Y: X's shape, Table's dtype, with
//   Y[i] = Table[u(X[i])]                    (unary)
//   Y[i] = Table[u(X[i]) * 256 + u(X2[i])]   (binary)
// where u(v) = v for uint8 and v + 128 for int8 (the value's rank among the
// 256 values of its type). X and X2 may differ in type.
// Attribute qlinear_add (optional, binary form, X, X2 and Table of one type):
// floats {r_a, r_b, fixed}, saying the table holds ONNX Runtime's QLinearAdd
// arithmetic of that form (qlinear_add_math.h). A kernel may compute it in
// place of the lookups once it has checked that the table holds it at every
// pair; the table stays the contract.
#pragma once

#include <cstdint>

#include "ir/dtype.h"

namespace tessera {

inline constexpr int64_t kLookupUnaryEntries = 256;
inline constexpr int64_t kLookupBinaryEntries = 256 * 256;

// The value whose table index is `u` (0..255) for an 8-bit `t`: u for uint8,
// u - 128 for int8, as the byte the tensor stores.
inline uint8_t lookup_byte_of_index(DType t, int u) { return static_cast<uint8_t>(t == DType::kInt8 ? u - 128 : u); }

}  // namespace tessera
