#include "backend/cpu/weight_format.h"

#include <algorithm>

#include "backend/cpu/bf16.h"

namespace looplm {

namespace {

// ---------------------------------------------------------------- fp32: the matrix as it is
size_t f32_bytes(int64_t r, int64_t c) { return (size_t)(r * c) * sizeof(float); }
void f32_unpack(const void* p, int64_t r, int64_t c, float* dst) {
  const float* s = static_cast<const float*>(p);
  std::copy(s, s + r * c, dst);
}
void f32_gemv(int rows, int cols, const void* p, const float* x, float* y, bool acc, GemvKernel k) {
  gemv_rows(rows, cols, static_cast<const float*>(p), cols, x, y, acc, k);
}
void f32_gemm(int N, int rows, int cols, const void* p, const float* x, float* y, float*) {
  gemm(false, true, N, rows, cols, 1.0f, x, cols, static_cast<const float*>(p), cols, 0.0f, y, rows);
}
size_t no_scratch(int64_t, int64_t) { return 0; }

const WeightFormat kF32 = {"fp32", "fp32 weights used in place (exact)", 1, 1, f32_bytes, nullptr, f32_unpack,
                           f32_gemv, f32_gemm, no_scratch};

// ---------------------------------------------------------------- bf16: the decode layout of bf16.h
size_t bf16_bytes(int64_t r, int64_t c) { return (size_t)(r * c) * sizeof(uint16_t); }
void bf16_pack(const float* w, int64_t r, int64_t c, void* dst) { pack_bf16(w, r, c, static_cast<uint16_t*>(dst)); }
void bf16_unpack(const void* p, int64_t r, int64_t c, float* dst) { unpack_bf16(static_cast<const uint16_t*>(p), r, c, dst); }
void bf16_gemv(int rows, int cols, const void* p, const float* x, float* y, bool acc, GemvKernel k) {
  gemv_rows_bf16(rows, cols, static_cast<const uint16_t*>(p), x, y, acc, k);
}
// Many rows (prefill): widen the matrix once (exact) and run the fp32 GEMM; the widening costs one
// pass over the weights, which the N-row product amortises.
void bf16_gemm(int N, int rows, int cols, const void* p, const float* x, float* y, float* scratch) {
  unpack_bf16(static_cast<const uint16_t*>(p), rows, cols, scratch);
  gemm(false, true, N, rows, cols, 1.0f, x, cols, scratch, cols, 0.0f, y, rows);
}
size_t bf16_scratch(int64_t r, int64_t c) { return (size_t)(r * c); }

const WeightFormat kBF16 = {"bf16",
                            "bf16 copy (round to nearest even) in a 4-row x 32-column layout: half the bytes, logits within ~1e-2",
                            kBf16Rows, kBf16Cols, bf16_bytes, bf16_pack, bf16_unpack, bf16_gemv, bf16_gemm, bf16_scratch};

}  // namespace

const std::vector<const WeightFormat*>& weight_formats() {
  static const std::vector<const WeightFormat*> t = {&kF32, &kBF16};
  return t;
}

const WeightFormat* find_weight_format(const std::string& name) {
  for (const WeightFormat* f : weight_formats())
    if (name == f->name) return f;
  return nullptr;
}

std::string weight_format_names() {
  std::string s;
  for (const WeightFormat* f : weight_formats()) s += (s.empty() ? "" : ", ") + std::string(f->name);
  return s;
}

}  // namespace looplm
