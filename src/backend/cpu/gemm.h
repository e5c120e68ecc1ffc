// Row-major GEMM: C[M,N] = alpha * op(A)[M,K] · op(B)[K,N] + beta * C.
// float goes to oneDNN (chosen by measurement, ../shared/PERF.md and docs/numerics.md; it picks its
// own kernel by CPU feature and shares the OpenMP pool); double is a plain reference used by the
// finite-difference tests.
#pragma once

namespace looplm {

void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc);
void gemm(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const double* A, int lda,
          const double* B, int ldb, double beta, double* C, int ldc);

// Σ a[i] b[i] (ISA-cloned, 16 partial sums).
float dot(const float* a, const float* b, int n);

// y[N] = W[N,K] · x[K] (+ y if accumulate) — matrix-vector for batch-1 decoding, multithreaded
// over rows, memory-bound (weights are streamed once).
void gemv_rows(int N, int K, const float* W, int ldw, const float* x, float* y, bool accumulate);

}  // namespace looplm
