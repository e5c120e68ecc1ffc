// q8_0 / q4_0 (quant.h): the scalar reference, packing, and the products per ISA. Each
// WeightFormat row at the end is what the format table (weight_format.cpp) lists.
#include "backend/cpu/quant.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/isa.h"
#include "backend/cpu/quant_driver.h"
#include "backend/cpu/quant_q4_block.h"
#include "backend/cpu/weight_format.h"


namespace looplm {

// ---------------------------------------------------------------- fp16
uint16_t fp32_to_fp16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  // NaN
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  // rounds to ≥ 65520: Inf
  if (ax < 0x38800000u) {  // below the smallest normal half: a subnormal (or zero), rounded to nearest even
    float a;
    std::memcpy(&a, &ax, 4);
    const float scaled = a * 16777216.0f;  // / 2^-24, the subnormal unit
    return (uint16_t)(sign | (uint32_t)std::nearbyint(scaled));
  }
  uint32_t m = ax + 0xc8000000u;  // rebias the exponent (127 -> 15)
  m += 0x0fffu + ((m >> 13) & 1u);  // round to nearest even at bit 13
  return (uint16_t)(sign | (m >> 13));
}

float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu;
  float f;
  if (e == 0) {
    f = std::ldexp((float)m, -24);
    if (sign) f = -f;
    return f;
  }
  const uint32_t bits = e == 31 ? sign | 0x7f800000u | (m << 13) : sign | ((e + 112) << 23) | (m << 13);
  std::memcpy(&f, &bits, 4);
  return f;
}

// ---------------------------------------------------------------- the scalar reference
namespace {
// Codes u = clamp(round(x / d), lo, hi) + offset of a block (n ≤ 32 values, the rest 0).
void block_codes(const float* x, int n, float d, float lo, float hi, float offset, uint8_t* u) {
  const float id = d != 0 ? 1.0f / d : 0.0f;
  for (int i = 0; i < kQBlock; ++i) {
    const float v = i < n ? std::nearbyint(x[i] * id) : 0.0f;
    u[i] = (uint8_t)(std::clamp(v, lo, hi) + offset);
  }
}
inline float block_amax(const float* x, int n) {
  float amax = 0;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  return amax;
}
// The value of largest magnitude, with its sign (q4_0's scale, llama.cpp's choice: it maps to −8 exactly).
float block_extreme(const float* x, int n) {
  float amax = 0, m = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      m = x[i];
    }
  return m;
}
}  // namespace

void quantize_block_q8_0_scaled(const float* x, int n, float d, uint8_t* u) { block_codes(x, n, d, -127, 127, 128, u); }
void quantize_block_q4_0_scaled(const float* x, int n, float d, uint8_t* u) { block_codes(x, n, d, -8, 7, 8, u); }

void quantize_block_q8_0(const float* x, int n, uint16_t* d, uint8_t* u) {
  const float s = block_amax(x, n) / 127.0f;
  *d = fp32_to_fp16(s);
  quantize_block_q8_0_scaled(x, n, s, u);
}

void quantize_block_q4_0(const float* x, int n, uint16_t* d, uint8_t* u) {
  const float s = block_extreme(x, n) / -8.0f;
  *d = fp32_to_fp16(s);
  quantize_block_q4_0_scaled(x, n, s, u);
}

// Per block: amax, scale, codes, sum (ISA-cloned: with SSE4.1 and up nearbyint is one instruction
// and the block vectorizes, instead of a libm call per value; the result is the same).
LOOPLM_ISA_CLONES static void quantize_blocks(const float* x, int K, int blocks, int8_t* q, float* dd, int32_t* sum) {
  for (int b = 0; b < blocks; ++b) {
    const int n = std::min(kQBlock, K - b * kQBlock);
    const float* xb = x + (int64_t)b * kQBlock;
    const float d = block_amax(xb, n) / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
    int32_t s = 0;
    for (int i = 0; i < n; ++i) {
      const int v = (int)std::nearbyint(xb[i] * id);
      q[(size_t)b * kQBlock + i] = (int8_t)v;
      s += v;
    }
    dd[b] = d;
    sum[b] = s;
  }
}

void quantize_activations(const float* x, int K, QuantizedRow& o) {
  o.blocks = (K + kQBlock - 1) / kQBlock;
  o.q.assign((size_t)o.blocks * kQBlock, 0);
  o.d.resize(o.blocks);
  o.sum.resize(o.blocks);
  quantize_blocks(x, K, o.blocks, o.q.data(), o.d.data(), o.sum.data());
}

namespace {

int64_t row_groups(int64_t R) { return (R + kQRows - 1) / kQRows; }
int64_t col_blocks(int64_t C) { return (C + kQBlock - 1) / kQBlock; }

// ---------------------------------------------------------------- packing
size_t q8_bytes(int64_t R, int64_t C) { return (size_t)(row_groups(R) * col_blocks(C)) * sizeof(BlockQ8_0x4); }
size_t q4_bytes(int64_t R, int64_t C) { return (size_t)(row_groups(R) * col_blocks(C)) * sizeof(BlockQ4_0x4); }

void q8_pack(const float* w, int64_t R, int64_t C, void* dst) {
  auto* B = static_cast<BlockQ8_0x4*>(dst);
  const int64_t nb = col_blocks(C);
#pragma omp parallel for if (R * C > (1 << 18))
  for (int64_t g = 0; g < row_groups(R); ++g)
    for (int64_t b = 0; b < nb; ++b) {
      BlockQ8_0x4& blk = B[g * nb + b];
      for (int r = 0; r < kQRows; ++r) {
        const int64_t row = g * kQRows + r;
        if (row < R) quantize_block_q8_0(w + row * C + b * kQBlock, (int)std::min<int64_t>(kQBlock, C - b * kQBlock), &blk.d[r], blk.qs[r]);
        else {
          blk.d[r] = 0;
          std::memset(blk.qs[r], 128, kQBlock);
        }
      }
    }
}

// Block by block (32 contiguous values per row: ISA-cloned, it vectorizes; the prefill path
// dequantizes 64-row panels with it at every long prompt).
LOOPLM_ISA_CLONES void q8_unpack(const void* p, int64_t R, int64_t C, float* dst) {
  const auto* B = static_cast<const BlockQ8_0x4*>(p);
  const int64_t nb = col_blocks(C);
  for (int64_t row = 0; row < R; ++row) {
    const int r = (int)(row % kQRows);
    const BlockQ8_0x4* g = B + (row / kQRows) * nb;
    for (int64_t b = 0; b < nb; ++b) {
      const float d = fp16_to_fp32(g[b].d[r]);
      const uint8_t* u = g[b].qs[r];
      float* o = dst + row * C + b * kQBlock;
      if ((b + 1) * kQBlock <= C) {
        for (int i = 0; i < kQBlock; ++i) o[i] = d * (float)((int)u[i] - 128);
      } else {
        for (int64_t i = 0; b * kQBlock + i < C; ++i) o[i] = d * (float)((int)u[i] - 128);
      }
    }
  }
}

void q4_pack(const float* w, int64_t R, int64_t C, void* dst) {
  auto* B = static_cast<BlockQ4_0x4*>(dst);
  const int64_t nb = col_blocks(C);
#pragma omp parallel for if (R * C > (1 << 18))
  for (int64_t g = 0; g < row_groups(R); ++g)
    for (int64_t b = 0; b < nb; ++b) {
      BlockQ4_0x4& blk = B[g * nb + b];
      for (int r = 0; r < kQRows; ++r) {
        const int64_t row = g * kQRows + r;
        uint8_t u[kQBlock];
        if (row < R) quantize_block_q4_0(w + row * C + b * kQBlock, (int)std::min<int64_t>(kQBlock, C - b * kQBlock), &blk.d[r], u);
        else {
          blk.d[r] = 0;
          std::fill(u, u + kQBlock, 8);
        }
        for (int i = 0; i < kQBlock / 2; ++i) blk.qs[r][i] = (uint8_t)(u[i] | (u[i + kQBlock / 2] << 4));
      }
    }
}

inline int q4_code(const BlockQ4_0x4& blk, int r, int i) {
  return i < kQBlock / 2 ? blk.qs[r][i] & 0x0f : blk.qs[r][i - kQBlock / 2] >> 4;
}

LOOPLM_ISA_CLONES void q4_unpack(const void* p, int64_t R, int64_t C, float* dst) {
  const auto* B = static_cast<const BlockQ4_0x4*>(p);
  const int64_t nb = col_blocks(C);
  constexpr int half = kQBlock / 2;
  for (int64_t row = 0; row < R; ++row) {
    const int r = (int)(row % kQRows);
    const BlockQ4_0x4* g = B + (row / kQRows) * nb;
    for (int64_t b = 0; b < nb; ++b) {
      const float d = fp16_to_fp32(g[b].d[r]);
      const uint8_t* q = g[b].qs[r];
      float* o = dst + row * C + b * kQBlock;
      if ((b + 1) * kQBlock <= C) {
        for (int i = 0; i < half; ++i) {
          o[i] = d * (float)((q[i] & 0x0f) - 8);
          o[i + half] = d * (float)((q[i] >> 4) - 8);
        }
      } else {
        for (int64_t i = 0; b * kQBlock + i < C; ++i) o[i] = d * (float)(q4_code(g[b], r, (int)i) - 8);
      }
    }
  }
}

// ---------------------------------------------------------------- the products of one row group
// Each kernel: out[n · 4 + r] = the group's row r · x[n] (the quantized activations), n < nx.
void group_q8_portable(const uint8_t* g, int, const QuantizedRow* const* x, int nx, float* out) {
  const auto* B = reinterpret_cast<const BlockQ8_0x4*>(g);
  for (int n = 0; n < nx; ++n) {
    float acc[kQRows] = {0, 0, 0, 0};
    for (int b = 0; b < x[n]->blocks; ++b)
      for (int r = 0; r < kQRows; ++r) {
        int32_t s = 0;
        for (int i = 0; i < kQBlock; ++i) s += (int32_t)B[b].qs[r][i] * x[n]->q[(size_t)b * kQBlock + i];
        acc[r] += fp16_to_fp32(B[b].d[r]) * x[n]->d[b] * (float)(s - 128 * x[n]->sum[b]);
      }
    std::copy(acc, acc + kQRows, out + n * kQRows);
  }
}

void group_q4_portable(const uint8_t* g, int, const QuantizedRow* const* x, int nx, float* out) {
  const auto* B = reinterpret_cast<const BlockQ4_0x4*>(g);
  for (int n = 0; n < nx; ++n) {
    float acc[kQRows] = {0, 0, 0, 0};
    for (int b = 0; b < x[n]->blocks; ++b)
      for (int r = 0; r < kQRows; ++r) {
        int32_t s = 0;
        for (int i = 0; i < kQBlock; ++i) s += q4_code(B[b], r, i) * x[n]->q[(size_t)b * kQBlock + i];
        acc[r] += fp16_to_fp32(B[b].d[r]) * x[n]->d[b] * (float)(s - 8 * x[n]->sum[b]);
      }
    std::copy(acc, acc + kQRows, out + n * kQRows);
  }
}

#ifdef LOOPLM_QUANT_X86
// AVX2: vpmaddubsw multiplies unsigned by signed bytes into saturating int16 pairs, so q8's codes
// go in as |q| with q's sign moved onto x (≤ 2·127² fits); q4's codes (≤ 15) go in directly.
template <int NX>
LOOPLM_AVX2_Q void q8_avx2(const BlockQ8_0x4* B, const QuantizedRow* const* x, float* out) {
  __m256 acc[NX][kQRows];
  for (int n = 0; n < NX; ++n)
    for (int r = 0; r < kQRows; ++r) acc[n][r] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8((char)0x80);
  for (int b = 0; b < x[0]->blocks; ++b) {
    __m256i W[kQRows], A[kQRows];  // q, |q|
    for (int r = 0; r < kQRows; ++r) {
      W[r] = _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)B[b].qs[r]), flip);
      A[r] = _mm256_abs_epi8(W[r]);
    }
    const __m128 dw = _mm_cvtph_ps(_mm_loadl_epi64((const __m128i*)B[b].d));
#pragma GCC unroll 4
    for (int n = 0; n < NX; ++n) {
      const __m256i X = _mm256_loadu_si256((const __m256i*)(x[n]->q.data() + (size_t)b * kQBlock));
      float s4[4];
      _mm_storeu_ps(s4, _mm_mul_ps(dw, _mm_set1_ps(x[n]->d[b])));
      for (int r = 0; r < kQRows; ++r) {
        const __m256i P = _mm256_maddubs_epi16(A[r], _mm256_sign_epi8(X, W[r]));
        acc[n][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(P, ones)), _mm256_set1_ps(s4[r]), acc[n][r]);
      }
    }
  }
  for (int n = 0; n < NX; ++n)
    for (int r = 0; r < kQRows; ++r) {
      float t[8];
      _mm256_storeu_ps(t, acc[n][r]);
      out[n * kQRows + r] = ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
    }
}
LOOPLM_AVX2_Q void group_q8_avx2(const uint8_t* g, int, const QuantizedRow* const* x, int nx, float* out) {
  LOOPLM_BY_INPUTS(q8_avx2, reinterpret_cast<const BlockQ8_0x4*>(g), x, nx, out)
}

template <int NX>
LOOPLM_AVX2_Q void q4_avx2(const BlockQ4_0x4* B, const QuantizedRow* const* x, float* out) {
  __m256 acc01[NX], acc23[NX];
  __m128 corr[NX];
  for (int n = 0; n < NX; ++n) acc01[n] = acc23[n] = _mm256_setzero_ps(), corr[n] = _mm_setzero_ps();
  for (int b = 0; b < x[0]->blocks; ++b) {
    const __m128 dw = _mm_cvtph_ps(_mm_loadl_epi64((const __m128i*)B[b].d));
    q4_block_avx2<NX, false>(B[b].qs[0], dw, dw, b, x, acc01, acc23, corr);
  }
  q4_reduce_avx2<NX>(acc01, acc23, corr, out);
}
LOOPLM_AVX2_Q void group_q4_avx2(const uint8_t* g, int, const QuantizedRow* const* x, int nx, float* out) {
  LOOPLM_BY_INPUTS(q4_avx2, reinterpret_cast<const BlockQ4_0x4*>(g), x, nx, out)
}

// (g++ 12 warns falsely about the intrinsics' undefined pass-through operands once they inline.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// AVX-512 VNNI: vpdpbusd sums 4 unsigned × signed byte products into each int32 lane; a 64-byte
// load covers two rows' blocks (q8; q4: quant_q4_block.h), against x broadcast to match.
template <int NX>
LOOPLM_VNNI_Q void q8_vnni(const BlockQ8_0x4* B, const QuantizedRow* const* x, float* out) {
  __m512 acc01[NX], acc23[NX];
  __m128 corr[NX];
  for (int n = 0; n < NX; ++n) acc01[n] = acc23[n] = _mm512_setzero_ps(), corr[n] = _mm_setzero_ps();
  const __m512i idx01 = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i idx23 = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2);
  const __m512i zero = _mm512_setzero_si512();
  for (int b = 0; b < x[0]->blocks; ++b) {
    const __m512i W01 = _mm512_loadu_si512(B[b].qs[0]), W23 = _mm512_loadu_si512(B[b].qs[2]);
    const __m128 dw = _mm_cvtph_ps(_mm_loadl_epi64((const __m128i*)B[b].d));
#pragma GCC unroll 4
    for (int n = 0; n < NX; ++n) {
      const __m512i X = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)(x[n]->q.data() + (size_t)b * kQBlock)));
      const __m128 s4 = _mm_mul_ps(dw, _mm_set1_ps(x[n]->d[b]));
      const __m512 S = _mm512_castps128_ps512(s4);
      acc01[n] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, W01, X)), _mm512_permutexvar_ps(idx01, S), acc01[n]);
      acc23[n] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, W23, X)), _mm512_permutexvar_ps(idx23, S), acc23[n]);
      corr[n] = _mm_fmadd_ps(s4, _mm_set1_ps(128.0f * (float)x[n]->sum[b]), corr[n]);
    }
  }
  for (int n = 0; n < NX; ++n) {
    float t[32], c[4];
    _mm512_storeu_ps(t, acc01[n]);
    _mm512_storeu_ps(t + 16, acc23[n]);
    _mm_storeu_ps(c, corr[n]);
    for (int r = 0; r < kQRows; ++r) {
      const float* v = t + 8 * r;
      out[n * kQRows + r] = (((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]))) - c[r];
    }
  }
}
LOOPLM_VNNI_Q void group_q8_vnni(const uint8_t* g, int, const QuantizedRow* const* x, int nx, float* out) {
  LOOPLM_BY_INPUTS(q8_vnni, reinterpret_cast<const BlockQ8_0x4*>(g), x, nx, out)
}

template <int NX>
LOOPLM_VNNI_Q void q4_vnni(const BlockQ4_0x4* B, const QuantizedRow* const* x, float* out) {
  __m512 acc[NX];
  __m128 corr[NX];
  for (int n = 0; n < NX; ++n) acc[n] = _mm512_setzero_ps(), corr[n] = _mm_setzero_ps();
  for (int b = 0; b < x[0]->blocks; ++b) {
    const __m128 dw = _mm_cvtph_ps(_mm_loadl_epi64((const __m128i*)B[b].d));
    q4_block_vnni<NX, false>(B[b].qs[0], dw, dw, b, x, acc, corr);
  }
  q4_reduce_vnni<NX>(acc, corr, out);
}
LOOPLM_VNNI_Q void group_q4_vnni(const uint8_t* g, int, const QuantizedRow* const* x, int nx, float* out) {
  LOOPLM_BY_INPUTS(q4_vnni, reinterpret_cast<const BlockQ4_0x4*>(g), x, nx, out)
}

#pragma GCC diagnostic pop
#else
constexpr GroupFn group_q8_avx2 = nullptr, group_q8_vnni = nullptr, group_q4_avx2 = nullptr, group_q4_vnni = nullptr;
#endif

}  // namespace

#ifdef LOOPLM_QUANT_X86
bool have_avx2_q() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return yes;
}
bool have_vnni_q() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vnni") && have_avx2_q();
  return yes;
}
#else
bool have_avx2_q() { return false; }
bool have_vnni_q() { return false; }
#endif

std::vector<GemvKernel> quant_kernels_available() {
  std::vector<GemvKernel> k = {GemvKernel::portable};
  if (have_avx2_q()) k.push_back(GemvKernel::avx2);
  if (have_vnni_q()) k.push_back(GemvKernel::avx512_vnni);
  return k;
}

GroupFn pick_group_kernel(GemvKernel k, GroupFn portable, GroupFn avx2, GroupFn vnni) {
  static const GemvKernel best = quant_kernels_available().back();
  if (k == GemvKernel::best) k = best;
  if (k == GemvKernel::avx512_vnni && vnni && have_vnni_q()) return vnni;
  if (k == GemvKernel::avx2 && avx2 && have_avx2_q()) return avx2;
  return portable;
}

// ---------------------------------------------------------------- the drivers (quant_driver.h)
void quant_gemv(int R, int C, const void* W, size_t group_bytes, const float* x, float* y, bool accumulate, GroupFn f) {
  static thread_local QuantizedRow xq;
  quantize_activations(x, C, xq);
  const QuantizedRow* xs[1] = {&xq};
  const auto* p = static_cast<const uint8_t*>(W);
  const int64_t G = row_groups(R);
#pragma omp parallel for schedule(static) if ((int64_t)R * C > (1 << 15))
  for (int64_t g = 0; g < G; ++g) {
    float o[kQRows];
    f(p + g * group_bytes, C, xs, 1, o);
    for (int r = 0; r < kQRows && g * kQRows + r < R; ++r) {
      float& t = y[g * kQRows + r];
      t = accumulate ? t + o[r] : o[r];
    }
  }
}

constexpr int kPanel = 64;  // rows per dequantized panel (many rows)
static_assert(kPanel % kQRows == 0);

void quant_gemm(int N, int R, int C, const void* W, size_t group_bytes, const float* x, float* y, float* scratch,
                GroupFn f, UnpackFn unpack) {
  const auto* p = static_cast<const uint8_t*>(W);
  if (N <= kFewRows) {
    static thread_local std::vector<QuantizedRow> xq;
    if ((int)xq.size() < N) xq.resize(N);
    const QuantizedRow* xs[kFewRows];
    for (int n = 0; n < N; ++n) {
      quantize_activations(x + (int64_t)n * C, C, xq[n]);
      xs[n] = &xq[n];
    }
    const int64_t G = row_groups(R);
    // Per group, every input row against its weights while they are in L1 (kGroupInputs at a time).
#pragma omp parallel for schedule(static) if ((int64_t)R * C * N > (1 << 15))
    for (int64_t g = 0; g < G; ++g)
      for (int n0 = 0; n0 < N; n0 += kGroupInputs) {
        const int nx = std::min(kGroupInputs, N - n0);
        float o[kGroupInputs * kQRows];
        f(p + g * group_bytes, C, xs + n0, nx, o);
        for (int j = 0; j < nx; ++j)
          for (int r = 0; r < kQRows && g * kQRows + r < R; ++r) y[(int64_t)(n0 + j) * R + g * kQRows + r] = o[j * kQRows + r];
      }
    return;
  }
  const int panels = (R + kPanel - 1) / kPanel;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < panels; ++i) {
    const int r0 = i * kPanel, n = std::min(kPanel, R - r0);
    float* w = scratch + (size_t)omp_get_thread_num() * kPanel * C;
    unpack(p + (int64_t)(r0 / kQRows) * group_bytes, n, C, w);  // a panel starts on a row group: a standalone [n, C] matrix
    gemm(false, true, N, n, C, 1.0f, x, C, w, C, 0.0f, y + r0, R);  // sequential inside a parallel region
  }
}
size_t quant_scratch(int64_t, int64_t C) { return (size_t)omp_get_max_threads() * kPanel * (size_t)C; }

namespace {

size_t q8_group_bytes(int C) { return (size_t)col_blocks(C) * sizeof(BlockQ8_0x4); }
size_t q4_group_bytes(int C) { return (size_t)col_blocks(C) * sizeof(BlockQ4_0x4); }
void q8_gemv(int R, int C, const void* p, const float* x, float* y, bool acc, GemvKernel k) {
  quant_gemv(R, C, p, q8_group_bytes(C), x, y, acc, pick_group_kernel(k, group_q8_portable, group_q8_avx2, group_q8_vnni));
}
void q8_gemm(int N, int R, int C, const void* p, const float* x, float* y, float* scratch) {
  quant_gemm(N, R, C, p, q8_group_bytes(C), x, y, scratch,
             pick_group_kernel(GemvKernel::best, group_q8_portable, group_q8_avx2, group_q8_vnni), q8_unpack);
}
void q4_gemv(int R, int C, const void* p, const float* x, float* y, bool acc, GemvKernel k) {
  quant_gemv(R, C, p, q4_group_bytes(C), x, y, acc, pick_group_kernel(k, group_q4_portable, group_q4_avx2, group_q4_vnni));
}
void q4_gemm(int N, int R, int C, const void* p, const float* x, float* y, float* scratch) {
  quant_gemm(N, R, C, p, q4_group_bytes(C), x, y, scratch,
             pick_group_kernel(GemvKernel::best, group_q4_portable, group_q4_avx2, group_q4_vnni), q4_unpack);
}

// ---------------------------------------------------------------- GPTQ's hooks: a grid is a block's scale
void q8_choose_grid(const float* x, int n, float* g) { *g = fp16_to_fp32(fp32_to_fp16(block_amax(x, n) / 127.0f)); }
void q4_choose_grid(const float* x, int n, float* g) { *g = fp16_to_fp32(fp32_to_fp16(block_extreme(x, n) / -8.0f)); }
float q8_snap(float x, const float* g, int) { return *g == 0 ? 0.0f : *g * std::clamp(std::nearbyint(x / *g), -127.0f, 127.0f); }
float q4_snap(float x, const float* g, int) { return *g == 0 ? 0.0f : *g * std::clamp(std::nearbyint(x / *g), -8.0f, 7.0f); }

template <class Block, bool Q4>
void pack_on_grids(const float* w, const float* scales, int64_t R, int64_t C, void* dst) {
  auto* B = static_cast<Block*>(dst);
  const int64_t nb = col_blocks(C);
  for (int64_t g = 0; g < row_groups(R); ++g)
    for (int64_t b = 0; b < nb; ++b) {
      Block& blk = B[g * nb + b];
      for (int r = 0; r < kQRows; ++r) {
        const int64_t row = g * kQRows + r;
        uint8_t u[kQBlock];
        const float d = row < R ? scales[row * nb + b] : 0.0f;
        blk.d[r] = fp32_to_fp16(d);
        const int n = row < R ? (int)std::min<int64_t>(kQBlock, C - b * kQBlock) : 0;
        const float* x = row < R ? w + row * C + b * kQBlock : nullptr;
        if (Q4) quantize_block_q4_0_scaled(x, n, d, u);
        else quantize_block_q8_0_scaled(x, n, d, u);
        if constexpr (Q4) {
          for (int i = 0; i < kQBlock / 2; ++i) blk.qs[r][i] = (uint8_t)(u[i] | (u[i + kQBlock / 2] << 4));
        } else {
          std::memcpy(blk.qs[r], u, kQBlock);
        }
      }
    }
}

}  // namespace

extern const WeightFormat kQ8_0 = {
    "q8_0", "int8 blocks of 32 with an fp16 scale (8.5 bits per weight; activations int8 per block in the products)",
    kQRows, kQBlock, q8_bytes, q8_pack, q8_unpack, q8_gemv, q8_gemm, quant_scratch, quant_kernels_available,
    kQBlock, 1, q8_choose_grid, q8_snap, pack_on_grids<BlockQ8_0x4, false>};
extern const WeightFormat kQ4_0 = {
    "q4_0", "4-bit blocks of 32 with an fp16 scale (4.5 bits per weight; activations int8 per block in the products)",
    kQRows, kQBlock, q4_bytes, q4_pack, q4_unpack, q4_gemv, q4_gemm, quant_scratch, quant_kernels_available,
    kQBlock, 1, q4_choose_grid, q4_snap, pack_on_grids<BlockQ4_0x4, true>};

}  // namespace looplm
