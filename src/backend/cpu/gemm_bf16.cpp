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
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include "backend/cpu/bf16.h"
#include "backend/cpu/gemm.h"
#include "looplm/error.h"

namespace looplm {

namespace {

// Tiles of 256 rows x 192 columns ran within 5% of one whole-matrix oneDNN call on the training
// shapes at 1 and 2 threads (bench/README.md, "bf16 training"); 128 x 128 lost up to 15%.
constexpr int kTileRows = 256, kTileCols = 192;

dnnl::engine& cpu_engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// op(X)[R, C] (X row-major with leading dimension ld, transposed when trans) as row-major bf16 with
// C columns, in 32 x 32 blocks so a transposed read stays within a few cache lines per row.
void to_bf16_rows(bool trans, int R, int C, const float* X, int ld, uint16_t* out) {
  constexpr int kB = 32;
  const int rb = (R + kB - 1) / kB, cb = (C + kB - 1) / kB;
#pragma omp parallel for schedule(static) if ((int64_t)R * C > (1 << 16))
  for (int t = 0; t < rb * cb; ++t) {
    const int r0 = (t / cb) * kB, c0 = (t % cb) * kB;
    const int r1 = std::min(R, r0 + kB), c1 = std::min(C, c0 + kB);
    if (trans) {
      for (int c = c0; c < c1; ++c)
        for (int r = r0; r < r1; ++r) out[(int64_t)r * C + c] = to_bf16(X[(int64_t)c * ld + r]);
    } else {
      for (int r = r0; r < r1; ++r)
        for (int c = c0; c < c1; ++c) out[(int64_t)r * C + c] = to_bf16(X[(int64_t)r * ld + c]);
    }
  }
}

struct TileKey {
  int m, n, k, ldc;
  float alpha;
  bool accumulate;
  int64_t lda, ldb;
  auto tie() const { return std::tie(m, n, k, ldc, alpha, accumulate, lda, ldb); }
  bool operator<(const TileKey& o) const { return tie() < o.tie(); }
};

// One single-threaded matmul per tile shape: C[m, n] (= or +=) alpha A[m, k] B[k, n], A and B bf16
// row-major (leading dimensions lda, ldb), C fp32 with leading dimension ldc.
struct TilePrimitive {
  dnnl::matmul matmul;
  size_t scratch_bytes;  // the scratchpad it asks for (user-managed: one per running thread)
};

class TilePrimitives {
 public:
  const TilePrimitive& get(const TileKey& key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    using dt = dnnl::memory::data_type;
    const dnnl::memory::desc a({key.m, key.k}, dt::bf16, dnnl::memory::dims{key.lda, 1});
    const dnnl::memory::desc b({key.k, key.n}, dt::bf16, dnnl::memory::dims{key.ldb, 1});
    const dnnl::memory::desc c({key.m, key.n}, dt::f32, dnnl::memory::dims{key.ldc, 1});
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
    return cache_.emplace(key, TilePrimitive{dnnl::matmul(pd), pd.scratchpad_desc().get_size()}).first->second;
  }

 private:
  std::mutex mu_;
  std::map<TileKey, TilePrimitive> cache_;
};

TilePrimitives& tile_primitives() {
  static TilePrimitives p;
  return p;
}

// Grow-only bf16 copies of the operands, per calling thread (training calls from one thread; each
// product overwrites them).
std::vector<uint16_t>& operand_buffer(int which) {
  thread_local std::vector<uint16_t> buf[2];
  return buf[which];
}

}  // namespace

bool bf16_products_supported() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512bf16");
  return yes;
#else
  return false;
#endif
}

void gemm_fixed_split_bf16(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                           const float* B, int ldb, float beta, float* C, int ldc) {
  LOOPLM_ASSERT(beta == 0.0f || beta == 1.0f, "gemm_fixed_split_bf16: beta must be 0 or 1");
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (beta == 0.0f)
      for (int i = 0; i < M; ++i) std::fill(C + (int64_t)i * ldc, C + (int64_t)i * ldc + N, 0.0f);
    return;
  }
  std::vector<uint16_t>& a = operand_buffer(0);
  std::vector<uint16_t>& b = operand_buffer(1);
  if (a.size() < (size_t)M * K) a.resize((size_t)M * K);
  if (b.size() < (size_t)K * N) b.resize((size_t)K * N);
  to_bf16_rows(ta, M, K, A, lda, a.data());  // op(A) [M, K]
  to_bf16_rows(tb, K, N, B, ldb, b.data());  // op(B) [K, N]

  const int tm = (M + kTileRows - 1) / kTileRows, tn = (N + kTileCols - 1) / kTileCols;
  // Every primitive this product needs exists before the parallel loop (at most four tile shapes).
  std::vector<const TilePrimitive*> prim((size_t)tm * tn);
  for (int t = 0; t < tm * tn; ++t) {
    const int i0 = (t / tn) * kTileRows, j0 = (t % tn) * kTileCols;
    const TileKey key{std::min(kTileRows, M - i0), std::min(kTileCols, N - j0), K, ldc, alpha, beta == 1.0f, K, N};
    prim[t] = &tile_primitives().get(key);
  }
  using dt = dnnl::memory::data_type;
#pragma omp parallel for schedule(dynamic, 1)  // always a parallel region: oneDNN inside stays single-threaded
  for (int t = 0; t < tm * tn; ++t) {
    const int i0 = (t / tn) * kTileRows, j0 = (t % tn) * kTileCols;
    const int m = std::min(kTileRows, M - i0), n = std::min(kTileCols, N - j0);
    dnnl::engine& e = cpu_engine();
    const dnnl::memory am({{m, K}, dt::bf16, dnnl::memory::dims{K, 1}}, e, a.data() + (int64_t)i0 * K);
    const dnnl::memory bm({{K, n}, dt::bf16, dnnl::memory::dims{N, 1}}, e, b.data() + j0);
    const dnnl::memory cm({{m, n}, dt::f32, dnnl::memory::dims{ldc, 1}}, e, C + (int64_t)i0 * ldc + j0);
    thread_local std::vector<uint8_t> scratch;
    if (scratch.size() < prim[t]->scratch_bytes) scratch.resize(prim[t]->scratch_bytes);
    const dnnl::memory sm({{(dnnl::memory::dim)prim[t]->scratch_bytes}, dt::u8, dnnl::memory::dims{1}}, e, scratch.data());
    dnnl::stream s(e);
    prim[t]->matmul.execute(s, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}, {DNNL_ARG_SCRATCHPAD, sm}});
  }
}

}  // namespace looplm
