// Graph-level ops: float forward now, backward recorded on the tape (graph.h has the contract).
// Each wraps a kernel pair from kernels.h / kernels_pointwise.h. Shapes: activations are 2-D
// [rows = B*T, cols]; weights [out, in].
#pragma once
#include <cstdint>
#include <vector>

#include "backend/cpu/weight_format.h"
#include "ops/graph.h"

namespace looplm {

namespace op {

Node* linear(Graph& g, Node* x, Node* W, Node* b);                  // x W^T + b
// Forward only (inference): x W^T + b with W in an inference weight format (one row: the format's
// matrix-vector kernel; more: its GEMM).
Node* linear_packed(Graph& g, Node* x, const PackedMatrix& W, Node* b);
// tok_emb rows (+ pos_emb rows when P: row n is at position pos0 + n % T_rows)
Node* embedding(Graph& g, const int32_t* tokens, int N, Node* E, Node* P, int T_rows, int pos0 = 0);
Node* rmsnorm(Graph& g, Node* x, Node* w, double eps);
Node* layernorm(Graph& g, Node* x, Node* w, Node* b, double eps);
// RoPE angles: cos and sin [positions, hd/2], row p for position p (SPEC §6); both null for none.
struct RopeAngles {
  const float* cos = nullptr;
  const float* sin = nullptr;
  int positions = 0;
  explicit operator bool() const { return cos != nullptr; }
};
// Causal MHA core on a fused qkv [B*T, 3d] -> [B*T, d], positions 0..T-1.
Node* attention(Graph& g, Node* qkv, int B, int T, int H, RopeAngles rope);
// Forward only (generation): appends the new rows' keys (rotated) and values, positions
// pos0..pos0+T-1, to the cache k, v [B, capacity, d] and attends each new query over every cached
// position up to its own.
Node* attention_cached(Graph& g, Node* qkv, int B, int T, int H, RopeAngles rope, float* k, float* v, int capacity,
                       int pos0);
Node* gelu(Graph& g, Node* x);
// Fused linear(gelu(u), W, b) that stores only u: gelu(u) [N, f] lives in shared scratch and is
// recomputed in backward (saves 4d floats per token per MLP). Same result as the composition
// (tests/test_gradcheck.cpp).
Node* gelu_linear(Graph& g, Node* u, Node* W, Node* b);
Node* swiglu(Graph& g, Node* gate_up);                               // [N, 2f] -> [N, f]
Node* axpby(Graph& g, float alpha, Node* a, Node* b);                // α a + b
inline Node* add(Graph& g, Node* a, Node* b) { return axpby(g, 1.0f, a, b); }
Node* concat(Graph& g, Node* a, Node* b);                            // along columns
Node* slice_cols(Graph& g, Node* x, int c0, int n);                  // columns c0..c0+n-1
// Mean token cross-entropy, a [1, 1] node; targets < 0 are ignored.
Node* cross_entropy(Graph& g, Node* logits, const int32_t* targets);

}  // namespace op
}  // namespace looplm
