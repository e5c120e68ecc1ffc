// Training's causal attention with bf16 products (precision = bf16, docs/numerics.md): the
// same computation and arguments as k::attention_fwd / attention_bwd (ops/kernels.h), with the
// products Q·Kᵀ, P·V, dO·Vᵀ, dS·K, dSᵀ·Q and Pᵀ·dO taking operands rounded to bf16 (Q and K after
// RoPE) and summing in fp32, and the softmax, its log-sum-exp and dS = P ∘ (dP − Σ P dP) in fp32.
// One (sequence, head) per task and each product single-threaded in a fixed order
// (backend/cpu/gemm_pairs_bf16.h), so the bits do not depend on the thread count. Causal: a block
// of query rows multiplies only the keys it can see, and a block of keys only the queries that
// see it. Only where bf16_products_supported().
#pragma once

namespace looplm::k {

void attention_fwd_bf16(const float* qkv, float* y, float* lse, int B, int T, int H, int hd, const float* cos_t,
                        const float* sin_t, double scale = 0, bool strict = false, int Hkv = 0);
void attention_bwd_bf16(const float* qkv, const float* lse, const float* dy, float* dqkv, bool acc, int B, int T,
                        int H, int hd, const float* cos_t, const float* sin_t, double scale = 0, bool strict = false,
                        int Hkv = 0);

}  // namespace looplm::k
