// Small single-threaded products of bf16 operands in the pair layout that AVX512_BF16's vdpbf16ps
// multiplies (two adjacent terms of the sum per 32-bit lane), fp32 sums: the kernels under
// training's bf16 attention (ops/attention_bf16.cpp), where a head's products are too small for a
// oneDNN call's fixed cost (bench/README.md, "Tried and not kept"). Only where
// bf16_products_supported() (gemm.h).
//
// A, the left operand [M, K]: bf16 rows (row stride lda), terms k and k+1 adjacent, K even (a
// caller with odd K pads a zero column). B, the right operand [K, N]: "pair-packed" — pair row p
// holds terms 2p and 2p+1 of every column side by side, element (k, n) at
// Bp[(k / 2) · 2·ldp + 2·n + k % 2], ldp ≥ N a multiple of 16 (pairs_width).
#pragma once
#include <cstdint>

namespace looplm {

// The column count of a pair-packed matrix with N columns: N rounded up to 16 (one vector).
inline int pairs_width(int N) { return (N + 15) / 16 * 16; }

// X [K, N] (element (k, n) at X[k·ld + n]; transposed: at X[n·ld + k]) rounded to bf16 (bf16.h's
// to_bf16) into pair rows 0..(Kp/2 − 1) of out (row width ldp), Kp = K rounded up to even: a K
// padding row and columns N..pairs_width(N) − 1 are zeros (columns past those are not written).
// Row k may keep only its first valid_cols[k] columns, the rest zeros (plain orientation only).
void pack_pairs_bf16(int K, int N, const float* X, int ld, bool transposed, uint16_t* out, int ldp,
                     const int* valid_cols = nullptr);

// x[0..n) rounded to bf16 exactly as bf16.h's to_bf16 (nearest even, NaN quiet) by vcvtne2ps2bf16,
// 32 at a time; a group holding a subnormal input, which the instruction would flush to zero, and
// the tail are rounded by to_bf16 itself.
void round_span_native(const float* x, int64_t n, uint16_t* out);

// x[0..n) rounded to bf16 (as to_bf16) into out[0..n), zeros in out[n..width).
void round_row_bf16(const float* x, int n, int width, uint16_t* out);

// X [R, C] (element (r, c) at X[r·ld + c]) rounded to bf16 into out [R, Cp] (row stride ldo ≥ Cp,
// Cp = C rounded up to even, the padding column zero): a left operand with K = C.
// Transposed: out [C, Rp] holds Xᵀ (row c = column c of X, Rp = R rounded up to even, padding zero).
void rows_bf16(int R, int C, const float* X, int ld, bool transposed, uint16_t* out, int ldo);

// Y[c, r] (= or += when accumulate) X[r, c] for X [R, C]: a product computed transposed put back.
void transpose_f32(int R, int C, const float* X, int ldx, float* Y, int ldy, bool accumulate);

// C[M, N] = alpha · A[M, K] · B[K, N] (+ C when accumulate), K even; A rows of stride lda, B
// pair-packed (row width ldp; Bp may point into a wider matrix: column n0 of pair row p0 is
// Bp + p0 · 2·ldp + 2·n0). Each C element sums its K terms in one fixed order (pairs ascending).
void gemm_pairs_bf16(int M, int N, int K, float alpha, const uint16_t* A, int lda, const uint16_t* Bp, int ldp,
                     bool accumulate, float* C, int ldc);

}  // namespace looplm
