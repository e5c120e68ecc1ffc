// The registries of the model family's components. A new block kind or loop rule is one source
// file with a register_*() function, listed once in components.cpp (docs/architecture.md).
#pragma once
#include "model/block.h"
#include "model/loop_rule.h"
#include "model/registry.h"

namespace looplm {

struct Registries {
  Registry<BlockFactory> blocks{"block kind"};
  Registry<LoopRuleFactory> loop_rules{"loop rule"};
};

// The process-wide registries, with every built-in registered (on first use, thread-safe).
Registries& registries();
// Registers the built-ins into `r` (one line per component); registries() calls it once.
void register_builtins(Registries& r);

// One line per component file (each defined in its own .cpp).
void register_standard_blocks(Registries& r);  // blocks_standard.cpp: pre_norm, parallel, sandwich
void register_energy_block(Registries& r);     // block_energy.cpp: energy (NRGPT)
void register_cem_block(Registries& r);        // block_cem.cpp: cem (causal energy minimisation)
void register_residual_rule(Registries& r);    // loop_residual.cpp: residual
void register_gated_rule(Registries& r);       // loop_gated.cpp: gated (RecurrentGPT)
void register_inject_rule(Registries& r);      // loop_inject.cpp: inject_linear (Huginn)
void register_hyper_rule(Registries& r);       // loop_hyper.cpp: hyper (Hyperloop, mHC)

}  // namespace looplm
