// The `cem` block kind: causal energy minimisation (docs/systems.md). Each sub-layer takes T = cem_T
// gradient steps on a conditional energy of a moving query state x given its own input h, which
// stays fixed as the context (x⁽⁰⁾ = h); both are RMS-normalised by the sub-layer's norm (with gain):
//
//   attention:  s_ij^k = (W_Q,k x̂_i)·(W_K,k ĥ_j)/√hd + x̂_iᵀ diag(δ) ĥ_j/√hd     (RoPE on the first term)
//               u_i    = Σ_k [ W_Q,kᵀ Σ_j a_ij^k W_K,k ĥ_j + δ ⊙ Σ_j a_ij^k ĥ_j ]   (W_V = W_K, W_O = W_Qᵀ)
//   MLP:        u      = W_upᵀ (SiLU(W_gate ĥ) ⊙ W_up x̂)                          (down = upᵀ)
//   step:       x ← x + P u,  P = I, or diag(softplus(p)) + U Vᵀ + V Uᵀ (cem_precond, rank cem_precond_rank)
//
// δ = attn.diag is shared by the heads (cem_diag; off drops it). The diagonal term rides in the
// attention op as extra head columns: head k's query is [RoPE(W_Q,k x̂) | x̂ ⊙ δ], its key
// [RoPE(W_K,k ĥ) | ĥ] and its value [W_K,k ĥ | ĥ] (values unrotated), at scale 1/√hd; its output's
// first hd columns are Σ_j a W_K,k ĥ_j and the last d are Σ_j a ĥ_j. Keys and values depend on the
// context only, so one KV-cache slot per (block, loop step) serves every inner step. The transposed
// uses of W_Q and W_up are op::matmul on the same parameter nodes: one gradient each.
//
// Init (docs/systems.md, CEM: W_Q and W_up get no output scaling): every matrix N(0, init_std),
// δ = 0, norms 1, p = softplus⁻¹(1) and U, V N(0, init_std) (P ≈ I). No biases.
//
// Diagnostics (eval): "cem.attn.step{t}" and "cem.mlp.step{t}", the mean per-token norm ‖P u‖ of
// inner step t of each sub-layer.
#include <cmath>

#include "looplm/error.h"
#include "model/components.h"

namespace looplm {

namespace {

// P u = softplus(p) ⊙ u + (u V) Uᵀ + (u U) Vᵀ for row vectors u.
class Preconditioner {
 public:
  Preconditioner() = default;
  Preconditioner(ParamStore& ps, const std::string& p, const Config& c, int rank) {
    const int64_t d = c.d_model, r = rank;
    p_ = ps.add(p + ".p", {d}, Init::constant(std::log(std::expm1(1.0))));  // softplus⁻¹(1)
    U_ = ps.add(p + ".U", {d, r}, Init::normal(c.init_std));
    V_ = ps.add(p + ".V", {d, r}, Init::normal(c.init_std));
  }
  void bind(ParamStore& ps) {
    pn_ = ps.view(p_);
    Un_ = ps.view(U_);
    Vn_ = ps.view(V_);
  }
  Node* operator()(Graph& g, Node* u) const {
    Node* y = op::mul_row(g, u, op::softplus(g, pn_));
    y = op::add(g, y, op::linear(g, op::matmul(g, u, Vn_), Un_, nullptr));
    return op::add(g, y, op::linear(g, op::matmul(g, u, Un_), Vn_, nullptr));
  }
 private:
  int p_ = -1, U_ = -1, V_ = -1;
  Node *pn_ = nullptr, *Un_ = nullptr, *Vn_ = nullptr;
};

class CemBlock : public Block {
 public:
  CemBlock(ParamStore& ps, const std::string& p, const Config& c)
      : d_(c.d_model),
        H_(c.n_heads),
        hd_(c.head_dim()),
        f_(c.ff_dim()),
        steps_((int)c.get_int("cem_T")),
        diag_(c.get_bool("cem_diag")),
        precond_(c.get_bool("cem_precond")),
        rank_((int)c.get_int("cem_precond_rank")) {
    Config rms = c;  // the sub-layers' norms are RMSNorm with gain whatever `norm` says (norm_f follows it)
    rms.norm = "rmsnorm";
    const int64_t d = d_, f = f_;
    attn_norm_ = Norm(ps, p + ".attn_norm", rms);
    q_w_ = ps.add(p + ".attn.q.weight", {d, d}, matrix_init(c));
    k_w_ = ps.add(p + ".attn.k.weight", {d, d}, matrix_init(c));
    if (diag_) delta_ = ps.add(p + ".attn.diag", {d}, Init::zeros());
    if (precond_) attn_pc_ = Preconditioner(ps, p + ".attn_precond", c, rank_);
    mlp_norm_ = Norm(ps, p + ".mlp_norm", rms);
    gate_w_ = ps.add(p + ".mlp.gate.weight", {f, d}, matrix_init(c));
    up_w_ = ps.add(p + ".mlp.up.weight", {f, d}, matrix_init(c));
    if (precond_) mlp_pc_ = Preconditioner(ps, p + ".mlp_precond", c, rank_);
    for (int t = 1; t <= steps_; ++t) {
      names_.push_back("cem.attn.step" + std::to_string(t));
      names_.push_back("cem.mlp.step" + std::to_string(t));
    }
  }

  void bind(ParamStore& ps) override {
    attn_norm_.bind(ps);
    Wq_ = ps.matrix(q_w_);
    Wq_->read_as_values = true;  // Σ_k W_Q,kᵀ o^k
    Wk_ = ps.matrix(k_w_);
    if (diag_) delta_n_ = ps.view(delta_);
    if (precond_) attn_pc_.bind(ps);
    mlp_norm_.bind(ps);
    Wgate_ = ps.matrix(gate_w_);
    Wup_ = ps.matrix(up_w_);
    Wup_->read_as_values = true;  // W_upᵀ a
    if (precond_) mlp_pc_.bind(ps);
  }

  Node* forward(Graph& g, Node* h, const BlockCtx& ctx) const override {
    return mlp(g, attention(g, h, ctx));
  }

  // K projection once; per inner step the Q projection, the attention over T/2 keys at head width
  // hd (+ d with the diagonal term; scores and values), the W_Qᵀ map (and the preconditioner's 4dr).
  // MLP: the gate once; per step W_up and W_upᵀ.
  double flops_per_token(int T) const override {
    const double d = d_, f = f_, w = hd_ + (diag_ ? d_ : 0), pc = precond_ ? 4.0 * d * rank_ : 0;
    return 2 * d * d + steps_ * (2 * (2 * d * d + pc) + 2.0 * T * H_ * w) + 2 * d * f + steps_ * 2 * (2 * d * f + pc);
  }
  int64_t kv_width(const Config&) const override { return (int64_t)H_ * (hd_ + (diag_ ? d_ : 0)); }

 private:
  Node* attention(Graph& g, Node* h, const BlockCtx& ctx) const {
    Node* ch = attn_norm_(g, h);  // ĥ, the fixed context
    g.tap("attn.in", ch);
    Node* kk = linear(g, ch, *Wk_, nullptr);
    Node* kr = ctx.rope ? op::rope(g, kk, ctx.B, ctx.T, H_, ctx.rope, ctx.place) : kk;
    Node* K = diag_ ? op::head_concat(g, kr, ch, H_) : kr;
    Node* V = diag_ ? op::head_concat(g, kk, ch, H_) : kk;
    op::AttnOptions ao;
    ao.scale = 1.0 / std::sqrt((double)hd_);
    Node* x = h;
    for (int t = 0; t < steps_; ++t) {
      Node* xh = t == 0 ? ch : attn_norm_(g, x);  // x⁽⁰⁾ = h
      Node* q = linear(g, xh, *Wq_, nullptr);
      if (ctx.rope) q = op::rope(g, q, ctx.B, ctx.T, H_, ctx.rope, ctx.place);
      Node* Q = diag_ ? op::head_concat(g, q, op::mul_row(g, xh, delta_n_), H_) : q;
      Node* qkv = op::concat(g, op::concat(g, Q, K), V);
      op::CacheRef cache = ctx.cache;
      cache.write = t == 0;  // K, V are the fixed context's: written once, read by every inner step
      Node* y = ctx.cache ? op::attention_cached(g, qkv, ctx.B, ctx.T, H_, {}, cache, ctx.place, ao)
                       : op::attention(g, qkv, ctx.B, ctx.T, H_, {}, ao);
      Node* u = op::matmul(g, diag_ ? op::head_slice(g, y, H_, 0, hd_) : y, Wq_->node);  // Σ_k W_Q,kᵀ o^k
      if (diag_) u = op::add(g, u, op::mul_row(g, op::sum_blocks(g, op::head_slice(g, y, H_, hd_, d_), H_), delta_n_));
      x = step(g, x, precond_ ? attn_pc_(g, u) : u, names_[2 * t]);
    }
    return x;
  }

  Node* mlp(Graph& g, Node* h) const {
    Node* ch = mlp_norm_(g, h);
    g.tap("mlp.in", ch);
    Node* s = op::silu(g, linear(g, ch, *Wgate_, nullptr));  // SiLU(W_gate ĥ), fixed
    Node* x = h;
    for (int t = 0; t < steps_; ++t) {
      Node* xh = t == 0 ? ch : mlp_norm_(g, x);
      Node* a = op::mul(g, s, linear(g, xh, *Wup_, nullptr));
      g.tap("mlp.down.in", a);
      Node* u = op::matmul(g, a, Wup_->node);  // W_upᵀ a
      x = step(g, x, precond_ ? mlp_pc_(g, u) : u, names_[2 * t + 1]);
    }
    return x;
  }

  // x + Δ, reporting the mean per-token ‖Δ‖ when evaluation watches.
  Node* step(Graph& g, Node* x, Node* delta, const std::string& name) const {
    if (g.diagnosing()) {
      Node* n = g.node(delta->rows, 1, false);
      for (int64_t r = 0; r < delta->rows; ++r) {
        double s = 0;
        for (int64_t j = 0; j < delta->cols; ++j) s += (double)delta->v[r * delta->cols + j] * delta->v[r * delta->cols + j];
        n->v[r] = (float)std::sqrt(s);
      }
      g.diagnostic(name.c_str(), n);
    }
    return op::add(g, x, delta);
  }

  int d_, H_, hd_, f_, steps_;
  bool diag_, precond_;
  int rank_;
  Norm attn_norm_, mlp_norm_;
  Preconditioner attn_pc_, mlp_pc_;
  int q_w_ = -1, k_w_ = -1, delta_ = -1, gate_w_ = -1, up_w_ = -1;
  WeightMatrix *Wq_ = nullptr, *Wk_ = nullptr, *Wgate_ = nullptr, *Wup_ = nullptr;
  Node* delta_n_ = nullptr;
  std::vector<std::string> names_;  // diagnostic names (the graph keeps the pointers)
};

}  // namespace

void register_cem_block(Registries& r) {
  r.blocks.add(
      {"cem",
       "each sub-layer: T steps x ← x + P u of causal energy minimisation, context = its input (tied W_V = W_K, W_O = W_Qᵀ, down = upᵀ)",
       {ConfigKey::integer("cem_T", 2, 1, 64, "cem: inner gradient steps per sub-layer (1: one standard tied layer)"),
        ConfigKey::flag("cem_diag", true, "cem: the shared diagonal term δ of the attention energy"),
        ConfigKey::flag("cem_precond", false, "cem: precondition each update by diag(softplus(p)) + U Vᵀ + V Uᵀ"),
        ConfigKey::integer("cem_precond_rank", 4, 1, 1024, "cem: rank r of the preconditioner's U, V [d, r]")},
       [](ParamStore& ps, const std::string& prefix, const Config& c) -> std::unique_ptr<Block> {
         return std::make_unique<CemBlock>(ps, prefix, c);
       },
       [](const Config& c) {
         if (c.get_bool("cem_diag") && c.d_model + c.head_dim() > 1024)
           throw UsageError("block = cem with cem_diag: d_model + head dim must be at most 1024 (the diagonal term widens each head by d)");
         if (c.get_int("cem_precond_rank") > c.d_model) throw UsageError("cem_precond_rank must be at most d_model");
         if (c.deeploop_p != 0) throw UsageError("block = cem: deeploop_p applies to sandwich blocks; set it to 0");
         if (!c.plain_attention())
           throw UsageError("block = cem: tied W_V = W_K and W_O = W_Qᵀ need every head its own key and d_model = n_heads · d_head; "
                            "leave n_kv_heads and d_head at 0");
       }});
}

}  // namespace looplm
