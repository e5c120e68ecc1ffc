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
#include "model/components.h"
#include "model/layers.h"

namespace looplm {

namespace {

class ResidualRule : public LoopRule {
 public:
  ResidualRule(ParamStore&, const Config& c) : cfg_(c), loop_norm_(c.get_bool("loop_norm")) {}
  void bind(ParamStore& ps) override {
    if (!loop_norm_) return;
    norm_ = Norm::existing(ps, "norm_f", cfg_);
    norm_.bind(ps);
  }
  Node* step(Graph& g, Node* h, Node* /*h_pre*/, int r, const CoreFn& core, const LoopCtx&) const override {
    return core(g, loop_norm_ && r > 1 ? norm_(g, h) : h);
  }

 private:
  Config cfg_;
  bool loop_norm_;
  Norm norm_;
};

}  // namespace

void register_residual_rule(Registries& r) {
  r.loop_rules.add({"residual", "h(r) = core(h(r-1)); with loop_norm, core(norm_f(h(r-1))) for r ≥ 2",
                    {ConfigKey::flag("loop_norm", false,
                                     "residual: the final norm norm_f (its weights) also between loop steps, "
                                     "h(r) = core(norm_f(h(r-1))) for r >= 2 (Nanbeige4.2, Ouro)")},
                    [](ParamStore& ps, const Config& c) -> std::unique_ptr<LoopRule> {
                      return std::make_unique<ResidualRule>(ps, c);
                    },
                    {}});
}

}  // namespace looplm
