// The `hyper` loop rule: Hyperloop, and mHC with hyper_res = sinkhorn (docs/systems.md). The state is
// n parallel residual streams Y [N, n·d] (stream s = columns s·d..s·d+d−1), each loop ℓ with its
// own hyper-connection maps:
//
//   Y      = [h_pre, …, h_pre]                                   init_state: n copies
//   z      = flatten(Y) / rms(flatten(Y))                         (n·d, no gain, eps 1e-20)
//   H_pre  = σ(α_pre,ℓ · φ_pre,ℓ(z) + b_pre,ℓ)                    [n]
//   x      = core(Σ_s H_pre[s] Y_s) + loop_emb[ℓ]
//   H_post = 2 σ(α_post,ℓ · φ_post,ℓ(z) + b_post,ℓ)               [n]
//   H_res  = σ(α_res,ℓ · φ_res,ℓ(z) + b_res,ℓ)                    [n]   (diag: one gate per stream)
//          | Sinkhorn(α_res,ℓ · φ_res,ℓ(z) + b_res,ℓ)             [n×n] (mHC: doubly stochastic)
//   Y_s    = Σ_t H_res[s,t] Y_t + H_post[s] x                     (diag: H_res[s] Y_s + H_post[s] x)
//   h      = mean_s Y_s                                           readout
//
// ℓ = min(r, R) − 1: loops beyond the trained R reuse the last loop's maps and embedding.
// Init (docs/systems.md, Hyperloop): φ weights U(±1/√(n·d)) (PyTorch's Linear default), α = 0.01,
// b_pre = 1/n, b_res = 1, b_post = 0 (so H_pre ≈ σ(1/n), H_res ≈ σ(1), H_post ≈ 1); loop_emb
// N(0, init_std). mHC's b_res (the paper is silent): 1 on the diagonal and 0 off it, the diagonal
// rule's bias on its diagonal; at init H_res is then the doubly stochastic
// (e − 1)/(e + n − 1) I + 1/(e + n − 1) 11ᵀ.
//
// The three φ of a loop are one matrix [n + n_res + n, n·d] (their weights are registered back to
// back), so a loop step makes one GEMM for all its maps. Diagnostics per loop step: "hyper.pre",
// "hyper.post" (means of H_pre, H_post) and "hyper.res" (mean of H_res; for sinkhorn the mean of
// its diagonal, the weight each stream keeps of itself — every entry's mean is 1/n by construction).
#include <cmath>

#include "model/components.h"

namespace looplm {

namespace {

class HyperRule : public LoopRule {
 public:
  HyperRule(ParamStore& ps, const Config& c)
      : n_((int)c.get_int("hyper_streams")),
        d_(c.d_model),
        R_(c.R),
        full_(c.get_string("hyper_res") == "sinkhorn"),
        iters_((int)c.get_int("sinkhorn_iters")) {
    const int64_t n = n_, nd = (int64_t)n_ * d_, nres = full_ ? n * n : n;
    const Init phi = Init::uniform(1.0 / std::sqrt((double)nd));
    for (int l = 0; l < R_; ++l) {
      const std::string p = "loop." + std::to_string(l);
      Loop L;
      L.w_pre = ps.add(p + ".pre.weight", {n, nd}, phi);
      ps.add(p + ".res.weight", {nres, nd}, phi);
      L.w_post = ps.add(p + ".post.weight", {n, nd}, phi);
      for (int m = 0; m < 3; ++m) L.alpha[m] = ps.add(p + "." + kMap[m] + ".alpha", {1}, Init::constant(0.01));
      L.bias[0] = ps.add(p + ".pre.bias", {n}, Init::constant(1.0 / n_));
      L.bias[1] = full_ ? ps.add(p + ".res.bias", {n, n}, Init::eye(1.0)) : ps.add(p + ".res.bias", {n}, Init::ones());
      L.bias[2] = ps.add(p + ".post.bias", {n}, Init::zeros());
      loops_.push_back(L);
    }
    emb_ = ps.add("loop.emb.weight", {(int64_t)R_, (int64_t)d_}, Init::normal(c.init_std));
  }

  void bind(ParamStore& ps) override {
    const int64_t nd = (int64_t)n_ * d_, rows = 2 * n_ + (full_ ? n_ * n_ : n_);
    for (int l = 0; l < R_; ++l) {
      Loop& L = loops_[l];
      L.W = ps.matrix(L.w_pre, L.w_post, rows, nd);
      for (int m = 0; m < 3; ++m) {
        L.a[m] = ps.view(L.alpha[m]);
        L.b[m] = ps.view(L.bias[m], L.bias[m], 1, m == 1 && full_ ? n_ * n_ : n_);
      }
      L.emb = ps.row(emb_, l);
    }
  }

  Node* init_state(Graph& g, Node* h_pre, const LoopCtx&) const override {
    Node* Y = h_pre;
    for (int s = 1; s < n_; ++s) Y = op::concat(g, Y, h_pre);
    return Y;
  }

  Node* step(Graph& g, Node* Y, Node* /*h_pre*/, int r, const CoreFn& core, const LoopCtx&) const override {
    const Loop& L = loops_[std::min(r, R_) - 1];
    const int nres = full_ ? n_ * n_ : n_;
    Node* z = op::rms_normalize(g, Y, 1e-20);
    Node* phi = linear(g, z, *L.W, nullptr);  // [N, n | n_res | n]
    auto map = [&](int m, int c0, int width) {
      return op::scale_shift(g, op::slice_cols(g, phi, c0, width), L.a[m], L.b[m]);
    };
    Node* H_pre = op::sigmoid(g, map(0, 0, n_));
    Node* x = op::scale_shift(g, core(g, op::stream_mix(g, Y, H_pre, n_)), nullptr, L.emb);
    Node* res = map(1, n_, nres);
    Node* H_res = full_ ? op::sinkhorn(g, res, n_, iters_) : op::sigmoid(g, res);
    Node* H_post = op::sigmoid(g, map(2, n_ + nres, n_), 1.0f, 2.0f);
    g.diagnostic("hyper.pre", H_pre);
    g.diagnostic("hyper.res", full_ ? diagonal(g, H_res) : H_res);
    g.diagnostic("hyper.post", H_post);
    return op::stream_update(g, Y, H_res, H_post, x, n_, full_);
  }

  // φ (n·d → 2n + n_res), the H_pre mix (n·d), the update (diag: 2n·d; full: n²·d + n·d), and
  // Sinkhorn's 2 normalisations of n² per round.
  double flops_per_token() const override {
    const double n = n_, d = d_, nres = full_ ? n * n : n;
    return 2 * n * d * (2 * n + nres) + 2 * n * d + (full_ ? 2 * (n * n * d + n * d) + 4.0 * iters_ * n * n : 4 * n * d);
  }

  Node* readout(Graph& g, Node* Y) const override {
    Node* ones = g.node(Y->rows, n_, false);
    std::fill(ones->v, ones->v + ones->numel(), 1.0f / (float)n_);
    return op::stream_mix(g, Y, ones, n_);
  }

 private:
  static constexpr const char* kMap[3] = {"pre", "res", "post"};
  struct Loop {
    int w_pre = -1, w_post = -1, alpha[3] = {-1, -1, -1}, bias[3] = {-1, -1, -1};
    WeightMatrix* W = nullptr;
    Node *a[3] = {}, *b[3] = {}, *emb = nullptr;
  };
  // The diagonal of each row's n×n matrix (a diagnostic only: no gradient).
  Node* diagonal(Graph& g, Node* H) const {
    Node* out = g.node(H->rows, n_, false);
    for (int64_t i = 0; i < H->rows; ++i)
      for (int s = 0; s < n_; ++s) out->v[i * n_ + s] = H->v[i * n_ * n_ + s * n_ + s];
    return out;
  }
  int n_, d_, R_;
  bool full_;
  int iters_;
  std::vector<Loop> loops_;
  int emb_ = -1;
};

}  // namespace

void register_hyper_rule(Registries& r) {
  r.loop_rules.add(
      {"hyper",
       "n streams Y_s = H_res Y + H_post[s] · (core(Σ H_pre[s] Y_s) + loop_emb[ℓ]), per-loop maps of z = Y/rms(Y); readout mean_s Y_s  (Hyperloop; mHC with hyper_res = sinkhorn)",
       {ConfigKey::integer("hyper_streams", 4, 1, 64, "hyper: parallel residual streams n"),
        ConfigKey::choice("hyper_res", "diag", {"diag", "sinkhorn"},
                          "hyper: H_res as one sigmoid gate per stream (Hyperloop) or a full n×n doubly stochastic matrix (mHC)"),
        ConfigKey::integer("sinkhorn_iters", 20, 1, 1000, "hyper: Sinkhorn–Knopp rounds for hyper_res = sinkhorn")},
       [](ParamStore& ps, const Config& c) -> std::unique_ptr<LoopRule> { return std::make_unique<HyperRule>(ps, c); },
       {}});
}

}  // namespace looplm
