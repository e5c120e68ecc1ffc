// Decode attention against a narrow KV cache (GenerateOptions::kv_cache): bf16, half the bytes of
// the fp32 cache per pass, or int8, a quarter (plus a scale per head vector) — the bytes are what
// batched decoding waits on once the weights are shared. Each key and value is widened to fp32
// exactly (bf16: a 16-bit shift; int8: the code) as it is read; the arithmetic is fp32. int8
// scales fold into the scores (s_j · dk_j) and into the softmax weights (p_j · dv_j).
#include <algorithm>
#include "backend/cpu/cpu_features.h"
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

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

inline float widened(uint16_t v) { return from_bf16(v); }
inline float widened(int8_t v) { return (float)v; }

// Portable: 64 columns at a time (ISA-cloned, the loops vectorize).
template <class E>
LOOPLM_ISA_CLONES void weighted_rows_sum_portable(const float* p, const E* V, int ld, int n, int hd, float* out) {
  for (int i0 = 0; i0 < hd; i0 += 64) {
    const int w = std::min(64, hd - i0);
    float acc[64] = {0};
    if (w == 64) {
      for (int j = 0; j < n; ++j) {
        const E* vj = V + (int64_t)j * ld + i0;
        const float pj = p[j];
        for (int l = 0; l < 64; ++l) acc[l] += pj * widened(vj[l]);
      }
    } else {
      for (int j = 0; j < n; ++j) {
        const E* vj = V + (int64_t)j * ld + i0;
        const float pj = p[j];
        for (int l = 0; l < w; ++l) acc[l] += pj * widened(vj[l]);
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
LOOPLM_ATT_AVX512 inline __m512 widen(const int8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)p)));
}
LOOPLM_ATT_AVX512 inline __m512 widen_masked(__mmask16 m, const int8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, p)));
}

// out = Σ_j p[j] V[j, :], 64 columns (4 registers) at a time.
template <class E>
LOOPLM_ATT_AVX512 void weighted_rows_sum_avx512(const float* p, const E* V, int ld, int n, int hd, float* out) {
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
        const E* vj = V + (int64_t)j * ld + i0;
        const __m512 pj = _mm512_set1_ps(p[j]);
        for (int c = 0; c < 4; ++c) acc[c] = _mm512_fmadd_ps(pj, widen(vj + 16 * c), acc[c]);
      }
      for (int c = 0; c < 4; ++c) _mm512_storeu_ps(out + i0 + 16 * c, acc[c]);
      continue;
    }
    for (int j = 0; j < n; ++j) {
      const E* vj = V + (int64_t)j * ld + i0;
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
LOOPLM_ATT_AVX2 inline __m256 widen8(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)p)));
}
template <class E>
LOOPLM_ATT_AVX2 void weighted_rows_sum_avx2(const float* p, const E* V, int ld, int n, int hd, float* out) {
  int i0 = 0;
  for (; i0 + 64 <= hd; i0 += 64) {
    __m256 acc[8];
    for (int c = 0; c < 8; ++c) acc[c] = _mm256_setzero_ps();
    for (int j = 0; j < n; ++j) {
      const E* vj = V + (int64_t)j * ld + i0;
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
  if (i0 < hd) weighted_rows_sum_portable(p, V + i0, ld, n, hd - i0, out + i0);
}
#pragma GCC diagnostic pop

bool have_avx2_att() { return cpu_features().avx2_fma; }
bool have_avx512_att() { return cpu_features().avx512 && cpu_features().avx512vl; }
#endif

// out = Σ_j p[j] V[j, :] with this CPU's kernel.
template <class E>
void weighted_rows_sum(const float* p, const E* V, int ld, int n, int hd, float* out) {
#ifdef LOOPLM_ATT_AVX512
  if (have_avx512_att() && hd <= 128) return weighted_rows_sum_avx512(p, V, ld, n, hd, out);
  if (have_avx2_att()) return weighted_rows_sum_avx2(p, V, ld, n, hd, out);
#endif
  weighted_rows_sum_portable(p, V, ld, n, hd, out);
}

}  // namespace

void attend_cached_row(const float* q, const uint16_t* K, const uint16_t* V, int ld, int n, int hd, float scale, float* s,
                       float* out) {
  dot_rows(n, hd, K, ld, q, s);  // s = K q: sixteen keys per pass (gemv.cpp)
  for (int j = 0; j < n; ++j) s[j] *= scale;
  softmax_row(s, n);
  weighted_rows_sum(s, V, ld, n, hd, out);
}

void attend_cached_row(const float* q, const int8_t* K, const float* k_scale, const int8_t* V, const float* v_scale, int ld,
                       int n, int hd, float scale, float* s, float* out) {
  dot_rows(n, hd, K, ld, q, s);  // the codes' dot products
  for (int j = 0; j < n; ++j) s[j] *= scale * k_scale[j];
  softmax_row(s, n);
  for (int j = 0; j < n; ++j) s[j] *= v_scale[j];
  weighted_rows_sum(s, V, ld, n, hd, out);
}

// ISA-cloned: nearbyint is then one instruction (roundss) instead of a libm call per value.
// The max and the finiteness check run in 16 independent lanes (so they vectorize: the scalar
// loop's early-out compare per value was a visible share of a batched decode); a max does
// not depend on the order, so the codes and scale are the same.
LOOPLM_ISA_CLONES void quantize_kv_row(const float* x, int n, int8_t* codes, float* scale) {
  float lane_max[16] = {};
  uint32_t lane_bad[16] = {};  // exponent all ones: Inf or NaN
  int i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) {
      const float a = std::fabs(x[i + l]);
      lane_max[l] = lane_max[l] < a ? a : lane_max[l];
      uint32_t bits;
      std::memcpy(&bits, x + i + l, 4);
      lane_bad[l] |= (uint32_t)((bits & 0x7f800000u) == 0x7f800000u);
    }
  float amax = 0;
  bool finite = true;
  for (int l = 0; l < 16; ++l) amax = std::max(amax, lane_max[l]), finite = finite && !lane_bad[l];
  for (; i < n; ++i) {
    amax = std::max(amax, std::fabs(x[i]));
    finite = finite && std::isfinite(x[i]);
  }
  if (!finite) {  // as an fp32 cache would: the attention that reads it comes out NaN
    std::fill(codes, codes + n, (int8_t)0);
    *scale = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
  for (int i = 0; i < n; ++i) codes[i] = (int8_t)std::nearbyint(x[i] * id);  // |x · id| ≤ 127
  *scale = d;
}

}  // namespace looplm::k
