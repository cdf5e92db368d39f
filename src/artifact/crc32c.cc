// CRC-32C of a byte range.
//
// Input: bytes and a running CRC. Output: the extended CRC.
// Method: with SSE4.2, the crc32 instruction consumes 8 bytes per call but has
// a 3-cycle latency, so one dependent chain runs at a third of the
// instruction's throughput. Large inputs are therefore cut into three
// interleaved streams of kStride bytes whose CRCs are computed independently
// and then combined: the CRC register is linear, so the state after A||B
// equals shift(state after A, |B|) xor (state of B started from zero), where
// shift multiplies by x^(8|B|) modulo the polynomial (a constant for a fixed
// stride, applied with a short carry-less multiply loop). Without SSE4.2, a
// slicing-by-8 table does 8 bytes per step.
#include "artifact/crc32c.h"

#include <array>
#include <cstring>

#if defined(__SSE4_2__)
#include <nmmintrin.h>
#endif

namespace tessera {

namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables make_tables() {
  Tables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i) {
    for (size_t s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
  }
  return t;
}

constexpr Tables kTables = make_tables();

uint64_t load_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Raw register update (no pre/post inversion).
uint32_t update_portable(uint32_t c, const uint8_t* p, size_t n) {
  while (n >= 8) {
    uint64_t w = load_le64(p) ^ c;
    c = kTables[7][w & 0xFF] ^ kTables[6][(w >> 8) & 0xFF] ^ kTables[5][(w >> 16) & 0xFF] ^
        kTables[4][(w >> 24) & 0xFF] ^ kTables[3][(w >> 32) & 0xFF] ^ kTables[2][(w >> 40) & 0xFF] ^
        kTables[1][(w >> 48) & 0xFF] ^ kTables[0][w >> 56];
    p += 8;
    n -= 8;
  }
  while (n--) c = (c >> 8) ^ kTables[0][(c ^ *p++) & 0xFF];
  return c;
}

#if defined(__SSE4_2__)

constexpr size_t kStride = 8192;  // bytes per stream per round; a multiple of 8

// a * b modulo the polynomial, both in the reflected representation (bit 31 is
// x^0). From zlib's crc32_combine.
constexpr uint32_t multmodp(uint32_t a, uint32_t b) {
  uint32_t m = 1u << 31, p = 0;
  for (;;) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = (b & 1) ? (b >> 1) ^ kPoly : b >> 1;
  }
  return p;
}

// x^(8 * bytes) modulo the polynomial: the operator that moves a CRC state
// past `bytes` zero bytes.
constexpr uint32_t shift_operator(uint64_t bytes) {
  uint32_t result = 1u << 31;  // x^0
  uint32_t power = 1u << 30;   // x^1, squared each step: x^(2^k)
  uint64_t bits = bytes * 8;
  while (bits) {
    if (bits & 1) result = multmodp(power, result);
    power = multmodp(power, power);
    bits >>= 1;
  }
  return result;
}

constexpr uint32_t kStrideShift = shift_operator(kStride);

uint32_t update_hw(uint32_t c, const uint8_t* p, size_t n) {
  while (n && (reinterpret_cast<uintptr_t>(p) & 7)) {
    c = _mm_crc32_u8(c, *p++);
    --n;
  }
  uint64_t c0 = c;
  while (n >= 3 * kStride) {
    uint64_t c1 = 0, c2 = 0;
    const uint8_t* p1 = p + kStride;
    const uint8_t* p2 = p + 2 * kStride;
    for (size_t i = 0; i < kStride; i += 8) {
      uint64_t w0, w1, w2;
      std::memcpy(&w0, p + i, 8);
      std::memcpy(&w1, p1 + i, 8);
      std::memcpy(&w2, p2 + i, 8);
      c0 = _mm_crc32_u64(c0, w0);
      c1 = _mm_crc32_u64(c1, w1);
      c2 = _mm_crc32_u64(c2, w2);
    }
    uint32_t s = multmodp(kStrideShift, static_cast<uint32_t>(c0)) ^ static_cast<uint32_t>(c1);
    c0 = multmodp(kStrideShift, s) ^ static_cast<uint32_t>(c2);
    p += 3 * kStride;
    n -= 3 * kStride;
  }
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c0 = _mm_crc32_u64(c0, w);
    p += 8;
    n -= 8;
  }
  c = static_cast<uint32_t>(c0);
  while (n--) c = _mm_crc32_u8(c, *p++);
  return c;
}

#endif

}  // namespace

uint32_t crc32c_portable(const void* data, size_t size, uint32_t crc) {
  return ~update_portable(~crc, static_cast<const uint8_t*>(data), size);
}

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
#if defined(__SSE4_2__)
  return ~update_hw(~crc, static_cast<const uint8_t*>(data), size);
#else
  return crc32c_portable(data, size, crc);
#endif
}

bool crc32c_is_hardware() {
#if defined(__SSE4_2__)
  return true;
#else
  return false;
#endif
}

}  // namespace tessera
