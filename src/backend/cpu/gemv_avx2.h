// AVX2 + FMA kernels (gemv_avx2.cpp), dispatched from gemv.cpp: the bf16 and fp32 matrix-vector
// products (and their few-rows forms for batched decoding) and attention's scores. bf16 weights in
// the decode layout (bf16.h); x de-interleaved: xe = x[0::2] at X, xo = x[1::2] at X + half, each
// zero-padded past ceil(K/2) to a multiple of 16.
#pragma once
#include <cstdint>

namespace looplm {

bool have_avx2_fma();

// y[j] (+)= W[j, :] · x for rows [0, n) of W (starting at a multiple of 4 rows).
void span_bf16_avx2(const uint16_t* W, const float* X, int half, int K, float* y, int n, bool acc);

// Y[m, j] = W[j, :] · X[m] for m < M and rows j in [lo, lo + n): input row m's xe at X + m·ldxp, its
// xo `half` further. Each weight block is read from memory once for all M rows; every output is
// bit-identical to span_bf16_avx2's for that input row.
void span_bf16_avx2_rows(int M, const uint16_t* W, const float* X, int ldxp, int half, int K, float* Y, int ldy,
                         int lo, int n);

// fp32 weights W [rows, K] row-major (row stride ldw): y[j] (+)= W[j, :] · x for rows [0, n), and
// the few-rows form Y[m, j] = W[j, :] · X[m] for m < M, j in [lo, lo + n), each output
// bit-identical to span_f32_avx2's for that input row.
void span_f32_avx2(const float* W, int ldw, const float* x, int K, float* y, int n, bool acc);
void span_f32_avx2_rows(int M, const float* W, int ldw, const float* X, int ldx, int K, float* Y, int ldy, int lo,
                        int n);

// y[N] = W[N, K] · x for short rows (attention's scores over cached keys), eight rows reduced
// together; W fp32, bf16 or int8 codes (row stride ldw).
void dot_rows_avx2(int N, int K, const float* W, int ldw, const float* x, float* y);
void dot_rows_avx2(int N, int K, const uint16_t* W, int ldw, const float* x, float* y);
void dot_rows_avx2(int N, int K, const int8_t* W, int ldw, const float* x, float* y);

}  // namespace looplm
