// Batch-1 decoding's matrix-vector products y = W x (W [N, K] row-major, fp32 or bf16).
// Memory-bound: every weight is read once per token, so the kernels stream four rows at a time
// (each load of x feeds four products) and split the rows between threads.
//
// Two implementations: AVX-512 intrinsics where the CPU has AVX-512F/BW (GCC's auto-vectoriser
// uses 256-bit vectors even in the AVX-512 clone and widens bf16 through extract/shuffle
// sequences; the hand-written loop does 32 bf16 weights per 64-byte load with one shift and one
// mask), and a portable ISA-cloned version for every other x86-64 CPU.
#include <omp.h>
#include "backend/cpu/cpu_features.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "backend/cpu/bf16.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/gemv_avx2.h"
#include "backend/cpu/isa.h"
#include "backend/cpu/parallel.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define LOOPLM_AVX512_GEMV 1
// GCC 12's own AVX-512 headers trip this warning (their _mm512_undefined_* placeholders in
// reductions and shifts); nothing in this file reads an uninitialised value.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace looplm {

// Σ a[i] b[i] with 16 independent partial sums (vectorises to one accumulator per 16 lanes).
LOOPLM_ISA_CLONES float dot(const float* a, const float* b, int n) {
  float acc[16] = {0};
  int i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) acc[l] += a[i + l] * b[i + l];
  float s = 0;
  for (int l = 0; l < 16; ++l) s += acc[l];
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

namespace {

// Portable: y[j] (+)= W[j,:] · x for rows [0, n), one row after another (a row-major matrix read as
// one sequential stream, as span_f32_avx512), each by the ISA-cloned dot.
void span_f32_portable(const float* W, int ldw, const float* x, int K, float* y, int n, bool acc) {
  for (int j = 0; j < n; ++j) {
    const float v = dot(W + (int64_t)j * ldw, x, K);
    y[j] = acc ? y[j] + v : v;
  }
}

// bf16 in the decode layout (bf16.h): per 4-row block, chunks of 4 × w consecutive weights.
LOOPLM_ISA_CLONES void span_bf16_portable(const uint16_t* W, const float* x, int K, float* y, int n, bool acc) {
  int j = 0;
  for (; j + kBf16Rows <= n; j += kBf16Rows) {
    const uint16_t* blk = W + (int64_t)j * K;
    float a[kBf16Rows][16] = {};
    float tail[kBf16Rows] = {};
    for (int c0 = 0; c0 < K; c0 += kBf16Cols) {
      const int w = std::min(kBf16Cols, K - c0);
      const uint16_t* chunk = blk + (int64_t)c0 * kBf16Rows;
      for (int r = 0; r < kBf16Rows; ++r) {
        const uint16_t* seg = chunk + r * w;
        if (w == kBf16Cols) {
          for (int l = 0; l < 16; ++l) a[r][l] += from_bf16(seg[l]) * x[c0 + l] + from_bf16(seg[16 + l]) * x[c0 + 16 + l];
        } else {
          for (int c = 0; c < w; ++c) tail[r] += from_bf16(seg[c]) * x[c0 + c];
        }
      }
    }
    for (int r = 0; r < kBf16Rows; ++r) {
      float s = tail[r];
      for (int l = 0; l < 16; ++l) s += a[r][l];
      y[j + r] = acc ? y[j + r] + s : s;
    }
  }
  for (; j < n; ++j) {  // the last R % 4 rows are plain
    const uint16_t* w = W + (int64_t)j * K;
    float s = 0;
    for (int i = 0; i < K; ++i) s += from_bf16(w[i]) * x[i];
    y[j] = acc ? y[j] + s : s;
  }
}

#ifdef LOOPLM_AVX512_GEMV
#define LOOPLM_AVX512 __attribute__((target("avx512f,avx512bw")))

LOOPLM_AVX512 inline void store_row(float* y, __m512 a, bool acc) {
  const float s = _mm512_reduce_add_ps(a);
  *y = acc ? *y + s : s;
}

// fp32: 16 columns per step, the K % 16 tail by a masked load, one 16-lane accumulator per row;
// RB rows side by side (RB streams a row apart, each load of x feeding RB products). Which access
// pattern streams memory fastest depends on the core (f32_rows_side_by_side below); every row's
// sum runs in the same order either way, so the outputs are bit-identical.
template <int RB>
LOOPLM_AVX512 void span_f32_avx512_by(const float* W, int ldw, const float* x, int K, float* y, int n, bool acc) {
  const int full = K / 16 * 16;
  const __mmask16 tail = (__mmask16)((1u << (K - full)) - 1);
  int j = 0;
  for (; j + RB <= n; j += RB) {
    const float* w = W + (int64_t)j * ldw;
    __m512 a[RB];
    for (int r = 0; r < RB; ++r) a[r] = _mm512_setzero_ps();
    for (int i = 0; i < full; i += 16) {
      const __m512 xv = _mm512_loadu_ps(x + i);
      for (int r = 0; r < RB; ++r) a[r] = _mm512_fmadd_ps(_mm512_loadu_ps(w + (int64_t)r * ldw + i), xv, a[r]);
    }
    if (tail) {
      const __m512 xv = _mm512_maskz_loadu_ps(tail, x + full);
      for (int r = 0; r < RB; ++r) a[r] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w + (int64_t)r * ldw + full), xv, a[r]);
    }
    for (int r = 0; r < RB; ++r) store_row(y + j + r, a[r], acc);
  }
  if constexpr (RB > 1)
    if (j < n) span_f32_avx512_by<1>(W + (int64_t)j * ldw, ldw, x, K, y + j, n - j, acc);
}

// One row after another reads a row-major matrix as one sequential stream; some cores read four
// rows side by side at far less than the stream's bandwidth, others a little faster. Zen 5 and
// later take four rows, other CPUs the sequential stream, the choice measured first (the
// measurements: bench/README.md, "Kernel decisions").
bool f32_rows_side_by_side() {
  return cpu_features().zen5_or_later;
}

LOOPLM_AVX512 void span_f32_avx512(const float* W, int ldw, const float* x, int K, float* y, int n, bool acc) {
  if (f32_rows_side_by_side()) return span_f32_avx512_by<4>(W, ldw, x, K, y, n, acc);
  span_f32_avx512_by<1>(W, ldw, x, K, y, n, acc);
}

// Sixteen short rows at a time (attention's scores: K = a head's width): each row's partial sums
// stay in their own register and the sixteen are reduced together by a transposing tree (45
// shuffles and adds per 16 rows where reducing each alone costs ~8 per row, more than its FMAs
// at K = 64). Requires K ≤ 128 for x to stay in registers. The rows are fp32 or bf16 (a bf16 KV
// cache, widened exactly as it is read); the rest past a multiple of 16 rows: fp32 by
// span_f32_avx512, bf16 one row at a time.
LOOPLM_AVX512 inline __m512 reduce16(__m512* a) {
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

LOOPLM_AVX512 inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
LOOPLM_AVX512 inline __m512 load16(const uint16_t* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)), 16));
}
LOOPLM_AVX512 inline __m512 load16(const int8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)p)));
}
LOOPLM_AVX512 inline __m512 load16(__mmask16 m, const float* p) { return _mm512_maskz_loadu_ps(m, p); }
LOOPLM_AVX512 inline __m512 load16(__mmask16 m, const int8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm512_castsi512_si128(_mm512_maskz_loadu_epi8((__mmask64)m, p))));
}
LOOPLM_AVX512 inline __m512 load16(__mmask16 m, const uint16_t* p) {
  const __m256i h = _mm512_castsi512_si256(_mm512_maskz_loadu_epi16((__mmask32)m, p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// One row's 16 lanes: the masked tail first, then the full chunks (x's chunks in xv, its tail in xt).
template <class E>
LOOPLM_AVX512 inline __m512 row_lanes(const E* w, const __m512* xv, __m512 xt, int steps, int full, __mmask16 tail) {
  __m512 a = tail ? _mm512_mul_ps(load16(tail, w + full), xt) : _mm512_setzero_ps();
  for (int i = 0; i < steps; ++i) a = _mm512_fmadd_ps(load16(w + 16 * i), xv[i], a);
  return a;
}

template <class E>
LOOPLM_AVX512 void dot_rows_avx512(int n, int K, const E* W, int ldw, const float* x, float* y) {
  const int full = K / 16 * 16, steps = full / 16;
  const __mmask16 tail = (__mmask16)((1u << (K - full)) - 1);
  __m512 xv[8];
  for (int i = 0; i < steps; ++i) xv[i] = _mm512_loadu_ps(x + 16 * i);
  const __m512 xt = _mm512_maskz_loadu_ps(tail, x + full);
  int j = 0;
  for (; j + 16 <= n; j += 16) {
    __m512 a[16];
    for (int r = 0; r < 16; ++r) a[r] = row_lanes(W + (int64_t)(j + r) * ldw, xv, xt, steps, full, tail);
    _mm512_storeu_ps(y + j, reduce16(a));
  }
  if constexpr (std::is_same_v<E, float>) {
    if (j < n) span_f32_avx512(W + (int64_t)j * ldw, ldw, x, K, y + j, n - j, false);
  } else {
    for (; j < n; ++j) y[j] = _mm512_reduce_add_ps(row_lanes(W + (int64_t)j * ldw, xv, xt, steps, full, tail));
  }
}

// A few input rows at once (batched decoding, fp32 weights): each block of RB weight rows is read
// once and multiplied with MG input rows; per (weight row, input row) the sums run in
// span_f32_avx512's order (one 16-lane accumulator, the masked tail, the same reduction), so each
// output is bit-identical to the matrix-vector product's.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
template <int RB, int MG>
LOOPLM_AVX512 void block_f32_rows(const float* w, int ldw, const float* X, int ldx, int K, float* Y, int ldy, int j,
                                  const float* next = nullptr, int next_rows = RB, bool to_l2 = false) {
  const int full = K / 16 * 16;
  const __mmask16 tail = (__mmask16)((1u << (K - full)) - 1);
  __m512 a[RB][MG];
  for (int r = 0; r < RB; ++r)
    for (int g = 0; g < MG; ++g) a[r][g] = _mm512_setzero_ps();
  for (int i = 0; i < full; i += 16) {
    if (next) {  // the next block's rows, one cache line each per step, while this one computes from L1
      if (to_l2)
        for (int r = 0; r < next_rows; ++r) _mm_prefetch(reinterpret_cast<const char*>(next + (int64_t)r * ldw + i), _MM_HINT_T1);
      else
        for (int r = 0; r < next_rows; ++r) _mm_prefetch(reinterpret_cast<const char*>(next + (int64_t)r * ldw + i), _MM_HINT_T0);
    }
    __m512 wv[RB];
    for (int r = 0; r < RB; ++r) wv[r] = _mm512_loadu_ps(w + (int64_t)r * ldw + i);
    for (int g = 0; g < MG; ++g) {
      const __m512 xv = _mm512_loadu_ps(X + (int64_t)g * ldx + i);
      for (int r = 0; r < RB; ++r) a[r][g] = _mm512_fmadd_ps(wv[r], xv, a[r][g]);
    }
  }
  if (tail)
    for (int g = 0; g < MG; ++g) {
      const __m512 xv = _mm512_maskz_loadu_ps(tail, X + (int64_t)g * ldx + full);
      for (int r = 0; r < RB; ++r) a[r][g] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w + r * ldw + full), xv, a[r][g]);
    }
  for (int g = 0; g < MG; ++g)
    for (int r = 0; r < RB; ++r) store_row(Y + (int64_t)g * ldy + j + r, a[r][g], false);
}
#pragma GCC diagnostic pop

// One weight row per sweep against up to 8 input rows (8 accumulators): one pass over the weights
// serves the whole batch; the last pass over a row (in L1 by then) fetches the next row. It takes the rows
// past a multiple of four in span_f32_rows4 (it once took every batched product, slower:
// span_f32_rows4's comment).
LOOPLM_AVX512 void span_f32_rows(int M, const float* W, int ldw, const float* X, int ldx, int K, float* Y, int ldy,
                                 int lo, int n) {
  for (int j = lo; j < lo + n; ++j) {
    const float* w = W + (int64_t)j * ldw;
    const float* next = j + 1 < lo + n ? w + ldw : nullptr;
    int m = 0;
    auto pass = [&](auto mg) {
      constexpr int MG = decltype(mg)::value;
      block_f32_rows<1, MG>(w, ldw, X + (int64_t)m * ldx, ldx, K, Y + (int64_t)m * ldy, ldy, j, m + MG >= M ? next : nullptr);
      m += MG;
    };
    while (M - m >= 8) pass(std::integral_constant<int, 8>{});
    if (M - m >= 4) pass(std::integral_constant<int, 4>{});
    if (M - m >= 2) pass(std::integral_constant<int, 2>{});
    if (M - m >= 1) pass(std::integral_constant<int, 1>{});
  }
}

// The same with four weight rows per sweep against up to 4 input rows (16 accumulators): 8 loads
// per 16 FMAs where one row against 8 inputs needs 9 per 8, the second pass over the block from L1.
// The passes share out the next block's rows and fetch them into L2 as they go (T0 from the last
// pass alone left the weights' stream waiting on memory between blocks). Every AVX-512 CPU takes
// this path with more than one input, including those where batch 1 keeps one row per sweep
// (f32_rows_side_by_side): it was faster on each CPU measured (bench/README.md, "Kernel decisions"). The N % 4 last
// rows go one at a time.
LOOPLM_AVX512 void span_f32_rows4(int M, const float* W, int ldw, const float* X, int ldx, int K, float* Y, int ldy,
                                  int lo, int n) {
  int j = lo;
  for (; j + 4 <= lo + n; j += 4) {
    const float* w = W + (int64_t)j * ldw;
    const float* next = j + 8 <= lo + n ? w + 4 * (int64_t)ldw : nullptr;
    const int passes = M / 4 + (M % 4 >= 2) + (M % 2);
    int m = 0, p = 0;
    auto pass = [&](auto mg) {  // pass p fetches its share of the next block's rows
      constexpr int MG = decltype(mg)::value;
      const int r0 = 4 * p / passes, r1 = 4 * (p + 1) / passes;
      block_f32_rows<4, MG>(w, ldw, X + (int64_t)m * ldx, ldx, K, Y + (int64_t)m * ldy, ldy, j,
                            next && r1 > r0 ? next + (int64_t)r0 * ldw : nullptr, r1 - r0, true);
      m += MG, ++p;
    };
    while (M - m >= 4) pass(std::integral_constant<int, 4>{});
    if (M - m >= 2) pass(std::integral_constant<int, 2>{});
    if (M - m >= 1) pass(std::integral_constant<int, 1>{});
  }
  if (j < lo + n) span_f32_rows(M, W, ldw, X, ldx, K, Y, ldy, j, lo + n - j);
}

// bf16 in the decode layout (bf16.h). One 64-byte load holds a row's 32 weights of a chunk; in
// 32-bit lane l, bits 0-15 are column 2l and bits 16-31 column 2l+1, so `w << 16` is the even
// columns as fp32 and `w & 0xffff0000` the odd ones (exact). x comes de-interleaved
// (xe = x[0::2], xo = x[1::2], zero-padded past K/2 by at least 16).
LOOPLM_AVX512 inline void fma_bf16(__m512i w, __m512 xe, __m512 xo, __m512& ae, __m512& ao) {
  ae = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(w, 16)), xe, ae);
  ao = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32((int)0xffff0000u))), xo, ao);
}

LOOPLM_AVX512 void span_bf16_avx512(const uint16_t* W, const float* xe, const float* xo, int K, float* y, int n,
                                    bool acc) {
  static_assert(kBf16Rows == 4 && kBf16Cols == 32, "the kernel is written for 4 x 32 chunks");
  const int full = K / 32 * 32, rem = K - full;
  const __mmask32 tail = rem ? (__mmask32)((1u << rem) - 1) : 0;
  int j = 0;
  for (; j + 4 <= n; j += 4) {
    const uint16_t* w = W + (int64_t)j * K;  // the block: one sequential stream of 4·K weights
    __m512 e0 = _mm512_setzero_ps(), o0 = e0, e1 = e0, o1 = e0, e2 = e0, o2 = e0, e3 = e0, o3 = e0;
    for (int i = 0; i < full; i += 32, w += 128) {
      const __m512 ve = _mm512_loadu_ps(xe + i / 2), vo = _mm512_loadu_ps(xo + i / 2);
      fma_bf16(_mm512_loadu_si512(w), ve, vo, e0, o0);
      fma_bf16(_mm512_loadu_si512(w + 32), ve, vo, e1, o1);
      fma_bf16(_mm512_loadu_si512(w + 64), ve, vo, e2, o2);
      fma_bf16(_mm512_loadu_si512(w + 96), ve, vo, e3, o3);
    }
    if (tail) {
      const __m512 ve = _mm512_loadu_ps(xe + full / 2), vo = _mm512_loadu_ps(xo + full / 2);
      fma_bf16(_mm512_maskz_loadu_epi16(tail, w), ve, vo, e0, o0);
      fma_bf16(_mm512_maskz_loadu_epi16(tail, w + rem), ve, vo, e1, o1);
      fma_bf16(_mm512_maskz_loadu_epi16(tail, w + 2 * rem), ve, vo, e2, o2);
      fma_bf16(_mm512_maskz_loadu_epi16(tail, w + 3 * rem), ve, vo, e3, o3);
    }
    store_row(y + j, _mm512_add_ps(e0, o0), acc);
    store_row(y + j + 1, _mm512_add_ps(e1, o1), acc);
    store_row(y + j + 2, _mm512_add_ps(e2, o2), acc);
    store_row(y + j + 3, _mm512_add_ps(e3, o3), acc);
  }
  for (; j < n; ++j) {  // the last R % 4 rows are plain
    const uint16_t* w = W + (int64_t)j * K;
    __m512 e = _mm512_setzero_ps(), o = e;
    for (int i = 0; i < full; i += 32)
      fma_bf16(_mm512_loadu_si512(w + i), _mm512_loadu_ps(xe + i / 2), _mm512_loadu_ps(xo + i / 2), e, o);
    if (tail)
      fma_bf16(_mm512_maskz_loadu_epi16(tail, w + full), _mm512_loadu_ps(xe + full / 2),
               _mm512_loadu_ps(xo + full / 2), e, o);
    store_row(y + j, _mm512_add_ps(e, o), acc);
  }
}

// With AVX512_BF16: vdpbf16ps multiplies 32 bf16 pairs and adds each pair's sum into 16 fp32
// lanes in one instruction. x must be bf16 too, so it goes in as two bf16 vectors, hi = bf16(x)
// and lo = bf16(x − hi), whose sum carries x to ~2^-16 relative (the weights' own rounding is
// 2^-9): two instructions per 32 weights instead of four, and no de-interleaving.
#define LOOPLM_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512bf16")))

LOOPLM_AVX512BF16 inline __m512 dp2(__m512 acc, __m512i w, __m512i xh, __m512i xl) {
  acc = _mm512_dpbf16_ps(acc, (__m512bh)w, (__m512bh)xh);
  return _mm512_dpbf16_ps(acc, (__m512bh)w, (__m512bh)xl);
}

LOOPLM_AVX512BF16 void span_bf16_dp(const uint16_t* W, const uint16_t* xh, const uint16_t* xl, int K, float* y, int n,
                                    bool acc) {
  const int full = K / 32 * 32, rem = K - full;
  const __mmask32 tail = rem ? (__mmask32)((1u << rem) - 1) : 0;
  int j = 0;
  for (; j + 4 <= n; j += 4) {
    const uint16_t* w = W + (int64_t)j * K;  // the block: one sequential stream of 4·K weights
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int i = 0; i < full; i += 32, w += 128) {
      const __m512i h = _mm512_loadu_si512(xh + i), l = _mm512_loadu_si512(xl + i);
      a0 = dp2(a0, _mm512_loadu_si512(w), h, l);
      a1 = dp2(a1, _mm512_loadu_si512(w + 32), h, l);
      a2 = dp2(a2, _mm512_loadu_si512(w + 64), h, l);
      a3 = dp2(a3, _mm512_loadu_si512(w + 96), h, l);
    }
    if (tail) {
      const __m512i h = _mm512_maskz_loadu_epi16(tail, xh + full), l = _mm512_maskz_loadu_epi16(tail, xl + full);
      a0 = dp2(a0, _mm512_maskz_loadu_epi16(tail, w), h, l);
      a1 = dp2(a1, _mm512_maskz_loadu_epi16(tail, w + rem), h, l);
      a2 = dp2(a2, _mm512_maskz_loadu_epi16(tail, w + 2 * rem), h, l);
      a3 = dp2(a3, _mm512_maskz_loadu_epi16(tail, w + 3 * rem), h, l);
    }
    store_row(y + j, a0, acc);
    store_row(y + j + 1, a1, acc);
    store_row(y + j + 2, a2, acc);
    store_row(y + j + 3, a3, acc);
  }
  for (; j < n; ++j) {  // the last R % 4 rows are plain
    const uint16_t* w = W + (int64_t)j * K;
    __m512 a = _mm512_setzero_ps();
    for (int i = 0; i < full; i += 32)
      a = dp2(a, _mm512_loadu_si512(w + i), _mm512_loadu_si512(xh + i), _mm512_loadu_si512(xl + i));
    if (tail)
      a = dp2(a, _mm512_maskz_loadu_epi16(tail, w + full), _mm512_maskz_loadu_epi16(tail, xh + full),
              _mm512_maskz_loadu_epi16(tail, xl + full));
    store_row(y + j, a, acc);
  }
}

// A few input rows at once (batched decoding): each block of 4 weight rows is read from memory
// once and multiplied, from L1, with every input row, MG at a time (4 × MG accumulators). Y[m, j]
// = W[j, :] · X[m, :] for m < M; XH, XL the rows' hi / lo bf16 halves, ldxp apart.
// (g++ 12 warns falsely that _mm512_reduce_add_ps reads an uninitialised __m256d when this inlines.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
template <int MG>
LOOPLM_AVX512BF16 void block_bf16_dp_rows(const uint16_t* w, const uint16_t* XH, const uint16_t* XL, int ldxp, int K,
                                          float* Y, int ldy, int j, const uint16_t* next = nullptr, int l0 = 0,
                                          int l1 = 4) {
  const int full = K / 32 * 32, rem = K - full;
  const __mmask32 tail = rem ? (__mmask32)((1u << rem) - 1) : 0;
  __m512 a[4][MG];
  for (int r = 0; r < 4; ++r)
    for (int g = 0; g < MG; ++g) a[r][g] = _mm512_setzero_ps();
  const uint16_t* wi = w;
  for (int i = 0; i < full; i += 32, wi += 128) {
    if (next)  // cache lines l0 .. l1 - 1 of the next block's 256 bytes of this step, into L2
      for (int l = l0; l < l1; ++l) _mm_prefetch(reinterpret_cast<const char*>(next + (wi - w) + 32 * l), _MM_HINT_T1);
    const __m512i w0 = _mm512_loadu_si512(wi), w1 = _mm512_loadu_si512(wi + 32), w2 = _mm512_loadu_si512(wi + 64),
                  w3 = _mm512_loadu_si512(wi + 96);
    for (int g = 0; g < MG; ++g) {
      const __m512i h = _mm512_loadu_si512(XH + (int64_t)g * ldxp + i), l = _mm512_loadu_si512(XL + (int64_t)g * ldxp + i);
      a[0][g] = dp2(a[0][g], w0, h, l);
      a[1][g] = dp2(a[1][g], w1, h, l);
      a[2][g] = dp2(a[2][g], w2, h, l);
      a[3][g] = dp2(a[3][g], w3, h, l);
    }
  }
  if (tail)
    for (int g = 0; g < MG; ++g) {
      const __m512i h = _mm512_maskz_loadu_epi16(tail, XH + (int64_t)g * ldxp + full),
                    l = _mm512_maskz_loadu_epi16(tail, XL + (int64_t)g * ldxp + full);
      for (int r = 0; r < 4; ++r) a[r][g] = dp2(a[r][g], _mm512_maskz_loadu_epi16(tail, wi + r * rem), h, l);
    }
  for (int g = 0; g < MG; ++g)
    for (int r = 0; r < 4; ++r) store_row(Y + (int64_t)g * ldy + j + r, a[r][g], false);
}
#pragma GCC diagnostic pop

LOOPLM_AVX512BF16 void span_bf16_dp_rows(int M, const uint16_t* W, const uint16_t* XH, const uint16_t* XL, int ldxp,
                                         int K, float* Y, int ldy, int lo, int n) {
  int j = lo;
  for (; j + 4 <= lo + n; j += 4) {
    const uint16_t* w = W + (int64_t)j * K;
    // The passes share out the next block's fetches into L2 (as span_f32_rows4; T0 from the last
    // pass alone was slower: bench/README.md, "Kernel decisions").
    const uint16_t* next = j + 8 <= lo + n ? w + 4 * (int64_t)K : nullptr;
    const int passes = M / 4 + M % 4;
    int m = 0, p = 0;
    for (; m + 4 <= M; m += 4, ++p)
      block_bf16_dp_rows<4>(w, XH + (int64_t)m * ldxp, XL + (int64_t)m * ldxp, ldxp, K, Y + (int64_t)m * ldy, ldy, j,
                            next, 4 * p / passes, 4 * (p + 1) / passes);
    for (; m < M; ++m, ++p)
      block_bf16_dp_rows<1>(w, XH + (int64_t)m * ldxp, XL + (int64_t)m * ldxp, ldxp, K, Y + (int64_t)m * ldy, ldy, j,
                            next, 4 * p / passes, 4 * (p + 1) / passes);
  }
  for (int m = 0; m < M && j < lo + n; ++m)  // the last rows (N % 4) are plain
    span_bf16_dp(W + (int64_t)j * K, XH + (int64_t)m * ldxp, XL + (int64_t)m * ldxp, K, Y + (int64_t)m * ldy + j,
                 lo + n - j, false);
}

bool have_avx512() {
  return cpu_features().avx512;
}
bool have_avx512_bf16() {
  return cpu_features().avx512 && cpu_features().avx512_bf16;
}
#else
bool have_avx512() { return false; }
bool have_avx512_bf16() { return false; }
#endif

// Run span(lo, count) over rows [0, N): one call for small products (waking the pool costs more
// than the work), else chunks of ~32 KB of weights balanced between the threads (parallel_balanced,
// backend/cpu/parallel.h). A chunk is a multiple of 16 rows, so every chunk's row blocks (4 rows, or
// 16 for short rows) start where one span over all rows would start them: the same bits.
template <class F>
void for_row_blocks(int N, int K, size_t elem_bytes, F span) {
  const int64_t rows = std::max<int64_t>(16, (int64_t)(kBalancedChunkBytes / ((size_t)K * elem_bytes)) / 16 * 16);
  parallel_balanced(N, rows, (int64_t)N * K > (1 << 15), [&](int64_t lo, int64_t n) { span((int)lo, (int)n); });
}

// x de-interleaved for the shift-and-mask bf16 kernels: xe = x[0::2] at X, xo = x[1::2] at X + half,
// each zero past ceil(K/2). half: ≥ ceil(K/2), a multiple of 16, with room for a tail chunk's 16.
inline int deinterleaved_half(int K) { return (K / 2 + 16) / 16 * 16; }
void deinterleave(const float* x, int K, float* X, int half) {
  std::fill(X, X + 2 * half, 0.0f);
  for (int i = 0; i < K; ++i) X[(i % 2) * half + i / 2] = x[i];
}

}  // namespace

void gemv_rows(int N, int K, const float* W, int ldw, const float* x, float* y, bool accumulate, GemvKernel kernel) {
  const bool wide = kernel == GemvKernel::best ? have_avx512()
                                               : kernel == GemvKernel::avx512 || kernel == GemvKernel::avx512_bf16;
  const bool avx2 = !wide && (kernel == GemvKernel::best || kernel == GemvKernel::avx2) && have_avx2_fma();
  for_row_blocks(N, K, sizeof(float), [&](int lo, int n) {
#ifdef LOOPLM_AVX512_GEMV
    if (wide) return span_f32_avx512(W + (int64_t)lo * ldw, ldw, x, K, y + lo, n, accumulate);
#endif
    if (avx2) return span_f32_avx2(W + (int64_t)lo * ldw, ldw, x, K, y + lo, n, accumulate);
    span_f32_portable(W + (int64_t)lo * ldw, ldw, x, K, y + lo, n, accumulate);
  });
}

bool gemv_rows_f32_avx512_by(int rows, int N, int K, const float* W, int ldw, const float* x, float* y, bool accumulate) {
#ifdef LOOPLM_AVX512_GEMV
  if (!have_avx512()) return false;
  if (rows == 4)
    span_f32_avx512_by<4>(W, ldw, x, K, y, N, accumulate);
  else
    span_f32_avx512_by<1>(W, ldw, x, K, y, N, accumulate);
  return true;
#else
  (void)rows, (void)N, (void)K, (void)W, (void)ldw, (void)x, (void)y, (void)accumulate;
  return false;
#endif
}

bool gemm_rows_f32_few_avx512_by(int rows, int M, int N, int K, const float* W, int ldw, const float* X, int ldx,
                                 float* Y, int ldy) {
#ifdef LOOPLM_AVX512_GEMV
  if (!have_avx512() || M < 1) return false;
  if (rows == 4)
    span_f32_rows4(M, W, ldw, X, ldx, K, Y, ldy, 0, N);
  else
    span_f32_rows(M, W, ldw, X, ldx, K, Y, ldy, 0, N);
  return true;
#else
  (void)rows, (void)M, (void)N, (void)K, (void)W, (void)ldw, (void)X, (void)ldx, (void)Y, (void)ldy;
  return false;
#endif
}

void dot_rows(int N, int K, const float* W, int ldw, const float* x, float* y) {
#ifdef LOOPLM_AVX512_GEMV
  if (have_avx512()) return K <= 128 ? dot_rows_avx512(N, K, W, ldw, x, y) : span_f32_avx512(W, ldw, x, K, y, N, false);
#endif
  if (have_avx2_fma()) return dot_rows_avx2(N, K, W, ldw, x, y);
  span_f32_portable(W, ldw, x, K, y, N, false);
}

// Portable bf16 / int8 rows: 16 lanes per row (each lane its own fp32 sum over every 16th column,
// then one fixed tree; ISA-cloned, the loops vectorize).
inline float widened(uint16_t v) { return from_bf16(v); }
inline float widened(int8_t v) { return (float)v; }
template <class E>
LOOPLM_ISA_CLONES static void dot_rows_narrow_portable(int N, int K, const E* W, int ldw, const float* x, float* y) {
  for (int j = 0; j < N; ++j) {
    const E* wj = W + (int64_t)j * ldw;
    float acc[16] = {0};
    int i0 = 0;
    for (; i0 + 16 <= K; i0 += 16)
      for (int l = 0; l < 16; ++l) acc[l] += x[i0 + l] * widened(wj[i0 + l]);
    for (int l = 0; i0 + l < K; ++l) acc[l] += x[i0 + l] * widened(wj[i0 + l]);
    for (int w = 8; w >= 1; w /= 2)
      for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
    y[j] = acc[0];
  }
}

template <class E>
static void dot_rows_narrow(int N, int K, const E* W, int ldw, const float* x, float* y) {
#ifdef LOOPLM_AVX512_GEMV
  if (have_avx512() && K <= 128) return dot_rows_avx512(N, K, W, ldw, x, y);
#endif
  if (have_avx2_fma()) return dot_rows_avx2(N, K, W, ldw, x, y);
  dot_rows_narrow_portable(N, K, W, ldw, x, y);
}
void dot_rows(int N, int K, const uint16_t* W, int ldw, const float* x, float* y) { dot_rows_narrow(N, K, W, ldw, x, y); }
void dot_rows(int N, int K, const int8_t* W, int ldw, const float* x, float* y) { dot_rows_narrow(N, K, W, ldw, x, y); }

std::vector<GemvKernel> gemv_kernels_available() {
  std::vector<GemvKernel> k = {GemvKernel::portable};
  if (have_avx2_fma()) k.push_back(GemvKernel::avx2);
  if (have_avx512()) k.push_back(GemvKernel::avx512);
  if (have_avx512_bf16()) k.push_back(GemvKernel::avx512_bf16);
  return k;
}

void gemv_rows_bf16(int N, int K, const uint16_t* W, const float* x, float* y, bool accumulate, GemvKernel kernel) {
  static const GemvKernel best = gemv_kernels_available().back();
  if (kernel == GemvKernel::best) kernel = best;
  // Per-thread buffers for x in the form the kernel wants; they only grow (no allocation on the
  // hot path after the first token) and are filled once, before the threads split the rows.
  static thread_local std::vector<float> xbuf;
#ifdef LOOPLM_AVX512_GEMV
  if (kernel == GemvKernel::avx512_bf16) {
    const int pad = (K + 31) / 32 * 32;
    if ((int)xbuf.size() < pad) xbuf.resize(pad);
    uint16_t* xh = reinterpret_cast<uint16_t*>(xbuf.data());
    uint16_t* xl = xh + pad;
    for (int i = 0; i < K; ++i) {
      xh[i] = to_bf16(x[i]);
      xl[i] = to_bf16(x[i] - from_bf16(xh[i]));
    }
    for_row_blocks(N, K, sizeof(uint16_t), [&](int lo, int n) { span_bf16_dp(W + (int64_t)lo * K, xh, xl, K, y + lo, n, accumulate); });
    return;
  }
#endif
  if (kernel == GemvKernel::avx512 || kernel == GemvKernel::avx2) {
    const int half = deinterleaved_half(K);
    if ((int)xbuf.size() < 2 * half) xbuf.resize(2 * half);
    float *xe = xbuf.data(), *xo = xe + half;
    deinterleave(x, K, xe, half);
#ifdef LOOPLM_AVX512_GEMV
    if (kernel == GemvKernel::avx512) {
      for_row_blocks(N, K, sizeof(uint16_t), [&](int lo, int n) { span_bf16_avx512(W + (int64_t)lo * K, xe, xo, K, y + lo, n, accumulate); });
      return;
    }
#endif
    for_row_blocks(N, K, sizeof(uint16_t), [&](int lo, int n) { span_bf16_avx2(W + (int64_t)lo * K, xe, half, K, y + lo, n, accumulate); });
    return;
  }
  for_row_blocks(N, K, sizeof(uint16_t), [&](int lo, int n) { span_bf16_portable(W + (int64_t)lo * K, x, K, y + lo, n, accumulate); });
}

bool gemm_rows_bf16_few(int M, int N, int K, const uint16_t* W, const float* X, int ldx, float* Y, int ldy) {
  if (M < 1) return false;
  // Only where the matrix-vector kernel it reproduces bit for bit is the one batch 1 runs.
  static const GemvKernel best = gemv_kernels_available().back();
  if (best == GemvKernel::avx2) {
    const int half = deinterleaved_half(K);
    static thread_local std::vector<float> xbuf;
    if ((int)xbuf.size() < 2 * M * half) xbuf.resize((size_t)2 * M * half);
    float* XD = xbuf.data();  // this thread's buffer: inside the parallel region `xbuf` names another's
    for (int m = 0; m < M; ++m) deinterleave(X + (int64_t)m * ldx, K, XD + (size_t)2 * m * half, half);
    for_row_blocks(N, K, sizeof(uint16_t), [&](int lo, int n) { span_bf16_avx2_rows(M, W, XD, 2 * half, half, K, Y, ldy, lo, n); });
    return true;
  }
#ifdef LOOPLM_AVX512_GEMV
  if (best != GemvKernel::avx512_bf16) return false;
  const int pad = (K + 31) / 32 * 32;
  static thread_local std::vector<uint16_t> xbuf;
  if ((int)xbuf.size() < 2 * M * pad) xbuf.resize((size_t)2 * M * pad);
  uint16_t* XH = xbuf.data();
  uint16_t* XL = XH + (size_t)M * pad;
  for (int m = 0; m < M; ++m)
    for (int i = 0; i < K; ++i) {
      const float x = X[(int64_t)m * ldx + i];
      XH[(size_t)m * pad + i] = to_bf16(x);
      XL[(size_t)m * pad + i] = to_bf16(x - from_bf16(XH[(size_t)m * pad + i]));
    }
  for_row_blocks(N, K, sizeof(uint16_t), [&](int lo, int n) { span_bf16_dp_rows(M, W, XH, XL, pad, K, Y, ldy, lo, n); });
  return true;
#else
  (void)M, (void)N, (void)K, (void)W, (void)X, (void)ldx, (void)Y, (void)ldy;
  return false;
#endif
}

bool gemm_rows_f32_few(int M, int N, int K, const float* W, int ldw, const float* X, int ldx, float* Y, int ldy) {
  if (M < 1) return false;
#ifdef LOOPLM_AVX512_GEMV
  if (have_avx512()) {
    for_row_blocks(N, K, sizeof(float), [&](int lo, int n) { span_f32_rows4(M, W, ldw, X, ldx, K, Y, ldy, lo, n); });
    return true;
  }
#endif
  if (!have_avx2_fma()) return false;
  for_row_blocks(N, K, sizeof(float), [&](int lo, int n) { span_f32_avx2_rows(M, W, ldw, X, ldx, K, Y, ldy, lo, n); });
  return true;
}

}  // namespace looplm
