// Float sums of a contiguous row in the order ONNX Runtime's CPU kernels take them: its ReduceSum/ReduceMean over
// trailing axes and its InstanceNormalization sum with Eigen's vectorised reduction, in the SSE build it ships.
// A quantized model requantizing such a sum needs its last bit.
//
// Order (Eigen 3.4, linear vectorised traversal, packets of 4 floats): the packets of a row read from memory start at
// its first element on a 16-byte boundary of the tensor (`offset`, the row's element offset in a tensor that starts
// on one, decides where); two accumulators take alternate packets, are added, take one more packet when an odd one is
// left, and reduce as (a0 + a2) + (a1 + a3); then the elements before the first boundary, then those after the last
// packet, one by one. A row shorter than its first boundary plus one packet is summed in order.
#pragma once

#include <cstdint>

namespace tessera::eigen_order {

// sum of x[0..n)
float row_sum(const float* x, int64_t n, int64_t offset);

// sum of (x[i] - c)^2, every difference and square rounded to float (Eigen's squaredNorm of x - c). An expression has
// no address, so Eigen starts its packets at element 0 whatever the row's alignment.
float row_sum_sq_diff(const float* x, float c, int64_t n);

}  // namespace tessera::eigen_order
