#include "backend/cpu/gemm.h"

#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include "backend/cpu/isa.h"
#include "looplm/error.h"

namespace looplm {

// Σ a[i] b[i] with 16 independent partial sums (vectorises to one zmm accumulator per 16 lanes).
LOOPLM_ISA_CLONES float dot(const float* a, const float* b, int n) {
  float acc[16] = {0};
  int i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) acc[l] += a[i + l] * b[i + l];
  float s = 0;
  for (int l = 0; l < 16; ++l) s += acc[l];
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void gemv_rows(int N, int K, const float* W, int ldw, const float* x, float* y, bool accumulate) {
  // Memory-bound: each thread streams its own rows of W once.
#pragma omp parallel for schedule(static) if ((int64_t)N * K > (1 << 15))
  for (int j = 0; j < N; ++j) {
    float v = dot(W + (int64_t)j * ldw, x, K);
    y[j] = accumulate ? y[j] + v : v;
  }
}

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
