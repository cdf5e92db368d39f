// Helpers shared by the signal family files: scalar input values, float
// dtype dispatch and conversions through double (every signal op computes in
// double and rounds once when writing its output).
#pragma once

#include <cstdint>
#include <type_traits>

#include "ops/op_registry.h"

namespace tessera {

// Value of a scalar (0-D or one-element) input at inference time. Returns 1
// when known, 0 when unknown, -1 when the input is known but not a scalar.
inline int known_scalar_int(const InferContext& ctx, int i, int64_t* out) {
  const Tensor* t = ctx.in_value(i);
  if (t == nullptr) return 0;
  if (t->numel() != 1) return -1;
  *out = t->as_int64(0);
  return 1;
}

template <class T>
inline double to_double(T v) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    return static_cast<double>(static_cast<float>(v));
  } else {
    return static_cast<double>(v);
  }
}

template <class T>
inline T from_double(double v) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    return T(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, bool>) {
    return v != 0.0;
  } else {
    return static_cast<T>(v);
  }
}

// Calls fn(T{}) for the four float dtypes; false for any other.
template <class Fn>
bool visit_float_dtype(DType t, Fn&& fn) {
  switch (t) {
    case DType::kFloat32: fn(float{}); return true;
    case DType::kFloat64: fn(double{}); return true;
    case DType::kFloat16: fn(Float16{}); return true;
    case DType::kBFloat16: fn(BFloat16{}); return true;
    default: return false;
  }
}

// HannWindow, HammingWindow, BlackmanWindow, MelWeightMatrix
// (signal_windows.cc), called from the family registration in signal.cc.
void register_signal_window_ops(OpRegistry& reg);

}  // namespace tessera
