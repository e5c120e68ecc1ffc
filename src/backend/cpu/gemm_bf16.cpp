// Matrix products with bf16 operands and fp32 results (training with precision = bf16,
// docs/numerics.md): both operands are rounded to bf16 (round to nearest even, bf16.h's to_bf16),
// oneDNN's matmul multiplies them with fp32 accumulation (its brgemm kernels for AVX512_BF16 /
// AMX), and the result lands in fp32.
//
// Thread-count independence, as gemm_fixed_split: C is cut into a fixed grid of tiles and each tile
// is one single-threaded oneDNN matmul over the whole K. The primitives are created with one
// OpenMP thread (oneDNN plans its work split for the thread count it sees at creation) and run
// inside our parallel loop, where oneDNN stays on the calling thread. A tile's bits then depend
// on the matrix shapes only.
#include <algorithm>
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/gemm_pairs_bf16.h"
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include "backend/cpu/gemm.h"
#include "backend/cpu/isa.h"
#include "looplm/error.h"

namespace looplm {

namespace {

// Tiles large enough that a single-threaded matmul runs near oneDNN's whole-matrix speed, small
// enough that a d 384 layer's product still splits into several per thread (the choice and its
// measurement: bench/README.md, "bf16 training").
constexpr int kTileRows = 256, kTileCols = 192;

dnnl::engine& cpu_engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// n floats rounded to bf16 (bf16.h's to_bf16, written without a branch so it vectorises).
LOOPLM_ISA_CLONES void round_span(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, 4);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, quiet_nan = (u >> 16) | 0x40u;
    out[i] = (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
  }
}

// A tile's product: C[m, n] (= or +=) alpha op(A)[m, k] op(B)[k, n] with A and B bf16 as stored
// (row-major, leading dimensions lda and ldb; a transposed operand is read through its strides,
// which oneDNN's bf16 kernels take at nearly the plain speed) and C fp32 (leading dimension ldc).
struct TileKey {
  int m, n, k;
  bool ta, tb;
  int64_t lda, ldb, ldc;
  float alpha;
  bool accumulate;
  auto tie() const { return std::tie(m, n, k, ta, tb, lda, ldb, ldc, alpha, accumulate); }
  bool operator<(const TileKey& o) const { return tie() < o.tie(); }
};

struct TilePrimitive {
  dnnl::matmul matmul;
  dnnl::memory::desc a, b, c;
  size_t scratch_bytes;  // the scratchpad it asks for (user-managed: one per running thread)
};

class TilePrimitives {
 public:
  const TilePrimitive& get(const TileKey& key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    using dt = dnnl::memory::data_type;
    using dims = dnnl::memory::dims;
    const dnnl::memory::desc a({key.m, key.k}, dt::bf16, key.ta ? dims{1, key.lda} : dims{key.lda, 1});
    const dnnl::memory::desc b({key.k, key.n}, dt::bf16, key.tb ? dims{1, key.ldb} : dims{key.ldb, 1});
    const dnnl::memory::desc c({key.m, key.n}, dt::f32, dims{key.ldc, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (key.alpha != 1.0f) attr.set_output_scales(0, {key.alpha});
    if (key.accumulate) {
      dnnl::post_ops po;
      po.append_sum(1.0f);
      attr.set_post_ops(po);
    }
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);  // plan the primitive for the one thread that will run it
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, cpu_engine());
    omp_set_num_threads(threads);
    TilePrimitive p{dnnl::matmul(pd), a, b, c, pd.scratchpad_desc().get_size()};
    return cache_.emplace(key, std::move(p)).first->second;
  }

 private:
  std::mutex mu_;
  std::map<TileKey, TilePrimitive> cache_;
};

TilePrimitives& tile_primitives() {
  static TilePrimitives p;
  return p;
}

}  // namespace

bool bf16_products_supported() {
#if defined(__x86_64__) && defined(__GNUC__)
  return cpu_features().avx512 && cpu_features().avx512vl && cpu_features().avx512_bf16;  // VL: the attention kernels' 256-bit stores
#else
  return false;
#endif
}

void round_to_bf16(int rows, int cols, const float* X, int ld, uint16_t* out) {
  // The same bits either way; the CPU's own conversion, faster, where it has one.
  static const bool native = bf16_products_supported();
  auto* span = native ? round_span_native : round_span;
#pragma omp parallel for schedule(static) if ((int64_t)rows * cols > (1 << 16))
  for (int r = 0; r < rows; ++r) span(X + (int64_t)r * ld, cols, out + (int64_t)r * cols);
}

uint16_t* bf16_buffer(Bf16Buffer which, size_t n) {
  thread_local std::vector<uint16_t> buf[(int)Bf16Buffer::count];
  std::vector<uint16_t>& b = buf[(int)which];
  if (b.size() < n) b.resize(n);
  return b.data();
}

void gemm_bf16(bool ta, bool tb, int M, int N, int K, float alpha, const uint16_t* A, int lda, const uint16_t* B,
               int ldb, float beta, float* C, int ldc) {
  LOOPLM_ASSERT(beta == 0.0f || beta == 1.0f, "gemm_bf16: beta must be 0 or 1");
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (beta == 0.0f)
      for (int i = 0; i < M; ++i) std::fill(C + (int64_t)i * ldc, C + (int64_t)i * ldc + N, 0.0f);
    return;
  }
  const int tm = (M + kTileRows - 1) / kTileRows, tn = (N + kTileCols - 1) / kTileCols;
  // Every primitive this product needs exists before the parallel loop (at most four tile shapes).
  std::vector<const TilePrimitive*> prim((size_t)tm * tn);
  for (int t = 0; t < tm * tn; ++t) {
    const int i0 = (t / tn) * kTileRows, j0 = (t % tn) * kTileCols;
    const TileKey key{std::min(kTileRows, M - i0), std::min(kTileCols, N - j0), K, ta, tb, lda, ldb, ldc, alpha,
                      beta == 1.0f};
    prim[t] = &tile_primitives().get(key);
  }
#pragma omp parallel for schedule(dynamic, 1)  // always a parallel region: oneDNN inside stays single-threaded
  for (int t = 0; t < tm * tn; ++t) {
    const int i0 = (t / tn) * kTileRows, j0 = (t % tn) * kTileCols;
    const TilePrimitive& p = *prim[t];
    dnnl::engine& e = cpu_engine();
    // op(A) rows i0.. and op(B) columns j0..
    const dnnl::memory am(p.a, e, const_cast<uint16_t*>(ta ? A + i0 : A + (int64_t)i0 * lda));
    const dnnl::memory bm(p.b, e, const_cast<uint16_t*>(tb ? B + (int64_t)j0 * ldb : B + j0));
    const dnnl::memory cm(p.c, e, C + (int64_t)i0 * ldc + j0);
    thread_local std::vector<uint8_t> scratch;
    if (scratch.size() < p.scratch_bytes) scratch.resize(p.scratch_bytes);
    const dnnl::memory sm({{(dnnl::memory::dim)p.scratch_bytes}, dnnl::memory::data_type::u8, dnnl::memory::dims{1}}, e,
                          scratch.data());
    dnnl::stream s(e);
    p.matmul.execute(s, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}, {DNNL_ARG_SCRATCHPAD, sm}});
  }
}

void gemm_fixed_split_bf16(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                           const float* B, int ldb, float beta, float* C, int ldc) {
  // Each operand rounded as stored ([M, K] or, transposed, [K, M]), packed to its own width.
  const int a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
  uint16_t* a = bf16_buffer(Bf16Buffer::product_a, (size_t)a_rows * a_cols);
  uint16_t* b = bf16_buffer(Bf16Buffer::product_b, (size_t)b_rows * b_cols);
  round_to_bf16(a_rows, a_cols, A, lda, a);
  round_to_bf16(b_rows, b_cols, B, ldb, b);
  gemm_bf16(ta, tb, M, N, K, alpha, a, a_cols, b, b_cols, beta, C, ldc);
}

}  // namespace looplm
