// A transformer block kind (docs/systems.md, Building blocks). A kind is one source file: a class
// that declares its parameters (with their init) in its constructor and applies itself in
// forward(), and a register_*() function that src/model/components.cpp calls
// (docs/architecture.md).
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "model/layers.h"

namespace looplm {

class Block {
 public:
  virtual ~Block() = default;
  virtual void bind(ParamStore& ps) = 0;  // create graph views once the values exist
  virtual Node* forward(Graph& g, Node* x, const BlockCtx& ctx) const = 0;
  // Forward FLOPs of one application per token with T tokens of context (matrix products and
  // attention at its causal average, T/2 keys per query; norms and pointwise work not counted).
  virtual double flops_per_token(int T) const = 0;
  // Floats per position of its KV cache (keys; values the same): n_kv_heads · d_head unless its attention is wider.
  virtual int64_t kv_width(const Config& c) const { return c.kv_width(); }
  // It reports a diagnostic of its input state (NRGPT's energy): the state after the last loop step
  // is diagnosed by one more application, which evaluation runs and discards.
  virtual bool diagnoses_input() const { return false; }
};

// prefix: the block's parameter name stem, e.g. "core.0".
using BlockFactory = std::function<std::unique_ptr<Block>(ParamStore&, const std::string& prefix, const Config&)>;

}  // namespace looplm
