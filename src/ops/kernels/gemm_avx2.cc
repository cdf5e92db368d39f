// The GEMM for AVX2 + FMA CPUs: its portable micro-kernel, vectorised by the compiler (built with AVX-512 off, so
// that it stays the AVX2 kernel in a -march=native build too; gemm_isa.h).
#define TSR_GEMM_ISA avx2
#define TSR_GEMM_ISA_NAME "avx2"
#define TSR_GEMM_AVX512 0
#include "ops/kernels/gemm_impl.inc"
