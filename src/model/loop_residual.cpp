// The `residual` loop rule (docs/systems.md, Status): h^(r) = core(h^(r-1)). No parameters, no
// keys; the state is one stream [N, d], so init_state and readout keep their defaults (the state
// is h). The worked example of docs/architecture.md.
#include "model/components.h"

namespace looplm {

namespace {

class ResidualRule : public LoopRule {
 public:
  ResidualRule(ParamStore&, const Config&) {}
  Node* step(Graph& g, Node* h, Node* /*h_pre*/, int /*r*/, const CoreFn& core, const LoopCtx&) const override {
    return core(g, h);
  }
};

}  // namespace

void register_residual_rule(Registries& r) {
  r.loop_rules.add({"residual", "h(r) = core(h(r-1))", {},
                    [](ParamStore& ps, const Config& c) -> std::unique_ptr<LoopRule> {
                      return std::make_unique<ResidualRule>(ps, c);
                    },
                    {}});
}

}  // namespace looplm
