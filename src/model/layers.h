// The shared building blocks of SPEC §1.1: norm, causal multi-head attention, MLP. Each registers
// its parameters under its SPEC §6 name and applies itself with ops from src/ops.
#pragma once
#include <string>

#include "looplm/config.h"
#include "model/params.h"
#include "ops/ops.h"

namespace looplm {

// What a block application needs besides its input.
struct BlockCtx {
  int B = 1, T = 1;                // rows = B*T
  const RopeTable* rope = nullptr;  // null unless pos = rope
  const KVSlot* kv = nullptr;       // generation: this (block, loop step)'s cache
  int pos0 = 0;                     // generation: position of the first row
};

class Norm {
 public:
  Norm() = default;
  Norm(ParamStore& ps, const std::string& name, const Config& c);
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
  Node* operator()(Graph& g, Node* x, const BlockCtx& ctx) const;
  int q_w = -1, k_w = -1, v_w = -1, o_w = -1;  // param ids (for init)
 private:
  int d_ = 0, H_ = 0;
  int q_b = -1, v_b = -1, o_b = -1;
  Node *Wqkv = nullptr, *bqkv = nullptr, *Wo = nullptr, *bo = nullptr;
};

class Mlp {
 public:
  Mlp() = default;
  Mlp(ParamStore& ps, const std::string& prefix, const Config& c);
  void bind(ParamStore& ps);
  Node* operator()(Graph& g, Node* x) const;
  int gate_w = -1, up_w = -1, down_w = -1;
 private:
  bool swiglu_ = false;
  int d_ = 0, f_ = 0;
  int gate_b = -1, up_b = -1, down_b = -1;
  Node *Win = nullptr, *bin = nullptr, *Wdown = nullptr, *bdown = nullptr;
};

}  // namespace looplm
