// Helpers shared by the normalisation, softmax and loss kernels (norm.cc,
// softmax.cc, misc.cc): dtype dispatch restricted to floating types, and
// float32 row primitives (max, sum, exp, affine normalisation; norm_rows.cc).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>


#include "ir/dtype.h"
#include "ir/shape.h"
#include "ops/op_registry.h"

namespace tessera::normk {

// Accumulation type: double for double inputs, float for everything else.
template <class T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Calls fn(T{}) for float32/float64/float16/bfloat16 and returns true; returns
// false (without calling) for any other dtype.
template <class Fn>
bool visit_float(DType t, Fn&& fn) {
  switch (t) {
    case DType::kFloat32: fn(float{}); return true;
    case DType::kFloat64: fn(double{}); return true;
    case DType::kFloat16: fn(Float16{}); return true;
    case DType::kBFloat16: fn(BFloat16{}); return true;
    default: return false;
  }
}

// A stateless kernel that also needs the model's opset (KernelContext does
// not carry it): register with make_opset_kernel<fn> as the factory.
using OpsetKernelFn = Status (*)(KernelContext& ctx, int64_t opset);

class OpsetKernel final : public Kernel {
 public:
  OpsetKernel(OpsetKernelFn fn, int64_t opset) : fn_(fn), opset_(opset) {}
  Status run(KernelContext& ctx) const override { return fn_(ctx, opset_); }

 private:
  OpsetKernelFn fn_;
  int64_t opset_;
};

template <OpsetKernelFn kFn>
Expected<std::unique_ptr<Kernel>> make_opset_kernel(const KernelInit& init) {
  return std::unique_ptr<Kernel>(std::make_unique<OpsetKernel>(kFn, init.opset));
}

inline int64_t prod(const Dims& d, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end && i < d.size(); ++i) p *= d[i];
  return p;
}

// Grain (rows per task) so that one task touches about `target` elements.
inline int64_t row_grain(int64_t row_len, int64_t target = 16384) {
  return std::max<int64_t>(1, target / std::max<int64_t>(1, row_len));
}

// float32 row primitives (norm_rows.cc), on AVX-512 or AVX2 by the CPU (util/cpu_isa.h).

float row_max(const float* x, int64_t n);
float row_sum(const float* x, int64_t n);
// sum((x - c)^2)
float row_sum_sq_diff(const float* x, float c, int64_t n);
// y = exp(x - shift); returns sum(y). y may alias x.
float row_exp_shift_sum(const float* x, float shift, float* y, int64_t n);
// y = exp(x) elementwise, in place.
void exp_inplace(float* y, int64_t n);
// Mean and population variance of a row of n elements. float rows go through the vector primitives above (in
// float, whatever A is); other types accumulate in A.
template <class T, class A>
void row_moments(const T* x, int64_t n, A* mean, A* var) {
  if constexpr (std::is_same_v<T, float>) {
    const float m = row_sum(x, n) / static_cast<float>(n);
    *mean = m;
    *var = row_sum_sq_diff(x, m, n) / static_cast<float>(n);
  } else {
    A sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<A>(x[i]);
    const A m = sum / static_cast<A>(n);
    A sq = 0;
    for (int64_t i = 0; i < n; ++i) {
      const A dv = static_cast<A>(x[i]) - m;
      sq += dv * dv;
    }
    *mean = m;
    *var = sq / static_cast<A>(n);
  }
}

// y = x * a + b (scalars a, b). y may alias x.
void row_axpb(const float* x, float a, float b, float* y, int64_t n);
// The same with the product rounded before the add, as ONNX Runtime's BatchNormalization computes it: a model that
// quantizes the result (DynamicQuantizeLinear) turns a last-bit difference into a whole quantization step.
void row_mul_then_add(const float* x, float a, float b, float* y, int64_t n);
// a * b rounded to float, kept from being fused into a following add or subtract.
inline float mul_unfused(float a, float b) {
  float p = a * b;
  asm("" : "+x"(p));  // the compiler cannot see through this, so it cannot contract p into an FMA
  return p;
}
// LayerNormalization of one row of n floats with ONNX Runtime's arithmetic (1.31, its AVX2 row kernel), so that a
// model that quantizes the result (DynamicQuantizeLinear, QDQ) gets its steps, not ones a last bit moved:
// mean = the row's sum in double over n, rounded to float; var = the sum of (x - mean)^2 in eight float lanes with
// FMAs (lane j takes elements j, j + 8, ..), the lanes added pairwise (j + 4, then j + 2, then j + 1), the tail
// after them, over n; inv_std = 1 / sqrt(var + eps) in float; y = fma((x - mean) * inv_std, scale, bias). Rows under
// 8 take its scalar path: float sums of x and x^2 in order, d = sqrt(sum_sq / n - mean^2 + eps),
// y = (x - mean) / d * scale + bias. bias may be null; mean_out and inv_std_out may be null.
void layernorm_row(const float* x, int64_t n, float eps, const float* scale, const float* bias, float* y,
                   float* mean_out, float* inv_std_out);

}  // namespace tessera::normk
