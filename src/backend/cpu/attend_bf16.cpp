// Decode attention against a bf16 KV cache (GenerateOptions::kv_cache): half the bytes of the
// fp32 cache per pass, which is what batched decoding waits on once the weights are shared. Each
// key and value is widened to fp32 exactly (a 16-bit shift) as it is read; the arithmetic is fp32.
#include <algorithm>
#include <cstdint>

#include "backend/cpu/bf16.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/isa.h"
#include "backend/cpu/pointwise_f32.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define LOOPLM_ATT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
#define LOOPLM_ATT_AVX2 __attribute__((target("avx2,fma")))
#endif

namespace looplm::k {

float softmax_row(float* s, int n);

namespace {

// Portable: 64 columns at a time (ISA-cloned, the loops vectorize).
LOOPLM_ISA_CLONES void weighted_rows_sum_bf16_portable(const float* p, const uint16_t* V, int ld, int n, int hd, float* out) {
  for (int i0 = 0; i0 < hd; i0 += 64) {
    const int w = std::min(64, hd - i0);
    float acc[64] = {0};
    if (w == 64) {
      for (int j = 0; j < n; ++j) {
        const uint16_t* vj = V + (int64_t)j * ld + i0;
        const float pj = p[j];
        for (int l = 0; l < 64; ++l) acc[l] += pj * from_bf16(vj[l]);
      }
    } else {
      for (int j = 0; j < n; ++j) {
        const uint16_t* vj = V + (int64_t)j * ld + i0;
        const float pj = p[j];
        for (int l = 0; l < w; ++l) acc[l] += pj * from_bf16(vj[l]);
      }
    }
    for (int l = 0; l < w; ++l) out[i0 + l] = acc[l];
  }
}



#ifdef LOOPLM_ATT_AVX512
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
LOOPLM_ATT_AVX512 inline __m512 widen(const uint16_t* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)), 16));
}
LOOPLM_ATT_AVX512 inline __m512 widen_masked(__mmask16 m, const uint16_t* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}

// out = Σ_j p[j] V[j, :], 64 columns (4 registers) at a time.
LOOPLM_ATT_AVX512 void weighted_rows_sum_bf16_avx512(const float* p, const uint16_t* V, int ld, int n, int hd, float* out) {
  for (int i0 = 0; i0 < hd; i0 += 64) {
    const int w = std::min(64, hd - i0);
    __mmask16 m[4];
    for (int c = 0; c < 4; ++c) {
      const int k = std::clamp(w - 16 * c, 0, 16);
      m[c] = (__mmask16)((1u << k) - 1);
    }
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    if (w == 64) {  // unmasked loads (the common head width)
      for (int j = 0; j < n; ++j) {
        const uint16_t* vj = V + (int64_t)j * ld + i0;
        const __m512 pj = _mm512_set1_ps(p[j]);
        for (int c = 0; c < 4; ++c) acc[c] = _mm512_fmadd_ps(pj, widen(vj + 16 * c), acc[c]);
      }
      for (int c = 0; c < 4; ++c) _mm512_storeu_ps(out + i0 + 16 * c, acc[c]);
      continue;
    }
    for (int j = 0; j < n; ++j) {
      const uint16_t* vj = V + (int64_t)j * ld + i0;
      const __m512 pj = _mm512_set1_ps(p[j]);
      for (int c = 0; c < 4; ++c)
        if (m[c]) acc[c] = _mm512_fmadd_ps(pj, widen_masked(m[c], vj + 16 * c), acc[c]);
    }
    for (int c = 0; c < 4; ++c)
      if (m[c]) _mm512_mask_storeu_ps(out + i0 + 16 * c, m[c], acc[c]);
  }
}

// The same with AVX2 + FMA, 8 registers of 8 columns. A head narrower than 64 (or its last part):
// the columns past a multiple of 8 by the portable loop.
LOOPLM_ATT_AVX2 inline __m256 widen8(const uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16));
}
LOOPLM_ATT_AVX2 void weighted_rows_sum_bf16_avx2(const float* p, const uint16_t* V, int ld, int n, int hd, float* out) {
  int i0 = 0;
  for (; i0 + 64 <= hd; i0 += 64) {
    __m256 acc[8];
    for (int c = 0; c < 8; ++c) acc[c] = _mm256_setzero_ps();
    for (int j = 0; j < n; ++j) {
      const uint16_t* vj = V + (int64_t)j * ld + i0;
      const __m256 pj = _mm256_set1_ps(p[j]);
      for (int c = 0; c < 8; ++c) acc[c] = _mm256_fmadd_ps(pj, widen8(vj + 8 * c), acc[c]);
    }
    for (int c = 0; c < 8; ++c) _mm256_storeu_ps(out + i0 + 8 * c, acc[c]);
  }
  for (; i0 + 8 <= hd; i0 += 8) {
    __m256 acc = _mm256_setzero_ps();
    for (int j = 0; j < n; ++j) acc = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), widen8(V + (int64_t)j * ld + i0), acc);
    _mm256_storeu_ps(out + i0, acc);
  }
  if (i0 < hd) weighted_rows_sum_bf16_portable(p, V + i0, ld, n, hd - i0, out + i0);
}
#pragma GCC diagnostic pop

bool have_avx2_att() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}
bool have_avx512_att() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  return yes;
}
#endif

}  // namespace

void attend_cached_row(const float* q, const uint16_t* K, const uint16_t* V, int ld, int n, int hd, float scale, float* s,
                       float* out) {
#ifdef LOOPLM_ATT_AVX512
  const bool wide = have_avx512_att() && hd <= 128;
#else
  const bool wide = false;
#endif
  dot_rows(n, hd, K, ld, q, s);  // s = K q: sixteen keys per pass (gemv.cpp)
  for (int j = 0; j < n; ++j) s[j] *= scale;
  softmax_row(s, n);
#ifdef LOOPLM_ATT_AVX512
  if (wide) return weighted_rows_sum_bf16_avx512(s, V, ld, n, hd, out);
  if (have_avx2_att()) return weighted_rows_sum_bf16_avx2(s, V, ld, n, hd, out);
#endif
  weighted_rows_sum_bf16_portable(s, V, ld, n, hd, out);
}

}  // namespace looplm::k
