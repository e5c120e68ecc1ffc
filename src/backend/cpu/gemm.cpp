#include "backend/cpu/gemm.h"

#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include <algorithm>

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

// y[j] (+)= W[j,:] · x for rows [0, n): four rows at a time so each load of x feeds four
// products and the 16-lane partial sums are reduced once per row.
LOOPLM_ISA_CLONES static void gemv_span(const float* W, int ldw, const float* x, int K, float* y, int n, bool acc) {
  int j = 0;
  for (; j + 4 <= n; j += 4) {
    const float* w0 = W + (int64_t)j * ldw;
    const float* w1 = w0 + ldw;
    const float* w2 = w1 + ldw;
    const float* w3 = w2 + ldw;
    float a0[16] = {0}, a1[16] = {0}, a2[16] = {0}, a3[16] = {0};
    int i = 0;
    for (; i + 16 <= K; i += 16)
      for (int l = 0; l < 16; ++l) {
        const float xv = x[i + l];
        a0[l] += w0[i + l] * xv;
        a1[l] += w1[i + l] * xv;
        a2[l] += w2[i + l] * xv;
        a3[l] += w3[i + l] * xv;
      }
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (int l = 0; l < 16; ++l) { s0 += a0[l]; s1 += a1[l]; s2 += a2[l]; s3 += a3[l]; }
    for (; i < K; ++i) { s0 += w0[i] * x[i]; s1 += w1[i] * x[i]; s2 += w2[i] * x[i]; s3 += w3[i] * x[i]; }
    if (acc) { y[j] += s0; y[j + 1] += s1; y[j + 2] += s2; y[j + 3] += s3; }
    else { y[j] = s0; y[j + 1] = s1; y[j + 2] = s2; y[j + 3] = s3; }
  }
  for (; j < n; ++j) {
    float v = dot(W + (int64_t)j * ldw, x, K);
    y[j] = acc ? y[j] + v : v;
  }
}

void gemv_rows(int N, int K, const float* W, int ldw, const float* x, float* y, bool accumulate) {
  // Memory-bound: each thread streams its own contiguous rows of W once.
  if ((int64_t)N * K <= (1 << 15)) { gemv_span(W, ldw, x, K, y, N, accumulate); return; }
#pragma omp parallel
  {
    const int nt = omp_get_num_threads(), id = omp_get_thread_num();
    const int per = ((N + nt - 1) / nt + 3) / 4 * 4;
    const int lo = std::min(N, id * per), hi = std::min(N, lo + per);
    if (hi > lo) gemv_span(W + (int64_t)lo * ldw, ldw, x, K, y + lo, hi - lo, accumulate);
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
