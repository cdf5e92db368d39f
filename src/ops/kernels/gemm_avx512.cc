// The GEMM for AVX-512 CPUs (built with -mavx512f/bw/dq/vl; run only where the CPU has them: gemm_isa.h).
#define TSR_GEMM_ISA avx512
#define TSR_GEMM_ISA_NAME "avx512"
#include "ops/kernels/gemm_impl.inc"
