// Kernels of the exit gate's training objectives (docs/systems.md, Learned exit gate), forward and
// backward side by side, templated on the scalar (float engine / double gradcheck,
// tests/test_loop_ops.cpp). Per-exit values are stored exit-major: X[r·N + n] is exit r + 1's value
// for token n (r = 0..R−1). `valid[n]` is 0 for a token without a target (never counted); means
// are over the valid tokens. Sums run over n in order on one thread: N·R values, a few thousand,
// so the result never depends on the thread count.
//
//   per-token cross-entropy    ℓ_n = lse(z_n) − z_n[y_n]
//   stage I                    p_r = λ_r ∏_{j<r} (1 − λ_j) (r < R), p_R = ∏_{j<R} (1 − λ_j)
//                              loss = mean_n Σ_r p_nr L_nr − β H, H = mean_n H(p_n) (token prior)
//                              or H(mean_n p_n) (batch prior)
//   stage II                   loss = mean_{n,r} [w softplus(z) + (1 − w) softplus(−z)]: the BCE of
//                              1 − λ = σ(−z) against the continue target w, on the gate's logit z
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/cpu/parallel.h"
#include "ops/kernels.h"
#include "ops/kernels_pointwise.h"

namespace looplm::k {

// logits [N, V] → ℓ [N] (0 where the target is < 0), lse [N] saved.
template <class T>
void token_xent_fwd(const T* logits, const int32_t* targets, T* lse, T* loss, int N, int V) {
  parallel_for<int>(N, (int64_t)N * V > kParallelMin, [&](int n) {
    const T* z = logits + (int64_t)n * V;
    lse[n] = row_logsumexp(z, V);
    loss[n] = targets[n] >= 0 ? lse[n] - z[targets[n]] : T(0);
  });
}
// dlogits_n = (softmax(z_n) − onehot(y_n)) · dℓ_n
template <class T>
void token_xent_bwd(const T* logits, const int32_t* targets, const T* lse, const T* dloss, T* dlogits, bool acc, int N,
                    int V) {
  parallel_for<int>(N, (int64_t)N * V > kParallelMin, [&](int n) {
    const T* z = logits + (int64_t)n * V;
    T* g = dlogits + (int64_t)n * V;
    const T w = targets[n] >= 0 ? dloss[n] : T(0);
    for (int v = 0; v < V; ++v) {
      T p = std::exp(z[v] - lse[n]) * w;
      if (v == targets[n]) p -= w;
      store(g + v, p, acc);
    }
  });
}

// The head and each token's cross-entropy fused, x [N, d] → ℓ [N] through logits x Wᵀ + b [N, V]
// made `chunk` rows at a time (0: head_chunk_rows) into `buf` [chunk, V] and recomputed in backward: an exit's loss keeps
// x and lse [N], never its [N, V] logits (op::head_token_loss gives `buf` back to the arena after
// each pass), so the exits' losses cost one chunk·V buffer at a time, not R·N·V floats.
inline int head_chunk_rows(int N, int V) { return std::max(1, std::min(N, (1 << 22) / std::max(V, 1))); }

template <class T>
void head_xent_fwd(const T* x, const T* W, const T* b, const int32_t* targets, T* lse, T* loss, int N, int d, int V,
                   T* buf, bool bf16, int chunk = 0) {
  const int C = chunk > 0 ? chunk : head_chunk_rows(N, V);
  for (int n0 = 0; n0 < N; n0 += C) {
    const int c = std::min(C, N - n0);
    linear_fwd(x + (int64_t)n0 * d, W, b, buf, c, d, V, bf16);
    token_xent_fwd(buf, targets + n0, lse + n0, loss + n0, c, V);
  }
}
// dx (overwrite or add), dW +=, db += for an upstream dℓ [N]; chunks in order, so the sums do not
// depend on the thread count.
template <class T>
void head_xent_bwd(const T* x, const T* W, const T* b, const int32_t* targets, const T* lse, const T* dloss, T* dx,
                   bool dx_acc, T* dW, T* db, int N, int d, int V, T* buf, bool bf16, int chunk = 0) {
  const int C = chunk > 0 ? chunk : head_chunk_rows(N, V);
  for (int n0 = 0; n0 < N; n0 += C) {
    const int c = std::min(C, N - n0);
    linear_fwd(x + (int64_t)n0 * d, W, b, buf, c, d, V, bf16);
    token_xent_bwd(buf, targets + n0, lse + n0, dloss + n0, buf, false, c, V);  // in place: each entry read, then written
    linear_bwd(x + (int64_t)n0 * d, W, buf, dx ? dx + (int64_t)n0 * d : nullptr, dx_acc, dW, db, c, d, V, bf16);
  }
}

// What the stage I forward measured (token means over the valid tokens).
struct ExitSummary {
  double expected_loss = 0;  // Σ_r p_r L_r
  double entropy = 0;        // H(p) per token
  double mean_step = 0;      // Σ_r r p_r
  int tokens = 0;            // valid tokens
};

template <class T>
inline T exit_log(T p) {  // log p, finite at p = 0 (a gate saturated in float)
  return std::log(std::max(p, T(1e-30)));
}

// The exit distribution p [R·N] from the gates λ [R·N] (row R−1 unused: the last step takes what is left).
template <class T>
void exit_distribution(const T* lam, int N, int R, T* p) {
  for (int n = 0; n < N; ++n) {
    T left = 1;
    for (int r = 0; r < R - 1; ++r) {
      p[(int64_t)r * N + n] = lam[(int64_t)r * N + n] * left;
      left *= 1 - lam[(int64_t)r * N + n];
    }
    p[(int64_t)(R - 1) * N + n] = left;
  }
}

// Stage I. Returns the loss; p [R·N] and pbar [R] (the mean distribution) are saved for backward.
template <class T>
double exit_objective_fwd(const T* L, const T* lam, const uint8_t* valid, int N, int R, bool batch_prior, T beta, T* p,
                          T* pbar, ExitSummary* s = nullptr) {
  exit_distribution(lam, N, R, p);
  ExitSummary sum;
  std::vector<double> mean(R, 0.0);
  for (int n = 0; n < N; ++n) {
    if (!valid[n]) continue;
    ++sum.tokens;
    for (int r = 0; r < R; ++r) {
      const T pr = p[(int64_t)r * N + n];
      sum.expected_loss += (double)(pr * L[(int64_t)r * N + n]);
      if (pr > 0) sum.entropy -= (double)(pr * std::log(pr));
      sum.mean_step += (double)(pr * T(r + 1));
      mean[r] += (double)pr;
    }
  }
  const double cnt = std::max(1, sum.tokens);
  sum.expected_loss /= cnt, sum.entropy /= cnt, sum.mean_step /= cnt;
  double H = sum.entropy;
  if (batch_prior) {
    H = 0;
    for (int r = 0; r < R; ++r) {
      pbar[r] = (T)(mean[r] / cnt);
      if (pbar[r] > 0) H -= (double)(pbar[r] * std::log(pbar[r]));
    }
  } else {
    for (int r = 0; r < R; ++r) pbar[r] = (T)(mean[r] / cnt);
  }
  if (s) *s = sum;
  return sum.tokens ? sum.expected_loss - (double)beta * H : 0.0;
}

// d loss / dL [R·N] and d loss / dλ [R·N] (row R−1: 0), times dloss. Through the distribution in
// reverse (no division by 1 − λ): with left_r = ∏_{j<r}(1 − λ_j) and G_r = ∂loss/∂p_r,
//   ∂/∂λ_r = left_r (G_r − g_left),  g_left ← G_r λ_r + g_left (1 − λ_r)  (from r = R−1 down).
template <class T>
void exit_objective_bwd(const T* L, const T* lam, const T* p, const T* pbar, const uint8_t* valid, int N, int R,
                        bool batch_prior, T beta, T dloss, T* dL, T* dlam) {
  int cnt = 0;
  for (int n = 0; n < N; ++n) cnt += valid[n] ? 1 : 0;
  const T w = cnt ? dloss / T(cnt) : T(0);
  std::vector<T> G(R), left(R);
  for (int n = 0; n < N; ++n) {
    if (!valid[n]) {
      for (int r = 0; r < R; ++r) dL[(int64_t)r * N + n] = 0, dlam[(int64_t)r * N + n] = 0;
      continue;
    }
    T l = 1;
    for (int r = 0; r < R; ++r) {
      const int64_t i = (int64_t)r * N + n;
      const T pr = p[i];
      left[r] = l;
      if (r < R - 1) l *= 1 - lam[i];
      dL[i] = w * pr;
      // −β H: ∂(−H)/∂p = log p + 1 (token: the token's own p; batch: p̄, and ∂p̄_r/∂p_nr = 1/cnt)
      G[r] = w * (L[i] + beta * (exit_log(batch_prior ? pbar[r] : pr) + T(1)));
    }
    T g_left = G[R - 1];
    dlam[(int64_t)(R - 1) * N + n] = 0;
    for (int r = R - 2; r >= 0; --r) {
      const int64_t i = (int64_t)r * N + n;
      dlam[i] = left[r] * (G[r] - g_left);
      g_left = G[r] * lam[i] + g_left * (1 - lam[i]);
    }
  }
}

template <class T>
inline T softplus_of(T x) {  // log(1 + eˣ), stable both ways
  return std::max(x, T(0)) + std::log1p(std::exp(-std::fabs(x)));
}

// Stage II: z, w [R·N]; returns the mean BCE over valid tokens and exits.
template <class T>
double exit_bce_fwd(const T* z, const T* w, const uint8_t* valid, int N, int R) {
  double s = 0;
  int cnt = 0;
  for (int n = 0; n < N; ++n) {
    if (!valid[n]) continue;
    ++cnt;
    for (int r = 0; r < R; ++r) {
      const int64_t i = (int64_t)r * N + n;
      s += (double)(w[i] * softplus_of(z[i]) + (1 - w[i]) * softplus_of(-z[i]));
    }
  }
  return cnt ? s / ((double)cnt * R) : 0.0;
}
// dz = (σ(z) − (1 − w)) · dloss / (cnt · R)
template <class T>
void exit_bce_bwd(const T* z, const T* w, const uint8_t* valid, int N, int R, T dloss, T* dz) {
  int cnt = 0;
  for (int n = 0; n < N; ++n) cnt += valid[n] ? 1 : 0;
  const T scale = cnt ? dloss / (T(cnt) * T(R)) : T(0);
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < N; ++n) {
      const int64_t i = (int64_t)r * N + n;
      dz[i] = valid[n] ? scale * (T(1) / (T(1) + std::exp(-z[i])) - (1 - w[i])) : T(0);
    }
}

}  // namespace looplm::k
