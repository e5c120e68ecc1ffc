// Batch-1 decoding from bf16 weight copies: the rounding, the packed layout, every matrix-vector
// kernel this CPU has, and a whole model (bf16 decoding = fp32 decoding of the rounded model).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <random>
#include <vector>

#include "backend/cpu/bf16.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/pointwise_f32.h"
#include "backend/cpu/weight_format.h"
#include "core/rng.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "ops/kernels.h"
#include "ops/ops.h"
#include "train/train_step.h"

using namespace looplm;

namespace {
// 2 OpenMP threads for the scope (the few-rows tests split their rows between them).
struct TwoThreads {
  int before = omp_get_max_threads();
  TwoThreads() { omp_set_num_threads(2); }
  ~TwoThreads() { omp_set_num_threads(before); }
};
}  // namespace

TEST(Bf16, RoundsToNearestEven) {
  auto bits = [](float f) { return to_bf16(f); };
  EXPECT_EQ(bits(1.0f), 0x3f80);
  EXPECT_EQ(bits(1.0f + 0x1p-8f), 0x3f80);           // tie: stays on the even mantissa
  EXPECT_EQ(bits(1.0f + 3 * 0x1p-8f), 0x3f82);       // tie: rounds up to the even one
  EXPECT_EQ(bits(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);  // above the tie
  EXPECT_EQ(bits(-2.5f), 0xc020);
  EXPECT_EQ(bits(INFINITY), 0x7f80);
  EXPECT_TRUE(std::isnan(from_bf16(bits(NAN))));
  EXPECT_EQ(from_bf16(bits(3.0f)), 3.0f);
}

// Every available kernel (fp32 and bf16) against a double-precision product of the same rounded weights, on
// shapes around the 4-row blocks and 32-column chunks. Tolerance 1e-5 of Σ|w x|: fp32 sums of
// ≤ 400 terms (K · 6e-8 relative ≈ 2.4e-5 worst case, ~1e-6 typical), and x's hi + lo bf16 split
// in the AVX512-BF16 kernel (2^-17 relative).
TEST(Bf16, GemvKernelsMatchDouble) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0, 1);
  for (int N : {1, 3, 4, 7, 67})
    for (int K : {1, 31, 32, 33, 100, 384}) {
      std::vector<float> W((size_t)N * K), x(K), y0(N, 0.25f);
      for (auto& w : W) w = nd(rng);
      for (auto& v : x) v = nd(rng);
      for (GemvKernel kern : gemv_kernels_available()) {  // the fp32 kernels, exact weights
        std::vector<float> y(N);
        gemv_rows(N, K, W.data(), K, x.data(), y.data(), false, kern);
        for (int n = 0; n < N; ++n) {
          double r = 0, a = 0;
          for (int k = 0; k < K; ++k) r += (double)W[(size_t)n * K + k] * x[k], a += std::fabs(W[(size_t)n * K + k] * x[k]);
          ASSERT_NEAR(y[n], r, 1e-5 * (a + 1)) << "fp32 kernel " << (int)kern << " N " << N << " K " << K;
        }
      }
      std::vector<uint16_t> P((size_t)N * K);
      pack_bf16(W.data(), N, K, P.data());
      std::vector<double> ref(N), mag(N);
      for (int n = 0; n < N; ++n)
        for (int k = 0; k < K; ++k) {
          const double w = from_bf16(to_bf16(W[(size_t)n * K + k]));
          ref[n] += w * x[k];
          mag[n] += std::fabs(w * x[k]);
        }
      for (GemvKernel kern : gemv_kernels_available())
        for (bool acc : {false, true}) {
          std::vector<float> y = y0;
          gemv_rows_bf16(N, K, P.data(), x.data(), y.data(), acc, kern);
          for (int n = 0; n < N; ++n)
            ASSERT_NEAR(y[n], ref[n] + (acc ? 0.25 : 0.0), 1e-5 * (mag[n] + 1))
                << "kernel " << (int)kern << " N " << N << " K " << K << " row " << n;
        }
    }
}

// The AVX-512 fp32 kernel's two access patterns (one row after another, or four side by side:
// gemv_rows picks by CPU) sum every row in the same order, so they agree bit for bit, on shapes
// around the 4-row blocks and the 16-column steps, with a row stride past K, both with and
// without accumulation. Skipped without AVX-512.
TEST(Bf16, F32KernelRowsSideBySideIsBitIdentical) {
  std::mt19937 rng(13);
  std::normal_distribution<float> nd(0, 1);
  for (int N : {1, 3, 4, 5, 9, 67})
    for (int K : {1, 15, 16, 17, 100, 384}) {
      const int ldw = K + 3;
      std::vector<float> W((size_t)N * ldw), x(K), y0(N);
      for (auto& w : W) w = nd(rng);
      for (auto& v : x) v = nd(rng);
      for (auto& v : y0) v = nd(rng);
      for (bool acc : {false, true}) {
        std::vector<float> one = y0, four = y0;
        if (!gemv_rows_f32_avx512_by(1, N, K, W.data(), ldw, x.data(), one.data(), acc)) GTEST_SKIP() << "no AVX-512";
        ASSERT_TRUE(gemv_rows_f32_avx512_by(4, N, K, W.data(), ldw, x.data(), four.data(), acc));
        for (int n = 0; n < N; ++n)
          ASSERT_EQ(one[n], four[n]) << "N " << N << " K " << K << " row " << n << " acc " << acc;
        // and the value itself, loosely (fp32 sums of K products; the bit identity is the point)
        double r = acc ? y0[N - 1] : 0;
        for (int k = 0; k < K; ++k) r += (double)W[(size_t)(N - 1) * ldw + k] * x[k];
        ASSERT_NEAR(four[N - 1], r, 1e-4 * (std::fabs(r) + K));
      }
    }
}

// The few-rows kernel (batched decoding) gives each input row what the batch-1 kernel (the best
// this CPU has: AVX512-BF16 or AVX2) gives it: the same products summed in the same order
// (bit-identical), on shapes around the 4-row blocks, 32-column chunks and groups of 4 input rows.
// Skipped where there is no few-rows kernel (AVX-512 without BF16, or no AVX2).
TEST(Bf16, FewRowsKernelIsTheMatrixVectorKernelPerRow) {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0, 1);
  bool ran = false;
  // 2 threads, and N = 260 with K = 384 is large enough for the rows to be split between them
  // (a buffer read through a thread_local name inside the parallel region once crashed only there).
  const TwoThreads two;
  for (int M : {1, 2, 4, 5, 8, 13})
    for (int N : {3, 4, 7, 67, 260})
      for (int K : {1, 31, 33, 384}) {
        std::vector<float> W((size_t)N * K), X((size_t)M * (K + 3)), Y((size_t)M * (N + 1), -7.0f);
        for (auto& w : W) w = nd(rng);
        for (auto& v : X) v = nd(rng);
        std::vector<uint16_t> P((size_t)N * K);
        pack_bf16(W.data(), N, K, P.data());
        if (!gemm_rows_bf16_few(M, N, K, P.data(), X.data(), K + 3, Y.data(), N + 1)) GTEST_SKIP() << "no few-rows kernel";
        ran = true;
        for (int m = 0; m < M; ++m) {
          std::vector<float> y(N);
          gemv_rows_bf16(N, K, P.data(), X.data() + (size_t)m * (K + 3), y.data(), false, GemvKernel::best);
          for (int n = 0; n < N; ++n)
            ASSERT_EQ(Y[(size_t)m * (N + 1) + n], y[n]) << "M " << M << " N " << N << " K " << K << " row " << m;
          ASSERT_EQ(Y[(size_t)m * (N + 1) + N], -7.0f);  // the gap between output rows is not written
        }
      }
  EXPECT_TRUE(ran);
}

// The fp32 few-rows kernel (AVX-512 or AVX2) likewise gives each input row the best matrix-vector
// kernel's result, bit for bit (so a batched decode is each sequence's alone), on odd shapes (K
// around the AVX2 kernel's 8- and 16-column steps), at 2 threads on a shape whose rows get split.
TEST(Bf16, FewRowsF32KernelIsTheMatrixVectorKernelPerRow) {
  std::mt19937 rng(19);
  std::normal_distribution<float> nd(0, 1);
  const TwoThreads two;
  for (int M : {1, 3, 4, 7, 8, 9, 16})
    for (int N : {1, 3, 4, 67, 260})
      for (int K : {1, 7, 8, 15, 16, 17, 33, 384}) {
        std::vector<float> W((size_t)N * (K + 1)), X((size_t)M * (K + 2)), Y((size_t)M * (N + 1), -7.0f);
        for (auto& w : W) w = nd(rng);
        for (auto& v : X) v = nd(rng);
        if (!gemm_rows_f32_few(M, N, K, W.data(), K + 1, X.data(), K + 2, Y.data(), N + 1)) GTEST_SKIP() << "no AVX2";
        for (int m = 0; m < M; ++m) {
          std::vector<float> y(N);
          gemv_rows(N, K, W.data(), K + 1, X.data() + (size_t)m * (K + 2), y.data(), false, GemvKernel::best);
          for (int n = 0; n < N; ++n)
            ASSERT_EQ(Y[(size_t)m * (N + 1) + n], y[n]) << "M " << M << " N " << N << " K " << K << " row " << m;
          ASSERT_EQ(Y[(size_t)m * (N + 1) + N], -7.0f);
        }
      }
}

// The AVX-512 fp32 few-rows kernel's two sweeps (one weight row at a time, or four: picked by CPU
// as for batch 1) each give every input row the one-row batch-1 kernel's result bit for bit, on
// row counts around the 4-row sweep (N % 4 rows go one at a time) and the 4 / 2 / 1 input-row
// groups, so a batched decode is each sequence's alone on every AVX-512 CPU. Skipped without AVX-512.
TEST(Bf16, FewRowsF32SweepsAreTheMatrixVectorKernelPerRow) {
  std::mt19937 rng(29);
  std::normal_distribution<float> nd(0, 1);
  for (int rows : {1, 4})
    for (int M : {1, 2, 3, 4, 5, 7, 8})
      for (int N : {1, 3, 4, 5, 8, 9, 67})
        for (int K : {1, 15, 16, 17, 100}) {
          const int ldw = K + 3, ldx = K + 2, ldy = N + 1;
          std::vector<float> W((size_t)N * ldw), X((size_t)M * ldx), Y((size_t)M * ldy, -7.0f);
          for (auto& w : W) w = nd(rng);
          for (auto& v : X) v = nd(rng);
          if (!gemm_rows_f32_few_avx512_by(rows, M, N, K, W.data(), ldw, X.data(), ldx, Y.data(), ldy))
            GTEST_SKIP() << "no AVX-512";
          for (int m = 0; m < M; ++m) {
            std::vector<float> y(N);
            ASSERT_TRUE(gemv_rows_f32_avx512_by(1, N, K, W.data(), ldw, X.data() + (size_t)m * ldx, y.data(), false));
            for (int n = 0; n < N; ++n)
              ASSERT_EQ(Y[(size_t)m * ldy + n], y[n]) << "rows " << rows << " M " << M << " N " << N << " K " << K;
            ASSERT_EQ(Y[(size_t)m * ldy + N], -7.0f);  // the gap between output rows is not written
          }
        }
}

// dot_rows (attention's scores over cached keys: 16 rows reduced together on AVX-512, 8 on AVX2)
// against a double product on row counts around 8 and 16 and widths around the 8- and 16-lane steps
// and the AVX-512 kernel's 128 limit, for fp32 and bf16 keys; 1e-5 of Σ|w x| (fp32 partial sums in
// another order).
TEST(Gemv, DotRowsMatchDouble) {
  std::mt19937 rng(23);
  std::normal_distribution<float> nd(0, 1);
  for (int N : {1, 7, 8, 9, 15, 16, 17, 40})
    for (int K : {1, 7, 16, 33, 64, 128, 200}) {
      const int ld = K + 3;
      std::vector<float> W((size_t)N * ld), x(K), y(N + 1, -7.0f);
      for (auto& w : W) w = nd(rng);
      for (auto& v : x) v = nd(rng);
      std::vector<uint16_t> Wh(W.size());
      for (size_t i = 0; i < W.size(); ++i) Wh[i] = to_bf16(W[i]);
      for (bool half : {false, true}) {
        std::fill(y.begin(), y.end(), -7.0f);
        if (half) dot_rows(N, K, Wh.data(), ld, x.data(), y.data());
        else dot_rows(N, K, W.data(), ld, x.data(), y.data());
        for (int n = 0; n < N; ++n) {
          double ref = 0, mag = 0;
          for (int k = 0; k < K; ++k) {
            const size_t at = (size_t)n * ld + k;
            const double t = (half ? (double)from_bf16(Wh[at]) : (double)W[at]) * x[k];
            ref += t, mag += std::fabs(t);
          }
          ASSERT_NEAR(y[n], ref, 1e-5 * mag) << (half ? "bf16" : "fp32") << " N " << N << " K " << K << " row " << n;
        }
        ASSERT_EQ(y[N], -7.0f);
      }
    }
}

// Decode attention against a bf16 KV cache: softmax(K q · scale) V with K, V widened exactly, on
// head widths below, at and between the kernels' 8- and 64-column steps, against double.
// Tolerance 1e-5 of Σ p |v|: fp32 sums of n products of probabilities and values.
TEST(Bf16, CachedAttentionRowMatchesDouble) {
  std::mt19937 rng(29);
  std::normal_distribution<float> nd(0, 1);
  for (int n : {1, 5, 37})
    for (int hd : {4, 20, 64, 72, 100, 128, 136}) {
      const int ld = 2 * hd + 3;
      std::vector<float> q(hd), s(n), out(hd + 1, -7.0f);
      std::vector<uint16_t> K((size_t)n * ld), V((size_t)n * ld);
      for (auto& v : q) v = nd(rng);
      for (auto& v : K) v = to_bf16(nd(rng));
      for (auto& v : V) v = to_bf16(nd(rng));
      const double scale = 1 / std::sqrt((double)hd);
      k::attend_cached_row(q.data(), K.data(), V.data(), ld, n, hd, (float)scale, s.data(), out.data());
      std::vector<double> p(n);
      double mx = -1e300, z = 0;
      for (int j = 0; j < n; ++j) {
        double d = 0;
        for (int i = 0; i < hd; ++i) d += (double)q[i] * from_bf16(K[(size_t)j * ld + i]);
        p[j] = d * scale, mx = std::max(mx, p[j]);
      }
      for (int j = 0; j < n; ++j) z += (p[j] = std::exp(p[j] - mx));
      for (int i = 0; i < hd; ++i) {
        double o = 0, mag = 0;
        for (int j = 0; j < n; ++j) {
          const double t = p[j] / z * from_bf16(V[(size_t)j * ld + i]);
          o += t, mag += std::fabs(t);
        }
        ASSERT_NEAR(out[i], o, 1e-5 * (mag + 1e-3)) << "n " << n << " hd " << hd << " column " << i;
      }
      ASSERT_EQ(out[hd], -7.0f);
    }
}

namespace {
// Greedy decode of `steps` tokens from a one-token prompt, every step batch 1 (so every matrix
// product takes the decode path); returns all logits.
std::vector<float> decode_logits(const Model& m, int steps) {
  const Config& c = m.config();
  KVCache cache(c, 1, c.context, c.R, m.kv_width());
  Graph g;
  Graph::NoGrad ng(g);
  RunOptions o;
  o.cache = &cache;
  std::vector<float> all;
  int32_t tok = 7;
  for (int t = 0; t < steps; ++t) {
    o.place.pos0 = t;
    Node* z = m.logits(g, &tok, 1, 1, o);
    all.insert(all.end(), z->v, z->v + c.vocab_size);
    tok = (int32_t)(std::max_element(z->v, z->v + c.vocab_size) - z->v);
    g.reset();
  }
  return all;
}
}  // namespace

// A model decoded from its bf16 weight format computes what the fp32 path computes on a model whose
// matrices were rounded to bf16 (untied head, so the embedding lookup reads the same values in
// both). Tolerance 1e-4 of the logit scale: only fp32 summation order and x's hi + lo split differ.
// Also: the bf16 model stays close to the fp32 one (3e-2 of the scale: weights carry 2^-9
// relative rounding error). Each matrix is packed as the product sees it (q|k|v together), so row
// counts that are not a multiple of the layout's 4 (d_model = 30: q|k|v has 90 rows) pack too.
TEST(Bf16, ModelDecodeEqualsRoundedWeights) {
  for (auto [mlp, d] : {std::pair{"gelu", 40}, {"swiglu", 40}, {"gelu", 30}}) {
    Config c;
    c.vocab_size = 61;  // not a multiple of 4: the head's last rows are plain
    c.d_model = d;      // not a multiple of 32: the kernels' tail chunks
    c.n_heads = d == 30 ? 3 : 2;
    c.context = 12;
    c.n_prelude = 1;
    c.n_core = 1;
    c.n_coda = 1;
    c.R = 2;
    c.mlp = mlp;
    c.bias = true;
    c.tie_embeddings = false;
    c.validate();
    Model mf(c), mb(c), rounded(c);
    mf.init_weights(3);
    for (auto& w : mf.params().values()) w *= 4.0f;  // away from near-ties
    std::copy(mf.params().values().begin(), mf.params().values().end(), mb.params().values().begin());
    std::copy(mf.params().values().begin(), mf.params().values().end(), rounded.params().values().begin());
    for (const ParamInfo& p : rounded.params().infos())
      if (p.shape.size() >= 2 && p.name != "tok_emb.weight" && p.name != "pos_emb.weight")
        for (size_t i = p.offset; i < p.offset + p.numel; ++i)
          rounded.params().values()[i] = from_bf16(to_bf16(rounded.params().values()[i]));
    mb.prepare_inference(*find_weight_format("bf16"));
    mf.prepare_inference(*find_weight_format("fp32"));
    const int steps = 8;
    std::vector<float> zb = decode_logits(mb, steps), zr = decode_logits(rounded, steps), zf = decode_logits(mf, steps);
    float scale = 0, moved = 0;
    for (float v : zf) scale = std::max(scale, std::fabs(v));
    for (size_t i = 0; i < zb.size(); ++i) {
      ASSERT_NEAR(zb[i], zr[i], 1e-4 * scale) << mlp << " d " << d << " logit " << i;
      ASSERT_NEAR(zb[i], zf[i], 3e-2 * scale) << mlp << " d " << d << " logit " << i;
      moved = std::max(moved, std::fabs(zb[i] - zf[i]));
    }
    EXPECT_GT(moved, 1e-6 * scale) << "the bf16 copies were not used";
  }
}

// Every weight format's pack/unpack round trip and its two products against the scalar reference
// (unpack, then a double product) on odd shapes, for every kernel this CPU has.
TEST(WeightFormat, KernelsMatchReference) {
  for (const WeightFormat* f : weight_formats()) {
    if (f->quantized()) continue;  // tests/test_quant.cpp
    // 300 rows: bf16's many-row path widens panels of 128 rows (two whole panels and a partial one)
    for (auto [R, C] : {std::pair{1, 1}, {3, 31}, {4, 32}, {7, 33}, {13, 100}, {67, 384}, {300, 70}}) {
      std::vector<float> w((size_t)R * C);
      Rng rng(R * 1000 + C);
      for (auto& v : w) v = (float)rng.normal();
      std::vector<uint8_t> packed(f->packed_bytes(R, C));
      const void* p = w.data();
      if (f->pack) {
        f->pack(w.data(), R, C, packed.data());
        p = packed.data();
      }
      std::vector<float> back((size_t)R * C);
      f->unpack(p, R, C, back.data());
      for (size_t i = 0; i < w.size(); ++i)
        ASSERT_NEAR(back[i], w[i], std::string(f->name) == "fp32" ? 0.0 : std::fabs(w[i]) * 0x1p-8) << f->name;
      for (int N : {1, 2, 5, kFewRows + 24}) {  // more than kFewRows: the prefill path
        std::vector<float> x((size_t)N * C), y((size_t)N * R, 9.0f), scratch(f->gemm_scratch(R, C));
        for (auto& v : x) v = (float)rng.normal();
        auto check = [&](const char* what) {
          for (int n = 0; n < N; ++n)
            for (int r = 0; r < R; ++r) {
              double ref = 0, mag = 0;
              for (int k = 0; k < C; ++k) {
                ref += (double)back[(size_t)r * C + k] * x[(size_t)n * C + k];
                mag += std::fabs((double)back[(size_t)r * C + k] * x[(size_t)n * C + k]);
              }
              ASSERT_NEAR(y[(size_t)n * R + r], ref, 1e-5 * (mag + 1)) << f->name << " " << what << " " << R << "x" << C;
            }
        };
        if (N == 1) {
          for (GemvKernel k : f->kernels()) {
            f->gemv(R, C, p, x.data(), y.data(), false, k);
            check("gemv");
          }
        } else {
          f->gemm(N, R, C, p, x.data(), y.data(), scratch.data());
          check("gemm");
        }
      }
    }
  }
}

// In the emulated-CPU runs (CMakeLists.txt: qemu-x86_64 -cpu max / qemu64) the emulator must really
// hide AVX-512 (and, at the baseline, AVX2), or those runs would not exercise the fallbacks.
TEST(Isa, EmulatedCpuHidesWideUnits) {
  const char* expect = std::getenv("LOOPLM_EXPECT_ISA");
  if (!expect) GTEST_SKIP() << "native run";
  EXPECT_FALSE(__builtin_cpu_supports("avx512f"));
  EXPECT_EQ(__builtin_cpu_supports("avx2") != 0, std::string(expect) == "avx2");
  const std::vector<GemvKernel> want =  // no AVX-512 kernel; the AVX2 one only where AVX2 is
      std::string(expect) == "avx2" ? std::vector<GemvKernel>{GemvKernel::portable, GemvKernel::avx2}
                                    : std::vector<GemvKernel>{GemvKernel::portable};
  EXPECT_EQ(gemv_kernels_available(), want);
}

// ---------------------------------------------------------------- training's bf16 products
// (precision = bf16): gemm_fixed_split_bf16 is the product of the operands rounded to bf16, with
// fp32 accumulation, for every transpose, alpha and beta the layers use, shapes with edge tiles
// (the tile grid is 256 x 192) and odd K; its bits do not depend on the thread count.
TEST(Bf16, TrainingProductsAreTheRoundedOperandsProduct) {
  if (!bf16_products_supported()) GTEST_SKIP() << "this CPU has no AVX512_BF16 (Bf16.TrainingPrecisionNeedsTheCpuFeature)";
  std::mt19937 gen(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  struct Shape { int M, N, K; };
  for (const Shape s : {Shape{300, 200, 77}, Shape{5, 3, 1}, Shape{513, 385, 64}}) {
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (float alpha : {1.0f, 1.5f})
          for (float beta : {0.0f, 1.0f}) {
            const int lda = (ta ? s.M : s.K) + 3, ldb = (tb ? s.K : s.N) + 1, ldc = s.N + 2;
            std::vector<float> A((size_t)(ta ? s.K : s.M) * lda), B((size_t)(tb ? s.N : s.K) * ldb), C0((size_t)s.M * ldc);
            for (float& v : A) v = nd(gen);
            for (float& v : B) v = nd(gen);
            for (float& v : C0) v = nd(gen);
            auto a = [&](int i, int k) { return (double)from_bf16(to_bf16(ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k])); };
            auto b = [&](int k, int j) { return (double)from_bf16(to_bf16(tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j])); };
            std::vector<float> C1 = C0, C2 = C0;
            {
              omp_set_num_threads(1);
              gemm_fixed_split_bf16(ta, tb, s.M, s.N, s.K, alpha, A.data(), lda, B.data(), ldb, beta, C1.data(), ldc);
              TwoThreads two;
              gemm_fixed_split_bf16(ta, tb, s.M, s.N, s.K, alpha, A.data(), lda, B.data(), ldb, beta, C2.data(), ldc);
            }
            int bad = 0;
            for (int i = 0; i < s.M; ++i)
              for (int j = 0; j < s.N; ++j) {
                double ref = 0, mag = 0;
                for (int k = 0; k < s.K; ++k) ref += a(i, k) * b(k, j), mag += std::fabs(a(i, k) * b(k, j));
                const double c0 = C0[(size_t)i * ldc + j];
                ref = alpha * ref + beta * c0;
                // fp32 accumulation of K products (each exact in fp32: 8-bit mantissas): the error
                // is at most about K units of fp32 rounding of the running sum.
                const double tol = 1e-6 * (s.K + 2) * (std::fabs(alpha) * mag + std::fabs(c0)) + 1e-30;
                bad += std::fabs(C1[(size_t)i * ldc + j] - ref) > tol;
              }
            EXPECT_EQ(bad, 0) << s.M << "x" << s.N << "x" << s.K << " ta " << ta << " tb " << tb << " alpha " << alpha
                              << " beta " << beta;
            EXPECT_TRUE(C1 == C2) << "1 and 2 threads differ: " << s.M << "x" << s.N << "x" << s.K;
            for (int i = 0; i < s.M; ++i)  // the padding between rows is left alone
              for (int j = s.N; j < ldc; ++j) EXPECT_EQ(C1[(size_t)i * ldc + j], C0[(size_t)i * ldc + j]);
          }
  }
}

// Where the CPU cannot multiply bf16 natively, precision = bf16 is refused with the feature's name
// (the emulated CPUs of the test suite take this branch); where it can, it is accepted.
TEST(Bf16, TrainingPrecisionNeedsTheCpuFeature) {
  Config c;
  c.precision = "bf16";
  if (bf16_products_supported()) {
    EXPECT_NO_THROW(require_precision_supported(c));
  } else {
    try {
      require_precision_supported(c);
      ADD_FAILURE() << "precision = bf16 accepted on a CPU without AVX512_BF16";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("AVX512_BF16"), std::string::npos) << e.what();
    }
  }
  c.precision = "fp32";
  EXPECT_NO_THROW(require_precision_supported(c));
  EXPECT_THROW(c.set("precision", "fp16"), UsageError);
}

// A linear layer's bf16 backward rounds dy once for both products: dx (= or +=) and dW (+=) are
// bit for bit the two bf16 products of its operands.
TEST(Bf16, LinearBackwardIsTheTwoBf16Products) {
  if (!bf16_products_supported()) GTEST_SKIP() << "this CPU has no AVX512_BF16 (Bf16.TrainingPrecisionNeedsTheCpuFeature)";
  std::mt19937 gen(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int N = 300, in = 70, out = 200;
  std::vector<float> x((size_t)N * in), W((size_t)out * in), dy((size_t)N * out), dx0((size_t)N * in), dW0((size_t)out * in);
  for (auto* v : {&x, &W, &dy, &dx0, &dW0})
    for (float& f : *v) f = nd(gen);
  for (bool dx_acc : {false, true}) {
    std::vector<float> dx = dx0, dW = dW0, dx_ref = dx0, dW_ref = dW0;
    k::linear_bwd(x.data(), W.data(), dy.data(), dx.data(), dx_acc, dW.data(), (float*)nullptr, N, in, out, true);
    gemm_fixed_split_bf16(false, false, N, in, out, 1.0f, dy.data(), out, W.data(), in, dx_acc ? 1.0f : 0.0f, dx_ref.data(), in);
    gemm_fixed_split_bf16(true, false, out, in, N, 1.0f, dy.data(), out, x.data(), in, 1.0f, dW_ref.data(), in);
    EXPECT_TRUE(dx == dx_ref) << "dx, dx_acc " << dx_acc;
    EXPECT_TRUE(dW == dW_ref) << "dW, dx_acc " << dx_acc;
    std::vector<float> dx32 = dx0;
    k::linear_bwd(x.data(), W.data(), dy.data(), dx32.data(), dx_acc, (float*)nullptr, (float*)nullptr, N, in, out, false);
    EXPECT_FALSE(dx32 == dx) << "the bf16 backward gave fp32's bits";
  }
}
