#include "ops/attention_bf16.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/cpu/gemm_pairs_bf16.h"
#include "ops/kernels.h"

namespace looplm::k {

namespace {

// Query rows per block (even, so a block's pair rows are its own).
constexpr int kRowBlock = 48;
// Key columns per product call in the key-indexed products (dKᵀ, dVᵀ): each call sums only over
// the queries that see its first key.
constexpr int kKeyBlock = 64;

int round_even(int n) { return (n + 1) / 2 * 2; }
size_t padded(size_t n) { return (n + 31) / 32 * 32; }

// One thread's working memory, grow-only (the OpenMP pool's threads live as long as the process).
struct Work {
  std::vector<float> f32;
  std::vector<uint16_t> b16;
  float* take_f32(size_t n) { return grab(f32, fo, n); }
  uint16_t* take_b16(size_t n) { return grab(b16, bo, n); }
  void start(size_t nf, size_t nb) {
    if (f32.size() < nf) f32.resize(nf);
    if (b16.size() < nb) b16.resize(nb);
    fo = bo = 0;
  }

 private:
  size_t fo = 0, bo = 0;
  template <class V>
  static typename V::value_type* grab(V& v, size_t& at, size_t n) {
    n = padded(n);  // pieces start on multiples of 32 elements
    typename V::value_type* p = v.data() + at;
    at += n;
    return p;
  }
};
Work& thread_work() {
  thread_local Work w;
  return w;
}

// One call's sizes: the fused qkv rows (query heads per key/value head G, row stride ld) and the
// padded widths of the bf16 operands.
struct Shape {
  int Hkv, G, dq, dkv, ld, shift;
  float scale;
  int T2, hd2, ldk, ldh;  // T and hd rounded up to even; pair-packed widths over the keys and over hd
  Shape(int T, int H, int hd, int Hkv_, double scale_, bool strict)
      : Hkv(Hkv_ > 0 ? Hkv_ : H), G(H / Hkv), dq(H * hd), dkv(Hkv * hd), ld(dq + 2 * dkv), shift(strict ? 1 : 0),
        scale(scale_ > 0 ? (float)scale_ : 1.0f / std::sqrt((float)hd)), T2(round_even(T)), hd2(round_even(hd)),
        ldk(pairs_width(T)), ldh(pairs_width(hd)) {}
};

}  // namespace

void attention_fwd_bf16(const float* qkv, float* y, float* lse, int B, int T, int H, int hd, const float* cos_t,
                        const float* sin_t, double scale_, bool strict, int Hkv) {
  const Shape s(T, H, hd, Hkv, scale_, strict);
  const int G = s.G, dq = s.dq, dkv = s.dkv, ld = s.ld, shift = s.shift, ldv = s.ldh;
  const float scale = s.scale;
#pragma omp parallel for schedule(dynamic, 1)
  for (int bh = 0; bh < B * H; ++bh) {
    const int b = bh / H, h = bh % H;
    Work& w = thread_work();
    const size_t nf = 2 * padded((size_t)T * hd) + padded((size_t)kRowBlock * s.ldk);
    const size_t nb = padded((size_t)T * s.hd2) + padded((size_t)s.hd2 / 2 * 2 * s.ldk) +
                      padded((size_t)s.T2 / 2 * 2 * ldv) + padded((size_t)kRowBlock * s.T2);
    w.start(nf, nb);
    float* Qr = w.take_f32((size_t)T * hd);
    float* Kr = w.take_f32((size_t)T * hd);
    float* S = w.take_f32((size_t)kRowBlock * s.ldk);  // a block's scores, then probabilities
    uint16_t* Qb = w.take_b16((size_t)T * s.hd2);      // Q rows
    uint16_t* Kp = w.take_b16((size_t)s.hd2 / 2 * 2 * s.ldk);  // Kᵀ pair-packed: terms over channels, keys as columns
    uint16_t* Vp = w.take_b16((size_t)s.T2 / 2 * 2 * ldv);      // V pair-packed: terms over keys
    uint16_t* Pb = w.take_b16((size_t)kRowBlock * s.T2);       // a block's probabilities, rows

    const float* row = qkv + (int64_t)b * T * ld;
    const float* q = row + h * hd;
    const float* kk = row + dq + (h / G) * hd;
    const float* V = kk + dkv;
    int ldq = ld, ldk = ld;
    if (cos_t) {
      rope_fwd(q, ld, Qr, hd, cos_t, sin_t, T, hd);
      rope_fwd(kk, ld, Kr, hd, cos_t, sin_t, T, hd);
      q = Qr; kk = Kr; ldq = ldk = hd;
    }
    rows_bf16(T, hd, q, ldq, false, Qb, s.hd2);
    pack_pairs_bf16(hd, T, kk, ldk, true, Kp, s.ldk);
    pack_pairs_bf16(T, hd, V, ld, false, Vp, ldv);
    float* L = lse + (int64_t)bh * T;
    float* Y = y + (int64_t)b * T * dq + h * hd;
    for (int i0 = 0; i0 < T; i0 += kRowBlock) {
      const int i1 = std::min(T, i0 + kRowBlock), m = i1 - i0, keys = round_even(i1);
      gemm_pairs_bf16(m, i1, s.hd2, scale, Qb + (int64_t)i0 * s.hd2, s.hd2, Kp, s.ldk, false, S, s.ldk);
      for (int i = i0; i < i1; ++i) {
        float* sr = S + (int64_t)(i - i0) * s.ldk;
        uint16_t* pr = Pb + (int64_t)(i - i0) * s.T2;
        const int n = i + 1 - shift;  // visible keys
        L[i] = n > 0 ? softmax_row(sr, n) : 0.0f;
        round_row_bf16(sr, n, keys, pr);
      }
      gemm_pairs_bf16(m, hd, keys, 1.0f, Pb, s.T2, Vp, ldv, false, Y + (int64_t)i0 * dq, dq);
    }
  }
}

// dP = dO Vᵀ; dS = P ∘ (dP − rowsum(dP ∘ P)); dQ = scale dS K; dKᵀ = scale Qᵀ dS; dVᵀ = dOᵀ P.
// The key-indexed gradients are computed transposed (channels as rows, keys as columns) so that
// P and dS serve as pair-packed right operands (two query rows interleaved, built block by block
// as the rows are computed) instead of being transposed; dKᵀ and dVᵀ [hd, T] are summed over the
// group's query heads and transposed once at the end.
void attention_bwd_bf16(const float* qkv, const float* lse, const float* dy, float* dqkv, bool acc, int B, int T,
                        int H, int hd, const float* cos_t, const float* sin_t, double scale_, bool strict, int Hkv) {
  const Shape s(T, H, hd, Hkv, scale_, strict);
  const int G = s.G, dq = s.dq, dkv = s.dkv, ld = s.ld, shift = s.shift, ldh = s.ldh;
  const float scale = s.scale;
  Hkv = s.Hkv;
#pragma omp parallel for schedule(dynamic, 1)
  for (int bk = 0; bk < B * Hkv; ++bk) {
    const int b = bk / Hkv, kvh = bk % Hkv;
    Work& w = thread_work();
    const size_t th = padded((size_t)T * hd), keyed = padded((size_t)hd * s.ldk);
    const size_t nf = 3 * th + 2 * keyed + 2 * padded((size_t)kRowBlock * s.ldk);
    const size_t packed_keys = padded((size_t)s.hd2 / 2 * 2 * s.ldk), packed_hd = padded((size_t)s.T2 / 2 * 2 * ldh);
    const size_t nb = 2 * packed_keys + packed_hd + 2 * padded((size_t)T * s.hd2) + 2 * padded((size_t)hd * s.T2) +
                      2 * padded((size_t)s.T2 / 2 * 2 * s.ldk) + padded((size_t)kRowBlock * s.T2);
    w.start(nf, nb);
    float* Qr = w.take_f32((size_t)T * hd);
    float* Kr = w.take_f32((size_t)T * hd);
    float* dQr = w.take_f32((size_t)T * hd);
    float* dKt = w.take_f32((size_t)hd * s.ldk);  // dKᵀ [hd, T], summed over the group
    float* dVt = w.take_f32((size_t)hd * s.ldk);
    float* P = w.take_f32((size_t)kRowBlock * s.ldk);   // a block's scores, then probabilities
    float* dP = w.take_f32((size_t)kRowBlock * s.ldk);  // a block's dP, then dS
    uint16_t* Kp = w.take_b16(packed_keys);             // Kᵀ pair-packed (for the scores)
    uint16_t* Vt = w.take_b16(packed_keys);             // Vᵀ pair-packed (for dP)
    uint16_t* Kd = w.take_b16(packed_hd);               // K pair-packed over keys (for dQ)
    uint16_t* Qb = w.take_b16((size_t)T * s.hd2);       // Q rows
    uint16_t* dOb = w.take_b16((size_t)T * s.hd2);      // dO rows
    uint16_t* Qt = w.take_b16((size_t)hd * s.T2);       // Qᵀ rows (for dKᵀ)
    uint16_t* dOt = w.take_b16((size_t)hd * s.T2);      // dOᵀ rows (for dVᵀ)
    uint16_t* Pp = w.take_b16((size_t)s.T2 / 2 * 2 * s.ldk);   // P pair-packed over queries
    uint16_t* dSp = w.take_b16((size_t)s.T2 / 2 * 2 * s.ldk);  // dS pair-packed over queries
    uint16_t* dSb = w.take_b16((size_t)kRowBlock * s.T2);      // a block's dS rows (for dQ)

    const float* row = qkv + (int64_t)b * T * ld;
    float* drow = dqkv + (int64_t)b * T * ld;
    const float* kk = row + dq + kvh * hd;
    const float* V = kk + dkv;
    float* dK = drow + dq + kvh * hd;
    float* dV = dK + dkv;
    int ldk = ld;
    if (cos_t) {
      rope_fwd(kk, ld, Kr, hd, cos_t, sin_t, T, hd);
      kk = Kr; ldk = hd;
    }
    pack_pairs_bf16(hd, T, kk, ldk, true, Kp, s.ldk);
    pack_pairs_bf16(hd, T, V, ld, true, Vt, s.ldk);
    pack_pairs_bf16(T, hd, kk, ldk, false, Kd, ldh);
    for (int gi = 0; gi < G; ++gi) {
      const int h = kvh * G + gi;
      const float* q = row + h * hd;
      const float* dO = dy + (int64_t)b * T * dq + h * hd;
      float* dQ = drow + h * hd;
      int ldq = ld;
      if (cos_t) {
        rope_fwd(q, ld, Qr, hd, cos_t, sin_t, T, hd);
        q = Qr; ldq = hd;
      }
      float* gq = cos_t ? dQr : dQ;  // dQ in the rotated frame (un-rotated below) or in place
      const int ldg = cos_t ? hd : ld;
      const bool add_q = !cos_t && acc;
      rows_bf16(T, hd, q, ldq, false, Qb, s.hd2);
      rows_bf16(T, hd, dO, dq, false, dOb, s.hd2);
      rows_bf16(T, hd, q, ldq, true, Qt, s.T2);
      rows_bf16(T, hd, dO, dq, true, dOt, s.T2);
      const float* L = lse + ((int64_t)b * H + h) * T;
      for (int i0 = 0; i0 < T; i0 += kRowBlock) {
        const int i1 = std::min(T, i0 + kRowBlock), m = i1 - i0, keys = round_even(i1);
        gemm_pairs_bf16(m, i1, s.hd2, scale, Qb + (int64_t)i0 * s.hd2, s.hd2, Kp, s.ldk, false, P, s.ldk);
        gemm_pairs_bf16(m, i1, s.hd2, 1.0f, dOb + (int64_t)i0 * s.hd2, s.hd2, Vt, s.ldk, false, dP, s.ldk);
        // Two rows at a time, while they are in L1: P and dS of rows i, i + 1 (fp32), dS's rows in
        // bf16 (for dQ), and pair row i/2 of P and dS (zeros past each row's visible keys): the
        // right operands of dVᵀ and dKᵀ, whose key blocks read it up to the end of the key block
        // holding i1.
        const int cols = std::min(T, (i1 + kKeyBlock - 1) / kKeyBlock * kKeyBlock);
        for (int i = i0; i < i1; i += 2) {
          const int rows = std::min(2, i1 - i);
          int visible[2] = {0, 0};
          for (int r = 0; r < rows; ++r) {
            float* p = P + (int64_t)(i + r - i0) * s.ldk;
            float* g = dP + (int64_t)(i + r - i0) * s.ldk;
            const int n = visible[r] = std::max(i + r + 1 - shift, 0);
            if (n > 0) softmax_bwd_row(p, g, n, L[i + r]);
            round_row_bf16(g, n, keys, dSb + (int64_t)(i + r - i0) * s.T2);
          }
          const int64_t at = (int64_t)i / 2 * 2 * s.ldk;
          pack_pairs_bf16(rows, cols, P + (int64_t)(i - i0) * s.ldk, s.ldk, false, Pp + at, s.ldk, visible);
          pack_pairs_bf16(rows, cols, dP + (int64_t)(i - i0) * s.ldk, s.ldk, false, dSp + at, s.ldk, visible);
        }
        gemm_pairs_bf16(m, hd, keys, scale, dSb, s.T2, Kd, ldh, add_q, gq + (int64_t)i0 * ldg, ldg);
      }
      // Key block j0..: the queries that see it are i ≥ j0 (+ shift), from the pair row holding j0.
      for (int j0 = 0; j0 < T; j0 += kKeyBlock) {
        const int nj = std::min(kKeyBlock, T - j0), i_from = j0 / 2 * 2, terms = s.T2 - i_from;
        const int64_t at = (int64_t)i_from / 2 * 2 * s.ldk + 2 * j0;
        gemm_pairs_bf16(hd, nj, terms, 1.0f, dOt + i_from, s.T2, Pp + at, s.ldk, gi > 0, dVt + j0, s.ldk);
        gemm_pairs_bf16(hd, nj, terms, scale, Qt + i_from, s.T2, dSp + at, s.ldk, gi > 0, dKt + j0, s.ldk);
      }
      if (cos_t) rope_bwd(dQr, hd, dQ, ld, cos_t, sin_t, T, hd, acc);
    }
    // dK, dV from their transposes (through the inverse rotation for a rotated K).
    float* gk = cos_t ? Kr : dK;  // K's rotated copy is no longer needed: it holds dK's rotated rows
    const int ldgk = cos_t ? hd : ld;
    transpose_f32(hd, T, dKt, s.ldk, gk, ldgk, !cos_t && acc);
    transpose_f32(hd, T, dVt, s.ldk, dV, ld, acc);
    if (cos_t) rope_bwd(Kr, hd, dK, ld, cos_t, sin_t, T, hd, acc);
  }
}

}  // namespace looplm::k
