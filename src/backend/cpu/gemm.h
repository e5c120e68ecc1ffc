// Row-major GEMM: C[M,N] = alpha * op(A)[M,K] · op(B)[K,N] + beta * C.
// float goes to oneDNN (chosen by measurement, ../shared/PERF.md and docs/numerics.md; it picks its
// own kernel by CPU feature and shares the OpenMP pool); double is a plain reference used by the
// finite-difference tests.
#pragma once
#include <cstdint>
#include <vector>

namespace looplm {

void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc);
void gemm(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const double* A, int lda,
          const double* B, int ldb, double beta, double* C, int ldc);

// Σ a[i] b[i] (ISA-cloned, 16 partial sums).
float dot(const float* a, const float* b, int n);

// Matrix-vector kernels by CPU feature (gemv.cpp): `best` is the fastest this CPU has; tests run
// every available one. avx512_bf16 applies to bf16 weights (for fp32 it means avx512).
enum class GemvKernel { best, portable, avx512, avx512_bf16 };
std::vector<GemvKernel> gemv_kernels_available();  // portable first, best last

// y[N] = W[N,K] · x[K] (+ y if accumulate) — matrix-vector for batch-1 decoding, multithreaded
// over rows, memory-bound (weights are streamed once).
void gemv_rows(int N, int K, const float* W, int ldw, const float* x, float* y, bool accumulate,
               GemvKernel kernel = GemvKernel::best);

// The same with W [N, K] in bf16 in the decode layout (backend/cpu/bf16.h: pack_bf16), widened to
// fp32 as it is read (exact), fp32 products and sums: half the bytes of gemv_rows.
void gemv_rows_bf16(int N, int K, const uint16_t* W, const float* x, float* y, bool accumulate,
                    GemvKernel kernel = GemvKernel::best);

}  // namespace looplm
