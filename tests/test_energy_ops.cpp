// The energy blocks' kernels (kernels_energy.h) and NRGPT's attention options: finite-difference
// checks in double on odd sizes (gradcheck_util.h), and the analytic energy gradients of NRGPT
// (docs/systems.md) — as the block computes them from these kernels — against finite differences
// of the energies.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gradcheck_util.h"
#include "ops/kernels_energy.h"

using namespace looplm;
using namespace looplm::test;

TEST(GradCheck, GeluDerivatives) {
  const int n = 45;
  Vec u = randn(n, 1, 2.0), v = randn(n, 2), G = randn(n, 3), y(n), du(n), dv(n);
  auto L = [&] { k::gelu_prime_mul_fwd(u.data(), v.data(), y.data(), n); return dotv(G, y); };
  L();
  k::gelu_prime_mul_bwd(u.data(), v.data(), G.data(), du.data(), false, dv.data(), false, n);
  fd_check("gelu_prime_mul du (GELU'')", u, du, L);
  fd_check("gelu_prime_mul dv", v, dv, L);
  auto L2 = [&] { k::gelu_gelu_prime_fwd(u.data(), y.data(), n); return dotv(G, y); };
  L2();
  k::gelu_gelu_prime_bwd(u.data(), G.data(), du.data(), false, n);
  fd_check("gelu_gelu_prime du", u, du, L2);
  // GELU′ itself is the derivative of GELU
  for (double x : {-3.1, -0.4, 0.0, 0.9, 2.7}) {
    const double h = 1e-6;
    const double num = (k::gelu_derivs(x + h).f - k::gelu_derivs(x - h).f) / (2 * h);
    EXPECT_NEAR(k::gelu_derivs(x).f1, num, 1e-8) << x;
  }
}

TEST(GradCheck, MatmulUntransposed) {
  const int N = 5, K = 7, M = 3;
  Vec x = randn(N * K, 4), W = randn(K * M, 5), G = randn(N * M, 6), y(N * M), dx(N * K), dW(K * M, 0.0);
  auto L = [&] { k::matmul_fwd(x.data(), W.data(), y.data(), N, K, M, 1.5); return dotv(G, y); };
  L();
  k::matmul_bwd(x.data(), W.data(), G.data(), dx.data(), false, dW.data(), N, K, M, 1.5);
  fd_check("matmul dx", x, dx, L);
  fd_check("matmul dW", W, dW, L);
}

TEST(GradCheck, MulRowAndHeadBlocks) {
  const int N = 6, C = 5, n = 3;
  Vec x = randn(N * C, 7), w = randn(C, 8), G = randn(N * C, 9), y(N * C), dx(N * C), dw(C, 0.0);
  auto L = [&] { k::mul_row_fwd(x.data(), w.data(), 0.3, y.data(), N, C); return dotv(G, y); };
  L();
  k::mul_row_bwd(x.data(), w.data(), 0.3, G.data(), dx.data(), false, dw.data(), N, C);
  fd_check("mul_row dx", x, dx, L);
  fd_check("mul_row dw", w, dw, L);
  // repeat_cols and sum_blocks are each other's adjoint
  Vec r(N * n * C), Gr = randn(N * n * C, 10), dxr(N * C);
  auto Lr = [&] { k::repeat_cols_fwd(x.data(), r.data(), N, C, n); return dotv(Gr, r); };
  Lr();
  k::sum_blocks_fwd(Gr.data(), dxr.data(), false, N, C, n);
  fd_check("repeat_cols dx", x, dxr, Lr);
  Vec s(N * C), dr(N * n * C);
  auto Ls = [&] { k::sum_blocks_fwd(Gr.data(), s.data(), false, N, C, n); return dotv(G, s); };
  Ls();
  k::repeat_cols_acc(G.data(), dr.data(), false, N, C, n);
  fd_check("sum_blocks dx", Gr, dr, Ls);
}

namespace {
void nrgpt_attention_check(bool strict, int T) {
  const int B = 2, H = 2, hd = 5, d = H * hd;
  Vec qkv = randn(B * T * 3 * d, 11, 0.7), G = randn(B * T * d, 12), y(B * T * d), lse(B * H * T);
  Vec scratch(64 * (2 * T * T + 4 * T * hd));
  auto L = [&] {
    k::attention_fwd(qkv.data(), y.data(), lse.data(), B, T, H, hd, nullptr, nullptr, scratch.data(), 1.0, strict);
    return dotv(G, y);
  };
  L();
  // The forward from the definition: query i over keys j ≤ i (strict: j < i; none: 0), scale 1.
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < T; ++i) {
        const double* q = &qkv[((size_t)b * T + i) * 3 * d + h * hd];
        const int n = strict ? i : i + 1;
        std::vector<double> s(n);
        double mx = -1e300, z = 0;
        for (int j = 0; j < n; ++j) {
          const double* kk = &qkv[((size_t)b * T + j) * 3 * d + d + h * hd];
          s[j] = 0;
          for (int c = 0; c < hd; ++c) s[j] += q[c] * kk[c];
          mx = std::max(mx, s[j]);
        }
        for (int j = 0; j < n; ++j) z += std::exp(s[j] - mx);
        EXPECT_NEAR(lse[((size_t)b * H + h) * T + i], n ? mx + std::log(z) : 0.0, 1e-12);
        for (int c = 0; c < hd; ++c) {
          double o = 0;
          for (int j = 0; j < n; ++j) o += std::exp(s[j] - mx) / z * qkv[((size_t)b * T + j) * 3 * d + 2 * d + h * hd + c];
          EXPECT_NEAR(y[((size_t)b * T + i) * d + h * hd + c], o, 1e-12);
        }
      }
  Vec dqkv(qkv.size());
  k::attention_bwd(qkv.data(), lse.data(), G.data(), dqkv.data(), false, B, T, H, hd, nullptr, nullptr, scratch.data(),
                   1.0, strict);
  // past a causal block, every 7th input (rows of 30): each difference is two O(T²) passes
  fd_check(strict ? "strict attention dqkv" : "attention (scale 1) dqkv", qkv, dqkv, L, T > k::kAttnBlock ? 7 : 1);
}
}  // namespace

TEST(GradCheck, AttentionScaleAndStrict) {
  nrgpt_attention_check(false, 7);
  nrgpt_attention_check(true, 7);
  nrgpt_attention_check(true, k::kAttnBlock + 3);  // strict across a causal block boundary
}

// docs/systems.md (NRGPT): the block's update is the negative gradient of the energies with respect
// to the (normalised) token state g — the attention energy's with respect to the query token only.
// The analytic forms, built from the kernels the block uses, against finite differences of the
// energies written out from their definitions.
namespace {
struct EnergyCase {
  int T = 6, d = 4, H = 2, f = 7;
  Vec g, Hm, W1, b1, W2, b2;
  EnergyCase() : g(randn(T * d, 21)), Hm(randn(H * d * d, 22, 0.5)), W1(randn(f * d, 23, 0.6)), b1(randn(f, 24, 0.3)),
                 W2(randn(d * f, 25, 0.6)), b2(randn(d, 26, 0.3)) {}
  // E_AT,i as a function of the query copy q (keys g_j fixed), strict or not.
  double e_at(const double* q, int i, bool strict) const {
    double e = 0;
    const int n = strict ? i : i + 1;
    if (n == 0) return 0;
    for (int h = 0; h < H; ++h) {
      std::vector<double> s(n);
      double mx = -1e300, z = 0;
      for (int j = 0; j < n; ++j) {
        s[j] = 0;  // q^T H_h g_j
        for (int a = 0; a < d; ++a)
          for (int c = 0; c < d; ++c) s[j] += q[a] * Hm[((size_t)h * d + a) * d + c] * g[(size_t)j * d + c];
        mx = std::max(mx, s[j]);
      }
      for (int j = 0; j < n; ++j) z += std::exp(s[j] - mx);
      e -= mx + std::log(z);
    }
    return e;
  }
  double e_ff(const double* x, bool ff2w) const {  // of one token state x [d]
    Vec u(f);
    for (int o = 0; o < f; ++o) {
      u[o] = b1[o];
      for (int c = 0; c < d; ++c) u[o] += W1[(size_t)o * d + c] * x[c];
    }
    double e = 0;
    if (!ff2w) {
      for (int o = 0; o < f; ++o) e -= k::gelu_derivs(u[o]).f * k::gelu_derivs(u[o]).f;
      return e;
    }
    for (int c = 0; c < d; ++c) {
      double m = b2[c];
      for (int o = 0; o < f; ++o) m += W2[(size_t)c * f + o] * k::gelu_derivs(u[o]).f;
      e -= x[c] * m;
    }
    return e;
  }
};
double fd(const std::function<double(const double*)>& E, const double* x0, int d, int c) {
  const double h = 1e-6;
  Vec x(x0, x0 + d);
  x[c] += h;
  const double p = E(x.data());
  x[c] -= 2 * h;
  return (p - E(x.data())) / (2 * h);
}
}  // namespace

TEST(EnergyGradients, AttentionUpdateIsTheQueryGradient) {
  EnergyCase ec;
  const int T = ec.T, d = ec.d, H = ec.H, hd = d;
  for (bool strict : {false, true}) {
    // qkv = [g repeated H times | H_h g | H_h g], the attention at scale 1, the heads summed
    Vec kh(T * H * d), qkv(T * 3 * H * d), y(T * H * d), lse(H * T), A(T * d);
    for (int t = 0; t < T; ++t)
      for (int r = 0; r < H * d; ++r) {
        double s = 0;
        for (int c = 0; c < d; ++c) s += ec.Hm[(size_t)r * d + c] * ec.g[(size_t)t * d + c];
        kh[(size_t)t * H * d + r] = s;
      }
    Vec rep(T * H * d);
    k::repeat_cols_fwd(ec.g.data(), rep.data(), T, d, H);
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < H * d; ++c) {
        qkv[(size_t)t * 3 * H * d + c] = rep[(size_t)t * H * d + c];
        qkv[(size_t)t * 3 * H * d + H * d + c] = kh[(size_t)t * H * d + c];
        qkv[(size_t)t * 3 * H * d + 2 * H * d + c] = kh[(size_t)t * H * d + c];
      }
    Vec scratch(64 * (2 * T * T + 4 * T * hd));
    k::attention_fwd(qkv.data(), y.data(), lse.data(), 1, T, H, hd, nullptr, nullptr, scratch.data(), 1.0, strict);
    k::sum_blocks_fwd(y.data(), A.data(), false, T, d, H);
    for (int i = 0; i < T; ++i) {
      // the lse the block reports as −E_AT
      double lsum = 0;
      for (int h = 0; h < H; ++h) lsum += lse[(size_t)h * T + i];
      EXPECT_NEAR(-lsum, ec.e_at(&ec.g[(size_t)i * d], i, strict), 1e-12);
      for (int c = 0; c < d; ++c) {
        const double num = fd([&](const double* q) { return ec.e_at(q, i, strict); }, &ec.g[(size_t)i * d], d, c);
        EXPECT_NEAR(A[(size_t)i * d + c], -num, 1e-7) << "token " << i << " strict " << strict;
      }
    }
  }
}

TEST(EnergyGradients, FeedForwardUpdatesAreTheEnergyGradients) {
  EnergyCase ec;
  const int T = ec.T, d = ec.d, f = ec.f;
  Vec u(T * f);
  for (int t = 0; t < T; ++t)
    for (int o = 0; o < f; ++o) {
      u[(size_t)t * f + o] = ec.b1[o];
      for (int c = 0; c < d; ++c) u[(size_t)t * f + o] += ec.W1[(size_t)o * d + c] * ec.g[(size_t)t * d + c];
    }
  // ff1: F = 2 W1ᵀ (GELU(u) ⊙ GELU′(u))
  Vec gg(T * f), F1(T * d);
  k::gelu_gelu_prime_fwd(u.data(), gg.data(), T * f);
  k::matmul_fwd(gg.data(), ec.W1.data(), F1.data(), T, f, d, 2.0);
  // ff2w: F = W2 GELU(u) + b2 + W1ᵀ (GELU′(u) ⊙ W2ᵀ g)
  Vec a(T * f), m(T * d), w2g(T * f), gp(T * f), t2(T * d);
  for (int i = 0; i < T * f; ++i) a[i] = k::gelu_derivs(u[i]).f;
  k::linear_fwd(a.data(), ec.W2.data(), ec.b2.data(), m.data(), T, f, d);
  k::matmul_fwd(ec.g.data(), ec.W2.data(), w2g.data(), T, d, f);
  k::gelu_prime_mul_fwd(u.data(), w2g.data(), gp.data(), T * f);
  k::matmul_fwd(gp.data(), ec.W1.data(), t2.data(), T, f, d);
  for (int i = 0; i < T; ++i)
    for (int c = 0; c < d; ++c) {
      const double* x = &ec.g[(size_t)i * d];
      const double n1 = fd([&](const double* q) { return ec.e_ff(q, false); }, x, d, c);
      const double n2 = fd([&](const double* q) { return ec.e_ff(q, true); }, x, d, c);
      EXPECT_NEAR(F1[(size_t)i * d + c], -n1, 1e-7) << "ff1";
      EXPECT_NEAR(m[(size_t)i * d + c] + t2[(size_t)i * d + c], -n2, 1e-7) << "ff2w";
    }
}

TEST(GradCheck, HeadLayoutsMulSoftplus) {
  const int N = 3, H = 2, a = 3, b = 4;
  Vec A = randn(N * H * a, 31), Bv = randn(N * b, 32), G = randn(N * H * (a + b), 33), Y(N * H * (a + b));
  Vec dA(A.size()), dB(Bv.size());
  auto L = [&] { k::head_concat_fwd(A.data(), Bv.data(), Y.data(), N, H, a, b); return dotv(G, Y); };
  L();
  k::head_concat_bwd(G.data(), dA.data(), false, dB.data(), false, N, H, a, b);
  fd_check("head_concat dA", A, dA, L);
  fd_check("head_concat dB", Bv, dB, L);
  const int w = a + b, c0 = 2, n = 4;
  Vec Z(N * H * n), Gz = randn(N * H * n, 34), dY(Y.size());
  Vec Yin = randn(N * H * w, 35);
  auto Ls = [&] { k::head_slice_fwd(Yin.data(), Z.data(), N, H, w, c0, n); return dotv(Gz, Z); };
  Ls();
  k::head_slice_bwd(Gz.data(), dY.data(), false, N, H, w, c0, n);
  fd_check("head_slice dY", Yin, dY, Ls);
  const int m = 23;
  Vec x = randn(m, 36, 3.0), y2 = randn(m, 37), Gm = randn(m, 38), o(m), dx(m), dy(m);
  auto Lm = [&] { k::mul_fwd(x.data(), y2.data(), o.data(), m); return dotv(Gm, o); };
  Lm();
  k::mul_bwd(x.data(), y2.data(), Gm.data(), dx.data(), false, dy.data(), false, m);
  fd_check("mul da", x, dx, Lm);
  fd_check("mul db", y2, dy, Lm);
  auto Lp = [&] { k::softplus_fwd(x.data(), o.data(), m); return dotv(Gm, o); };
  Lp();
  k::softplus_bwd(x.data(), Gm.data(), dx.data(), false, m);
  fd_check("softplus dx", x, dx, Lp);
  double p0 = std::log(std::expm1(1.0)), sp = 0;  // softplus⁻¹(1), the preconditioner's init
  k::softplus_fwd(&p0, &sp, 1);
  EXPECT_NEAR(sp, 1.0, 1e-15);
}
