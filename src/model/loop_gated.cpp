// The `gated` loop rule (docs/systems.md, RecurrentGPT). For r = 1..depth, with h = h^(r-1):
//
//   h~      = W_proj [h + ε_x, h_pre]                          (+ b_proj when biases are on)
//   o       = core(h~)
//   g       = σ( f_g([LN_a(h), LN_b(h_pre)]) / τ + ε_g )         f_g: Linear(2d→d), SiLU, Linear(d→d)
//   h^(r)   = g ⊙ h + (1 − g) ⊙ o
//
// h^(0) = h_pre. ε_x ~ N(0, σ_x²), ε_g ~ N(0, σ_g²) per element and step, in training only. The last
// bias of f_g starts at gate_bias_init (+4: g ≈ 0.98, the state is copied at first and the model
// learns what to overwrite). The gate is reported per step as the diagnostic "gate".
//
// Init where the paper is silent (docs/systems.md, the choices under Status): W_proj and both f_g
// weights N(0, init_std) like every other matrix of the family; b_proj and f_g's first bias 0.
#include "model/components.h"

namespace looplm {

namespace {

enum : uint64_t { kNoiseState = 1, kNoiseGate = 2 };  // LoopCtx::rng purposes

class GatedRule : public LoopRule {
 public:
  GatedRule(ParamStore& ps, const Config& c)
      : d_(c.d_model), sigma_x_(c.get_float("gate_sigma_x")), sigma_g_(c.get_float("gate_sigma_g")), tau_(c.get_float("gate_tau")) {
    const int64_t d = c.d_model;
    proj_w_ = ps.add("loop.proj.weight", {d, 2 * d}, matrix_init(c));
    if (c.bias) proj_b_ = ps.add("loop.proj.bias", {d}, Init::zeros());
    norm_a_ = Norm(ps, "loop.norm_a", c);
    norm_b_ = Norm(ps, "loop.norm_b", c);
    fc1_w_ = ps.add("loop.gate.fc1.weight", {d, 2 * d}, matrix_init(c));
    fc1_b_ = ps.add("loop.gate.fc1.bias", {d}, Init::zeros());
    fc2_w_ = ps.add("loop.gate.fc2.weight", {d, d}, matrix_init(c));
    fc2_b_ = ps.add("loop.gate.fc2.bias", {d}, Init::constant(c.get_float("gate_bias_init")));
  }

  void bind(ParamStore& ps) override {
    Wproj_ = ps.matrix(proj_w_);
    bproj_ = proj_b_ >= 0 ? ps.view(proj_b_) : nullptr;
    norm_a_.bind(ps);
    norm_b_.bind(ps);
    W1_ = ps.matrix(fc1_w_);
    b1_ = ps.view(fc1_b_);
    W2_ = ps.matrix(fc2_w_);
    b2_ = ps.view(fc2_b_);
  }

  Node* step(Graph& g, Node* h, Node* h_pre, int r, const CoreFn& core, const LoopCtx& ctx) const override {
    const bool noisy = ctx.training;
    Node* hx = h;
    if (noisy && sigma_x_ > 0) hx = op::add(g, h, op::gaussian(g, h->rows, h->cols, sigma_x_, ctx.rng(kNoiseState, r)));
    Node* o = core(g, linear(g, op::concat(g, hx, h_pre), *Wproj_, bproj_));

    Node* f = linear(g, op::concat(g, norm_a_(g, h), norm_b_(g, h_pre)), *W1_, b1_);
    f = linear(g, op::silu(g, f), *W2_, b2_);
    // σ(f/τ + ε_g) = σ((f + τ ε_g) / τ)
    if (noisy && sigma_g_ > 0)
      f = op::add(g, f, op::gaussian(g, f->rows, f->cols, tau_ * sigma_g_, ctx.rng(kNoiseGate, r)));
    Node* gate = op::sigmoid(g, f, (float)(1.0 / tau_));
    g.diagnostic("gate", gate);
    return op::gate_mix(g, gate, h, o);
  }

  // W_proj (2d → d), f_g (2d → d, d → d): the R·10d² of docs/systems.md (RecurrentGPT).
  double flops_per_token() const override { return 10.0 * d_ * d_; }

 private:
  double d_, sigma_x_, sigma_g_, tau_;
  int proj_w_ = -1, proj_b_ = -1, fc1_w_ = -1, fc1_b_ = -1, fc2_w_ = -1, fc2_b_ = -1;
  Norm norm_a_, norm_b_;
  WeightMatrix *Wproj_ = nullptr, *W1_ = nullptr, *W2_ = nullptr;
  Node *bproj_ = nullptr, *b1_ = nullptr, *b2_ = nullptr;
};

}  // namespace

void register_gated_rule(Registries& r) {
  r.loop_rules.add(
      {"gated", "h(r) = g ⊙ h(r-1) + (1 − g) ⊙ core(W_proj [h(r-1) + ε_x, h_pre]), g = σ(f_g([LN h(r-1), LN h_pre]) / τ + ε_g)  (RecurrentGPT)",
       {ConfigKey::number("gate_sigma_x", 0.1, 0, 100, "gated: std of the training noise ε_x on h(r-1) in the core's input"),
        ConfigKey::number("gate_sigma_g", 0.1, 0, 100, "gated: std of the training noise ε_g on the gate's pre-activation"),
        ConfigKey::number("gate_tau", 1.0, 0, 1000, "gated: gate temperature τ", /*lo_excl=*/true),
        ConfigKey::number("gate_bias_init", 4.0, -100, 100, "gated: init of f_g's last bias (+4: g ≈ 0.98, copy first)")},
       [](ParamStore& ps, const Config& c) -> std::unique_ptr<LoopRule> { return std::make_unique<GatedRule>(ps, c); },
       {}});
}

}  // namespace looplm
