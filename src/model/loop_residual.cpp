// The `residual` loop rule (SPEC §6): h^(r) = core(h^(r-1)). No parameters.
#include "looplm/error.h"
#include "model/loop_rule.h"

namespace looplm {

std::map<std::string, LoopRuleFactory>& loop_rule_registry() {
  static std::map<std::string, LoopRuleFactory> r;
  return r;
}

std::unique_ptr<LoopRule> make_loop_rule(ParamStore& ps, const Config& c) {
  auto it = loop_rule_registry().find(c.loop_rule);
  if (it == loop_rule_registry().end()) throw UsageError("unknown loop_rule '" + c.loop_rule + "'");
  return it->second(ps, c);
}

class ResidualRule : public LoopRule {
 public:
  ResidualRule(ParamStore&, const Config&) {}
  Node* step(Graph& g, Node* h_prev, Node*, int, const CoreFn& core, const LoopCtx&) const override {
    return core(g, h_prev);
  }
};
LOOPLM_REGISTER_LOOP_RULE("residual", ResidualRule);

}  // namespace looplm
