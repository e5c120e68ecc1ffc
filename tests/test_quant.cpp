// The quantized weight formats (backend/cpu/quant.h): fp16, the scalar reference blocks, every
// kernel this CPU has against a double computation of the same integer products on odd shapes, the
// many-rows path against the dequantized matrix, and whole-model logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "backend/cpu/quant.h"
#include "backend/cpu/weight_format.h"
#include "core/rng.h"
#include "looplm/looplm.h"
#include "model/model.h"
#include "model/model_io.h"
#include "ops/ops.h"
#include "quant/gptq.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

using namespace looplm;

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("f16c"))) static uint16_t hw_fp16(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }
__attribute__((target("f16c"))) static float hw_fp32(uint16_t h) { return _cvtsh_ss(h); }
#endif

TEST(Quant, Fp16RoundTrip) {
  EXPECT_EQ(fp32_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(fp32_to_fp16(-2.0f), 0xc000);
  EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(fp32_to_fp16(1e6f), 0x7c00);               // overflow: Inf
  EXPECT_EQ(fp32_to_fp16(0x1p-24f), 0x0001);           // the smallest subnormal
  EXPECT_EQ(fp32_to_fp16(1.0f + 0x1p-11f), 0x3c00);    // tie: to even
  EXPECT_EQ(fp32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02);
  EXPECT_TRUE(std::isnan(fp16_to_fp32(fp32_to_fp16(NAN))));
  Rng rng(3);
  for (int i = 0; i < 20000; ++i) {
    const float f = (float)(rng.normal() * std::exp(8 * rng.normal()));
    const uint16_t h = fp32_to_fp16(f);
    if (std::fabs(f) < 65504) {
      const float back = fp16_to_fp32(h);
      EXPECT_LE(std::fabs(back - f), std::max(std::fabs(f) * 0x1p-11f, 0x1p-25f)) << f;
    }
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("f16c")) {  // the hardware conversion (what the kernels read) agrees
      EXPECT_EQ(h, hw_fp16(f)) << f;
      EXPECT_EQ(fp16_to_fp32(h), hw_fp32(h)) << h;
    }
#endif
  }
}

// The reference blocks: q8_0 maps the block's largest |w| to ±127 and every value within half a
// step; q4_0 maps its largest-magnitude value to −8 and the rest within half a step (one step at
// the +8 end, which clamps to 7).
TEST(Quant, ReferenceBlocks) {
  Rng rng(7);
  for (int n : {1, 5, 32}) {
    std::vector<float> x(32, 0.0f);
    for (int i = 0; i < n; ++i) x[i] = (float)rng.normal();
    float amax = 0, m = 0;
    for (int i = 0; i < n; ++i)
      if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), m = x[i];
    uint16_t d;
    uint8_t u[32];
    quantize_block_q8_0(x.data(), n, &d, u);
    const float s8 = fp16_to_fp32(d);
    for (int i = 0; i < 32; ++i) {
      EXPECT_LE(u[i], 255);
      EXPECT_GE(u[i], 1);  // −127..127
      if (i < n) {
        EXPECT_LE(std::fabs(s8 * (u[i] - 128) - x[i]), s8 * 0.5f + amax * 0x1p-10f) << i;
      } else {
        EXPECT_EQ(u[i], 128);
      }
    }
    quantize_block_q4_0(x.data(), n, &d, u);
    const float s4 = fp16_to_fp32(d);
    for (int i = 0; i < n; ++i) {
      EXPECT_LE(u[i], 15);
      EXPECT_LE(std::fabs(s4 * (u[i] - 8) - x[i]), std::fabs(s4) * 1.0f + amax * 0x1p-9f) << i;
      if (x[i] == m) {
        EXPECT_EQ(u[i], 0);
      }
    }
  }
}

// q4_k's reference: codes in 0..15 and 6-bit scales and mins, on whole and truncated
// super-blocks; a constant sub-block is its value (to fp16 and 6-bit rounding: the min alone holds
// it); on Gaussian weights its squared error is below q4_0's at the same 4.5 bits per weight (the
// least-squares scale and min per 32 against q4_0's largest-value scale; measured 0.73 of it).
TEST(Quant, ReferenceSuperBlocks) {
  Rng rng(9);
  double e_k = 0, e_0 = 0;
  for (int t = 0; t < 40; ++t) {
    const int n = t % 4 == 0 ? 100 : 256;
    std::vector<float> x(256, 0.0f);
    for (int i = 0; i < n; ++i) x[i] = (float)rng.normal();
    const GridQ4_K g = fit_grid_q4_k(x.data(), n);
    uint8_t u[256];
    quantize_superblock_q4_k(x.data(), n, g, u);
    for (int j = 0; j < 8; ++j) {
      EXPECT_LE(g.sc[j], 63);
      EXPECT_LE(g.m[j], 63);
    }
    for (int i = 0; i < n; ++i) {
      EXPECT_LE(u[i], 15);
      const double v = g.value(i / 32, u[i]);
      e_k += (v - x[i]) * (v - x[i]);
    }
    for (int b = 0; b * 32 < n; ++b) {
      const int m = std::min(32, n - b * 32);
      uint16_t d;
      uint8_t q[32];
      quantize_block_q4_0(x.data() + b * 32, m, &d, q);
      for (int i = 0; i < m; ++i) {
        const double v = (double)fp16_to_fp32(d) * (q[i] - 8);
        e_0 += (v - x[b * 32 + i]) * (v - x[b * 32 + i]);
      }
    }
  }
  std::printf("q4_k / q4_0 squared error on Gaussian weights: %.3f\n", e_k / e_0);
  EXPECT_LT(e_k, 0.85 * e_0);
  std::vector<float> c(32, -0.37f);
  const GridQ4_K g = fit_grid_q4_k(c.data(), 32);
  uint8_t u[32];
  quantize_superblock_q4_k(c.data(), 32, g, u);
  for (int i = 0; i < 32; ++i) EXPECT_NEAR(g.value(0, u[i]), -0.37f, 0.37f * 0x1p-10f);
}

namespace {
// The activations' int8 blocks (vectorized where the CPU has AVX-512) are exactly the scalar
// rule: d = amax / 127, q = nearbyint(x · (1 / d)), and their sum.
TEST(Quant, ActivationsMatchTheScalarRule) {
  for (int K : {1, 31, 32, 33, 100, 384, 1536}) {
    std::vector<float> x(K);
    Rng rng(K);
    for (auto& v : x) v = (float)(rng.normal() * 3.0);
    if (K > 40) std::fill(x.begin() + 32, x.begin() + 64, 0.0f);  // an all-zero block: d = 0
    QuantizedRow o;
    quantize_activations(x.data(), K, o);
    ASSERT_EQ(o.blocks, (K + 31) / 32);
    for (int b = 0; b < o.blocks; ++b) {
      const int n = std::min(32, K - 32 * b);
      float amax = 0;
      for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[32 * b + i]));
      const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
      int32_t sum = 0;
      for (int i = 0; i < 32; ++i) {
        const int q = i < n ? (int)std::nearbyint(x[32 * b + i] * id) : 0;
        ASSERT_EQ(o.q[32 * b + i], q) << K << " block " << b << " value " << i;
        sum += q;
      }
      ASSERT_EQ(o.d[b], d) << K << " block " << b;
      ASSERT_EQ(o.sum[b], sum) << K << " block " << b;
    }
  }
}

// What the kernels compute, in double: Σ_b d_w · d_x · Σ_i w_code · x_code, from the unpacked
// weights (d_w · code exactly) and the quantized activations.
double quantized_dot(const float* wrow, const QuantizedRow& xq, int C, double* mag) {
  double s = 0, a = 0;
  for (int k = 0; k < C; ++k) {
    const double t = (double)wrow[k] * xq.d[k / 32] * xq.q[k];
    s += t;
    a += std::fabs(t);
  }
  *mag = a;
  return s;
}
}  // namespace

// Every kernel of every format, on shapes around the 16-row tiles and 32-column blocks: the
// matrix-vector product (with and without accumulate) against the double value of the same
// integer products (1e-5 of Σ|terms|: fp32 partial sums per block and scale), a few rows (batched
// decoding) the same, and many rows (prefill) too: the dequantized matrix against the activations
// quantized as the kernels quantize them, so every path computes one function.
TEST(Quant, KernelsMatchTheScalarReference) {
  for (const char* name : {"q8_0", "q4_0", "q4_k"}) {
    const WeightFormat* f = find_weight_format(name);
    ASSERT_NE(f, nullptr);
    // q4_k: also whole, truncated and several super-blocks of 256
    for (auto [R, C] : {std::pair{1, 1}, {3, 31}, {4, 32}, {7, 33}, {13, 100}, {67, 384}, {130, 65}, {5, 256}, {9, 545}}) {
      std::vector<float> w((size_t)R * C), back((size_t)R * C);
      Rng rng(R * 1000 + C);
      for (auto& v : w) v = (float)rng.normal();
      std::vector<uint8_t> packed(f->packed_bytes(R, C));
      f->pack(w.data(), R, C, packed.data());
      f->unpack(packed.data(), R, C, back.data());
      // 20, 50, 140: over kFewRows, each over or under a format's integer_rows
      for (int N : {1, 3, 7, 11, 20, 50, 140}) {
        std::vector<float> x((size_t)N * C), y((size_t)N * R, 9.0f), scratch(f->gemm_scratch(R, C));
        for (auto& v : x) v = (float)rng.normal();
        std::vector<QuantizedRow> xq(N);
        for (int n = 0; n < N; ++n) quantize_activations(x.data() + (size_t)n * C, C, xq[n]);
        auto check_quantized = [&](const std::string& what, double add) {
          for (int n = 0; n < N; ++n)
            for (int r = 0; r < R; ++r) {
              double mag;
              const double ref = quantized_dot(back.data() + (size_t)r * C, xq[n], C, &mag) + add;
              ASSERT_NEAR(y[(size_t)n * R + r], ref, 1e-5 * (mag + 1)) << name << " " << what << " " << R << "x" << C;
            }
        };
        if (N == 1) {
          std::vector<float> portable(R);
          f->gemv(R, C, packed.data(), x.data(), portable.data(), false, GemvKernel::portable);
          for (GemvKernel k : f->kernels()) {
            f->gemv(R, C, packed.data(), x.data(), y.data(), false, k);
            check_quantized("gemv kernel " + std::to_string((int)k), 0);
            // every kernel does the same float operations on exact integer sums (quant.h)
            for (int r = 0; r < R; ++r) ASSERT_EQ(y[r], portable[r]) << name << " kernel " << (int)k << " row " << r;
            std::fill(y.begin(), y.end(), 0.5f);
            f->gemv(R, C, packed.data(), x.data(), y.data(), true, k);
            check_quantized("gemv accumulate kernel " + std::to_string((int)k), 0.5);
          }
        } else if (N <= std::max(kFewRows, f->integer_rows)) {
          f->gemm(N, R, C, packed.data(), x.data(), y.data(), scratch.data());
          check_quantized("gemm (few rows)", 0);
          // batched decoding and short prompts give each row the bits of decoding it alone (several
          // rows share each weight load, but every row's sums are its own)
          std::vector<float> one(R);
          for (int n = 0; n < N; ++n) {
            f->gemv(R, C, packed.data(), x.data() + (size_t)n * C, one.data(), false, GemvKernel::best);
            for (int r = 0; r < R; ++r) ASSERT_EQ(y[(size_t)n * R + r], one[r]) << name << " row " << n << " of " << N;
          }
        } else {  // dequantized panels in fp32, the activations quantized as the kernels do
          f->gemm(N, R, C, packed.data(), x.data(), y.data(), scratch.data());
          check_quantized("gemm (many rows)", 0);
        }
      }
    }
  }
}

// The integer sums at their largest: every weight code at the top of its range (q4_0: u = 15,
// each block's one −8 setting the scale; q8_0: ±127) against activations all at +127 or all at
// −127, so each kernel's narrow partial sums (AVX2 adds q4's int16 pairs over a whole block) reach
// their bound. Every kernel must still give the portable kernel's bits and the exact value.
TEST(Quant, KernelsAtTheIntegerExtremes) {
  const int R = 19, C = 96;
  for (const char* name : {"q8_0", "q4_0", "q4_k"}) {
    const WeightFormat* f = find_weight_format(name);
    ASSERT_NE(f, nullptr);
    std::vector<float> w((size_t)R * C), back((size_t)R * C);
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) w[(size_t)r * C + c] = c % 32 == 31 ? -8.0f : 7.0f;  // q4: u = 15 but one
    std::vector<uint8_t> packed(f->packed_bytes(R, C));
    f->pack(w.data(), R, C, packed.data());
    f->unpack(packed.data(), R, C, back.data());
    for (float sign : {1.0f, -1.0f}) {
      const int N = 5;
      std::vector<float> x((size_t)N * C, sign), y((size_t)N * R), portable(R), scratch(f->gemm_scratch(R, C));
      QuantizedRow xq;
      quantize_activations(x.data(), C, xq);
      ASSERT_EQ(xq.q[0], sign > 0 ? 127 : -127);
      f->gemv(R, C, packed.data(), x.data(), portable.data(), false, GemvKernel::portable);
      for (int r = 0; r < R; ++r) {
        double mag;
        const double ref = quantized_dot(back.data() + (size_t)r * C, xq, C, &mag);
        ASSERT_NEAR(portable[r], ref, 1e-6 * mag) << name;  // fp32 scales and sums per block: ~2^-24 each
      }
      for (GemvKernel k : f->kernels()) {
        f->gemv(R, C, packed.data(), x.data(), y.data(), false, k);
        for (int r = 0; r < R; ++r) ASSERT_EQ(y[r], portable[r]) << name << " kernel " << (int)k << " row " << r;
      }
      f->gemm(N, R, C, packed.data(), x.data(), y.data(), scratch.data());  // a few rows: the batched tiles
      for (int n = 0; n < N; ++n)
        for (int r = 0; r < R; ++r) ASSERT_EQ(y[(size_t)n * R + r], portable[r]) << name << " few rows, row " << n;
    }
  }
}

// A whole model run from q8_0 / q4_0 weights stays close to fp32: the RMS of the logits' error
// relative to their spread (measured 2.1% and 22% on this random model, whose R = 4 loop steps
// compound each product's error of ~1% (q8: weights and activations to 2^-8 of their block's
// largest value) and ~10% (q4)); a wrong scale or layout gives ~100%.
TEST(Quant, ModelLogitsStayClose) {
  Config c = load_preset("looped");
  c.d_model = 64;
  c.n_heads = 2;
  c.context = 16;
  c.init_std = 0.1;
  std::vector<int32_t> prompt = {5, 77, 120, 33, 9};
  auto logits = [&](const char* w) {
    LoadOptions lo;
    lo.weights = w;
    LanguageModel lm = LanguageModel::from_config(c, 4, lo);
    return lm.forward_logits(prompt);
  };
  const auto ref = logits("fp32");
  double mean = 0, var = 0;
  for (float v : ref) mean += v / ref.size();
  for (float v : ref) var += (v - mean) * (v - mean) / ref.size();
  for (auto [w, tol] : {std::pair{"q8_0", 0.04}, {"q4_0", 0.4}, {"q4_k", 0.4}}) {
    const auto q = logits(w);
    double err = 0;
    for (size_t i = 0; i < ref.size(); ++i) err += (q[i] - ref[i]) * (q[i] - ref[i]) / ref.size();
    EXPECT_LT(std::sqrt(err / var), tol) << w;
    EXPECT_GT(err, 0.0) << w;  // really quantized
  }
}

// A quantized checkpoint round trip: save_model_packed writes the packed bytes, load_model uses
// them in place (the very bytes: the products read the file), and the model computes what the
// model packed at load computes where the fp32 values agree (an untied head: the embedding is read
// as fp32 either way). Damaged files are errors naming the problem.
TEST(Quant, QuantizedCheckpointRoundTrip) {
  Config c = load_preset("looped");
  c.d_model = 64;
  c.n_heads = 2;
  c.context = 16;
  c.tie_embeddings = false;
  const std::string dir = ::testing::TempDir();
  const std::string fp32 = dir + "/quant_rt.safetensors";
  {
    ParamStorage s;
    s.grads = false;
    Model m(c, s);
    m.init_weights(11);
    save_model(fp32, m);
  }
  const std::vector<int32_t> prompt = {3, 50, 200, 17, 9, 1};
  for (const char* fmt : {"q8_0", "q4_0", "q4_k"}) {
    const std::string q = dir + "/quant_rt." + fmt + ".safetensors";
    std::unique_ptr<Model> m = load_model(fp32);
    m->prepare_inference(*find_weight_format(fmt));
    save_model_packed(q, *m, {{"quantize_method", "rtn"}});
    std::unique_ptr<Model> back = load_model(q);
    ASSERT_EQ(back->params().prepacked_format(), find_weight_format(fmt));
    back->prepare_inference(*find_weight_format(fmt));
    ASSERT_EQ(back->params().matrices().size(), m->params().matrices().size());
    for (size_t i = 0; i < m->params().matrices().size(); ++i) {
      const PackedMatrix& a = m->params().matrices()[i].packed;
      const PackedMatrix& b = back->params().matrices()[i].packed;
      ASSERT_EQ(std::memcmp(a.data, b.data, a.format->packed_bytes(a.rows, a.cols)), 0) << fmt << " matrix " << i;
    }
    LoadOptions own;  // the checkpoint's own format, through the public API
    LanguageModel lm = LanguageModel::load(q, own);
    LoadOptions at_load;
    at_load.weights = fmt;
    LanguageModel ref = LanguageModel::load(fp32, at_load);
    EXPECT_EQ(lm.forward_logits(prompt), ref.forward_logits(prompt)) << fmt;
    LoadOptions wider;  // another format from a quantized file: repacked from the dequantized values
    wider.weights = "fp32";
    EXPECT_NO_THROW(LanguageModel::load(q, wider).forward_logits(prompt));
  }
  // Damage: a packed tensor of the wrong size, another layout, a 'packed' entry naming an unknown param.
  std::unique_ptr<Model> m = load_model(fp32);
  m->prepare_inference(*find_weight_format("q8_0"));
  const std::string bad = dir + "/quant_bad.safetensors";
  save_model_packed(bad, *m, {{"weights", "q4_0"}});  // q8_0 bytes labelled q4_0
  try {
    load_model(bad);
    FAIL() << "loaded a mislabelled file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must be U8"), std::string::npos) << e.what();
  }
  save_model_packed(bad, *m, {{"layout", "rows4"}});  // q8_0 as looplm packed it before the 16-row tiles
  try {
    load_model(bad);
    FAIL() << "loaded a file packed in another layout";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'rows4' layout"), std::string::npos) << e.what();
  }
  {  // q4_k as looplm packed it before its 16-row tiles (2026-12-04): 4-row groups, refused the same way
    std::unique_ptr<Model> k = load_model(fp32);
    k->prepare_inference(*find_weight_format("q4_k"));
    save_model_packed(bad, *k, {{"layout", "rows4"}});
    try {
      load_model(bad);
      FAIL() << "loaded a q4_k file packed in another layout";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("q4_k matrices are packed in the 'rows4' layout"), std::string::npos) << e.what();
    }
  }
  save_model_packed(bad, *m, {{"packed", "[{\"tensor\": \"packed.x\", \"params\": [\"nope\"], \"rows\": 1, \"cols\": 1}]"}});
  try {
    load_model(bad);
    FAIL() << "loaded a file with an unknown packed param";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not declare"), std::string::npos) << e.what();
  }
  LoadModelOptions train;
  train.for_training = true;
  save_model_packed(bad, *m);
  EXPECT_THROW(load_model(bad, train), Error);
}

namespace {
std::vector<float> all_logits(const Model& m, const std::vector<int32_t>& toks) {
  Graph g;
  Graph::NoGrad ng(g);
  Node* z = m.logits(g, toks.data(), 1, (int)toks.size(), RunOptions{});
  return std::vector<float>(z->v, z->v + toks.size() * m.config().vocab_size);
}
}  // namespace

// A model of random weights (seed 5) written as a q4_0 checkpoint at `path`.
static void write_q4_0_checkpoint(const Config& c, const std::string& path) {
  ParamStorage s;
  s.grads = false;
  Model m(c, s);
  m.init_weights(5);
  m.prepare_inference(*find_weight_format("q4_0"));
  save_model_packed(path, m);
}

// A lean load of a quantized checkpoint (LanguageModel::load's) writes no fp32 values for the
// matrices that are only multiplied, yet computes what the full load computes, bit for bit, for
// every block kind and loop rule, tied and untied: a matrix the model reads as values without
// saying so (WeightMatrix::read_as_values) would read zeros here. Packing such a model into
// another format fills the values first.
TEST(Quant, LeanLoadReadsWhatTheModelReads) {
  const std::string dir = ::testing::TempDir();
  const std::vector<int32_t> prompt = {3, 50, 200, 17, 9, 1, 64};
  for (const char* preset : {"gpt", "llama", "looped", "recurrent_gpt", "hyperloop", "nrgpt", "cem"})
    for (bool tie : {true, false}) {
      Config c = load_preset(preset);
      c.d_model = 32;
      c.n_heads = 2;
      c.context = 16;
      c.R = std::min(c.R, 3);
      c.init_std = 0.3;
      c.tie_embeddings = tie;
      const std::string what = std::string(preset) + (tie ? " tied" : " untied");
      const std::string q = dir + "/lean." + preset + ".safetensors";
      write_q4_0_checkpoint(c, q);
      LoadModelOptions lean;
      lean.lean = true;
      std::unique_ptr<Model> a = load_model(q, lean), b = load_model(q);
      int unset = 0, read = 0;
      for (size_t i = 0; i < a->params().matrices().size(); ++i) {
        const Node* na = a->params().matrices()[i].node;
        const Node* nb = b->params().matrices()[i].node;
        const size_t n = (size_t)(na->rows * na->cols);
        if (a->params().matrices()[i].read_as_values) {
          ++read;
          ASSERT_EQ(std::memcmp(na->v, nb->v, n * sizeof(float)), 0) << what << " matrix " << i;
        } else {
          ++unset;
          ASSERT_TRUE(std::all_of(na->v, na->v + n, [](float v) { return v == 0.0f; })) << what << " matrix " << i;
        }
      }
      EXPECT_GT(unset, 0) << what;
      if (tie || std::string(preset) == "nrgpt" || std::string(preset) == "cem") {
        EXPECT_GT(read, 0) << what;
      }
      a->prepare_inference(*find_weight_format("q4_0"));
      b->prepare_inference(*find_weight_format("q4_0"));
      EXPECT_EQ(all_logits(*a, prompt), all_logits(*b, prompt)) << what;
      std::unique_ptr<Model> a2 = load_model(q, lean), b2 = load_model(q);  // into another format
      a2->prepare_inference(*find_weight_format("bf16"));
      b2->prepare_inference(*find_weight_format("bf16"));
      EXPECT_EQ(all_logits(*a2, prompt), all_logits(*b2, prompt)) << what << " as bf16";
    }
  // A non-finite value in a matrix whose values a lean load leaves unset is still found (its
  // dequantized copy is checked), with the tensor named.
  Config c = load_preset("llama");
  c.d_model = 32;
  c.n_heads = 2;
  c.context = 16;
  const std::string bad = dir + "/lean.nan.safetensors";
  {
    ParamStorage s;
    s.grads = false;
    Model m(c, s);
    m.init_weights(5);
    m.prepare_inference(*find_weight_format("q8_0"));
    const WeightMatrix* w = nullptr;
    for (const WeightMatrix& x : m.params().matrices())
      if (!x.read_as_values) w = &x;
    ASSERT_NE(w, nullptr);
    const uint16_t nan_fp16 = 0x7e00;  // the first block's scale (a tile starts with its 16 rows' fp16 scales)
    std::memcpy(const_cast<void*>(w->packed.data), &nan_fp16, sizeof nan_fp16);
    save_model_packed(bad, m);
  }
  try {
    LanguageModel::load(bad, LoadOptions{});
    FAIL() << "loaded a checkpoint holding NaN";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("packed tensor"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("NaN"), std::string::npos) << e.what();
  }
}

// A component that reads a lean-loaded matrix's fp32 values without marking it read_as_values
// would read zeros: the matrix's node says its values are unset and any op taking it as an input
// stops the process with the reason. Packing into another format fills the values and lifts it.
TEST(QuantDeathTest, ReadingALeanMatrixsUnsetValuesIsLoud) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string q = ::testing::TempDir() + "/lean_loud.safetensors";
  Config c = load_preset("llama");
  c.d_model = 32, c.n_heads = 2, c.context = 8, c.n_core = 1;
  write_q4_0_checkpoint(c, q);
  LoadModelOptions lean;
  lean.lean = true;
  std::unique_ptr<Model> a = load_model(q, lean);
  const WeightMatrix* unset = nullptr;
  for (const WeightMatrix& w : a->params().matrices())
    if (!w.read_as_values) unset = &w;
  ASSERT_NE(unset, nullptr);
  ASSERT_TRUE(unset->node->values_unset);
  Graph g;
  Graph::NoGrad ng(g);
  Node* x = g.node(1, unset->node->cols, false);
  std::fill(x->v, x->v + x->cols, 1.0f);
  EXPECT_DEATH(op::linear(g, x, unset->node, nullptr), "a lean load left unset");
  a->prepare_inference(*find_weight_format("bf16"));  // another format: the values are filled first
  EXPECT_FALSE(unset->node->values_unset);
  op::linear(g, x, unset->node, nullptr);  // now a real product
}

namespace {
// tr(E H Eᵀ) with E = W − Ŵ
double output_error(const std::vector<float>& W, const std::vector<float>& Q, int64_t R, int64_t C,
                    const std::vector<double>& H) {
  double t = 0;
  for (int64_t r = 0; r < R; ++r)
    for (int64_t i = 0; i < C; ++i)
      for (int64_t j = 0; j < C; ++j)
        t += (W[r * C + i] - Q[r * C + i]) * H[i * C + j] * (W[r * C + j] - Q[r * C + j]);
  return t;
}
}  // namespace

// GPTQ on one matrix: with uncorrelated inputs (H = c·I) there is no error to move and it is
// round to nearest (up to near-ties); with correlated inputs its layer-output error is below RTN's; its
// weights are on the format's grids, so packing them with their scales is exact.
TEST(Gptq, OneMatrix) {
  Rng rng(21);
  for (const char* name : {"q8_0", "q4_0", "q4_k"}) {
    const WeightFormat& f = *find_weight_format(name);
    // odd shapes: a partial row group and a partial last block (q4_k: super-block)
    const int64_t R = 9, C = f.grid_cols == 32 ? 70 : 300, ng = (C + f.grid_cols - 1) / f.grid_cols;
    std::vector<float> W(R * C);
    for (auto& v : W) v = (float)rng.normal();
    // a grid's step where column i is: q8_0 / q4_0: the block's scale; q4_k: d · sc of its sub-block
    auto step = [&](const std::vector<float>& S, int64_t i) {
      const float* g = S.data() + ((i / C) * ng + (i % C) / f.grid_cols) * f.grid_floats;
      return f.grid_floats == 1 ? std::fabs(g[0]) : g[0] * g[2 + (i % C % f.grid_cols) / 32];
    };
    std::vector<uint8_t> p(f.packed_bytes(R, C));
    f.pack(W.data(), R, C, p.data());
    std::vector<float> rtn(R * C), Q(R * C), S(R * ng * f.grid_floats), back(R * C);
    f.unpack(p.data(), R, C, rtn.data());
    std::vector<double> I(C * C, 0.0);
    for (int64_t i = 0; i < C; ++i) I[i * C + i] = 3.0;
    gptq_matrix(W.data(), R, C, I, f, 0.01, Q.data(), S.data());
    // The same up to near-ties: RTN rounds w / d with d unrounded (llama.cpp's rule), GPTQ on the
    // grid of the stored fp16 d; a value a hair from a half step may go either way.
    int differ = 0;
    for (int64_t i = 0; i < R * C; ++i)
      if (Q[i] != rtn[i]) {
        ++differ;
        EXPECT_NEAR(Q[i], rtn[i], 1.01 * step(S, i)) << name << " " << i;
      }
    EXPECT_LE(differ, R * C / 100) << name;
    // inputs x = z + 0.9 · (the previous column's z): neighbouring inputs correlate
    std::vector<double> H(C * C, 0.0);
    for (int n = 0; n < 400; ++n) {
      std::vector<double> z(C), x(C);
      for (auto& v : z) v = rng.normal();
      for (int64_t i = 0; i < C; ++i) x[i] = z[i] + (i ? 0.9 * z[i - 1] : 0.0);
      for (int64_t i = 0; i < C; ++i)
        for (int64_t j = 0; j < C; ++j) H[i * C + j] += x[i] * x[j];
    }
    gptq_matrix(W.data(), R, C, H, f, 0.01, Q.data(), S.data());
    const double eg = output_error(W, Q, R, C, H), er = output_error(W, rtn, R, C, H);
    EXPECT_LT(eg, 0.8 * er) << name << ": gptq " << eg << " rtn " << er;
    f.pack_on_grids(Q.data(), S.data(), R, C, p.data());
    f.unpack(p.data(), R, C, back.data());
    EXPECT_EQ(back, Q) << name;
  }
}

// GPTQ over a whole looped model: loop-aware calibration sums a core matrix's inputs over all R
// steps (R times the rows of the first-step-only Hessian), the quantized model's layer-output error
// is below RTN's, and it is what a saved and reloaded checkpoint computes.
TEST(Gptq, LoopedModel) {
  Config c = load_preset("looped");
  c.d_model = 32;
  c.n_heads = 2;
  c.context = 16;
  c.init_std = 0.1;
  std::vector<int32_t> tokens;
  for (int i = 0; i < 16 * 8 + 1; ++i) tokens.push_back((i * 37 + i / 3) % 200 + 20);
  GptqOptions o;
  o.tokens = tokens;
  o.max_tokens = 16 * 8;
  const std::string dir = ::testing::TempDir();
  for (bool first : {false, true}) {
    ParamStorage s;
    s.grads = false;
    Model m(c, s);
    m.init_weights(5);
    o.first_step_only = first;
    const GptqReport rep = quantize_gptq(m, *find_weight_format("q4_0"), o);
    EXPECT_EQ(rep.tokens, 16 * 8);
    EXPECT_EQ(rep.matrices, (int)m.params().matrices().size());
    EXPECT_LT(rep.gptq_error, rep.rtn_error) << (first ? "first step" : "all steps");
    const std::string path = dir + "/gptq_" + std::to_string(first) + ".safetensors";
    save_model_packed(path, m, {{"quantize_method", "gptq"}});
    std::unique_ptr<Model> back = load_model(path);
    back->prepare_inference(*find_weight_format("q4_0"));
    Graph g;
    Graph::NoGrad ng(g);
    RunOptions ro;
    const Node* a = m.logits(g, tokens.data(), 1, 16, ro);
    const std::vector<float> za(a->v, a->v + a->numel());
    Graph g2;
    Graph::NoGrad ng2(g2);
    const Node* b = back->logits(g2, tokens.data(), 1, 16, ro);
    // the tied embedding's lookup reads the original fp32 values in m, the dequantized ones in back
    double err = 0, mag = 0;
    for (size_t i = 0; i < za.size(); ++i) err = std::max(err, (double)std::fabs(za[i] - b->v[i])), mag = std::max(mag, (double)std::fabs(za[i]));
    EXPECT_LT(err, 0.2 * mag);
  }
}
