#include "util/cpu_isa.h"

#include <cpuid.h>

#include <unistd.h>
#include <cstdlib>
#include <cstring>

namespace tessera::cpu {

namespace {

bool forced_avx2() {
  const char* env = std::getenv("TESSERA_ISA");
  return env && std::strcmp(env, "avx2") == 0;
}

bool detect_avx512() {
  // libgcc's CPU model also checks XCR0, so a feature the OS does not save reads as absent.
  __builtin_cpu_init();
  return !forced_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}

}  // namespace

bool avx512() {
  static const bool has = detect_avx512();
  return has;
}

bool avx512_vnni() {
  static const bool has = avx512() && __builtin_cpu_supports("avx512vnni");
  return has;
}

bool avx512_vbmi() {
  static const bool has = avx512() && __builtin_cpu_supports("avx512vbmi");
  return has;
}

bool avx512_bf16() {
  static const bool has = avx512() && __builtin_cpu_supports("avx512bf16");
  return has;
}

bool avx512_fp16() {
  // CPUID leaf 7, sub-leaf 0, EDX bit 23 (clang 14's __builtin_cpu_supports does not know "avx512fp16").
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return avx512() && __get_cpuid_count(7, 0, &a, &b, &c, &d) != 0 && (d & (1u << 23)) != 0;
  }();
  return has;
}

bool forced_isa() { return forced_avx2(); }

const char* isa_name() { return avx512() ? "avx512" : "avx2"; }

int64_t l2_cache_bytes() {
  static const int64_t bytes = [] {
    const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return l2 > 0 ? static_cast<int64_t>(l2) : int64_t{1} << 20;
  }();
  return bytes;
}

}  // namespace tessera::cpu
