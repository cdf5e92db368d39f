// Small dense matrix helpers for the recurrent layers: C (+)= A * B with B
// pre-transposed into row-major [K,N], for float and double. The loops keep
// four rows of C and a 256-wide column block hot so the compiler vectorises
// the inner axpy; the work is split over rows (input projections) or columns
// (per-step recurrences with a small batch) on the thread pool.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "util/parallel.h"

namespace tessera {

// Returns the [cols, rows] transpose of a row-major [rows, cols] matrix.
template <class T>
std::vector<T> transpose_pack(const T* src, int64_t rows, int64_t cols) {
  std::vector<T> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[static_cast<size_t>(c * rows + r)] = src[r * cols + c];
  return out;
}

namespace rnn_detail {

// C[m0:m1, n0:n1] += A[m0:m1, :K] * B[:K, n0:n1].
template <class T>
void gemm_block(int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t K, const T* a, int64_t lda, const T* b,
                int64_t ldb, T* c, int64_t ldc) {
  constexpr int64_t kNB = 256;
  for (int64_t nb = n0; nb < n1; nb += kNB) {
    const int64_t ne = std::min(nb + kNB, n1);
    const int64_t len = ne - nb;
    int64_t m = m0;
    for (; m + 4 <= m1; m += 4) {
      T* __restrict c0 = c + m * ldc + nb;
      T* __restrict c1 = c0 + ldc;
      T* __restrict c2 = c1 + ldc;
      T* __restrict c3 = c2 + ldc;
      const T* a0 = a + m * lda;
      for (int64_t k = 0; k < K; ++k) {
        const T* __restrict br = b + k * ldb + nb;
        const T x0 = a0[k], x1 = a0[lda + k], x2 = a0[2 * lda + k], x3 = a0[3 * lda + k];
        for (int64_t j = 0; j < len; ++j) {
          const T bv = br[j];
          c0[j] += x0 * bv;
          c1[j] += x1 * bv;
          c2[j] += x2 * bv;
          c3[j] += x3 * bv;
        }
      }
    }
    for (; m < m1; ++m) {
      T* __restrict c0 = c + m * ldc + nb;
      const T* a0 = a + m * lda;
      for (int64_t k = 0; k < K; ++k) {
        const T* __restrict br = b + k * ldb + nb;
        const T x0 = a0[k];
        for (int64_t j = 0; j < len; ++j) c0[j] += x0 * br[j];
      }
    }
  }
}

template <class T>
void gemm_parallel(Parallel* pool, int64_t M, int64_t N, int64_t K, const T* a, int64_t lda, const T* b,
                   int64_t ldb, T* c, int64_t ldc) {
  const int64_t work = M * N * K;
  if (!pool || pool->num_threads() <= 1 || work < (1 << 16)) {
    gemm_block(0, M, 0, N, K, a, lda, b, ldb, c, ldc);
    return;
  }
  if (M >= 16) {
    pool->parallel_for((M + 3) / 4, 1, [&](int64_t lo, int64_t hi) {
      gemm_block(lo * 4, std::min(hi * 4, M), 0, N, K, a, lda, b, ldb, c, ldc);
    });
  } else {
    pool->parallel_for((N + 63) / 64, 1, [&](int64_t lo, int64_t hi) {
      gemm_block(0, M, lo * 64, std::min(hi * 64, N), K, a, lda, b, ldb, c, ldc);
    });
  }
}

}  // namespace rnn_detail

// C[M,N] = A[M,K] * B[K,N] + bias[N] (bias may be null).
template <class T>
void rnn_gemm(Parallel* pool, int64_t M, int64_t N, int64_t K, const T* a, int64_t lda, const T* b, int64_t ldb,
              T* c, int64_t ldc, const T* bias) {
  for (int64_t m = 0; m < M; ++m) {
    T* row = c + m * ldc;
    if (bias) std::copy(bias, bias + N, row);
    else std::fill(row, row + N, T(0));
  }
  rnn_detail::gemm_parallel(pool, M, N, K, a, lda, b, ldb, c, ldc);
}

// C[M,N] += A[M,K] * B[K,N].
template <class T>
void rnn_gemm_acc(Parallel* pool, int64_t M, int64_t N, int64_t K, const T* a, int64_t lda, const T* b,
                  int64_t ldb, T* c, int64_t ldc) {
  rnn_detail::gemm_parallel(pool, M, N, K, a, lda, b, ldb, c, ldc);
}

}  // namespace tessera
