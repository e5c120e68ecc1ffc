// Graph-level ops: float forward now, backward recorded on the tape (graph.h has the contract).
// Each wraps a kernel pair from kernels.h / kernels_pointwise.h. Shapes: activations are 2-D
// [rows = B*T, cols]; weights [out, in].
#pragma once
#include <cstdint>
#include <vector>

#include "backend/cpu/weight_format.h"
#include "core/rng.h"
#include "ops/cache_ref.h"
#include "ops/graph.h"

namespace looplm {

namespace k {
struct ExitSummary;  // ops/kernels_exit.h
}

namespace op {

Node* linear(Graph& g, Node* x, Node* W, Node* b);                  // x W^T + b
// Forward only (inference): x W^T + b with W in an inference weight format (one row: the format's
// matrix-vector kernel; more: its GEMM).
Node* linear_packed(Graph& g, Node* x, const PackedMatrix& W, Node* b);
// tok_emb rows (+ pos_emb rows when P: row n = b·T_rows + t is at position at.at(b) + t)
Node* embedding(Graph& g, const int32_t* tokens, int N, Node* E, Node* P, int T_rows, const RowPlace& at = {});
Node* rmsnorm(Graph& g, Node* x, Node* w, double eps);
Node* layernorm(Graph& g, Node* x, Node* w, Node* b, double eps);
// RoPE angles: cos and sin [positions, hd/2], row p for position p (docs/systems.md); both null for none.
struct RopeAngles {
  const float* cos = nullptr;
  const float* sin = nullptr;
  int positions = 0;
  explicit operator bool() const { return cos != nullptr; }
};
struct AttnOptions {
  double scale = 0;        // of the scores; 0: 1/√hd
  bool strict = false;     // query i sees keys j < i (a row with none gives 0; NRGPT's option)
  float** lse = nullptr;   // if set: receives the saved log-sum-exp per (b, head, t), [B, H, T]
  int kv_heads = 0;        // key/value heads (grouped-query attention); 0: H
};
// Causal attention core on a fused qkv [B*T, (H + 2 Hkv) hd] -> [B*T, H hd], positions 0..T-1
// (kernels.h: the layout, and which key head a query head reads).
Node* attention(Graph& g, Node* qkv, int B, int T, int H, RopeAngles rope, const AttnOptions& o = {});
// Forward only (generation): writes batch row b's new keys (rotated) and values, positions
// at.at(b)..at.at(b)+T-1, into cache row at.row(b) (averaged in under the mean policy) and
// attends each new query over every cached position of its row up to its own.
Node* attention_cached(Graph& g, Node* qkv, int B, int T, int H, RopeAngles rope, const CacheRef& cache,
                       const RowPlace& at, const AttnOptions& o = {});
Node* gelu(Graph& g, Node* x);
// Fused linear(gelu(u), W, b) that stores only u: gelu(u) [N, f] lives in shared scratch and is
// recomputed in backward (saves 4d floats per token per MLP). Same result as the composition
// (tests/test_gradcheck.cpp).
Node* gelu_linear(Graph& g, Node* u, Node* W, Node* b);
Node* swiglu(Graph& g, Node* gate_up);                               // [N, 2f] -> [N, f]
Node* axpby(Graph& g, float alpha, Node* a, Node* b);                // α a + b
inline Node* add(Graph& g, Node* a, Node* b) { return axpby(g, 1.0f, a, b); }
Node* concat(Graph& g, Node* a, Node* b);                            // along columns
Node* slice_cols(Graph& g, Node* x, int c0, int n);                  // columns c0..c0+n-1
// ---- the loop rules' ops (ops_loop.cpp, kernels_loop.h)
Node* sigmoid(Graph& g, Node* x, float in_scale = 1.0f, float out_scale = 1.0f);  // o · σ(s · x)
Node* silu(Graph& g, Node* x);                                        // x σ(x)
Node* gate_mix(Graph& g, Node* gate, Node* a, Node* b);              // gate ⊙ a + (1 − gate) ⊙ b
// s · x + b: s a [1, 1] scalar (null: 1), b a [1, cols] row added to every row (null: none).
Node* scale_shift(Graph& g, Node* x, Node* s, Node* b);
Node* rms_normalize(Graph& g, Node* x, double eps);                  // x / √(mean(x²) + eps), no gain
// n streams Y [N, n·d]: x = Σ_s w_s Y_s with w [N, n]
Node* stream_mix(Graph& g, Node* Y, Node* w, int n);
// Y'_s = Σ_t H[s,t] Y_t + P_s x (full: H [N, n·n]) or H_s Y_s + P_s x (H [N, n]); P [N, n], x [N, d]
Node* stream_update(Graph& g, Node* Y, Node* H, Node* P, Node* x, int n, bool full);
// Each row of L [N, n·n] -> doubly stochastic by `iters` Sinkhorn–Knopp rounds on exp(L − max).
Node* sinkhorn(Graph& g, Node* L, int n, int iters);
// A constant [rows, cols] of N(0, std²) draws from `rng` (element i from counters 2⌊i/2⌋, +1: the
// same numbers whatever the thread count). No gradient.
Node* gaussian(Graph& g, int64_t rows, int64_t cols, double std, const Rng& rng);

// ---- the energy blocks' ops (ops_energy.cpp, kernels_energy.h)
Node* gelu_prime_mul(Graph& g, Node* u, Node* v);                    // GELU′(u) ⊙ v
Node* gelu_gelu_prime(Graph& g, Node* u);                            // GELU(u) ⊙ GELU′(u)
Node* matmul(Graph& g, Node* x, Node* W, float alpha = 1.0f);       // α x W, W [K, M] (untransposed)
Node* mul_row(Graph& g, Node* x, Node* w, float c = 1.0f);           // c · x ⊙ w, w one row
Node* repeat_cols(Graph& g, Node* x, int n);                         // [N, d] -> [N, n·d] = [x | ... | x]
Node* sum_blocks(Graph& g, Node* x, int n);                          // [N, n·d] -> [N, d] = Σ_s x_s
// [N, H·(a+b)], head k = [A_k | B]: A [N, H·a] per head, B [N, b] the same for every head
Node* head_concat(Graph& g, Node* A, Node* B, int H);
Node* head_slice(Graph& g, Node* Y, int H, int c0, int n);           // [N, H·n], head k = Y_k[c0, c0+n)
Node* mul(Graph& g, Node* a, Node* b);                               // a ⊙ b
Node* softplus(Graph& g, Node* x);                                   // log(1 + eˣ)
// RoPE on x [B*T, H·hd] (every head), row b·T + t at position at.at(b) + t (rotate-half, docs/systems.md)
Node* rope(Graph& g, Node* x, int B, int T, int H, RopeAngles ra, const RowPlace& at = {});

// Mean token cross-entropy, a [1, 1] node; targets < 0 are ignored.
Node* cross_entropy(Graph& g, Node* logits, const int32_t* targets);

// ---- the exit gate's training objectives (ops_exit.cpp, kernels_exit.h; docs/systems.md, Learned exit gate)
// Each token's cross-entropy [N, 1] (0 where the target is < 0).
Node* token_cross_entropy(Graph& g, Node* logits, const int32_t* targets);
// The same of the logits x Wᵀ + b (W [V, d], b [V] or null), which it never keeps: made a chunk of
// rows at a time and recomputed in backward (kernels_exit.h, head_xent_*), so an exit's loss costs
// no [N, V] activation. dW and db accumulate as a linear layer's.
Node* head_token_loss(Graph& g, Node* x, Node* W, Node* b, const int32_t* targets);
// Stage I over R exits: losses[r], gates[r] the [N, 1] loss and λ of exit r + 1 (gates[R − 1] is
// not read: the last exit takes what is left; may be null). Returns mean_n Σ_r p_r L_r − β H, H the
// token prior's mean entropy or the batch prior's entropy of the mean distribution (tokens with a
// target < 0 not counted). `summary` and `distribution` (the mean p, R values) receive the forward's
// measurements when given.
Node* exit_objective(Graph& g, Node* const* losses, Node* const* gates, int R, const int32_t* targets, bool batch_prior,
                     double beta, k::ExitSummary* summary = nullptr, std::vector<double>* distribution = nullptr);
// Stage II: the mean over tokens and exits of the BCE of 1 − λ_r = σ(−z_r) against the continue
// target w (exit-major [R·N], a constant); logits[r] the gate's logit z [N, 1] at exit r + 1.
Node* exit_gate_bce(Graph& g, Node* const* logits, const float* targets_w, int R, const int32_t* targets);

}  // namespace op
}  // namespace looplm
