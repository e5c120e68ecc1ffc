// Weight-only post-training quantization (docs/cli.md, quantize): round to nearest (rtn: the
// format's own packing) or GPTQ (Frantar et al. 2022), which quantizes a matrix one column at a
// time and moves each column's error onto the columns not yet quantized through the inverse Hessian
// of the layer's inputs, H = Σ x xᵀ, from calibration text.
//
// Loop-aware calibration: a shared core block's matrices see inputs at every loop step, so their
// Hessian sums the inputs of all the steps they run in (the weights must serve every step);
// `first_step_only` keeps only the first step a matrix runs in (step 1 for a core block), the
// naive choice the experiment compares against.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/cpu/weight_format.h"
#include "model/model.h"

namespace looplm {

struct GptqOptions {
  std::vector<int32_t> tokens;  // calibration tokens: consecutive windows of `context`
  int64_t max_tokens = 16384;   // at most this many (whole windows)
  int batch = 8;                // windows per forward pass
  bool first_step_only = false; // each matrix's inputs from the first loop step it runs in only (not loop-aware)
  double damp = 0.01;           // added to H's diagonal, as a fraction of its mean
};

// GPTQ of one matrix W [rows, cols] with the Hessian H [cols, cols] (double, row-major; changed:
// damped): Wq (on the format's grids) and the grids [rows, ceil(cols / f.grid_cols), f.grid_floats].
void gptq_matrix(const float* W, int64_t rows, int64_t cols, std::vector<double> H, const WeightFormat& f,
                 double damp, float* Wq, float* grids);

struct GptqReport {
  int64_t tokens = 0;                 // calibration tokens run
  int matrices = 0;
  double rtn_error = 0, gptq_error = 0;  // Σ over matrices of tr((W − Ŵ) H (W − Ŵ)ᵀ) / tr(W H Wᵀ): the layer-output error
};

// Calibrates on o.tokens and packs every weight matrix of m in format f by GPTQ; afterwards m's
// products read the GPTQ weights (ParamStore::set_prepacked + pack), so save_model_packed writes them.
GptqReport quantize_gptq(Model& m, const WeightFormat& f, const GptqOptions& o);

}  // namespace looplm
