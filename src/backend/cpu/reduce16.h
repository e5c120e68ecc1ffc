// Sixteen 16-lane fp32 sums reduced together by a transposing tree: lane r of the result is the
// total of a[r] (45 shuffles and adds for 16 rows; reducing each alone costs ~8 per row). The
// attention scores' kernels share it (gemv.cpp's dot_rows, attend_bf16.cpp).
#pragma once
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

namespace looplm {

__attribute__((target("avx512f"))) inline __m512 reduce16(__m512* a) {
  __m512 t[8], u[4], v[2];
  for (int i = 0; i < 8; ++i)  // per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3] of rows 2i, 2i + 1
    t[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]), _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
  for (int i = 0; i < 4; ++i) {  // per 128-bit lane: the lane's sums of rows 4i .. 4i + 3
    const __m512d x = _mm512_castps_pd(t[2 * i]), y = _mm512_castps_pd(t[2 * i + 1]);
    u[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
  }
  for (int i = 0; i < 2; ++i)  // lanes pairwise: quarters (0 + 1, 2 + 3) of u[2i] then of u[2i + 1]
    v[i] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], 0x88), _mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], 0xdd));
  return _mm512_add_ps(_mm512_shuffle_f32x4(v[0], v[1], 0x88), _mm512_shuffle_f32x4(v[0], v[1], 0xdd));  // lane r: row r
}

}  // namespace looplm
#endif
