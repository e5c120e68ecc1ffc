// Graph-level ops: float forward now, backward recorded on the tape (graph.h has the contract).
// Each wraps a kernel pair from kernels.h / kernels_pointwise.h. Shapes: activations are 2-D
// [rows = B*T, cols]; weights [out, in].
#pragma once
#include <cstdint>
#include <vector>

#include "ops/graph.h"

namespace looplm {

// cos/sin of RoPE for positions 0..T-1, [T, hd/2] each (SPEC §6: θ_i = base^(−2i/hd)).
struct RopeTable {
  int T = 0, hd = 0;
  std::vector<float> cos, sin;
  RopeTable() = default;
  RopeTable(int T, int hd, double base);
  const float* cos_at(int pos) const { return cos.data() + (size_t)pos * (hd / 2); }
  const float* sin_at(int pos) const { return sin.data() + (size_t)pos * (hd / 2); }
};

// One (block, loop step)'s key/value cache: rotated keys and values, [B, capacity, d] each.
struct KVSlot {
  float* k = nullptr;
  float* v = nullptr;
  int capacity = 0;
};

namespace op {

Node* linear(Graph& g, Node* x, Node* W, Node* b);                  // x W^T + b
// tok_emb rows (+ pos_emb rows when P: row n is at position pos0 + n % T_rows)
Node* embedding(Graph& g, const int32_t* tokens, int N, Node* E, Node* P, int T_rows, int pos0 = 0);
Node* rmsnorm(Graph& g, Node* x, Node* w, double eps);
Node* layernorm(Graph& g, Node* x, Node* w, Node* b, double eps);
// Causal MHA core on a fused qkv [B*T, 3d] -> [B*T, d]; rope may be null.
Node* attention(Graph& g, Node* qkv, int B, int T, int H, const RopeTable* rope);
// Forward only (generation): appends the new rows' keys/values (positions pos0..pos0+T-1) to the
// slot and attends each new query over every cached position up to its own.
Node* attention_cached(Graph& g, Node* qkv, int B, int T, int H, const RopeTable* rope, const KVSlot& kv, int pos0);
Node* gelu(Graph& g, Node* x);
// Fused linear(gelu(u), W, b) that stores only u: gelu(u) [N, f] lives in shared scratch and is
// recomputed in backward (saves 4d floats per token per MLP). Same result as the composition
// (tests/test_gradcheck.cpp).
Node* gelu_linear(Graph& g, Node* u, Node* W, Node* b);
Node* swiglu(Graph& g, Node* gate_up);                               // [N, 2f] -> [N, f]
Node* axpby(Graph& g, float alpha, Node* a, Node* b);                // α a + b
inline Node* add(Graph& g, Node* a, Node* b) { return axpby(g, 1.0f, a, b); }
Node* concat(Graph& g, Node* a, Node* b);                            // along columns
// Mean token cross-entropy, a [1, 1] node; targets < 0 are ignored.
Node* cross_entropy(Graph& g, Node* logits, const int32_t* targets);

}  // namespace op
}  // namespace looplm
