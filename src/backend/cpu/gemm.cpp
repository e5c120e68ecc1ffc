#include "backend/cpu/gemm.h"

#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include "looplm/error.h"

namespace looplm {

void gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc) {
  if (M == 0 || N == 0) return;
  if (M == 1 && !ta && tb && alpha == 1.0f && (beta == 0.0f || beta == 1.0f)) {
    gemv_rows(N, K, B, ldb, A, C, beta == 1.0f);  // x W^T for one row: batch-1 decoding
    return;
  }
  dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  LOOPLM_ASSERT(st == dnnl_success, "dnnl_sgemm failed");
}

void gemm(bool ta, bool tb, int M, int N, int K, double alpha, const double* A, int lda, const double* B,
          int ldb, double beta, double* C, int ldc) {
#pragma omp parallel for
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double s = 0;
      for (int k = 0; k < K; ++k) s += (ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
      C[i * ldc + j] = alpha * s + (beta == 0 ? 0.0 : beta * C[i * ldc + j]);
    }
}

}  // namespace looplm
