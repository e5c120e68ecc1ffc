// Float overloads of the hottest non-GEMM kernels (ops and the kernel templates call these; the
// templates in src/ops/kernels*.h remain the double reference). The loops are ISA-cloned (isa.h),
// keep 16 independent partial sums where they reduce, and use fastmath.h, so they run 16 lanes
// wide on AVX-512. tests/test_gradcheck.cpp checks each against its double template.
#pragma once
#include <cstdint>

namespace looplm::k {

// GELU (exact, erf form) over n elements, multithreaded.
void gelu_fwd(const float* x, float* y, int64_t n);
void gelu_bwd(const float* x, const float* dy, float* dx, bool acc, int64_t n);

// SwiGLU over N rows: y[N, f] = silu(gate) ⊙ up from u[N, 2f] = [gate | up], and its backward
// (d gate = dy ⊙ up ⊙ silu'(gate), d up = dy ⊙ silu(gate); du = or += when acc), multithreaded.
void swiglu_fwd(const float* u, float* y, int N, int f);
void swiglu_bwd(const float* u, const float* dy, float* du, bool acc, int N, int f);

// One attention row of n visible scores: s ← softmax(s); returns log Σ exp(s) (the saved lse).
float softmax_row(float* s, int n);
// Backward of one row from the raw scores: p ← exp(p − lse); g ← p ∘ (g − Σ p∘g) (= dS).
void softmax_bwd_row(float* p, float* g, int n, float lse);

// One LayerNorm row: y = (x − μ) r w + b (w, b may be null); gives μ and r = 1/σ.
void layernorm_row_fwd(const float* x, const float* w, const float* b, float* y, int d, double eps, float& mean,
                       float& rstd);
// One row of the backward: pw += dy x̂, pb += dy, and dx (=, or += when acc) r (g − mean g − x̂ mean(g x̂))
// with g = dy w; dx may be null.
void layernorm_row_bwd(const float* x, const float* w, float mean, float rstd, const float* dy, float* dx, bool acc,
                       float* pw, float* pb, int d);

// Row helpers of the loop rules' stream ops (kernels_loop.h): y += a·x and y = a·x over n floats.
void axpy_row(float a, const float* x, float* y, int n);
void scale_row(float a, const float* x, float* y, int n);

// Decode attention for one query row against n cached keys/values (rows of stride ld):
// out[hd] = softmax(scale · K q) V, with s[n] as scratch for the scores.
void attend_cached_row(const float* q, const float* K, const float* V, int ld, int n, int hd, float scale, float* s,
                       float* out);
// The same against a bf16 cache (each key and value widened to fp32 exactly as it is read).
void attend_cached_row(const float* q, const uint16_t* K, const uint16_t* V, int ld, int n, int hd, float scale, float* s,
                       float* out);
// The same against an int8 cache: key j is k_scale[j] · K[j], value j v_scale[j] · V[j] (the codes
// widened exactly; the scores and softmax weights take the scales, fp32 arithmetic throughout).
void attend_cached_row(const float* q, const int8_t* K, const float* k_scale, const int8_t* V, const float* v_scale, int ld,
                       int n, int hd, float scale, float* s, float* out);
// An int8 cache's element (cache_ref.h): x[n] as codes round(x / d) and d = max|x| / 127 (d = 0
// and zero codes for a zero vector), |x − d · code| ≤ d / 2. A vector holding NaN or Inf: zero
// codes and a NaN scale, so that what reads it is NaN, as with an fp32 cache.
void quantize_kv_row(const float* x, int n, int8_t* codes, float* scale);

}  // namespace looplm::k
