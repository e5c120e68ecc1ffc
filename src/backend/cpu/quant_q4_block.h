// q4_k's 4-bit block step (quant_k.cpp): one 32-column sub-block of a 4-row group of codes u (16
// bytes per row, element i in the low nibble of byte i, i + 16 in the high one) against NX inputs'
// block b, per ISA. Per row r and input n:
//   acc += dx · sw_r · Σ u·qx,   corr += mw_r · (dx · Σqx)
// with sw, mw the sub-block's d·sc and dmin·m. y_r = the reduced acc − corr. (q4_0 shared it
// before its 16-row tiles, quant.h.)
#pragma once
#include "backend/cpu/quant_driver.h"

#ifdef LOOPLM_QUANT_X86
namespace looplm {

template <int NX>
LOOPLM_AVX2_Q inline void q4_block_avx2(const uint8_t* qs, __m128 sw, __m128 mw, int b, const QuantizedRow* const* x,
                                        __m256* acc01, __m256* acc23, __m128* corr) {
  const __m256i low = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
  const __m256i W01 = _mm256_loadu_si256((const __m256i*)qs), W23 = _mm256_loadu_si256((const __m256i*)(qs + 32));
  const __m256i lo01 = _mm256_and_si256(W01, low), hi01 = _mm256_and_si256(_mm256_srli_epi16(W01, 4), low);
  const __m256i lo23 = _mm256_and_si256(W23, low), hi23 = _mm256_and_si256(_mm256_srli_epi16(W23, 4), low);
#pragma GCC unroll 4
  for (int n = 0; n < NX; ++n) {
    const int8_t* xq = x[n]->q.data() + (size_t)b * kQBlock;
    const __m256i Xlo = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)xq));
    const __m256i Xhi = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)(xq + 16)));
    const __m128 s4 = _mm_mul_ps(sw, _mm_set1_ps(x[n]->d[b]));
    corr[n] = _mm_fmadd_ps(mw, _mm_set1_ps(x[n]->dsum[b]), corr[n]);
    const __m256i P01 = _mm256_add_epi16(_mm256_maddubs_epi16(lo01, Xlo), _mm256_maddubs_epi16(hi01, Xhi));
    const __m256i P23 = _mm256_add_epi16(_mm256_maddubs_epi16(lo23, Xlo), _mm256_maddubs_epi16(hi23, Xhi));
    const __m256 s01 = _mm256_set_m128(_mm_shuffle_ps(s4, s4, 0x55), _mm_shuffle_ps(s4, s4, 0x00));
    const __m256 s23 = _mm256_set_m128(_mm_shuffle_ps(s4, s4, 0xff), _mm_shuffle_ps(s4, s4, 0xaa));
    acc01[n] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(P01, ones)), s01, acc01[n]);
    acc23[n] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(P23, ones)), s23, acc23[n]);
  }
}

template <int NX>
LOOPLM_AVX2_Q inline void q4_reduce_avx2(const __m256* acc01, const __m256* acc23, const __m128* corr, float* out) {
  for (int n = 0; n < NX; ++n) {
    float t[16], c[4];
    _mm256_storeu_ps(t, acc01[n]);
    _mm256_storeu_ps(t + 8, acc23[n]);
    _mm_storeu_ps(c, corr[n]);
    for (int r = 0; r < kQRows; ++r) out[n * kQRows + r] = ((t[4 * r] + t[4 * r + 1]) + (t[4 * r + 2] + t[4 * r + 3])) - c[r];
  }
}

// (g++ 12 warns falsely about the intrinsics' undefined pass-through operands once they inline.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// AVX-512 VNNI: one 64-byte load holds the block's 4 rows; vpdpbusd sums 4 unsigned × signed
// byte products into each int32 lane, against x's halves broadcast to match.
template <int NX>
LOOPLM_VNNI_Q inline void q4_block_vnni(const uint8_t* qs, __m128 sw, __m128 mw, int b, const QuantizedRow* const* x,
                                        __m512* acc, __m128* corr) {
  const __m512i idx = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
  const __m512i low = _mm512_set1_epi8(0x0f), zero = _mm512_setzero_si512();
  const __m512i W = _mm512_loadu_si512(qs);
  const __m512i lo = _mm512_and_si512(W, low), hi = _mm512_and_si512(_mm512_srli_epi16(W, 4), low);
  // sw_r in row r's 4 lanes, once for all inputs (then · dx per input: the same products as
  // spreading sw · dx, so each input's bits do not depend on how many share the call)
  const __m512 sw16 = _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(sw));
#pragma GCC unroll 8
  for (int n = 0; n < NX; ++n) {
    const int8_t* xq = x[n]->q.data() + (size_t)b * kQBlock;
    const __m512i Xlo = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i*)xq));
    const __m512i Xhi = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i*)(xq + 16)));
    const __m512i A = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, lo, Xlo), hi, Xhi);
    acc[n] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(A), _mm512_mul_ps(sw16, _mm512_set1_ps(x[n]->d[b])), acc[n]);
    corr[n] = _mm_fmadd_ps(mw, _mm_set1_ps(x[n]->dsum[b]), corr[n]);
  }
}

template <int NX>
LOOPLM_VNNI_Q inline void q4_reduce_vnni(const __m512* acc, const __m128* corr, float* out) {
  for (int n = 0; n < NX; ++n) {
    float t[16], c[4];
    _mm512_storeu_ps(t, acc[n]);
    _mm_storeu_ps(c, corr[n]);
    for (int r = 0; r < kQRows; ++r) out[n * kQRows + r] = ((t[4 * r] + t[4 * r + 1]) + (t[4 * r + 2] + t[4 * r + 3])) - c[r];
  }
}
#pragma GCC diagnostic pop

}  // namespace looplm
#endif
