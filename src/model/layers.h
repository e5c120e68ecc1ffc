// The shared building blocks (docs/systems.md, Building blocks): norm, causal multi-head attention,
// MLP. Each declares its parameters under its checkpoint name (docs/format.md) with their init and
// applies itself with ops from src/ops.
#pragma once
#include <string>

#include "looplm/config.h"
#include "model/kv_cache.h"
#include "model/params.h"
#include "ops/ops.h"

namespace looplm {

// What a block application needs besides its input.
struct BlockCtx {
  int B = 1, T = 1;                // rows = B*T
  op::RopeAngles rope;             // empty unless pos = rope
  op::CacheRef cache;              // generation: this (block, loop step)'s KV cache
  op::RowPlace place;              // generation: where each batch row sits in it
};

// Init scales (docs/systems.md, Building blocks; DeepLoop and DeepNorm), functions of the config:
//  * matrices N(0, init_std);
//  * output projections (attn.o, mlp.down) × 1/√(2N), N the unrolled depth at the trained R;
//  * with DeepLoop (deeploop_p > 0), β = (8N)^-p instead scales attn.v, attn.o and every MLP
//    matrix (β replaces the 1/√(2N), it does not compound).
double deeploop_beta(const Config& c);
double deeploop_alpha(const Config& c);  // (2N)^p, 1 when p = 0: the sandwich skip scale
Init matrix_init(const Config& c);  // attn.q, attn.k, embeddings
Init value_init(const Config& c);   // attn.v, mlp.gate, mlp.up
Init output_init(const Config& c);  // attn.o, mlp.down

// x W^T + b: the autograd op, or (inference, after ParamStore::pack) the packed weight format.
Node* linear(Graph& g, Node* x, const WeightMatrix& W, Node* b);

class Norm {
 public:
  Norm() = default;
  Norm(ParamStore& ps, const std::string& name, const Config& c);
  // The norm whose params `name`.weight (and .bias) another component registered: shared weights
  // (a loop rule applying the final norm between loop steps). Call after that registration.
  static Norm existing(const ParamStore& ps, const std::string& name, const Config& c);
  void bind(ParamStore& ps);
  Node* operator()(Graph& g, Node* x) const;
 private:
  bool layer_ = false;
  double eps_ = 1e-5;
  int w_ = -1, b_ = -1;
  Node *W = nullptr, *Bn = nullptr;
};

class Attention {
 public:
  Attention() = default;
  Attention(ParamStore& ps, const std::string& prefix, const Config& c);
  void bind(ParamStore& ps);
  // Taps "attn.in" (the input of q|k|v) and "attn.o.in".
  Node* operator()(Graph& g, Node* x, const BlockCtx& ctx) const;
 private:
  int d_ = 0, H_ = 0, Hkv_ = 0, dq_ = 0, dkv_ = 0;
  int q_w = -1, v_w = -1, o_w = -1, q_b = -1, v_b = -1, o_b = -1;
  WeightMatrix *Wqkv = nullptr, *Wo = nullptr;
  Node *bqkv = nullptr, *bo = nullptr;
};

class Mlp {
 public:
  Mlp() = default;
  Mlp(ParamStore& ps, const std::string& prefix, const Config& c);
  void bind(ParamStore& ps);
  // Taps "mlp.in" and "mlp.down.in".
  Node* operator()(Graph& g, Node* x) const;
 private:
  bool swiglu_ = false;
  int d_ = 0, f_ = 0;
  int gate_w = -1, up_w = -1, down_w = -1, gate_b = -1, up_b = -1, down_b = -1;
  WeightMatrix *Win = nullptr, *Wdown = nullptr;
  Node *bin = nullptr, *bdown = nullptr;
};

}  // namespace looplm
