// A loop rule: how the state moves from h^(r-1) to h^(r) around the shared core (SPEC §1, §2).
// Rules register a factory under their config name (`loop_rule`), so a new rule is one file.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "model/params.h"
#include "looplm/config.h"

namespace looplm {

using CoreFn = std::function<Node*(Graph&, Node* x)>;  // one application of all core blocks

struct LoopCtx {
  bool training = false;  // noise and other training-only terms
  uint64_t seed = 0, step = 0;
};

class LoopRule {
 public:
  virtual ~LoopRule() = default;
  virtual void bind(ParamStore&) {}
  // h^(r) from h^(r-1), the prelude output h_pre and the core, for r = 1..depth.
  virtual Node* step(Graph& g, Node* h_prev, Node* h_pre, int r, const CoreFn& core, const LoopCtx& ctx) const = 0;
};

using LoopRuleFactory = std::function<std::unique_ptr<LoopRule>(ParamStore&, const Config&)>;
std::map<std::string, LoopRuleFactory>& loop_rule_registry();
std::unique_ptr<LoopRule> make_loop_rule(ParamStore& ps, const Config& c);

struct LoopRuleRegistrar {
  LoopRuleRegistrar(const std::string& name, LoopRuleFactory f) { loop_rule_registry()[name] = std::move(f); }
};
#define LOOPLM_REGISTER_LOOP_RULE(NAME, CLASS)                                                     \
  static ::looplm::LoopRuleRegistrar registrar_##CLASS(                                            \
      NAME, [](::looplm::ParamStore& ps, const ::looplm::Config& c) {                              \
        return std::unique_ptr<::looplm::LoopRule>(new CLASS(ps, c));                              \
      })

}  // namespace looplm
