#include "model/components.h"

namespace looplm {

void register_builtins(Registries& r) {
  register_standard_blocks(r);
  register_energy_block(r);
  register_cem_block(r);
  register_residual_rule(r);
  register_gated_rule(r);
  register_inject_rule(r);
  register_hyper_rule(r);
}

Registries& registries() {
  static Registries r = [] {
    Registries x;
    register_builtins(x);
    return x;
  }();
  return r;
}

}  // namespace looplm
