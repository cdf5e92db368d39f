// The GEMM for AVX2 + FMA CPUs (built with -mavx2 -mfma and AVX-512 off: its portable micro-kernel, vectorised by
// the compiler; gemm_isa.h).
#define TSR_GEMM_ISA avx2
#define TSR_GEMM_ISA_NAME "avx2"
#include "ops/kernels/gemm_impl.inc"
