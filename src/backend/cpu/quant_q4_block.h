// The integer sums of a 16-row 4-bit tile block (BlockQ4_0x16::qs, which q4_k's sub-blocks repeat:
// quant.h) per ISA, Σ u·qx for each row and input, shared by the q4_0 kernels (quant.cpp) and
// q4_k's (quant_k.cpp); the callers add their offset or min and the fp32 scaling.
#pragma once
#include <cstring>

#include "backend/cpu/quant_driver.h"

#ifdef LOOPLM_QUANT_X86
namespace looplm {

inline int32_t load4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// One 32-byte half of a column group's 64 bytes (8 of the 16 rows) as nibbles A (≤ 15) against 4
// columns of each input broadcast: vpmaddubsw's int16 pair sums (each |·| ≤ 2·15·128 = 3,840)
// added up in int16 over a block's 8 steps (≤ 30,720 < 2^15: exact, no saturation), then widened
// once by the caller: one vpmaddwd per input and block half instead of one per step.
template <int NX>
LOOPLM_AVX2_Q inline void tile_step_avx2_q4(__m256i A, const int8_t* const* xq, size_t at, __m256i* P) {
#pragma GCC unroll 8
  for (int n = 0; n < NX; ++n)
    P[n] = _mm256_add_epi16(P[n], _mm256_maddubs_epi16(A, _mm256_set1_epi32(load4(xq[n] + at))));
}

// g++ 12 reassociates the integer sums of the unrolled steps into a tree: every product is formed
// first and spilled to the stack, then added (half the speed at 4 inputs). An empty asm naming each
// sum after a column group's steps pins the order: the sums stay in registers, one add per product.
template <int NX>
LOOPLM_AVX2_Q inline void pin_sums(__m256i* s) {
  for (int n = 0; n < NX; ++n) __asm__("" : "+x"(s[n]));
}

// Half h of the block (rows 8h .. 8h + 7): the int32 sums per input into I.
template <int NX>
LOOPLM_AVX2_Q inline void q4_half_sums_avx2(const uint8_t* qs, int h, const int8_t* const* xq, size_t at, __m256i* I) {
  const __m256i low = _mm256_set1_epi8(0x0f);
  __m256i P[NX];
  for (int n = 0; n < NX; ++n) P[n] = _mm256_setzero_si256();
  for (int q = 0; q < kQBlock / 8; ++q) {
    const __m256i W = _mm256_loadu_si256((const __m256i*)(qs + q * 64 + h * 32));
    tile_step_avx2_q4<NX>(_mm256_and_si256(W, low), xq, at + 4 * q, P);
    tile_step_avx2_q4<NX>(_mm256_and_si256(_mm256_srli_epi16(W, 4), low), xq, at + 16 + 4 * q, P);
    pin_sums<NX>(P);
  }
  for (int n = 0; n < NX; ++n) I[n] = _mm256_madd_epi16(P[n], _mm256_set1_epi16(1));
}

// AVX-512 VNNI: one 64-byte load is 4 columns of all 16 rows, one vpdpbusd per input adds their
// products with 4 columns of x (broadcast). The sums go into I[n][0] (low nibbles) and
// I[n][kSplit − 1] (high): with kSplit = 2 one input's dependent chain is half as long.
// (g++ 12 warns falsely about the intrinsics' undefined pass-through operands once they inline.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
template <int NX, int kSplit>
LOOPLM_VNNI_Q inline void q4_block_sums_vnni(const uint8_t* qs, const int8_t* const* xq, size_t at, __m512i (*I)[kSplit]) {
  const __m512i low = _mm512_set1_epi8(0x0f);
#pragma GCC unroll 4
  for (int q = 0; q < kQBlock / 8; ++q) {
    const __m512i W = _mm512_loadu_si512(qs + q * 64);
    const __m512i lo = _mm512_and_si512(W, low), hi = _mm512_and_si512(_mm512_srli_epi16(W, 4), low);
#pragma GCC unroll 8
    for (int n = 0; n < NX; ++n) {
      I[n][0] = _mm512_dpbusd_epi32(I[n][0], lo, _mm512_set1_epi32(load4(xq[n] + at + 4 * q)));
      I[n][kSplit - 1] = _mm512_dpbusd_epi32(I[n][kSplit - 1], hi, _mm512_set1_epi32(load4(xq[n] + at + 16 + 4 * q)));
    }
  }
}
#pragma GCC diagnostic pop

}  // namespace looplm
#endif
