// The GEMM for AVX-512 CPUs: compiled for AVX-512 inside a region of cpu_isa.h, run only where the CPU has it
// (gemm_isa.h).
#define TSR_GEMM_ISA avx512
#define TSR_GEMM_ISA_NAME "avx512"
#define TSR_GEMM_AVX512 1
#include "ops/kernels/gemm_impl.inc"
