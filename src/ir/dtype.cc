#include "ir/dtype.h"

namespace tessera {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kFloat32: case DType::kInt32: case DType::kUInt32: return 4;
    case DType::kFloat64: case DType::kInt64: case DType::kUInt64: return 8;
    case DType::kFloat16: case DType::kBFloat16: case DType::kInt16: case DType::kUInt16: return 2;
    case DType::kInt8: case DType::kUInt8: case DType::kBool: return 1;
    default: return 0;
  }
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kInt8: return "int8";
    case DType::kUInt8: return "uint8";
    case DType::kInt16: return "int16";
    case DType::kUInt16: return "uint16";
    case DType::kInt32: return "int32";
    case DType::kUInt32: return "uint32";
    case DType::kInt64: return "int64";
    case DType::kUInt64: return "uint64";
    case DType::kBool: return "bool";
    case DType::kString: return "string";
    default: return "undefined";
  }
}

bool dtype_is_float(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16 ||
         t == DType::kBFloat16;
}

bool dtype_is_integer(DType t) {
  switch (t) {
    case DType::kInt8: case DType::kUInt8: case DType::kInt16: case DType::kUInt16:
    case DType::kInt32: case DType::kUInt32: case DType::kInt64: case DType::kUInt64:
      return true;
    default:
      return false;
  }
}

bool dtype_is_signed(DType t) {
  return t == DType::kInt8 || t == DType::kInt16 || t == DType::kInt32 || t == DType::kInt64 ||
         dtype_is_float(t);
}

bool dtype_is_supported(DType t) { return dtype_size(t) != 0; }

DType dtype_from_onnx(int32_t e) {
  switch (e) {
    case 1: case 2: case 3: case 4: case 5: case 6: case 7: case 8: case 9: case 10: case 11:
    case 12: case 13: case 16:
      return static_cast<DType>(e);
    default:
      return DType::kUndefined;
  }
}

float half_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) {  // inf or nan
    return static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0));
  }
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow
  if (absx < 0x38800000u) {  // subnormal or zero in half
    if (absx < 0x33000000u) return static_cast<uint16_t>(sign);
    // value = m * 2^(e-150); a half subnormal counts units of 2^-24.
    uint32_t e = absx >> 23;
    uint32_t m = (absx & 0x7fffffu) | 0x800000u;
    uint32_t s = 126 - e;
    uint32_t half_m = m >> s;
    uint32_t rem = m & ((1u << s) - 1);
    uint32_t mid = 1u << (s - 1);
    if (rem > mid || (rem == mid && (half_m & 1))) ++half_m;
    return static_cast<uint16_t>(sign | half_m);
  }
  uint32_t e = (absx >> 23) - 127 + 15;
  uint32_t m = absx & 0x7fffffu;
  uint32_t h = (e << 10) | (m >> 13);
  uint32_t rem = m & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float bfloat16_to_float(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_bfloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // nan
  uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

Float16::Float16(float f) : bits(float_to_half(f)) {}
Float16::operator float() const { return half_to_float(bits); }
BFloat16::BFloat16(float f) : bits(float_to_bfloat16(f)) {}
BFloat16::operator float() const { return bfloat16_to_float(bits); }

}  // namespace tessera
