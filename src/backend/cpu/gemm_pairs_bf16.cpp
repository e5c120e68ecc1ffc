#include "backend/cpu/gemm_pairs_bf16.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/bf16.h"
#include "looplm/error.h"

// GCC 12 reads the _mm512_undefined_* placeholders inside the shift and narrowing intrinsics as
// uninitialised values (a false positive).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace looplm {

namespace {

#define LOOPLM_BF16_PAIRS __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

// One register tile: MR rows of C by NV vectors of 16 columns, the last vector's columns by `last`
// (a mask: the C columns past N are neither read nor written). MR · NV accumulators stay in
// registers for the whole sum; per pair of terms, NV loads of B and MR broadcasts of A's pair.
template <int MR, int NV>
LOOPLM_BF16_PAIRS void tile(int pairs, float alpha, const uint16_t* A, int lda, const uint16_t* Bp, int ldp,
                            bool accumulate, float* C, int ldc, __mmask16 last) {
  __m512 acc[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int p = 0; p < pairs; ++p) {
    const uint16_t* brow = Bp + (int64_t)p * 2 * ldp;
    __m512bh b[NV];
    for (int v = 0; v < NV; ++v) b[v] = (__m512bh)_mm512_loadu_si512(brow + 32 * v);
    for (int r = 0; r < MR; ++r) {
      uint32_t w;
      std::memcpy(&w, A + (int64_t)r * lda + 2 * p, 4);
      const __m512bh a = (__m512bh)_mm512_set1_epi32((int)w);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], a, b[v]);
    }
  }
  const __m512 al = _mm512_set1_ps(alpha);
  for (int r = 0; r < MR; ++r) {
    float* c = C + (int64_t)r * ldc;
    for (int v = 0; v < NV; ++v) {
      const __mmask16 m = v == NV - 1 ? last : (__mmask16)0xffff;
      __m512 x = _mm512_mul_ps(acc[r][v], al);
      if (accumulate) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, c + 16 * v));
      _mm512_mask_storeu_ps(c + 16 * v, m, x);
    }
  }
}

constexpr int kRows = 6, kVectors = 4;  // 24 accumulators, 4 B vectors, a broadcast: 29 of 32 registers
using TileFn = void (*)(int, float, const uint16_t*, int, const uint16_t*, int, bool, float*, int, __mmask16);

template <int MR>
constexpr TileFn tile_for(int nv) {
  return nv == 1 ? tile<MR, 1> : nv == 2 ? tile<MR, 2> : nv == 3 ? tile<MR, 3> : tile<MR, 4>;
}
TileFn tile_fn(int mr, int nv) {
  switch (mr) {
    case 1: return tile_for<1>(nv);
    case 2: return tile_for<2>(nv);
    case 3: return tile_for<3>(nv);
    case 4: return tile_for<4>(nv);
    case 5: return tile_for<5>(nv);
    default: return tile_for<6>(nv);
  }
}

}  // namespace

namespace {

// 16 floats rounded to bf16 as bf16.h's to_bf16 does (nearest even, NaN kept quiet; the
// instruction vcvtneps2bf16 would flush subnormals, so the rounding is done on the bits), each in
// the low half of a 32-bit lane; lanes outside `keep` are 0.
LOOPLM_BF16_PAIRS inline __m512i round16(const float* x, __mmask16 keep) {
  // (A full vector is read with a plain load: a masked load cannot take its data from stores still
  // in flight, and the rows rounded here were mostly just written by the softmax.)
  const __m512i u = keep == 0xffff ? _mm512_loadu_si512(x) : _mm512_maskz_loadu_epi32(keep, x);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  return _mm512_mask_blend_epi32(nan, rounded, quiet);
}
LOOPLM_BF16_PAIRS inline __mmask16 first(int n) { return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1); }

// Pair words of two rows: x0's bf16 in the low half, x1's in the high half (x1 null: zeros).
LOOPLM_BF16_PAIRS inline __m512i pair16(const float* x0, int n0, const float* x1, int n1) {
  const __m512i lo = round16(x0, first(n0));
  if (!x1) return lo;
  return _mm512_or_si512(lo, _mm512_slli_epi32(round16(x1, first(n1)), 16));
}

}  // namespace

LOOPLM_BF16_PAIRS void round_span_native(const float* x, int64_t n, uint16_t* out) {
  const __m512i exponent = _mm512_set1_epi32(0x7f800000), mantissa = _mm512_set1_epi32(0x007fffff);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i a = _mm512_loadu_si512(x + i), b = _mm512_loadu_si512(x + i + 16);
    // Subnormal inputs (exponent 0, mantissa not): the instruction would flush them to zero.
    const __mmask16 sub_a = _mm512_mask_test_epi32_mask(_mm512_testn_epi32_mask(a, exponent), a, mantissa);
    const __mmask16 sub_b = _mm512_mask_test_epi32_mask(_mm512_testn_epi32_mask(b, exponent), b, mantissa);
    if (sub_a | sub_b) {
      for (int j = 0; j < 32; ++j) out[i + j] = to_bf16(x[i + j]);
      continue;
    }
    const __m512bh r = _mm512_cvtne2ps_pbh(_mm512_castsi512_ps(b), _mm512_castsi512_ps(a));  // [a, b]
    _mm512_storeu_si512(out + i, (__m512i)r);
  }
  for (; i < n; ++i) out[i] = to_bf16(x[i]);
}

LOOPLM_BF16_PAIRS void round_row_bf16(const float* x, int n, int width, uint16_t* out) {
  n = std::min(std::max(n, 0), width);
  for (int c = 0; c < n; c += 16)
    _mm256_mask_storeu_epi16(out + c, first(n - c), _mm512_cvtepi32_epi16(round16(x + c, first(n - c))));
  std::fill(out + n, out + width, (uint16_t)0);
}

LOOPLM_BF16_PAIRS void pack_pairs_bf16(int K, int N, const float* X, int ld, bool transposed, uint16_t* out, int ldp,
                                       const int* valid_cols) {
  LOOPLM_ASSERT(ldp >= N && ldp % 16 == 0, "pack_pairs_bf16: the row width must be >= N and a multiple of 16");
  uint32_t* out32 = reinterpret_cast<uint32_t*>(out);
  const int pairs = (K + 1) / 2;
  if (!transposed) {  // pair row p interleaves rows 2p and 2p + 1 of X
    for (int p = 0; p < pairs; ++p) {
      const int k = 2 * p;
      const float* x0 = X + (int64_t)k * ld;
      const float* x1 = k + 1 < K ? x0 + ld : nullptr;
      const int n0 = valid_cols ? std::min(valid_cols[k], N) : N, n1 = x1 ? (valid_cols ? std::min(valid_cols[k + 1], N) : N) : 0;
      uint32_t* row = out32 + (int64_t)p * ldp;
      for (int n = 0; n < N; n += 16) _mm512_storeu_si512(row + n, pair16(x0 + n, n0 - n, x1 ? x1 + n : nullptr, n1 - n));
    }
    return;
  }
  // Transposed: column n of B is row n of X, whose bf16 row read as 32-bit words is the column's
  // pairs: rounded 32 terms (16 words) at a time, the words spread down column n.
  LOOPLM_ASSERT(!valid_cols, "pack_pairs_bf16: valid_cols is for the plain orientation");
  alignas(64) uint32_t words[16];
  for (int n = 0; n < N; ++n) {
    const float* x = X + (int64_t)n * ld;
    for (int k = 0; k < K; k += 32) {
      const __m256i lo = _mm512_cvtepi32_epi16(round16(x + k, first(K - k)));
      const __m256i hi = _mm512_cvtepi32_epi16(round16(x + k + 16, first(K - k - 16)));
      _mm512_store_si512(words, _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
      const int np = std::min(16, pairs - k / 2);
      for (int i = 0; i < np; ++i) out32[(int64_t)(k / 2 + i) * ldp + n] = words[i];
    }
  }
  for (int p = 0; p < pairs; ++p) std::fill(out32 + (int64_t)p * ldp + N, out32 + (int64_t)p * ldp + pairs_width(N), 0u);
}

LOOPLM_BF16_PAIRS void rows_bf16(int R, int C, const float* X, int ld, bool transposed, uint16_t* out, int ldo) {
  const int Cp = (C + 1) / 2 * 2;
  if (!transposed) {
    for (int r = 0; r < R; ++r) round_row_bf16(X + (int64_t)r * ld, C, Cp, out + (int64_t)r * ldo);
    return;
  }
  // Two rows of X at a time: column c's pair (X[r, c], X[r+1, c]) is one 32-bit word of out row c.
  alignas(64) uint32_t w[16];
  for (int r = 0; r < R; r += 2) {
    const float* x0 = X + (int64_t)r * ld;
    const float* x1 = r + 1 < R ? x0 + ld : nullptr;
    for (int c = 0; c < C; c += 16) {
      _mm512_store_si512(w, pair16(x0 + c, C - c, x1 ? x1 + c : nullptr, C - c));
      for (int i = 0; i < std::min(16, C - c); ++i) std::memcpy(out + (int64_t)(c + i) * ldo + r, &w[i], 4);
    }
  }
}

LOOPLM_BF16_PAIRS void transpose_f32(int R, int C, const float* X, int ldx, float* Y, int ldy, bool accumulate) {
  // By 16 × 16 blocks in registers: 32-bit, then 64-bit interleaves inside 128-bit lanes leave
  // u[k] lane L = column 4L + k of four rows; two rounds of lane shuffles gather the four
  // row groups.
  for (int r0 = 0; r0 < R; r0 += 16)
    for (int c0 = 0; c0 < C; c0 += 16) {
      const int nr = std::min(16, R - r0), nc = std::min(16, C - c0);
      const __mmask16 cols = first(nc), rows = first(nr);
      __m512 r[16], t[16], u[16];
      for (int i = 0; i < 16; ++i)
        r[i] = i < nr ? _mm512_maskz_loadu_ps(cols, X + (int64_t)(r0 + i) * ldx + c0) : _mm512_setzero_ps();
      for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
      }
      for (int g = 0; g < 16; g += 4) {
        const __m512d a = _mm512_castps_pd(t[g]), b = _mm512_castps_pd(t[g + 1]);
        const __m512d c = _mm512_castps_pd(t[g + 2]), d = _mm512_castps_pd(t[g + 3]);
        u[g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        u[g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        u[g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        u[g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
      }
      for (int k = 0; k < 4; ++k) {
        const __m512 v02 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0x88), v13 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0xdd);
        const __m512 w02 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0x88), w13 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0xdd);
        const __m512 out[4] = {_mm512_shuffle_f32x4(v02, w02, 0x88), _mm512_shuffle_f32x4(v13, w13, 0x88),
                               _mm512_shuffle_f32x4(v02, w02, 0xdd), _mm512_shuffle_f32x4(v13, w13, 0xdd)};
        for (int L = 0; L < 4; ++L) {
          const int c = 4 * L + k;
          if (c >= nc) continue;
          float* y = Y + (int64_t)(c0 + c) * ldy + r0;
          const __m512 x = accumulate ? _mm512_add_ps(out[L], _mm512_maskz_loadu_ps(rows, y)) : out[L];
          _mm512_mask_storeu_ps(y, rows, x);
        }
      }
    }
}

void gemm_pairs_bf16(int M, int N, int K, float alpha, const uint16_t* A, int lda, const uint16_t* Bp, int ldp,
                     bool accumulate, float* C, int ldc) {
  LOOPLM_ASSERT(K % 2 == 0, "gemm_pairs_bf16: K must be even");
  if (M <= 0 || N <= 0) return;
  // Column chunks outside, rows inside: a chunk of B (K/2 pair rows × 64 columns) stays in L1
  // while the rows of A stream past it.
  for (int n0 = 0; n0 < N; n0 += 16 * kVectors) {
    const int w = std::min(16 * kVectors, N - n0), nv = (w + 15) / 16, tail = w - 16 * (nv - 1);
    const __mmask16 last = (__mmask16)(tail == 16 ? 0xffff : (1u << tail) - 1);
    for (int m0 = 0; m0 < M; m0 += kRows) {
      const int mr = std::min(kRows, M - m0);
      tile_fn(mr, nv)(K / 2, alpha, A + (int64_t)m0 * lda, lda, Bp + 2 * n0, ldp, accumulate,
                      C + (int64_t)m0 * ldc + n0, ldc, last);
    }
  }
}

}  // namespace looplm
