// Finite-difference checks in double precision for every op's backward kernel, on odd sizes.
// (gradcheck_util.h: L = sum of G times f(inputs), central differences, 1e-7 relative.)
// Also checks the accumulate flag (the second write adds) and the float kernels against double.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "backend/cpu/fastmath.h"
#include "backend/cpu/pointwise_f32.h"
#include "ops/kernels.h"
#include "ops/kernels_pointwise.h"
#include "model/rope.h"
#include "ops/ops.h"
#include "gradcheck_util.h"

using namespace looplm;
using namespace looplm::test;

TEST(GradCheck, Linear) {
  const int N = 7, in = 5, out = 9;
  Vec x = randn(N * in, 1), W = randn(out * in, 2), b = randn(out, 3), G = randn(N * out, 4), y(N * out);
  auto L = [&] { k::linear_fwd(x.data(), W.data(), b.data(), y.data(), N, in, out); return dotv(G, y); };
  Vec dx(N * in), dW(out * in, 0.0), db(out, 0.0);
  L();
  k::linear_bwd(x.data(), W.data(), G.data(), dx.data(), false, dW.data(), db.data(), N, in, out);
  fd_check("linear dx", x, dx, L);
  fd_check("linear dW", W, dW, L);
  fd_check("linear db", b, db, L);
  Vec dx2 = dx;  // accumulate flag adds
  k::linear_bwd(x.data(), W.data(), G.data(), dx2.data(), true, (double*)nullptr, (double*)nullptr, N, in, out);
  for (size_t i = 0; i < dx.size(); ++i) EXPECT_NEAR(dx2[i], 2 * dx[i], 1e-12);
}

TEST(GradCheck, EmbeddingWithPositions) {
  const int N = 10, d = 3, V = 6, T = 5;
  std::vector<int32_t> tok = {1, 5, 0, 1, 3, 3, 2, 1, 4, 0};
  Vec E = randn(V * d, 5), P = randn(T * d, 6), G = randn(N * d, 7), y(N * d);
  auto L = [&] { k::embedding_fwd(tok.data(), E.data(), P.data(), y.data(), N, d, T); return dotv(G, y); };
  Vec dE(V * d, 0.0), dP(T * d, 0.0);
  L();
  k::embedding_bwd(tok.data(), G.data(), dE.data(), dP.data(), N, d, T);
  fd_check("embedding dE", E, dE, L);
  fd_check("embedding dP", P, dP, L);
}

TEST(GradCheck, RmsNorm) {
  const int N = 2 * k::kRowChunk + 3, d = 11;  // three row chunks
  Vec x = randn(N * d, 8), w = randn(d, 9), G = randn(N * d, 10), y(N * d), r(N), part(64 * d);
  auto L = [&] { k::rmsnorm_fwd(x.data(), w.data(), y.data(), r.data(), N, d, 1e-5); return dotv(G, y); };
  Vec dx(N * d), dw(d, 0.0);
  L();
  k::rmsnorm_bwd(x.data(), w.data(), r.data(), G.data(), dx.data(), false, dw.data(), part.data(), N, d);
  fd_check("rmsnorm dx", x, dx, L);
  fd_check("rmsnorm dw", w, dw, L);
}

TEST(GradCheck, LayerNorm) {
  const int N = 2 * k::kRowChunk + 3, d = 13;
  Vec x = randn(N * d, 11), w = randn(d, 12), b = randn(d, 13), G = randn(N * d, 14), y(N * d), mu(N), r(N),
      part(64 * 2 * d);
  auto L = [&] { k::layernorm_fwd(x.data(), w.data(), b.data(), y.data(), mu.data(), r.data(), N, d, 1e-5); return dotv(G, y); };
  Vec dx(N * d), dw(d, 0.0), db(d, 0.0);
  L();
  k::layernorm_bwd(x.data(), w.data(), mu.data(), r.data(), G.data(), dx.data(), false, dw.data(), db.data(),
                   part.data(), N, d);
  fd_check("layernorm dx", x, dx, L);
  fd_check("layernorm dw", w, dw, L);
  fd_check("layernorm db", b, db, L);
}

TEST(GradCheck, Rope) {
  const int T = 5, hd = 6;
  RopeTable rt(T, hd, 10000.0);
  Vec x = randn(T * hd, 15), G = randn(T * hd, 16), y(T * hd);
  auto L = [&] { k::rope_fwd(x.data(), hd, y.data(), hd, rt.cos.data(), rt.sin.data(), T, hd); return dotv(G, y); };
  Vec dx(T * hd);
  L();
  k::rope_bwd(G.data(), hd, dx.data(), hd, rt.cos.data(), rt.sin.data(), T, hd, false);
  fd_check("rope dx", x, dx, L);
}

// Hkv < H: grouped-query attention (qkv [B*T, (H + 2 Hkv) hd]); the group's dK and dV gather
// every query head's part, so the accumulate flag (a second call adds) is checked there too.
void attention_check(bool rope, int B = 2, int T = 7, int H = 3, int hd = 4, int Hkv = 0, size_t every = 1) {
  if (Hkv == 0) Hkv = H;
  const int dq = H * hd, ld = (H + 2 * Hkv) * hd;
  RopeTable rt(T, hd, 10000.0);
  const float* cs = rope ? rt.cos.data() : nullptr;
  const float* sn = rope ? rt.sin.data() : nullptr;
  Vec qkv = randn(B * T * ld, 17), G = randn(B * T * dq, 18), y(B * T * dq), lse(B * H * T);
  Vec scratch(64 * (2 * T * T + 4 * T * hd));
  auto L = [&] {
    k::attention_fwd(qkv.data(), y.data(), lse.data(), B, T, H, hd, cs, sn, scratch.data(), 0, false, Hkv);
    return dotv(G, y);
  };
  L();
  Vec dqkv(qkv.size());
  k::attention_bwd(qkv.data(), lse.data(), G.data(), dqkv.data(), false, B, T, H, hd, cs, sn, scratch.data(), 0, false, Hkv);
  fd_check(rope ? "attention+rope dqkv" : "attention dqkv", qkv, dqkv, L, every);
  L();  // lse as the unperturbed input gives it (fd_check's last pass ran on a perturbed one)
  Vec twice = dqkv;
  k::attention_bwd(qkv.data(), lse.data(), G.data(), twice.data(), true, B, T, H, hd, cs, sn, scratch.data(), 0, false, Hkv);
  for (size_t i = 0; i < dqkv.size(); ++i) ASSERT_NEAR(twice[i], 2 * dqkv[i], 1e-12 * (1 + std::fabs(dqkv[i]))) << i;
}
TEST(GradCheck, Attention) { attention_check(false); }
TEST(GradCheck, AttentionRope) { attention_check(true); }
TEST(GradCheck, AttentionGroupedQuery) {
  attention_check(false, 2, 7, 4, 4, 2);
  attention_check(true, 2, 7, 4, 6, 2);
  attention_check(true, 1, 9, 3, 4, 1);  // multi-query: one key/value head for all
}
// T past two causal blocks (kAttnBlock = 64), ragged last block.
TEST(GradCheck, AttentionBlocks) {
  // every 7th input (rows of 12 and 16: each column, each row's share): the differences are O(T²) passes
  attention_check(false, 1, 2 * k::kAttnBlock + 3, 1, 4, 0, 7);
  attention_check(true, 1, k::kAttnBlock + 5, 2, 2, 0, 7);
  attention_check(true, 1, k::kAttnBlock + 5, 4, 2, 2, 7);
}

namespace {
// Naive causal attention in double, written from the definition (full masked score matrix, no
// blocks, no saved log-sum-exp): y = softmax(rope(q) rope(k)^T / √hd, causal) v, and its backward
// through the softmax Jacobian and the transposed rotation. qkv [B*T, 3d], head h at columns h*hd.
struct NaiveAttention {
  int B, T, H, hd;
  bool rope;
  RopeTable rt;
  NaiveAttention(int B_, int T_, int H_, int hd_, bool rope_) : B(B_), T(T_), H(H_), hd(hd_), rope(rope_), rt(T_, hd_, 10000.0) {}
  void rot(const double* x, int t, double* y, bool transpose) const {
    const int h = hd / 2;
    for (int i = 0; i < h; ++i) {
      const double c = rope ? rt.cos[(size_t)t * h + i] : 1.0, s = rope ? rt.sin[(size_t)t * h + i] : 0.0;
      const double a = x[i], b = x[i + h];
      y[i] = transpose ? a * c + b * s : a * c - b * s;
      y[i + h] = transpose ? -a * s + b * c : b * c + a * s;
    }
  }
  // y [B*T, d]; with dy also dqkv (overwritten).
  void run(const Vec& qkv, Vec& y, const Vec* dy = nullptr, Vec* dqkv = nullptr) const {
    const int d = H * hd, ld = 3 * d;
    const double scale = 1.0 / std::sqrt((double)hd);
    y.assign((size_t)B * T * d, 0.0);
    if (dqkv) dqkv->assign(qkv.size(), 0.0);
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h) {
        std::vector<Vec> q(T, Vec(hd)), k(T, Vec(hd)), v(T, Vec(hd));
        for (int t = 0; t < T; ++t) {
          const double* row = qkv.data() + (size_t)(b * T + t) * ld + h * hd;
          rot(row, t, q[t].data(), false);
          rot(row + d, t, k[t].data(), false);
          for (int i = 0; i < hd; ++i) v[t][i] = row[2 * d + i];
        }
        std::vector<Vec> P(T, Vec(T, 0.0));
        for (int t = 0; t < T; ++t) {
          double mx = -1e300;
          for (int u = 0; u <= t; ++u) {
            double sc = 0;
            for (int i = 0; i < hd; ++i) sc += q[t][i] * k[u][i];
            P[t][u] = sc * scale;
            mx = std::max(mx, P[t][u]);
          }
          double z = 0;
          for (int u = 0; u <= t; ++u) z += P[t][u] = std::exp(P[t][u] - mx);
          for (int u = 0; u <= t; ++u) P[t][u] /= z;
          double* yt = y.data() + (size_t)(b * T + t) * d + h * hd;
          for (int u = 0; u <= t; ++u)
            for (int i = 0; i < hd; ++i) yt[i] += P[t][u] * v[u][i];
        }
        if (!dy) continue;
        std::vector<Vec> dq(T, Vec(hd, 0.0)), dk(T, Vec(hd, 0.0)), dv(T, Vec(hd, 0.0));
        for (int t = 0; t < T; ++t) {
          const double* g = dy->data() + (size_t)(b * T + t) * d + h * hd;
          Vec dp(t + 1);
          double dot = 0;
          for (int u = 0; u <= t; ++u) {
            dp[u] = 0;
            for (int i = 0; i < hd; ++i) {
              dp[u] += g[i] * v[u][i];
              dv[u][i] += P[t][u] * g[i];
            }
            dot += P[t][u] * dp[u];
          }
          for (int u = 0; u <= t; ++u) {
            const double ds = P[t][u] * (dp[u] - dot) * scale;
            for (int i = 0; i < hd; ++i) {
              dq[t][i] += ds * k[u][i];
              dk[u][i] += ds * q[t][i];
            }
          }
        }
        for (int t = 0; t < T; ++t) {
          double* row = dqkv->data() + (size_t)(b * T + t) * ld + h * hd;
          rot(dq[t].data(), t, row, true);
          rot(dk[t].data(), t, row + d, true);
          for (int i = 0; i < hd; ++i) row[2 * d + i] = dv[t][i];
        }
      }
  }
};
}  // namespace

// The naive reference itself, by finite differences (small T: every input entry).
TEST(GradCheck, NaiveAttentionReference) {
  const int B = 1, T = 5, H = 2, hd = 4, d = H * hd;
  NaiveAttention na(B, T, H, hd, true);
  Vec qkv = randn(B * T * 3 * d, 40), G = randn(B * T * d, 41), y, dqkv;
  auto L = [&] { na.run(qkv, y); return dotv(G, y); };
  na.run(qkv, y, &G, &dqkv);
  fd_check("naive attention dqkv", qkv, dqkv, L);
}

// The blocked causal attention (query rows in blocks of kAttnBlock that only multiply the keys they
// see) for T well past the block size, ragged last block, against the naive reference: the double
// kernel to 1e-10 of the scale, the float engine op to 2e-5 (fp32 sums of ≤ 150 terms).
TEST(GradCheck, BlockedAttentionMatchesNaive) {
  for (bool rope : {false, true}) {
    const int B = 2, T = 2 * k::kAttnBlock + 22, H = 2, hd = 8, d = H * hd;
    NaiveAttention na(B, T, H, hd, rope);
    Vec qkv = randn(B * T * 3 * d, 42, 1.5), G = randn(B * T * d, 43), y_ref, dq_ref;
    na.run(qkv, y_ref, &G, &dq_ref);
    auto scale_of = [](const Vec& v) { double s = 1e-12; for (double x : v) s = std::max(s, std::fabs(x)); return s; };
    const double ys = scale_of(y_ref), gs = scale_of(dq_ref);

    RopeTable rt(T, hd, 10000.0);
    const float* cs = rope ? rt.cos.data() : nullptr;  // the kernels take float angles (as the engine's table)
    const float* sn = rope ? rt.sin.data() : nullptr;
    Vec y(B * T * d), lse(B * H * T), dqkv(qkv.size()), scratch(64 * (2 * T * T + 4 * T * hd));
    k::attention_fwd(qkv.data(), y.data(), lse.data(), B, T, H, hd, cs, sn, scratch.data());
    k::attention_bwd(qkv.data(), lse.data(), G.data(), dqkv.data(), false, B, T, H, hd, cs, sn, scratch.data());
    for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], y_ref[i], 1e-10 * ys) << "double y " << i;
    for (size_t i = 0; i < dqkv.size(); ++i) ASSERT_NEAR(dqkv[i], dq_ref[i], 1e-10 * gs) << "double dqkv " << i;

    Graph g;
    Node* x = g.node(B * T, 3 * d, true);
    for (size_t i = 0; i < qkv.size(); ++i) x->v[i] = (float)qkv[i];
    Node* yf = op::attention(g, x, B, T, H, rope ? rt.angles() : op::RopeAngles{});
    for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(yf->v[i], y_ref[i], 2e-5 * ys) << "float y " << i;
    bool acc = false;
    float* gy = g.grad_of(yf, acc);  // seed dy = G
    for (size_t i = 0; i < y.size(); ++i) gy[i] = (float)G[i];
    g.backward_seeded();  // the attention op's backward from dy = G
    for (size_t i = 0; i < qkv.size(); ++i) ASSERT_NEAR(x->g[i], dq_ref[i], 2e-5 * gs) << "float dqkv " << i;
  }
}

TEST(GradCheck, Gelu) {
  const int n = 33;
  Vec x = randn(n, 19, 2.0), G = randn(n, 20), y(n), dx(n);
  auto L = [&] { k::gelu_fwd(x.data(), y.data(), n); return dotv(G, y); };
  L();
  k::gelu_bwd(x.data(), G.data(), dx.data(), false, n);
  fd_check("gelu", x, dx, L);
}

TEST(GradCheck, SwiGLU) {
  const int N = 3, f = 7;
  Vec u = randn(N * 2 * f, 21, 2.0), G = randn(N * f, 22), y(N * f), du(N * 2 * f);
  auto L = [&] { k::swiglu_fwd(u.data(), y.data(), N, f); return dotv(G, y); };
  L();
  k::swiglu_bwd(u.data(), G.data(), du.data(), false, N, f);
  fd_check("swiglu", u, du, L);
}

TEST(GradCheck, Axpby) {
  const int n = 31;
  Vec a = randn(n, 23), b = randn(n, 24), G = randn(n, 25), y(n), da(n), db(n);
  auto L = [&] { k::axpby_fwd(0.7, a.data(), b.data(), y.data(), n); return dotv(G, y); };
  L();
  k::axpby_bwd(0.7, G.data(), da.data(), false, db.data(), false, n);
  fd_check("axpby da", a, da, L);
  fd_check("axpby db", b, db, L);
}

TEST(GradCheck, Concat) {
  const int N = 3, ca = 4, cb = 5;
  Vec a = randn(N * ca, 26), b = randn(N * cb, 27), G = randn(N * (ca + cb), 28), y(N * (ca + cb)), da(N * ca), db(N * cb);
  auto L = [&] { k::concat_fwd(a.data(), ca, b.data(), cb, y.data(), N); return dotv(G, y); };
  L();
  k::concat_bwd(G.data(), da.data(), false, ca, db.data(), false, cb, N);
  fd_check("concat da", a, da, L);
  fd_check("concat db", b, db, L);
}

TEST(GradCheck, SliceCols) {
  const int N = 3, C = 9, c0 = 2, n = 4;
  Vec x = randn(N * C, 31), G = randn(N * n, 32), y(N * n), dx(N * C, 7.0);
  auto L = [&] { k::slice_cols_fwd(x.data(), C, c0, n, y.data(), N); return dotv(G, y); };
  L();
  k::slice_cols_bwd(G.data(), dx.data(), false, C, c0, n, N);  // overwrite: the 7s must go
  fd_check("slice_cols dx", x, dx, L);
  Vec acc(N * C, 1.0);
  k::slice_cols_bwd(G.data(), acc.data(), true, C, c0, n, N);
  for (size_t i = 0; i < acc.size(); ++i) EXPECT_NEAR(acc[i], 1.0 + dx[i], 1e-15);
}

TEST(GradCheck, CrossEntropy) {
  const int N = 5, V = 7;
  Vec z = randn(N * V, 29, 2.0), lse(N), dz(N * V);
  std::vector<int32_t> t = {0, 6, 3, -1, 2};  // one ignored position
  auto L = [&] { return k::xent_fwd(z.data(), t.data(), lse.data(), N, V, nullptr); };
  L();
  k::xent_bwd(z.data(), t.data(), lse.data(), 1.0 / 4, dz.data(), false, N, V);
  fd_check("cross-entropy", z, dz, L);
}

// The float engine path agrees with the double kernels (attention with RoPE, the most involved).
TEST(GradCheck, FloatMatchesDouble) {
  const int B = 2, T = 9, H = 2, hd = 8, d = H * hd;
  RopeTable rt(T, hd, 10000.0);
  Vec qkv = randn(B * T * 3 * d, 30), y(B * T * d), lse(B * H * T), scratch(64 * (2 * T * T + 4 * T * hd));
  k::attention_fwd(qkv.data(), y.data(), lse.data(), B, T, H, hd, rt.cos.data(), rt.sin.data(), scratch.data());
  Graph g;
  Node* n = g.node(B * T, 3 * d, false);
  for (size_t i = 0; i < qkv.size(); ++i) n->v[i] = (float)qkv[i];
  Node* yf = op::attention(g, n, B, T, H, rt.angles());
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(yf->v[i], y[i], 1e-5);
}

// The float fast paths (fastmath.h, ISA-cloned) against the double reference kernels.
TEST(GradCheck, FloatGeluMatchesDouble) {
  const int n = 4001;
  std::vector<float> xf(n), yf(n), gf(n), dyf(n, 1.0f);
  Vec x(n), y(n), g(n), dy(n, 1.0);
  for (int i = 0; i < n; ++i) x[i] = xf[i] = -12.0f + 24.0f * i / (n - 1);
  k::gelu_fwd(xf.data(), yf.data(), n);  // float overload (pointwise_f32.cpp)
  k::gelu_fwd(x.data(), y.data(), n);    // double template
  k::gelu_bwd(xf.data(), dyf.data(), gf.data(), false, n);
  k::gelu_bwd(x.data(), dy.data(), g.data(), false, n);
  for (int i = 0; i < n; ++i) {
    // float rounding of the result (6e-8 relative) plus erf's < 2e-7 absolute error, times |x|
    EXPECT_NEAR(yf[i], y[i], 3e-7 * (1 + std::fabs(x[i]))) << x[i];
    EXPECT_NEAR(gf[i], g[i], 3e-7 * (1 + std::fabs(x[i]))) << x[i];
  }
  for (float v : {-80.0f, -10.0f, -1.0f, -1e-3f, 0.0f, 0.5f, 1.0f, 20.0f, 80.0f})
    EXPECT_NEAR(fm::exp(v) / std::exp((double)v), 1.0, 3e-7) << v;
}

// SwiGLU's float overload (fm::exp's σ) against the double template, forward and backward (both
// the = and the += form), on gates over [−30, 30] (σ saturating at both ends) in rows of 1, 17 and
// 100. Tolerance: float rounding of a few products (~4e-7 relative) plus fm::exp's 2 ulp, times
// the terms' magnitudes |g|·|up| and |dy|·(|up| + |g|·|up|).
TEST(GradCheck, FloatSwigluMatchesDouble) {
  for (int f : {1, 17, 100}) {
    const int N = 3;
    Vec u = randn(N * 2 * f, 50 + f, 1.0), dy = randn(N * f, 51 + f), y(N * f), du(N * 2 * f);
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < f; ++i) u[(size_t)n * 2 * f + i] = -30.0 + 60.0 * (n * f + i) / std::max(1, N * f - 1);
    auto fl = [](const Vec& v) { return std::vector<float>(v.begin(), v.end()); };
    std::vector<float> uf = fl(u), dyf = fl(dy), yf(N * f), duf(N * 2 * f), acc_f(N * 2 * f, 0.5f);
    Vec acc_d(N * 2 * f, 0.5);
    k::swiglu_fwd(u.data(), y.data(), N, f);  // double template
    k::swiglu_fwd(uf.data(), yf.data(), N, f);  // float overload (pointwise_f32.cpp)
    k::swiglu_bwd(u.data(), dy.data(), du.data(), false, N, f);
    k::swiglu_bwd(uf.data(), dyf.data(), duf.data(), false, N, f);
    k::swiglu_bwd(u.data(), dy.data(), acc_d.data(), true, N, f);
    k::swiglu_bwd(uf.data(), dyf.data(), acc_f.data(), true, N, f);
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < f; ++i) {
        const size_t gi = (size_t)n * 2 * f + i, ui = gi + f, yi = (size_t)n * f + i;
        const double g = std::fabs(u[gi]), up = std::fabs(u[ui]), d = std::fabs(dy[yi]);
        EXPECT_NEAR(yf[yi], y[yi], 1e-6 * (1 + g * up)) << "f " << f << " g " << u[gi];
        EXPECT_NEAR(duf[gi], du[gi], 1e-6 * (1 + d * up * (1 + g))) << "f " << f << " g " << u[gi];
        EXPECT_NEAR(duf[ui], du[ui], 1e-6 * (1 + d * g)) << "f " << f << " g " << u[gi];
        EXPECT_NEAR(acc_f[gi], acc_d[gi], 1e-6 * (1 + d * up * (1 + g))) << "f " << f;
        EXPECT_NEAR(acc_f[ui], acc_d[ui], 1e-6 * (1 + d * g)) << "f " << f;
      }
  }
}

// The float row kernels (softmax, its backward, LayerNorm, decode attention) against the double
// templates, on lengths around the 16-lane blocking (1, 15, 16, 17, 100). Tolerance 2e-6 of the
// scale: float rounding (6e-8) accumulated over ≤ 100-term sums, plus fm::exp's 2 ulp.
TEST(GradCheck, FloatRowKernelsMatchDouble) {
  for (int n : {1, 15, 16, 17, 100}) {
    Vec x = randn(n, 41 + n, 3.0), g = randn(n, 42 + n), w = randn(n, 43 + n), b = randn(n, 44 + n);
    auto f = [](const Vec& v) { return std::vector<float>(v.begin(), v.end()); };
    std::vector<float> xf = f(x), gf = f(g), wf = f(w), bf = f(b), yf(n), dxf(n, 0.5f), pwf(n, 0), pbf(n, 0);
    Vec y(n), dx(n, 0.5), pw(n, 0), pb(n, 0);
    // softmax forward and backward
    Vec s = x;
    std::vector<float> sf = xf;
    double lse = k::softmax_row(s.data(), n);
    float lsef = k::softmax_row(sf.data(), n);
    EXPECT_NEAR(lsef, lse, 2e-6 * (1 + std::fabs(lse))) << n;
    for (int j = 0; j < n; ++j) EXPECT_NEAR(sf[j], s[j], 2e-6) << n;
    Vec p = x, gd = g;
    std::vector<float> ppf = xf, gdf = gf;
    k::softmax_bwd_row(p.data(), gd.data(), n, lse);
    k::softmax_bwd_row(ppf.data(), gdf.data(), n, (float)lse);
    for (int j = 0; j < n; ++j) {
      EXPECT_NEAR(ppf[j], p[j], 2e-6) << n;
      EXPECT_NEAR(gdf[j], gd[j], 2e-5) << n;  // |g| ~ 3: scale of g - Σ p g
    }
    // LayerNorm row forward and backward (accumulating into dx)
    double mu, r;
    float muf, rf;
    k::layernorm_row_fwd(x.data(), w.data(), b.data(), y.data(), n, 1e-5, mu, r);
    k::layernorm_row_fwd(xf.data(), wf.data(), bf.data(), yf.data(), n, 1e-5, muf, rf);
    EXPECT_NEAR(muf, mu, 2e-6 * 3);
    EXPECT_NEAR(rf / r, 1.0, 2e-6 * (n == 1 ? 1e3 : 1));  // n = 1: var = 0, r = 1/sqrt(eps)
    for (int j = 0; j < n; ++j) EXPECT_NEAR(yf[j], y[j], 2e-5 * (1 + std::fabs(y[j]))) << n;
    if (n > 1) {
      k::layernorm_row_bwd(x.data(), w.data(), mu, r, g.data(), dx.data(), true, pw.data(), pb.data(), n);
      k::layernorm_row_bwd(xf.data(), wf.data(), muf, rf, gf.data(), dxf.data(), true, pwf.data(), pbf.data(), n);
      for (int j = 0; j < n; ++j) {
        EXPECT_NEAR(dxf[j], dx[j], 2e-5 * (1 + std::fabs(dx[j]))) << n;
        EXPECT_NEAR(pwf[j], pw[j], 2e-5 * (1 + std::fabs(pw[j]))) << n;
        EXPECT_NEAR(pbf[j], pb[j], 1e-6) << n;
      }
    }
  }
  // decode attention row: n keys, head dim 20 (not a multiple of 16), row stride 40
  const int n = 37, hd = 20, ld = 40;
  Vec q = randn(hd, 51), K = randn(n * ld, 52), V = randn(n * ld, 53);
  std::vector<float> qf(q.begin(), q.end()), Kf(K.begin(), K.end()), Vf(V.begin(), V.end()), sc(n), out(hd);
  const double scale = 1 / std::sqrt((double)hd);
  k::attend_cached_row(qf.data(), Kf.data(), Vf.data(), ld, n, hd, (float)scale, sc.data(), out.data());
  Vec sd(n);
  for (int j = 0; j < n; ++j) {
    double d = 0;
    for (int i = 0; i < hd; ++i) d += q[i] * K[j * ld + i];
    sd[j] = d * scale;
  }
  k::softmax_row(sd.data(), n);
  for (int i = 0; i < hd; ++i) {
    double o = 0;
    for (int j = 0; j < n; ++j) o += sd[j] * V[j * ld + i];
    EXPECT_NEAR(out[i], o, 1e-5) << i;
  }
}

// The fused gelu_linear op equals the composition linear(gelu(u)) in value and in every gradient.
TEST(GradCheck, FusedGeluLinearEqualsComposition) {
  const int N = 5, f = 12, out = 7;
  std::vector<float> uv(N * f), Wv(out * f), bv(out);
  Vec r = randn(N * f + out * f + out, 31);
  for (int i = 0; i < N * f; ++i) uv[i] = (float)r[i];
  for (int i = 0; i < out * f; ++i) Wv[i] = (float)r[N * f + i];
  for (int i = 0; i < out; ++i) bv[i] = (float)r[N * f + out * f + i];
  auto run = [&](bool fused, std::vector<float>& y, std::vector<float>& du, std::vector<float>& dW, std::vector<float>& db) {
    Graph g;
    std::vector<float> gW(out * f, 0.0f), gb(out, 0.0f);
    Node W{Wv.data(), gW.data(), out, f, true, true}, b{bv.data(), gb.data(), 1, out, true, true};
    Node* u = g.node(N, f, true);
    std::copy(uv.begin(), uv.end(), u->v);
    Node* yn = fused ? op::gelu_linear(g, u, &W, &b) : op::linear(g, op::gelu(g, u), &W, &b);
    y.assign(yn->v, yn->v + N * out);
    std::vector<int32_t> tgt(N, 1);
    Node* loss = op::cross_entropy(g, yn, tgt.data());
    g.backward(loss);
    du.assign(u->g, u->g + N * f);
    dW = gW;
    db = gb;
  };
  std::vector<float> y1, du1, dW1, db1, y2, du2, dW2, db2;
  run(true, y1, du1, dW1, db1);
  run(false, y2, du2, dW2, db2);
  for (size_t i = 0; i < y1.size(); ++i) EXPECT_NEAR(y1[i], y2[i], 1e-6);
  for (size_t i = 0; i < du1.size(); ++i) EXPECT_NEAR(du1[i], du2[i], 1e-7);
  for (size_t i = 0; i < dW1.size(); ++i) EXPECT_NEAR(dW1[i], dW2[i], 1e-7);
  for (size_t i = 0; i < db1.size(); ++i) EXPECT_NEAR(db1[i], db2[i], 1e-7);
}

// The batch-1 GEMV path (gemm with M = 1: 4-row groups, ragged tails, threaded above 2^15
// elements) against the double reference GEMM.
TEST(GradCheck, GemvMatchesReference) {
  for (auto [N, K] : {std::pair{13, 37}, std::pair{1030, 77}}) {
    Vec Wd = randn((size_t)N * K, 40), xd = randn(K, 41), yd(N);
    std::vector<float> W(Wd.begin(), Wd.end()), x(xd.begin(), xd.end()), y(N, 1.0f);
    gemm(false, true, 1, N, K, 1.0, xd.data(), K, Wd.data(), K, 0.0, yd.data(), N);
    gemm(false, true, 1, N, K, 1.0f, x.data(), K, W.data(), K, 1.0f, y.data(), N);  // accumulate onto 1
    for (int j = 0; j < N; ++j) EXPECT_NEAR(y[j], yd[j] + 1.0, 1e-5 * (1 + std::sqrt((double)K))) << N << "x" << K << " row " << j;
  }
}
