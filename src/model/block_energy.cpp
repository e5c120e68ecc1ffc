// The `energy` block kind: NRGPT (docs/systems.md). One application is one descent step of the token
// state on an energy, with the update written as the energy's analytic gradient (training then
// back-propagates through that gradient, so GELU″ appears):
//
//   g      = LN(x)                     LayerNorm without gain, trainable bias (attn_norm.bias)
//   s_ij^h = g_iᵀ H_h g_j              per head a full H_h [d, d] (attn.H.weight rows h·d..), no
//                                      scaling, causal j ≤ i (energy_strict: j < i, an empty row 0)
//   E_AT,i = − Σ_h logsumexp_j s_ij^h
//   A_i    = Σ_h Σ_j softmax_j(s_ij^h) H_h g_j          = −∂E_AT/∂g_i (the query token only)
//   ff1:   E_FF = −‖GELU(W g + b)‖²,                F = 2 Wᵀ (GELU(u) ⊙ GELU′(u))
//   ff2w:  E_FF = −gᵀ(W2 GELU(W1 g + b1) + b2),     F = W2 GELU(u) + b2 + W1ᵀ (GELU′(u) ⊙ W2ᵀ g)
//   x     ← x + P (A + s_ff F)         P = step.weight (matrix) or energy_c · diag(step.gamma)
//
// A is the attention op with every head's query = g, key = value = H_h g, scale 1, and the head
// outputs summed: so training, the KV cache (keys H_h g_j, n_heads·d wide) and generation are the
// attention op's. Wᵀ uses of W1 and W2 are op::matmul on the same parameter nodes, so both uses
// accumulate into the one gradient.
//
// Init (the paper is silent; chosen here, docs/systems.md): H, W1 N(0, init_std) like q/k; W2 and the
// step matrix N(0, init_std / √(2N)) like the output projections they play the part of; biases 0;
// s_ff = 1; γ = 1 (P = c·I).
//
// Diagnostic (eval): "energy", the per-token energy E = E_AT + E_FF of the block's input state,
// from the attention's saved log-sum-exp and the FF terms the update computes anyway; eval counts
// the tokens whose energy fell from one step to the next, and the final state's energy from one
// more application (Block::diagnoses_input).
#include <cmath>

#include "looplm/error.h"
#include "model/components.h"

namespace looplm {

namespace {

class EnergyBlock : public Block {
 public:
  EnergyBlock(ParamStore& ps, const std::string& p, const Config& c)
      : d_(c.d_model),
        H_(c.n_heads),
        f_(c.ff_dim()),
        eps_(c.norm_eps),
        ff2w_(c.get_string("energy_ff") == "ff2w"),
        diag_(c.get_string("energy_P") == "diag"),
        strict_(c.get_bool("energy_strict")),
        c_((float)c.get_float("energy_c")) {
    const int64_t d = d_, f = f_;
    norm_b_ = ps.add(p + ".attn_norm.bias", {d}, Init::zeros());
    H_w_ = ps.add(p + ".attn.H.weight", {(int64_t)H_ * d, d}, matrix_init(c));
    up_w_ = ps.add(p + ".mlp.up.weight", {f, d}, matrix_init(c));
    up_b_ = ps.add(p + ".mlp.up.bias", {f}, Init::zeros());
    if (ff2w_) {
      down_w_ = ps.add(p + ".mlp.down.weight", {d, f}, output_init(c));
      down_b_ = ps.add(p + ".mlp.down.bias", {d}, Init::zeros());
    }
    sff_ = ps.add(p + ".ff_scale", {1}, Init::ones());
    if (diag_) gamma_ = ps.add(p + ".step.gamma", {d}, Init::ones());
    else step_w_ = ps.add(p + ".step.weight", {d, d}, output_init(c));
  }

  void bind(ParamStore& ps) override {
    Bn_ = ps.view(norm_b_);
    WH_ = ps.matrix(H_w_);
    Wup_ = ps.matrix(up_w_);
    Wup_->read_as_values = true;  // W1ᵀ (op::matmul on the node)
    bup_ = ps.view(up_b_);
    if (ff2w_) {
      Wdown_ = ps.matrix(down_w_);
      Wdown_->read_as_values = true;  // W2ᵀ g
      bdown_ = ps.view(down_b_);
    }
    sff_n_ = ps.view(sff_);
    if (diag_) gamma_n_ = ps.view(gamma_);
    else Wstep_ = ps.matrix(step_w_);
  }

  Node* forward(Graph& g, Node* x, const BlockCtx& ctx) const override {
    const int64_t N = x->rows;
    Node* gn = op::layernorm(g, x, nullptr, Bn_, eps_);
    g.tap("attn.in", gn);
    // A: heads' queries g, keys = values = H_h g.
    Node* kh = linear(g, gn, *WH_, nullptr);  // [N, H·d]
    Node* qkv = op::concat(g, op::concat(g, op::repeat_cols(g, gn, H_), kh), kh);
    const bool energy = g.diagnosing() && !ctx.cache;
    float* lse = nullptr;
    op::AttnOptions ao{1.0, strict_, energy ? &lse : nullptr};
    Node* att = ctx.cache ? op::attention_cached(g, qkv, ctx.B, ctx.T, H_, {}, ctx.cache, ctx.place, ao)
                       : op::attention(g, qkv, ctx.B, ctx.T, H_, {}, ao);
    Node* A = op::sum_blocks(g, att, H_);
    // F = −∂E_FF/∂g
    g.tap("mlp.in", gn);
    Node* u = linear(g, gn, *Wup_, bup_);  // [N, f]
    Node *F, *m = nullptr, *a = nullptr;
    if (ff2w_) {
      const bool packed = Wdown_->packed && !g.grad_enabled();
      if (packed || g.observing() || energy) {
        Graph::NoGrad ng(g);  // the fused op below keeps the gradient path when training
        a = op::gelu(g, u);
        g.tap("mlp.down.in", a);
      }
      // W2 GELU(u) + b2: from the GELU tensor when one was made and no gradient is needed
      m = a && !g.grad_enabled() ? linear(g, a, *Wdown_, bdown_) : op::gelu_linear(g, u, Wdown_->node, bdown_);
      Node* w2g = op::matmul(g, gn, Wdown_->node);                                               // W2ᵀ g  [N, f]
      F = op::add(g, m, op::matmul(g, op::gelu_prime_mul(g, u, w2g), Wup_->node));
    } else {
      if (energy) {
        Graph::NoGrad ng(g);
        a = op::gelu(g, u);
      }
      F = op::matmul(g, op::gelu_gelu_prime(g, u), Wup_->node, 2.0f);
    }
    if (energy) report_energy(g, ctx, N, lse, gn, m, a);
    Node* v = op::add(g, A, op::scale_shift(g, F, sff_n_, nullptr));
    Node* step = diag_ ? op::mul_row(g, v, gamma_n_, c_) : linear(g, v, *Wstep_, nullptr);
    return op::add(g, x, step);
  }

  // H_h g (H·d²), the attention over T/2 keys at head dim d (scores and values: 2·H·d·T/2 each),
  // the up projection and, for ff2w, W2 GELU(u), W2ᵀ g and W1ᵀ(...) (ff1: W1ᵀ(...)), the step matrix.
  double flops_per_token(int T) const override {
    const double d = d_, f = f_;
    return 2 * (H_ * d * d + d * f * (ff2w_ ? 4 : 2) + (diag_ ? 0 : d * d)) + 2.0 * H_ * T * d;
  }
  int64_t kv_width(const Config& c) const override { return (int64_t)H_ * c.d_model; }
  bool diagnoses_input() const override { return true; }

 private:
  // E_i = −Σ_h lse_ih + E_FF,i  (ff1: −‖GELU(u_i)‖², ff2w: −g_i · (W2 GELU(u_i) + b2)), in double.
  void report_energy(Graph& g, const BlockCtx& ctx, int64_t N, const float* lse, const Node* gn, const Node* m,
                     const Node* a) const {
    Node* E = g.node(N, 1, false);
    const int T = ctx.T;
    for (int64_t n = 0; n < N; ++n) {
      const int64_t b = n / T, t = n % T;
      double e = 0;
      for (int h = 0; h < H_; ++h) e -= lse[(b * H_ + h) * T + t];
      if (ff2w_)
        for (int j = 0; j < d_; ++j) e -= (double)gn->v[n * d_ + j] * m->v[n * d_ + j];
      else
        for (int j = 0; j < f_; ++j) e -= (double)a->v[n * f_ + j] * a->v[n * f_ + j];
      E->v[n] = (float)e;
    }
    g.diagnostic("energy", E, /*descent=*/true);
  }

  int d_, H_, f_;
  double eps_;
  bool ff2w_, diag_, strict_;
  float c_;
  int norm_b_ = -1, H_w_ = -1, up_w_ = -1, up_b_ = -1, down_w_ = -1, down_b_ = -1, sff_ = -1, gamma_ = -1, step_w_ = -1;
  Node *Bn_ = nullptr, *bup_ = nullptr, *bdown_ = nullptr, *sff_n_ = nullptr, *gamma_n_ = nullptr;
  WeightMatrix *WH_ = nullptr, *Wup_ = nullptr, *Wdown_ = nullptr, *Wstep_ = nullptr;
};

}  // namespace

void register_energy_block(Registries& r) {
  r.blocks.add(
      {"energy",
       "x ← x + P(A + s_ff F): one descent step on NRGPT's energy E_AT + E_FF (A, F its analytic negative gradients)",
       {ConfigKey::choice("energy_ff", "ff2w", {"ff2w", "ff1"},
                          "energy: FF energy, ff2w −gᵀ(W2 GELU(W1 g + b1) + b2) or ff1 −‖GELU(W g + b)‖²"),
        ConfigKey::choice("energy_P", "matrix", {"matrix", "diag"},
                          "energy: step matrix P, a learned [d, d] or energy_c · diag(γ)"),
        ConfigKey::number("energy_c", 0.1, 0, 100, "energy: c of P = c · diag(γ) (energy_P = diag)", /*lo_excl=*/true),
        ConfigKey::flag("energy_strict", false, "energy: attention energy over keys j < i only (position 0: no term)")},
       [](ParamStore& ps, const std::string& prefix, const Config& c) -> std::unique_ptr<Block> {
         return std::make_unique<EnergyBlock>(ps, prefix, c);
       },
       [](const Config& c) {
         if (c.pos == "rope")
           throw UsageError("block = energy does not use RoPE (docs/systems.md, NRGPT): set pos to learned or none");
         if (c.deeploop_p != 0) throw UsageError("block = energy: deeploop_p applies to sandwich blocks; set it to 0");
         if (c.d_model > 1024) throw UsageError("block = energy: d_model must be at most 1024 (its head dim is d_model)");
         if (c.n_kv_heads != 0 || c.d_head != 0)
           throw UsageError("block = energy: its heads are d_model wide and each its own; leave n_kv_heads and d_head at 0");
       }});
}

}  // namespace looplm
