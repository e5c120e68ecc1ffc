#include "backend/cpu/weight_format.h"

#include <omp.h>

#include <algorithm>

#include "backend/cpu/bf16.h"
#include "backend/cpu/isa.h"

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
  if (N <= kFewRows && gemm_rows_f32_few(N, rows, cols, static_cast<const float*>(p), cols, x, cols, y, rows)) return;
  gemm_fixed_split(false, true, N, rows, cols, 1.0f, x, cols, static_cast<const float*>(p), cols, 0.0f, y, rows);
}
size_t no_scratch(int64_t, int64_t) { return 0; }

const WeightFormat kF32 = {"fp32", "fp32 weights used in place (exact)", f32_bytes, nullptr, f32_unpack,
                           f32_gemv, f32_gemm, no_scratch, gemv_kernels_available};

// ---------------------------------------------------------------- bf16: the decode layout of bf16.h
size_t bf16_bytes(int64_t r, int64_t c) { return (size_t)(r * c) * sizeof(uint16_t); }
void bf16_pack(const float* w, int64_t r, int64_t c, void* dst) { pack_bf16(w, r, c, static_cast<uint16_t*>(dst)); }
void bf16_gemv(int rows, int cols, const void* p, const float* x, float* y, bool acc, GemvKernel k) {
  gemv_rows_bf16(rows, cols, static_cast<const uint16_t*>(p), x, y, acc, k);
}
// Many rows (prefill, evaluation): panels of kPanel rows are widened (exact) into a per-thread
// buffer that stays in L2 and multiplied there by a single-threaded fp32 GEMM; the panels are
// split between the threads. No fp32 copy of the matrix is ever made. kPanel is the fp32 path's
// tile (gemm_fixed_split), so bf16 weights run the same GEMM shapes as fp32 ones; 64-row or
// uneven panels measured up to 40% slower in a cold prefill (bench/README.md, "Cold prefill").
constexpr int kPanel = 128;
static_assert(kPanel % kBf16Rows == 0);

// Rows [0, n) of a packed matrix with C columns, widened (exact: the inverse of pack_bf16). Row
// block b starts at element 4·b·C, so a panel that starts on a block boundary has the layout of a
// standalone [n, C] matrix.
LOOPLM_ISA_CLONES void widen_panel(const uint16_t* src, int64_t n, int64_t C, float* dst) {
  const int64_t blocks = n / kBf16Rows;
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t c0 = 0; c0 < C; c0 += kBf16Cols) {
      const int64_t w = C - c0 < kBf16Cols ? C - c0 : kBf16Cols;
      for (int r = 0; r < kBf16Rows; ++r) {
        const uint16_t* s = src + b * kBf16Rows * C + c0 * kBf16Rows + r * w;
        float* d = dst + (b * kBf16Rows + r) * C + c0;
        for (int64_t c = 0; c < w; ++c) d[c] = from_bf16(s[c]);
      }
    }
  for (int64_t i = blocks * kBf16Rows * C; i < n * C; ++i) dst[i] = from_bf16(src[i]);
}

void bf16_unpack(const void* p, int64_t r, int64_t c, float* dst) { widen_panel(static_cast<const uint16_t*>(p), r, c, dst); }

// Batched decoding (a few rows): the multi-row matrix-vector kernel reads each weight once.
void bf16_gemm(int N, int rows, int cols, const void* p, const float* x, float* y, float* scratch) {
  const uint16_t* W = static_cast<const uint16_t*>(p);
  if (N <= kFewRows && gemm_rows_bf16_few(N, rows, cols, W, x, cols, y, rows)) return;
  const int panels = (rows + kPanel - 1) / kPanel;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < panels; ++i) {
    const int r0 = i * kPanel, n = std::min(kPanel, rows - r0);
    float* w = scratch + (size_t)omp_get_thread_num() * kPanel * cols;
    widen_panel(W + (int64_t)r0 * cols, n, cols, w);
    gemm(false, true, N, n, cols, 1.0f, x, cols, w, cols, 0.0f, y + r0, rows);  // sequential inside a parallel region
  }
}
size_t bf16_scratch(int64_t, int64_t c) { return (size_t)omp_get_max_threads() * kPanel * (size_t)c; }

const WeightFormat kBF16 = {"bf16",
                            "bf16 copy (round to nearest even) in a 4-row x 32-column layout: half the bytes, logits within ~1e-2",
                            bf16_bytes, bf16_pack, bf16_unpack, bf16_gemv, bf16_gemm, bf16_scratch,
                            gemv_kernels_available};

}  // namespace

extern const WeightFormat kQ8_0, kQ4_0, kQ4_K;  // quant.cpp, quant_k.cpp

const std::vector<const WeightFormat*>& weight_formats() {
  static const std::vector<const WeightFormat*> t = {&kF32, &kBF16, &kQ8_0, &kQ4_0, &kQ4_K};
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
