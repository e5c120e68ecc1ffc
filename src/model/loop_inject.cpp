// The `inject_linear` loop rule (docs/systems.md, Huginn's linear injection): the state starts at
// zero and each step feeds the core a linear map of the state and the prelude's output,
//
//   s^(0) = 0,   s^(r) = core(W_proj [s^(r-1), h_pre])        (+ b_proj when biases are on)
//
// which is the gated rule without its gate and noise. Huginn-0125 initialises the state randomly
// (its `state_init`); looplm starts it at zero, as its authors advise for reproducible outputs,
// so every run of a prompt gives the same logits. With `inject_readout_norm` the exit reads
// norm_f(s^(r)) (its weights shared with the final norm): Huginn applies its ln_f before the coda
// and again after it.
#include "model/components.h"
#include "model/layers.h"

namespace looplm {

namespace {

class InjectLinearRule : public LoopRule {
 public:
  InjectLinearRule(ParamStore& ps, const Config& c) : cfg_(c), d_(c.d_model), readout_norm_(c.get_bool("inject_readout_norm")) {
    const int64_t d = c.d_model;
    proj_w_ = ps.add("loop.proj.weight", {d, 2 * d}, matrix_init(c));
    if (c.bias) proj_b_ = ps.add("loop.proj.bias", {d}, Init::zeros());
  }
  void bind(ParamStore& ps) override {
    Wproj_ = ps.matrix(proj_w_);
    bproj_ = proj_b_ >= 0 ? ps.view(proj_b_) : nullptr;
    if (!readout_norm_) return;
    norm_ = Norm::existing(ps, "norm_f", cfg_);
    norm_.bind(ps);
  }
  // Zero, with h_pre's shape (x − x: exactly 0 for the finite values a prelude produces).
  Node* init_state(Graph& g, Node* h_pre, const LoopCtx&) const override { return op::axpby(g, -1.0f, h_pre, h_pre); }
  Node* step(Graph& g, Node* s, Node* h_pre, int, const CoreFn& core, const LoopCtx&) const override {
    return core(g, linear(g, op::concat(g, s, h_pre), *Wproj_, bproj_));
  }
  Node* readout(Graph& g, Node* s) const override { return readout_norm_ ? norm_(g, s) : s; }
  double flops_per_token() const override { return 4.0 * d_ * d_; }  // W_proj: 2d → d

 private:
  Config cfg_;
  double d_;
  bool readout_norm_;
  int proj_w_ = -1, proj_b_ = -1;
  WeightMatrix* Wproj_ = nullptr;
  Node* bproj_ = nullptr;
  Norm norm_;
};

}  // namespace

void register_inject_rule(Registries& r) {
  r.loop_rules.add({"inject_linear", "s(0) = 0; s(r) = core(W_proj [s(r-1), h_pre])  (Huginn's linear injection)",
                    {ConfigKey::flag("inject_readout_norm", false,
                                     "inject_linear: the exit reads norm_f(s) (norm_f's weights) before the coda (Huginn)")},
                    [](ParamStore& ps, const Config& c) -> std::unique_ptr<LoopRule> {
                      return std::make_unique<InjectLinearRule>(ps, c);
                    },
                    {}});
}

}  // namespace looplm
