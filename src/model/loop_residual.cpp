// The `residual` loop rule (docs/systems.md, Status): h^(r) = core(h^(r-1)). No parameters; the
// state is one stream [N, d], so init_state and readout keep their defaults (the state is h). The
// worked example of docs/architecture.md.
//
// With `loop_norm` the model's final norm also stands between loop steps: h^(r) =
// core(norm_f(h^(r-1))) for r ≥ 2 (the first step reads h^(0) as it is). That is how the published
// fully looped models run (Nanbeige4.2: the final norm at each loop boundary unless
// skip_loop_final_norm; Ouro: the norm after every loop, which the next one consumes): exit r
// then reads norm_f(h^(r)) as always, so every exit sees a normed state and the next step starts
// from one. The weights are norm_f's own (shared), so the rule adds no parameters.
//
// With `exit_gate` the rule carries Ouro's learned exit gate, loop.exit_gate.{weight [1, d],
// bias [1]}: λ_r = σ(w · x_r + b) on exit r's final hidden state x_r. The exit rule `gate` reads it
// (infer/early_exit.h); training leaves it as it is (no gradient reaches it from the LM loss).
#include "model/components.h"
#include "model/layers.h"

namespace looplm {

namespace {

class ResidualRule : public LoopRule {
 public:
  ResidualRule(ParamStore& ps, const Config& c) : cfg_(c), loop_norm_(c.get_bool("loop_norm")) {
    if (c.get_bool("exit_gate")) {
      gate_w_ = ps.add("loop.exit_gate.weight", {1, (int64_t)c.d_model}, Init::normal(c.init_std));
      gate_b_ = ps.add("loop.exit_gate.bias", {1}, Init::zeros());
    }
  }
  void bind(ParamStore& ps) override {
    if (gate_w_ >= 0) gate_W_ = ps.view(gate_w_), gate_B_ = ps.view(gate_b_);
    if (!loop_norm_) return;
    norm_ = Norm::existing(ps, "norm_f", cfg_);
    norm_.bind(ps);
  }
  bool has_exit_gate() const override { return gate_w_ >= 0; }
  Node* exit_gate(Graph& g, Node* x) const override {
    return gate_w_ >= 0 ? op::sigmoid(g, op::linear(g, x, gate_W_, gate_B_)) : nullptr;
  }
  Node* step(Graph& g, Node* h, Node* /*h_pre*/, int r, const CoreFn& core, const LoopCtx&) const override {
    return core(g, loop_norm_ && r > 1 ? norm_(g, h) : h);
  }

 private:
  Config cfg_;
  bool loop_norm_;
  Norm norm_;
  int gate_w_ = -1, gate_b_ = -1;
  Node *gate_W_ = nullptr, *gate_B_ = nullptr;
};

}  // namespace

void register_residual_rule(Registries& r) {
  r.loop_rules.add({"residual", "h(r) = core(h(r-1)); with loop_norm, core(norm_f(h(r-1))) for r ≥ 2",
                    {ConfigKey::flag("loop_norm", false,
                                     "residual: the final norm norm_f (its weights) also between loop steps, "
                                     "h(r) = core(norm_f(h(r-1))) for r >= 2 (Nanbeige4.2, Ouro)"),
                     ConfigKey::flag("exit_gate", false,
                                     "residual: a learned exit gate loop.exit_gate (Ouro), read by --exit-rule gate; not trained by looplm")},
                    [](ParamStore& ps, const Config& c) -> std::unique_ptr<LoopRule> {
                      return std::make_unique<ResidualRule>(ps, c);
                    },
                    {}});
}

}  // namespace looplm
