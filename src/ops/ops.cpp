#include "ops/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <omp.h>

#include "ops/attention_bf16.h"
#include "ops/kernels.h"
#include "backend/cpu/bf16.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/pointwise_f32.h"
#include "ops/kernels_pointwise.h"

namespace looplm {

namespace op {

static int n_threads() { return omp_get_max_threads(); }

Node* linear(Graph& g, Node* x, Node* W, Node* b) {
  const int N = (int)x->rows, in = (int)x->cols, out = (int)W->rows;
  LOOPLM_ASSERT(W->cols == in, "linear: W [out, in] must match x [N, in]");
  Node* y = g.output(N, out, x, W, b);
  k::linear_fwd(x->v, W->v, b ? b->v : nullptr, y->v, N, in, out, g.bf16_products());
  if (y->requires_grad)
    g.record(y, [&g, x, W, b, y, N, in, out] {
      bool ax = false, aw, ab;
      float* dx = g.grad_of(x, ax);
      float* dW = g.grad_of(W, aw);
      float* db = b ? g.grad_of(b, ab) : nullptr;
      k::linear_bwd(x->v, W->v, y->g, dx, ax, dW, db, N, in, out, g.bf16_products());
    });
  return y;
}

Node* linear_packed(Graph& g, Node* x, const PackedMatrix& W, Node* b) {
  const int N = (int)x->rows, in = (int)x->cols, out = (int)W.rows;
  LOOPLM_ASSERT(W.cols == in, "linear_packed: W [out, in] must match x [N, in]");
  Node* y = g.node(N, out, false);
  if (N == 1) W.format->gemv(out, in, W.data, x->v, y->v, false, GemvKernel::best);
  else W.format->gemm(N, out, in, W.data, x->v, y->v, g.shared_scratch(W.format->gemm_scratch(out, in)));
  if (b)
    for (int n = 0; n < N; ++n)
      for (int o = 0; o < out; ++o) y->v[(int64_t)n * out + o] += b->v[o];
  return y;
}

Node* embedding(Graph& g, const int32_t* tokens, int N, Node* E, Node* P, int T_rows, const RowPlace& at) {
  const int d = (int)E->cols;
  Node* y = g.output(N, d, E, P);
  int32_t* tok = g.scratch<int32_t>(N);
  std::memcpy(tok, tokens, sizeof(int32_t) * N);
  LOOPLM_ASSERT(!at.pos || !y->requires_grad, "embedding: per-row positions are for generation (no gradients)");
  k::embedding_fwd(tok, E->v, P ? P->v : nullptr, y->v, N, d, T_rows, at.pos0, at.pos);
  if (y->requires_grad)
    g.record(y, [&g, tok, E, P, y, N, d, T_rows] {
      bool a;
      float* dE = g.grad_of(E, a);
      float* dP = P ? g.grad_of(P, a) : nullptr;
      k::embedding_bwd(tok, y->g, dE, dP, N, d, T_rows);
    });
  return y;
}

Node* rmsnorm(Graph& g, Node* x, Node* w, double eps) {
  const int N = (int)x->rows, d = (int)x->cols;
  Node* y = g.output(N, d, x, w);
  float* rstd = g.scratch<float>(N);
  k::rmsnorm_fwd(x->v, w->v, y->v, rstd, N, d, eps);
  if (y->requires_grad)
    g.record(y, [&g, x, w, y, rstd, N, d] {
      bool ax = false, aw;
      float* dx = g.grad_of(x, ax);
      float* dw = g.grad_of(w, aw);
      k::rmsnorm_bwd(x->v, w->v, rstd, y->g, dx, ax, dw, g.shared_scratch((size_t)k::row_chunks(N) * d), N, d);
    });
  return y;
}

Node* layernorm(Graph& g, Node* x, Node* w, Node* b, double eps) {
  const int N = (int)x->rows, d = (int)x->cols;
  Node* y = g.output(N, d, x, w, b);
  float* mean = g.scratch<float>(N);
  float* rstd = g.scratch<float>(N);
  k::layernorm_fwd(x->v, w ? w->v : nullptr, b ? b->v : nullptr, y->v, mean, rstd, N, d, eps);
  if (y->requires_grad)
    g.record(y, [&g, x, w, b, y, mean, rstd, N, d] {
      bool ax = false, a;
      float* dx = g.grad_of(x, ax);
      float* dw = w ? g.grad_of(w, a) : nullptr;
      float* db = b ? g.grad_of(b, a) : nullptr;
      k::layernorm_bwd(x->v, w ? w->v : nullptr, mean, rstd, y->g, dx, ax, dw, db,
                       g.shared_scratch((size_t)k::row_chunks(N) * 2 * d), N, d);
    });
  return y;
}

static size_t attention_scratch(int T, int hd) { return (size_t)n_threads() * (2 * (size_t)T * T + 4 * (size_t)T * hd); }

Node* attention(Graph& g, Node* qkv, int B, int T, int H, RopeAngles rope, const AttnOptions& ao) {
  const int Hkv = ao.kv_heads > 0 ? ao.kv_heads : H, hd = (int)qkv->cols / (H + 2 * Hkv), dq = H * hd;
  LOOPLM_ASSERT(qkv->rows == (int64_t)B * T && (int64_t)(H + 2 * Hkv) * hd == qkv->cols && H % Hkv == 0,
                "attention: qkv must be [B*T, (H + 2 Hkv) hd]");
  Node* y = g.output((int64_t)B * T, dq, qkv);
  float* lse = g.scratch<float>((size_t)B * H * T);
  LOOPLM_ASSERT(!rope || T <= rope.positions, "attention: positions beyond the RoPE table");
  const float* cs = rope.cos;
  const float* sn = rope.sin;
  const double scale = ao.scale;
  const bool strict = ao.strict;
  const bool bf16 = g.bf16_products();  // the products in bf16, as the layers' (ops/attention_bf16.h)
  if (bf16)
    k::attention_fwd_bf16(qkv->v, y->v, lse, B, T, H, hd, cs, sn, scale, strict, Hkv);
  else
    k::attention_fwd(qkv->v, y->v, lse, B, T, H, hd, cs, sn, g.shared_scratch(attention_scratch(T, hd)), scale, strict,
                     Hkv);
  if (ao.lse) *ao.lse = lse;
  if (y->requires_grad)
    g.record(y, [&g, qkv, y, lse, B, T, H, Hkv, hd, cs, sn, scale, strict, bf16] {
      bool acc = false;
      float* dqkv = g.grad_of(qkv, acc);
      if (!dqkv) return;
      if (bf16)
        k::attention_bwd_bf16(qkv->v, lse, y->g, dqkv, acc, B, T, H, hd, cs, sn, scale, strict, Hkv);
      else
        k::attention_bwd(qkv->v, lse, y->g, dqkv, acc, B, T, H, hd, cs, sn,
                         g.shared_scratch(attention_scratch(T, hd)), scale, strict, Hkv);
    });
  return y;
}

namespace {
// One (sequence, head) of a cache: keys and values [capacity, w] (and, int8, their scales per position).
template <class E>
struct HeadCache {
  E* k;
  E* v;
  float* k_scale = nullptr;
  float* v_scale = nullptr;
};

// Position p's head vector x[hd] into the cache: fp32 as it is, bf16 rounded, int8 as codes and a
// scale (quantize_kv_row). keep > 0 (the mean policy): keep · (what is there) + take · x.
inline float get(const float* src, int i) { return src[i]; }
inline float get(const uint16_t* src, int i) { return from_bf16(src[i]); }
inline void put(float* dst, int i, float x) { dst[i] = x; }
inline void put(uint16_t* dst, int i, float x) { dst[i] = to_bf16(x); }
template <class E>
void store(E* dst, float*, const float* x, int hd, float keep, float take) {
  if (keep > 0)
    for (int i = 0; i < hd; ++i) put(dst, i, keep * get(dst, i) + take * x[i]);
  else
    for (int i = 0; i < hd; ++i) put(dst, i, x[i]);
}
void store(int8_t* dst, float* scale, const float* x, int hd, float keep, float take) {
  float blend[kMaxHeadDim];
  LOOPLM_ASSERT(hd <= kMaxHeadDim, "a head wider than Config::validate allows");
  if (keep > 0) {
    for (int i = 0; i < hd; ++i) blend[i] = keep * (*scale * (float)dst[i]) + take * x[i];
    x = blend;
  }
  k::quantize_kv_row(x, hd, dst, scale);
}

template <class E>  // fp32, bf16
inline void attend_row(const float* q, const HeadCache<E>& c, int w, int n, int hd, float scale, float* s, float* out) {
  k::attend_cached_row(q, c.k, c.v, w, n, hd, scale, s, out);
}
inline void attend_row(const float* q, const HeadCache<int8_t>& c, int w, int n, int hd, float scale, float* s, float* out) {
  k::attend_cached_row(q, c.k, c.k_scale, c.v, c.v_scale, w, n, hd, scale, s, out);
}

// One (batch row, key/value head) of attention_cached: the T new keys/values into the cache
// (position p at K + p·w), then each new query of the group's G query heads against the keys up to
// its position. X: the row's qkv (rows ld apart: q | k | v, dq and dkv wide); Y: its output (rows dq apart).
template <class E>
void attend_group(const float* X, int T, int ld, int dq, int dkv, int hd, int kvh, int G, int p0, const HeadCache<E>& c,
                  int w, RopeAngles rope, const CacheRef& cache, float keep, float take, float scale, int shift, float* s,
                  float* Y) {
  const int half = hd / 2;
  LOOPLM_ASSERT(hd <= kMaxHeadDim, "a head wider than Config::validate allows");  // a config's limit, checked here too
  float q[kMaxHeadDim];
  float kr[kMaxHeadDim];
  for (int t = 0; t < T && cache.write; ++t) {
    const float* kn = X + (int64_t)t * ld + dq + (int64_t)kvh * hd;
    const float* vn = kn + dkv;
    const int p = p0 + t;
    const float* knr = kn;
    if (rope) {
      k::rope_fwd(kn, ld, kr, hd, rope.cos + (size_t)p * half, rope.sin + (size_t)p * half, 1, hd);
      knr = kr;
    }
    store(c.k + (int64_t)p * w, c.k_scale ? c.k_scale + p : nullptr, knr, hd, keep, take);
    store(c.v + (int64_t)p * w, c.v_scale ? c.v_scale + p : nullptr, vn, hd, keep, take);
  }
  for (int gi = 0; gi < G; ++gi) {
    const int h = kvh * G + gi;
    for (int t = 0; t < T; ++t) {
      const int p = p0 + t, n = p + 1 - shift;  // keys 0..p (strict: ..p-1)
      const float* Q = X + (int64_t)t * ld + (int64_t)h * hd;
      float* out = Y + (int64_t)t * dq + (int64_t)h * hd;
      if (n == 0) {
        std::fill(out, out + hd, 0.0f);
        continue;
      }
      if (rope) k::rope_fwd(Q, ld, q, hd, rope.cos + (size_t)p * half, rope.sin + (size_t)p * half, 1, hd);
      else std::memcpy(q, Q, sizeof(float) * hd);
      attend_row(q, c, w, n, hd, scale, s, out);
    }
  }
}
}  // namespace

Node* attention_cached(Graph& g, Node* qkv, int B, int T, int H, RopeAngles rope, const CacheRef& cache,
                       const RowPlace& at, const AttnOptions& ao) {
  const int Hkv = ao.kv_heads > 0 ? ao.kv_heads : H, G = H / Hkv, hd = (int)qkv->cols / (H + 2 * Hkv), dq = H * hd,
            dkv = Hkv * hd, ld = (int)qkv->cols, w = cache.width, cap = cache.capacity, hw = w / Hkv;
  LOOPLM_ASSERT((int64_t)(H + 2 * Hkv) * hd == qkv->cols && H % Hkv == 0, "attention_cached: qkv must be [B*T, (H + 2 Hkv) hd]");
  LOOPLM_ASSERT(w >= dkv && w % Hkv == 0, "attention_cached: the cache is narrower than the keys");
  LOOPLM_ASSERT(hd <= 1024, "attention_cached: a head dimension above 1024 (Config::validate's limit; the per-head buffers hold 1024)");
  int Tk = 0;  // the most keys any row attends over
  for (int b = 0; b < B; ++b) {
    const int end = at.at(b) + T;
    LOOPLM_ASSERT(at.at(b) >= 0 && end <= cap, "attention_cached: KV cache capacity exceeded");
    LOOPLM_ASSERT(!rope || end <= rope.positions, "attention_cached: position beyond the RoPE table");
    Tk = std::max(Tk, end);
  }
  Node* y = g.node((int64_t)B * T, dq, false);
  const float scale = ao.scale > 0 ? (float)ao.scale : 1.0f / std::sqrt((float)hd);
  const int shift = ao.strict ? 1 : 0;
  // The mean policy: the new key/value joins its slot as the (mean_step + 1)-th sample.
  const float keep = cache.mean_step > 0 ? (float)cache.mean_step / (cache.mean_step + 1) : 0.0f;
  const float take = 1.0f - keep;
  float* scores = g.shared_scratch((size_t)n_threads() * std::max(Tk, 1));
  auto group = [&](int bk) {
    const int b = bk / Hkv, h = bk % Hkv, p0 = at.at(b);
    float* s = scores + (size_t)omp_get_thread_num() * Tk;
    const float* X = qkv->v + (int64_t)b * T * ld;
    float* Y = y->v + (int64_t)b * T * dq;
    // Head-major (cache_ref.h): this head's keys one after another, hw apart.
    const int64_t off = (int64_t)at.row(b) * cap * w + (int64_t)h * cap * hw;
    switch (cache.elem) {
      case KvElem::f32:
        attend_group(X, T, ld, dq, dkv, hd, h, G, p0,
                     HeadCache<float>{static_cast<float*>(cache.k) + off, static_cast<float*>(cache.v) + off}, hw, rope,
                     cache, keep, take, scale, shift, s, Y);
        break;
      case KvElem::bf16:
        attend_group(X, T, ld, dq, dkv, hd, h, G, p0,
                     HeadCache<uint16_t>{static_cast<uint16_t*>(cache.k) + off, static_cast<uint16_t*>(cache.v) + off}, hw,
                     rope, cache, keep, take, scale, shift, s, Y);
        break;
      case KvElem::i8: {
        const int64_t soff = off / hw;  // the scales: one per (sequence, head, position)
        attend_group(X, T, ld, dq, dkv, hd, h, G, p0,
                     HeadCache<int8_t>{static_cast<int8_t*>(cache.k) + off, static_cast<int8_t*>(cache.v) + off,
                                       cache.k_scale + soff, cache.v_scale + soff},
                     hw, rope, cache, keep, take, scale, shift, s, Y);
        break;
      }
    }
  };
  if (!pool_has_threads()) {  // one thread: no OpenMP region at all (backend/cpu/parallel.h)
    for (int bk = 0; bk < B * Hkv; ++bk) group(bk);
    return y;
  }
#pragma omp parallel for schedule(dynamic, 1)
  for (int bk = 0; bk < B * Hkv; ++bk) group(bk);
  return y;
}

Node* gelu(Graph& g, Node* x) {
  Node* y = g.output(x->rows, x->cols, x);
  k::gelu_fwd(x->v, y->v, x->numel());
  if (y->requires_grad)
    g.record(y, [&g, x, y] {
      bool acc = false;
      if (float* dx = g.grad_of(x, acc)) k::gelu_bwd(x->v, y->g, dx, acc, x->numel());
    });
  return y;
}

Node* gelu_linear(Graph& g, Node* u, Node* W, Node* b) {
  const int N = (int)u->rows, f = (int)u->cols, out = (int)W->rows;
  LOOPLM_ASSERT(W->cols == f, "gelu_linear: W [out, f] must match u [N, f]");
  Node* y = g.output(N, out, u, W, b);
  float* a = g.shared_scratch((size_t)N * f);  // gelu(u), not kept
  k::gelu_fwd(u->v, a, (int64_t)N * f);
  k::linear_fwd(a, W->v, b ? b->v : nullptr, y->v, N, f, out, g.bf16_products());
  if (y->requires_grad)
    g.record(y, [&g, u, W, b, y, N, f, out] {
      bool au = false, aw, ab;
      float* du = g.grad_of(u, au);
      float* dW = g.grad_of(W, aw);
      float* db = b ? g.grad_of(b, ab) : nullptr;
      float* a = g.shared_scratch((size_t)2 * N * f);
      float* da = a + (size_t)N * f;
      k::gelu_fwd(u->v, a, (int64_t)N * f);  // recompute
      k::linear_bwd(a, W->v, y->g, du ? da : nullptr, false, dW, db, N, f, out, g.bf16_products());
      if (du) k::gelu_bwd(u->v, da, du, au, (int64_t)N * f);
    });
  return y;
}

Node* swiglu(Graph& g, Node* u) {
  const int N = (int)u->rows, f = (int)u->cols / 2;
  Node* y = g.output(N, f, u);
  k::swiglu_fwd(u->v, y->v, N, f);
  if (y->requires_grad)
    g.record(y, [&g, u, y, N, f] {
      bool acc = false;
      if (float* du = g.grad_of(u, acc)) k::swiglu_bwd(u->v, y->g, du, acc, N, f);
    });
  return y;
}

Node* axpby(Graph& g, float alpha, Node* a, Node* b) {
  LOOPLM_ASSERT(a->numel() == b->numel(), "axpby: shapes differ");
  Node* y = g.output(a->rows, a->cols, a, b);
  k::axpby_fwd(alpha, a->v, b->v, y->v, a->numel());
  if (y->requires_grad)
    g.record(y, [&g, alpha, a, b, y] {
      bool aa = false, ab = false;
      float* da = g.grad_of(a, aa);
      float* db = g.grad_of(b, ab);
      k::axpby_bwd(alpha, y->g, da, aa, db, ab, y->numel());
    });
  return y;
}

Node* concat(Graph& g, Node* a, Node* b) {
  LOOPLM_ASSERT(a->rows == b->rows, "concat: row counts differ");
  const int N = (int)a->rows, ca = (int)a->cols, cb = (int)b->cols;
  Node* y = g.output(N, ca + cb, a, b);
  k::concat_fwd(a->v, ca, b->v, cb, y->v, N);
  if (y->requires_grad)
    g.record(y, [&g, a, b, y, N, ca, cb] {
      bool aa = false, ab = false;
      float* da = g.grad_of(a, aa);
      float* db = g.grad_of(b, ab);
      k::concat_bwd(y->g, da, aa, ca, db, ab, cb, N);
    });
  return y;
}

Node* slice_cols(Graph& g, Node* x, int c0, int n) {
  const int N = (int)x->rows, C = (int)x->cols;
  LOOPLM_ASSERT(c0 >= 0 && n >= 0 && c0 + n <= C, "slice_cols: columns out of range");
  Node* y = g.output(N, n, x);
  k::slice_cols_fwd(x->v, C, c0, n, y->v, N);
  if (y->requires_grad)
    g.record(y, [&g, x, y, N, C, c0, n] {
      bool acc = false;
      if (float* dx = g.grad_of(x, acc)) k::slice_cols_bwd(y->g, dx, acc, C, c0, n, N);
    });
  return y;
}

Node* cross_entropy(Graph& g, Node* logits, const int32_t* targets) {
  const int N = (int)logits->rows, V = (int)logits->cols;
  Node* loss = g.output(1, 1, logits);
  int32_t* tgt = g.scratch<int32_t>(N);
  std::memcpy(tgt, targets, sizeof(int32_t) * N);
  float* lse = g.scratch<float>(N);
  int counted = 0;
  loss->v[0] = (float)k::xent_fwd(logits->v, tgt, lse, N, V, &counted);
  if (loss->requires_grad)
    g.record(loss, [&g, logits, tgt, lse, loss, N, V, counted] {
      bool acc = false;
      if (float* dz = g.grad_of(logits, acc))
        k::xent_bwd(logits->v, tgt, lse, counted ? loss->g[0] / counted : 0.0f, dz, acc, N, V);
    });
  return loss;
}

}  // namespace op
}  // namespace looplm
