// Weight formats as data (docs/architecture.md): how an inference copy of a weight matrix W [rows, cols]
// is stored and multiplied. A format is one row of a table — its packing unit, pack / unpack, and
// the two products an inference pass needs: the matrix-vector kernel for a single row (batch-1
// decoding, memory-bound; the ISA is picked inside by CPU feature) and the GEMM for many rows
// (prefill, evaluation). fp32, bf16, and the quantized q8_0 / q4_0 / q4_k (backend/cpu/quant.h).
//
// A format is chosen once, when a model is loaded for inference (ParamStore::pack); training
// never sees it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cpu/gemm.h"

namespace looplm {

// A product with at most this many rows is batched decoding: the formats' few-rows paths read each
// weight once for all of them (or, quantized, run the matrix-vector product per row).
constexpr int kFewRows = 16;

struct WeightFormat {
  const char* name;     // "fp32", "bf16": the --weights value
  const char* summary;  // one line for --help and errors
  // Bytes of a packed [rows, cols] matrix.
  size_t (*packed_bytes)(int64_t rows, int64_t cols);
  // fp32 row-major -> packed. Null for fp32: the matrix is used in place (no copy).
  void (*pack)(const float* w, int64_t rows, int64_t cols, void* dst);
  // packed -> fp32 row-major (the scalar reference the kernels are tested against).
  void (*unpack)(const void* packed, int64_t rows, int64_t cols, float* dst);
  // y[rows] = W x (+ y when accumulate) for one input row.
  void (*gemv)(int rows, int cols, const void* packed, const float* x, float* y, bool accumulate, GemvKernel kernel);
  // y[N, rows] = x[N, cols] · W^T for N rows; `scratch` holds gemm_scratch(rows, cols) floats.
  void (*gemm)(int N, int rows, int cols, const void* packed, const float* x, float* y, float* scratch);
  size_t (*gemm_scratch)(int64_t rows, int64_t cols);
  // The gemv kernels this CPU has for the format (portable first, best last): tests run each.
  std::vector<GemvKernel> (*kernels)();
  // Quantized formats only (null otherwise), for GPTQ. A grid is the set of values a group of
  // `grid_cols` consecutive columns of a row can take (q8_0 / q4_0: a block's scale; q4_k: a
  // super-block's scales and mins), described by `grid_floats` numbers: chosen from the group's
  // values (n ≤ grid_cols of them) as the format stores it (fp16, 6-bit), a value's nearest point on
  // it (i: the value's column within the group), and packing with given grids
  // [rows, ceil(cols / grid_cols), grid_floats] of values already on them (exact).
  int grid_cols = 0, grid_floats = 0;
  void (*choose_grid)(const float* x, int n, float* grid) = nullptr;
  float (*snap)(float x, const float* grid, int i) = nullptr;
  void (*pack_on_grids)(const float* w, const float* grids, int64_t rows, int64_t cols, void* dst) = nullptr;
  // Packed formats: the name of the byte layout, written to a quantized checkpoint's metadata
  // (`layout`) and checked when it is read, so that a file packed in another layout is refused
  // instead of misread. "rows4": looplm before the 16-row tiles, for every format.
  const char* layout = nullptr;
  // Quantized formats: a product with up to this many input rows (and at least kFewRows) runs the
  // integer kernels of decoding, kFewRows rows at a time, its activations quantized to int8 per
  // block; more rows multiply dequantized weights in fp32 (quant_driver.h: where each is faster).
  int integer_rows = 0;
  // Batch-1 decoding: a step of fewer FLOPs than this (rows × FLOPs per token) runs on one thread
  // (infer/decoder.h): waking a second thread for each of its ~50 products costs more than it
  // saves. The break-even is a time, ~0.5–0.7 ms of one thread's work per token, so it lies at more
  // FLOPs where a FLOP is cheaper: ~12–20 M for fp32 and bf16, ~70 M for the integer kernels
  // (bench/README.md, "Threads").
  double serial_decode_flops = 16e6;

  // Integer codes on a grid (q8_0, q4_0, q4_k), as opposed to a float copy (fp32, bf16): what
  // `looplm quantize` writes, and what GPTQ can fit.
  bool quantized() const { return grid_cols > 0; }
};

// The table. find_weight_format: nullptr when `name` is not a format.
const std::vector<const WeightFormat*>& weight_formats();
const WeightFormat* find_weight_format(const std::string& name);
std::string weight_format_names();  // "fp32, bf16, q8_0, q4_0, q4_k"

// One weight matrix in an inference format.
struct PackedMatrix {
  const WeightFormat* format = nullptr;
  const void* data = nullptr;
  int64_t rows = 0, cols = 0;
  explicit operator bool() const { return data != nullptr; }
};

}  // namespace looplm
