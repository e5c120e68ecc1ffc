// Row-major GEMM: C[M,N] = alpha * op(A)[M,K] · op(B)[K,N] + beta * C.
// float goes to oneDNN (chosen by measurement, docs/numerics.md; it picks its
// own kernel by CPU feature and shares the OpenMP pool); double is a plain reference used by the
// finite-difference tests.
#pragma once
#include "looplm/bench.h"
#include <cstddef>
#include <cstdint>
#include <vector>

namespace looplm {

void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc);
void gemm(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const double* A, int lda,
          const double* B, int ldb, double beta, double* C, int ldc);

// The same product split over a fixed grid of C tiles, each computed by a single-threaded GEMM
// over the whole K: the result does not depend on the thread count (oneDNN's own parallel GEMM
// splits K for some small-C shapes, e.g. a [64, 64] weight gradient over 512 rows, and then adds
// the halves in a thread-count-dependent way, and at 3+ threads other shapes differ too). Every
// product of a linear layer goes through it, so training, evaluation and generation give the same
// bits whatever the (adaptive) pool's size; measured on the training shapes it runs at oneDNN's
// own speed within noise for x W^T and dy W, and 10-30% slower for dy^T x (single-threaded tiles
// against oneDNN's K-split).
void gemm_fixed_split(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                      const float* B, int ldb, float beta, float* C, int ldc);
inline void gemm_fixed_split(bool ta, bool tb, int M, int N, int K, double alpha, const double* A, int lda,
                             const double* B, int ldb, double beta, double* C, int ldc) {
  gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);  // the double reference is serial per element
}

// The same product with both operands rounded to bf16 and fp32 accumulation (oneDNN's bf16
// matmul; gemm_bf16.cpp): the matrix products of training with precision = bf16. Thread-count
// independent like gemm_fixed_split; beta 0 or 1. Only where bf16_products_supported().
void gemm_fixed_split_bf16(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                           const float* B, int ldb, float beta, float* C, int ldc);
// Its parts, for a caller that multiplies one rounded operand twice (a linear layer's backward):
// X [rows, cols] (leading dimension ld) rounded to bf16 (bf16.h's to_bf16) into out [rows, cols];
// grow-only bf16 buffers of the calling thread, one per user (Bf16Buffer); and the product of bf16
// operands as stored, transposes read through strides.
void round_to_bf16(int rows, int cols, const float* X, int ld, uint16_t* out);
enum class Bf16Buffer {
  product_a,      // gemm_fixed_split_bf16's operands
  product_b,
  linear_dy,      // linear_bwd (ops/kernels.h): dy, rounded once for both products
  linear_weight,  // W, for dx = dy W
  linear_input,   // x, for dW = dyᵀ x
  count
};
uint16_t* bf16_buffer(Bf16Buffer which, size_t n);
void gemm_bf16(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const uint16_t* A, int lda,
               const uint16_t* B, int ldb, float beta, float* C, int ldc);
// The CPU multiplies bf16 natively (AVX512_BF16; AMX CPUs have it too). Without it oneDNN would
// fall back to kernels slower than fp32, so precision = bf16 is refused instead.
bool bf16_products_supported();

// measure_gemm_gflops (the best shape's median of `reps` timed calls; the reference for MFU too)
// and measure_read_gbps (bandwidth.cpp): include/looplm/bench.h.

// Σ a[i] b[i] (ISA-cloned, 16 partial sums).
float dot(const float* a, const float* b, int n);

// Matrix-vector kernels by CPU feature (gemv.cpp): `best` is the fastest this CPU has; tests run
// every available one. avx512_bf16 applies to bf16 weights (for fp32 it means avx512); avx2 to bf16
// (for fp32 it means portable, whose dot is ISA-cloned) and to the quantized formats, avx512_vnni to
// the quantized formats only (backend/cpu/quant.h: quant_kernels_available).
enum class GemvKernel { best, portable, avx512, avx512_bf16, avx2, avx512_vnni };
std::vector<GemvKernel> gemv_kernels_available();  // portable first, best last

// y[N] = W[N,K] · x[K] (+ y if accumulate) — matrix-vector for batch-1 decoding, multithreaded
// over rows, memory-bound (weights are streamed once).
void gemv_rows(int N, int K, const float* W, int ldw, const float* x, float* y, bool accumulate,
               GemvKernel kernel = GemvKernel::best);

// The AVX-512 fp32 matrix-vector kernel with `rows` (1 or 4) weight rows side by side; gemv_rows
// picks one by CPU (gemv.cpp: f32_rows_side_by_side), both sum every row in the same order. For
// tests; single-threaded; false where the CPU has no AVX-512.
bool gemv_rows_f32_avx512_by(int rows, int N, int K, const float* W, int ldw, const float* x, float* y, bool accumulate);

// y[N] = W[N,K] · x[K] for short rows (K ≤ 128: attention's scores over cached keys), single-threaded,
// sixteen rows reduced together (AVX-512), eight (AVX2, gemv_avx2.cpp), else the portable kernel. W fp32, bf16
// (a bf16 KV cache: each value widened to fp32 exactly, fp32 products and sums) or int8 codes (an
// int8 KV cache: y = the codes' dot with x, exact codes in fp32 products and sums; the caller scales).
void dot_rows(int N, int K, const float* W, int ldw, const float* x, float* y);
void dot_rows(int N, int K, const uint16_t* W, int ldw, const float* x, float* y);
void dot_rows(int N, int K, const int8_t* W, int ldw, const float* x, float* y);

// The same with W [N, K] in bf16 in the decode layout (backend/cpu/bf16.h: pack_bf16), widened to
// fp32 as it is read (exact), fp32 products and sums: half the bytes of gemv_rows.
void gemv_rows_bf16(int N, int K, const uint16_t* W, const float* x, float* y, bool accumulate,
                    GemvKernel kernel = GemvKernel::best);
// A few rows (batched decoding): Y[m, :N] = W · X[m, :K] for m < M, every weight read once for all
// M rows, each output bit-identical to gemv_rows_bf16's with the best kernel (AVX512_BF16 or AVX2).
// False where that kernel has no few-rows form (AVX-512 without BF16, or no AVX2).
bool gemm_rows_bf16_few(int M, int N, int K, const uint16_t* W, const float* X, int ldx, float* Y, int ldy);
// The same for fp32 weights W [N, K] (row stride ldw), each output bit-identical to gemv_rows's
// with the best kernel (AVX-512 or AVX2). False where the CPU has neither.
bool gemm_rows_f32_few(int M, int N, int K, const float* W, int ldw, const float* X, int ldx, float* Y, int ldy);
// Its AVX-512 form with `rows` (1 or 4) weight rows per sweep (gemm_rows_f32_few picks by CPU, as
// gemv_rows does). For tests; single-threaded; false where the CPU has no AVX-512.
bool gemm_rows_f32_few_avx512_by(int rows, int M, int N, int K, const float* W, int ldw, const float* X, int ldx,
                                 float* Y, int ldy);

}  // namespace looplm
