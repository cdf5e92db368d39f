// GEMM steps on cuBLASLt (see cuda_engine.h).
//
// Tessera's tensors are row-major; cuBLASLt's default order is column-major.
// A row-major [r, c] matrix read column-major is its transpose, so the step
// computes D^T (N x M) = op(B)^T (N x K) * op(A)^T (K x M): cuBLASLt's "A" is
// our B, its "B" our A, and D's column-major [N, M] bytes are the row-major
// [M, N] result. The bias epilogue adds a vector along D's rows, which are our
// N columns. fp32 throughout, compute type CUBLAS_COMPUTE_32F: no TF32.
#include <string>
#include <vector>

#include "cuda_engine.h"

namespace tessera_cuda {

using tessera_plugin::fail;

namespace {

cublasLtEpilogue_t lt_epilogue(Epilogue e) {
  switch (e) {
    case Epilogue::kRelu:
      return CUBLASLT_EPILOGUE_RELU;
    case Epilogue::kBias:
      return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::kReluBias:
      return CUBLASLT_EPILOGUE_RELU_BIAS;
    case Epilogue::kGeluTanhBias:
      return CUBLASLT_EPILOGUE_GELU_BIAS;
    case Epilogue::kNone:
      break;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

// A column-major layout of `rows` x `cols` with leading dimension `ld`, `batch` matrices `stride` apart.
cublasLtMatrixLayout_t make_layout(int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride,
                                   const std::string& where) {
  cublasLtMatrixLayout_t l = nullptr;
  check_cublas(cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld),
               where + ": cublasLtMatrixLayoutCreate");
  if (batch > 1) {
    int32_t count = static_cast<int32_t>(batch);
    cublasStatus_t s = cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count));
    if (s == CUBLAS_STATUS_SUCCESS) {
      s = cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride));
    }
    if (s != CUBLAS_STATUS_SUCCESS) {
      cublasLtMatrixLayoutDestroy(l);
      check_cublas(s, where + ": cublasLtMatrixLayoutSetAttribute (batch)");
    }
  }
  return l;
}

}  // namespace

GemmPlan::GemmPlan(const GemmParams& g, const void* bias, ThreadContext& ctx, const std::string& where)
    : alpha_(g.alpha), beta_(g.c >= 0 ? g.beta : 0.0f) {
  if (g.batch > INT32_MAX) fail(TESSERA_ERROR_UNSUPPORTED, where + ": batch " + std::to_string(g.batch) + " too large");
  cublasLtMatmulPreference_t pref = nullptr;
  try {
    check_cublas(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                 where + ": cublasLtMatmulDescCreate");
    cublasOperation_t op_a = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A is our B
    cublasOperation_t op_b = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    check_cublas(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)),
                 where + ": cublasLtMatmulDescSetAttribute(TRANSA)");
    check_cublas(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)),
                 where + ": cublasLtMatmulDescSetAttribute(TRANSB)");
    // Stored B: [K, N] (column-major N x K, ld N), or [N, K] with transB (column-major K x N, ld K).
    lt_a_ = g.trans_b ? make_layout(g.k, g.n, g.k, g.batch, g.stride_b, where)
                      : make_layout(g.n, g.k, g.n, g.batch, g.stride_b, where);
    // Stored A: [M, K] (column-major K x M, ld K), or [K, M] with transA (column-major M x K, ld M).
    lt_b_ = g.trans_a ? make_layout(g.m, g.k, g.m, g.batch, g.stride_a, where)
                      : make_layout(g.k, g.m, g.k, g.batch, g.stride_a, where);
    lt_d_ = make_layout(g.n, g.m, g.n, g.batch, g.m * g.n, where);

    check_cublas(cublasLtMatmulPreferenceCreate(&pref), where + ": cublasLtMatmulPreferenceCreate");
    uint64_t ws = kLtWorkspaceBytes;
    check_cublas(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
                 where + ": cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)");
    // The host's buffers are 64-byte aligned (backend.h), ours 256: ask for kernels that need no more than 16.
    uint32_t align = 16;
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
      check_cublas(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align)),
                   where + ": cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT)");
    }
    // The epilogue asked for, then simpler ones should the heuristics find nothing with it.
    std::vector<Epilogue> tries{g.epilogue};
    if (g.epilogue == Epilogue::kReluBias || g.epilogue == Epilogue::kGeluTanhBias) tries.push_back(Epilogue::kBias);
    if (g.epilogue != Epilogue::kNone) tries.push_back(Epilogue::kNone);
    cublasLtMatmulHeuristicResult_t results[8] = {};
    int pick = -1;
    for (Epilogue e : tries) {
      cublasLtEpilogue_t epi = lt_epilogue(e);
      check_cublas(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)),
                   where + ": cublasLtMatmulDescSetAttribute(EPILOGUE)");
      if (e == Epilogue::kBias || e == Epilogue::kReluBias || e == Epilogue::kGeluTanhBias) {
        if (!bias) fail(TESSERA_ERROR_INTERNAL, where + ": bias epilogue without a bias");
        check_cublas(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
                     where + ": cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
      }
      int found = 0;
      cublasStatus_t st =
          cublasLtMatmulAlgoGetHeuristic(ctx.lt(), desc_, lt_a_, lt_b_, lt_d_, lt_d_, pref, 8, results, &found);
      if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED) {
        check_cublas(st, where + ": cublasLtMatmulAlgoGetHeuristic (M=" + std::to_string(g.m) +
                             " N=" + std::to_string(g.n) + " K=" + std::to_string(g.k) +
                             " batch=" + std::to_string(g.batch) + ")");
      }
      for (int i = 0; st == CUBLAS_STATUS_SUCCESS && i < found && pick < 0; ++i) {
        if (results[i].state == CUBLAS_STATUS_SUCCESS && results[i].workspaceSize <= kLtWorkspaceBytes) pick = i;
      }
      if (pick >= 0) {
        applied_ = e;
        break;
      }
    }
    if (pick < 0) {
      fail(TESSERA_ERROR_UNSUPPORTED, where + ": cuBLASLt has no algorithm for M=" + std::to_string(g.m) +
                                          " N=" + std::to_string(g.n) + " K=" + std::to_string(g.k));
    }
    algo_ = results[pick].algo;
    workspace_ = results[pick].workspaceSize;
    cublasLtMatmulPreferenceDestroy(pref);
  } catch (...) {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    destroy();
    throw;
  }
}

void GemmPlan::destroy() {
  if (lt_d_) cublasLtMatrixLayoutDestroy(lt_d_);
  if (lt_b_) cublasLtMatrixLayoutDestroy(lt_b_);
  if (lt_a_) cublasLtMatrixLayoutDestroy(lt_a_);
  if (desc_) cublasLtMatmulDescDestroy(desc_);
  lt_a_ = lt_b_ = lt_d_ = nullptr;
  desc_ = nullptr;
}

GemmPlan::~GemmPlan() { destroy(); }

void GemmPlan::run(ThreadContext& ctx, const float* a, const float* b, float* d, const std::string& where) const {
  check_cublas(cublasLtMatmul(ctx.lt(), desc_, &alpha_, b, lt_a_, a, lt_b_, &beta_, d, lt_d_, d, lt_d_, &algo_,
                              ctx.lt_workspace(), kLtWorkspaceBytes, ctx.stream()),
               where + ": cublasLtMatmul");
}

}  // namespace tessera_cuda
