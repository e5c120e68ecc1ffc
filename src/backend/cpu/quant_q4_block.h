// The AVX2 steps of a 16-row 4-bit tile block (BlockQ4_0x16::qs, which q4_k's sub-blocks repeat:
// quant.h), shared by the q4_0 kernels (quant.cpp) and q4_k's (quant_k.cpp).
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

}  // namespace looplm
#endif
