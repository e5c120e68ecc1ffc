// Training's bf16 attention (precision = bf16): the pair-layout products under it are the products
// of the rounded operands, and the attention forward and backward are the fp32 kernels' within
// bf16 rounding, for RoPE, grouped-query heads, NRGPT's strict mask, odd lengths and head widths,
// with bits that do not depend on the thread count.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/bf16.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/gemm_pairs_bf16.h"
#include "ops/attention_bf16.h"
#include "ops/kernels.h"

using namespace looplm;

namespace {

#define SKIP_WITHOUT_BF16()                 \
  if (!bf16_products_supported()) GTEST_SKIP() << "this CPU has no AVX512_BF16 (Bf16.TrainingPrecisionNeedsTheCpuFeature)"

struct Threads {
  int before = omp_get_max_threads();
  explicit Threads(int n) { omp_set_num_threads(n); }
  ~Threads() { omp_set_num_threads(before); }
};

std::vector<float> normal(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = nd(gen);
  return v;
}

double rounded(float x) { return from_bf16(to_bf16(x)); }

// ‖a − b‖ / ‖b‖
double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), den += (double)b[i] * b[i];
  return std::sqrt(num / den);
}

}  // namespace

// gemm_pairs_bf16 over packed operands is the product of the operands rounded to bf16 with fp32
// sums, for both packing orientations, odd K (a zero padding term), N off the 16-column grid,
// row counts off the 6-row tile, alpha, accumulation, an operand starting inside a wider packed
// matrix, and rows cut short by valid_cols; C's columns past N are left alone.
TEST(Bf16, PairProductsAreTheRoundedOperandsProduct) {
  SKIP_WITHOUT_BF16();
  struct Shape { int M, N, K; };
  for (const Shape s : {Shape{13, 37, 9}, Shape{6, 64, 64}, Shape{1, 1, 1}, Shape{20, 100, 130}}) {
    for (int transposed = 0; transposed < 2; ++transposed)
      for (int accumulate = 0; accumulate < 2; ++accumulate) {
        const int K2 = (s.K + 1) / 2 * 2, ldp = pairs_width(s.N), lda = K2 + 4, ldx = (transposed ? s.K : s.N) + 3;
        const int ldc = s.N + 5;
        std::vector<float> A = normal((size_t)s.M * s.K, 1), X = normal((size_t)(transposed ? s.N : s.K) * ldx, 2);
        std::vector<float> C0 = normal((size_t)s.M * ldc, 3);
        std::vector<int> valid(s.K);
        for (int k = 0; k < s.K; ++k) valid[k] = transposed ? s.N : (k * 7) % (s.N + 1);
        auto b = [&](int k, int n) {
          if (!transposed && n >= valid[k]) return 0.0;
          return rounded(transposed ? X[(size_t)n * ldx + k] : X[(size_t)k * ldx + n]);
        };
        std::vector<uint16_t> Ab((size_t)s.M * lda), Bp((size_t)K2 / 2 * 2 * ldp, 0xffff);
        rows_bf16(s.M, s.K, A.data(), s.K, false, Ab.data(), lda);
        pack_pairs_bf16(s.K, s.N, X.data(), ldx, transposed, Bp.data(), ldp, transposed ? nullptr : valid.data());
        std::vector<float> C = C0;
        const float alpha = 0.75f;
        gemm_pairs_bf16(s.M, s.N, K2, alpha, Ab.data(), lda, Bp.data(), ldp, accumulate, C.data(), ldc);
        int bad = 0;
        for (int i = 0; i < s.M; ++i)
          for (int j = 0; j < ldc; ++j) {
            const double c0 = C0[(size_t)i * ldc + j];
            if (j >= s.N) {  // outside the product
              bad += C[(size_t)i * ldc + j] != c0;
              continue;
            }
            double ref = 0, mag = 0;
            for (int k = 0; k < s.K; ++k) ref += rounded(A[(size_t)i * s.K + k]) * b(k, j), mag += std::fabs(rounded(A[(size_t)i * s.K + k]) * b(k, j));
            ref = alpha * ref + (accumulate ? c0 : 0.0);
            // Each product of two bf16 values is exact in fp32; the error is the fp32 rounding of
            // the running sum, at most about K units of it.
            const double tol = 1e-6 * (s.K + 2) * (alpha * mag + (accumulate ? std::fabs(c0) : 0.0)) + 1e-30;
            bad += std::fabs(C[(size_t)i * ldc + j] - ref) > tol;
          }
        EXPECT_EQ(bad, 0) << s.M << "x" << s.N << "x" << s.K << " transposed " << transposed << " accumulate " << accumulate;
      }
  }
  // A product over pair rows 3.. and columns 16.. of a wider packed matrix.
  const int K = 20, N = 48, M = 5, ldp = pairs_width(N);
  std::vector<float> A = normal((size_t)M * K, 4), X = normal((size_t)K * N, 5);
  std::vector<uint16_t> Ab((size_t)M * K), Bp((size_t)K / 2 * 2 * ldp);
  rows_bf16(M, K, A.data(), K, false, Ab.data(), K);
  pack_pairs_bf16(K, N, X.data(), N, false, Bp.data(), ldp);
  std::vector<float> C((size_t)M * 32);
  gemm_pairs_bf16(M, 32, K - 6, 1.0f, Ab.data() + 6, K, Bp.data() + 3 * 2 * ldp + 2 * 16, ldp, false, C.data(), 32);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < 32; ++j) {
      double ref = 0;
      for (int k = 6; k < K; ++k) ref += rounded(A[(size_t)i * K + k]) * rounded(X[(size_t)k * N + 16 + j]);
      EXPECT_NEAR(C[(size_t)i * 32 + j], ref, 1e-4) << i << "," << j;
    }
}

// The layouts themselves: rows_bf16 (plain and transposed, odd sizes padded with a zero) and
// transpose_f32 (overwrite and add) against their definitions.
TEST(Bf16, PairLayoutsAndTransposes) {
  SKIP_WITHOUT_BF16();
  const int R = 19, C = 35;
  std::vector<float> X = normal((size_t)R * (C + 2), 6);
  std::vector<uint16_t> rows((size_t)R * 40, 0xffff), cols((size_t)C * 22, 0xffff);
  rows_bf16(R, C, X.data(), C + 2, false, rows.data(), 40);
  rows_bf16(R, C, X.data(), C + 2, true, cols.data(), 22);
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      EXPECT_EQ(rows[(size_t)r * 40 + c], to_bf16(X[(size_t)r * (C + 2) + c]));
      EXPECT_EQ(cols[(size_t)c * 22 + r], to_bf16(X[(size_t)r * (C + 2) + c]));
    }
    EXPECT_EQ(rows[(size_t)r * 40 + C], 0) << "the padding column of an odd width";
  }
  for (int c = 0; c < C; ++c) EXPECT_EQ(cols[(size_t)c * 22 + R], 0) << "the padding row of an odd height";
  for (bool add : {false, true}) {
    std::vector<float> Y0 = normal((size_t)C * (R + 3), 7), Y = Y0;
    transpose_f32(R, C, X.data(), C + 2, Y.data(), R + 3, add);
    for (int c = 0; c < C; ++c)
      for (int r = 0; r < R + 3; ++r) {
        const float y0 = Y0[(size_t)c * (R + 3) + r];
        const float want = r >= R ? y0 : add ? y0 + X[(size_t)r * (C + 2) + c] : X[(size_t)r * (C + 2) + c];
        EXPECT_EQ(Y[(size_t)c * (R + 3) + r], want) << c << "," << r << " add " << add;
      }
  }
}

// Attention with bf16 products against the fp32 kernels on the same inputs: outputs, log-sum-exp
// and the three gradients (overwritten and added) within bf16 rounding, for the training shape
// and for odd ones (RoPE, grouped-query heads, strict mask, odd T and head widths); 1 and 2
// threads give the same bits.
TEST(Bf16, AttentionIsTheFp32KernelWithinBf16Rounding) {
  SKIP_WITHOUT_BF16();
  struct Case { int B, T, H, hd, Hkv; bool rope, strict; };
  for (const Case c : {Case{2, 256, 3, 64, 3, false, false}, Case{3, 77, 4, 32, 2, true, false},
                       Case{2, 33, 2, 24, 1, false, true}, Case{1, 5, 2, 6, 2, true, true}}) {
    const int ld = (c.H + 2 * c.Hkv) * c.hd, hh = c.hd / 2;
    const std::vector<float> qkv = normal((size_t)c.B * c.T * ld, 8), dy = normal((size_t)c.B * c.T * c.H * c.hd, 9);
    std::vector<float> cs((size_t)c.T * hh), sn((size_t)c.T * hh);
    for (int t = 0; t < c.T; ++t)
      for (int i = 0; i < hh; ++i) {
        const double a = t * std::pow(10000.0, -2.0 * i / c.hd);
        cs[(size_t)t * hh + i] = (float)std::cos(a);
        sn[(size_t)t * hh + i] = (float)std::sin(a);
      }
    const float* cos_t = c.rope ? cs.data() : nullptr;
    const float* sin_t = c.rope ? sn.data() : nullptr;
    const std::string what = "B " + std::to_string(c.B) + " T " + std::to_string(c.T) + " hd " + std::to_string(c.hd);
    for (bool acc : {false, true}) {
      const std::vector<float> d0 = normal(qkv.size(), 10);
      std::vector<float> y((size_t)c.B * c.T * c.H * c.hd), lse((size_t)c.B * c.H * c.T), dqkv = d0;
      std::vector<float> scratch((size_t)omp_get_max_threads() * (2 * c.T * c.T + 4 * c.T * c.hd));
      k::attention_fwd(qkv.data(), y.data(), lse.data(), c.B, c.T, c.H, c.hd, cos_t, sin_t, scratch.data(), 0, c.strict, c.Hkv);
      k::attention_bwd(qkv.data(), lse.data(), dy.data(), dqkv.data(), acc, c.B, c.T, c.H, c.hd, cos_t, sin_t,
                       scratch.data(), 0, c.strict, c.Hkv);
      std::vector<float> y1(y.size()), lse1(lse.size()), d1 = d0, y2 = y1, lse2 = lse1, d2 = d0;
      {
        Threads one(1);
        k::attention_fwd_bf16(qkv.data(), y1.data(), lse1.data(), c.B, c.T, c.H, c.hd, cos_t, sin_t, 0, c.strict, c.Hkv);
        k::attention_bwd_bf16(qkv.data(), lse1.data(), dy.data(), d1.data(), acc, c.B, c.T, c.H, c.hd, cos_t, sin_t, 0,
                              c.strict, c.Hkv);
      }
      {
        Threads two(2);
        k::attention_fwd_bf16(qkv.data(), y2.data(), lse2.data(), c.B, c.T, c.H, c.hd, cos_t, sin_t, 0, c.strict, c.Hkv);
        k::attention_bwd_bf16(qkv.data(), lse2.data(), dy.data(), d2.data(), acc, c.B, c.T, c.H, c.hd, cos_t, sin_t, 0,
                              c.strict, c.Hkv);
      }
      EXPECT_TRUE(y1 == y2 && lse1 == lse2 && d1 == d2) << what << ": 1 and 2 threads differ";
      // bf16 keeps 8 significant bits (a relative rounding of at most 2^-9 ≈ 0.2% per operand);
      // each output goes through two or three rounded operands (Q, K, then P and V; dO, V, dS and
      // Q or K), so its error is a few tenths of a percent in norm (measured 0.1–0.5%); 2% bounds it
      // with room, and an error of the size of a wrong term or a lost mask would be far larger.
      EXPECT_LT(rel_error(y1, y), 2e-2) << what;
      EXPECT_LT(rel_error(lse1, lse), 2e-2) << what;
      // The gradient by part of the fused row: dQ, dK, dV.
      std::vector<float> parts[3][2];
      for (size_t r = 0; r < (size_t)c.B * c.T; ++r)
        for (int col = 0; col < ld; ++col) {
          const int part = col < c.H * c.hd ? 0 : col < (c.H + c.Hkv) * c.hd ? 1 : 2;
          // Added gradients: compare what the kernels added, not the (shared) starting values.
          const float base = acc ? d0[r * ld + col] : 0.0f;
          parts[part][0].push_back(d1[r * ld + col] - base);
          parts[part][1].push_back(dqkv[r * ld + col] - base);
        }
      for (int part = 0; part < 3; ++part)
        EXPECT_LT(rel_error(parts[part][0], parts[part][1]), 2e-2) << what << " gradient part " << part << " acc " << acc;
      EXPECT_FALSE(y1 == y) << what << ": the bf16 kernel gave fp32's bits";
    }
  }
}

// The CPU's conversion used for training's operands gives to_bf16's bits, ties, subnormals (which
// the instruction alone would flush), infinities and NaN included, in full groups and in the tail.
TEST(Bf16, NativeRoundingIsToBf16) {
  SKIP_WITHOUT_BF16();
  std::vector<float> x = normal(1000, 11);
  const float specials[] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1e-40f, -3e-39f, 0x1p-126f, -0.0f, INFINITY, -INFINITY,
                            NAN, -NAN, 3.4e38f, 1e-45f};
  for (size_t i = 0; i < sizeof(specials) / sizeof(float); ++i) {
    x[37 * i] = specials[i];
    x[990 + i % 10] = specials[i];
  }
  std::vector<uint16_t> out(x.size());
  round_span_native(x.data(), (int64_t)x.size(), out.data());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(out[i], to_bf16(x[i])) << i << ": " << x[i];
  std::vector<uint16_t> rows(x.size());
  round_to_bf16(10, 100, x.data(), 100, rows.data());
  EXPECT_TRUE(rows == out);
}
