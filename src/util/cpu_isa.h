// The instruction sets the native kernels may use on this CPU, decided once
// per process at run time, so that one build runs on any x86-64 CPU with AVX2
// (the build's baseline, x86-64-v3) and uses AVX-512 where the CPU has it.
//
// Kernels keep their AVX-512 code in a region opened by TSR_AVX512_BEGIN and
// closed by TSR_AVX512_END, inside a namespace named `avx512` (or one whose
// name starts with it): the region compiles its functions for AVX-512 whatever
// the build targets, and callers branch on cpu::avx512() before calling them.
// Headers are included before a region, never inside one, so that no inline
// function of a header is compiled for AVX-512. scripts/isa_check.py
// disassembles the build and fails on an AVX-512 instruction in any function
// whose name does not say avx512.
//
// TESSERA_ISA=avx2 makes every kernel take its AVX2 path on an AVX-512 CPU
// (the tests use it to cover those paths).
//
// This header also brings <immintrin.h>: include it first among the files
// that use intrinsics.
#pragma once

// GCC 12 reports the deliberately undefined pass-through operands of the
// AVX-512 intrinsics (_mm512_undefined_ps) as uninitialized once they are
// inlined; the warning is a false positive located in the intrinsics headers,
// so it is silenced for them only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

namespace tessera::cpu {

// AVX-512 F, BW, DQ and VL, with the OS saving their state; false when
// TESSERA_ISA=avx2.
bool avx512();
// avx512() and the AVX-512 VNNI dot products.
bool avx512_vnni();
// avx512() and the VBMI byte permutes (vpermb, vpermi2b).
bool avx512_vbmi();
// avx512() and the BF16 dot products (vdpbf16ps).
bool avx512_bf16();
// avx512() and AVX512-FP16 arithmetic.
bool avx512_fp16();
// True when TESSERA_ISA narrows what the CPU has (the dispatch switch).
bool forced_isa();
// "avx512" or "avx2": the widest set the kernels use.
const char* isa_name();
// Bytes of one core's L2 cache as the OS reports it (1 MiB when it does not).
int64_t l2_cache_bytes();

}  // namespace tessera::cpu

// The regions. The target strings are spelt out because _Pragma takes one string literal (which clang-format
// would split).
// clang-format off
#if defined(__clang__)
#define TSR_AVX512_BEGIN                                                                                     \
  _Pragma("clang attribute push(__attribute__((target(\"avx2,fma,f16c,bmi,bmi2,avx512f,avx512bw,avx512dq,avx512vl\"))), apply_to = function)")
#define TSR_AVX512_VNNI_BEGIN                                                                                \
  _Pragma("clang attribute push(__attribute__((target(\"avx2,fma,f16c,bmi,bmi2,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni\"))), apply_to = function)")
#define TSR_AVX512_VBMI_BEGIN                                                                                \
  _Pragma("clang attribute push(__attribute__((target(\"avx2,fma,f16c,bmi,bmi2,avx512f,avx512bw,avx512dq,avx512vl,avx512vbmi\"))), apply_to = function)")
#define TSR_AVX512_BF16_BEGIN                                                                                \
  _Pragma("clang attribute push(__attribute__((target(\"avx2,fma,f16c,bmi,bmi2,avx512f,avx512bw,avx512dq,avx512vl,avx512bf16\"))), apply_to = function)")
#define TSR_AVX512_FP16_BEGIN                                                                                \
  _Pragma("clang attribute push(__attribute__((target(\"avx2,fma,f16c,bmi,bmi2,avx512f,avx512bw,avx512dq,avx512vl,avx512fp16\"))), apply_to = function)")
#define TSR_AVX512_END _Pragma("clang attribute pop")
#else
// GCC: loops the compiler vectorises inside a region use 512-bit vectors (its generic tuning prefers 256).
#define TSR_AVX512_BEGIN \
  _Pragma("GCC push_options")  \
  _Pragma("GCC target(\"avx2,fma,f16c,bmi,bmi2,avx512f,avx512bw,avx512dq,avx512vl,prefer-vector-width=512\")")
#define TSR_AVX512_VNNI_BEGIN \
  _Pragma("GCC push_options")  \
  _Pragma(                     \
      "GCC target(\"avx2,fma,f16c,bmi,bmi2,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,prefer-vector-width=512\")")
#define TSR_AVX512_VBMI_BEGIN \
  _Pragma("GCC push_options")  \
  _Pragma(                     \
      "GCC target(\"avx2,fma,f16c,bmi,bmi2,avx512f,avx512bw,avx512dq,avx512vl,avx512vbmi,prefer-vector-width=512\")")
#define TSR_AVX512_BF16_BEGIN \
  _Pragma("GCC push_options")  \
  _Pragma(                     \
      "GCC target(\"avx2,fma,f16c,bmi,bmi2,avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,prefer-vector-width=512\")")
#define TSR_AVX512_FP16_BEGIN \
  _Pragma("GCC push_options")  \
  _Pragma(                     \
      "GCC target(\"avx2,fma,f16c,bmi,bmi2,avx512f,avx512bw,avx512dq,avx512vl,avx512fp16,prefer-vector-width=512\")")
#define TSR_AVX512_END _Pragma("GCC pop_options")
#endif
// clang-format on
