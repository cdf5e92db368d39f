// Element types. Numbering matches onnx::TensorProto::DataType so import and
// export are a cast, and so the C backend ABI can share it.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace tessera {

enum class DType : int32_t {
  kUndefined = 0,
  kFloat32 = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kUInt16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,
  kBool = 9,
  kFloat16 = 10,
  kFloat64 = 11,
  kUInt32 = 12,
  kUInt64 = 13,
  kBFloat16 = 16,
};

size_t dtype_size(DType t);            // bytes per element; 0 for undefined/string
const char* dtype_name(DType t);       // "float32", "int64", ...
bool dtype_is_float(DType t);          // float16/bfloat16/float32/float64
bool dtype_is_integer(DType t);        // signed or unsigned integers (not bool)
bool dtype_is_signed(DType t);
bool dtype_is_supported(DType t);      // every dtype except undefined and string
DType dtype_from_onnx(int32_t onnx_elem_type);  // kUndefined if unknown

// IEEE half and bfloat16 storage types with conversions; arithmetic happens in
// float.
struct Float16 {
  uint16_t bits = 0;
  Float16() = default;
  explicit Float16(float f);
  operator float() const;  // NOLINT: implicit widening is intended
};

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f);
  operator float() const;  // NOLINT
};

float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bfloat16_to_float(uint16_t b);
uint16_t float_to_bfloat16(float f);

// Calls fn(T{}) with T the C++ type of `t`. Use in kernels to dispatch once
// per node, never per element.
//   visit_dtype(t, [&](auto tag) { using T = decltype(tag); ... });
template <class Fn>
decltype(auto) visit_dtype(DType t, Fn&& fn) {
  switch (t) {
    case DType::kFloat32: return fn(float{});
    case DType::kFloat64: return fn(double{});
    case DType::kFloat16: return fn(Float16{});
    case DType::kBFloat16: return fn(BFloat16{});
    case DType::kInt8: return fn(int8_t{});
    case DType::kUInt8: return fn(uint8_t{});
    case DType::kInt16: return fn(int16_t{});
    case DType::kUInt16: return fn(uint16_t{});
    case DType::kInt32: return fn(int32_t{});
    case DType::kUInt32: return fn(uint32_t{});
    case DType::kInt64: return fn(int64_t{});
    case DType::kUInt64: return fn(uint64_t{});
    case DType::kBool: return fn(bool{});
    default: return fn(float{});  // callers check dtype_is_supported first
  }
}

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::kFloat32; }
template <> constexpr DType dtype_of<double>() { return DType::kFloat64; }
template <> constexpr DType dtype_of<Float16>() { return DType::kFloat16; }
template <> constexpr DType dtype_of<BFloat16>() { return DType::kBFloat16; }
template <> constexpr DType dtype_of<int8_t>() { return DType::kInt8; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::kUInt8; }
template <> constexpr DType dtype_of<int16_t>() { return DType::kInt16; }
template <> constexpr DType dtype_of<uint16_t>() { return DType::kUInt16; }
template <> constexpr DType dtype_of<int32_t>() { return DType::kInt32; }
template <> constexpr DType dtype_of<uint32_t>() { return DType::kUInt32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::kInt64; }
template <> constexpr DType dtype_of<uint64_t>() { return DType::kUInt64; }
template <> constexpr DType dtype_of<bool>() { return DType::kBool; }

}  // namespace tessera
