#include "quant/gptq.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>

#include "backend/cpu/gemm.h"
#include "core/threads.h"
#include "looplm/error.h"
#include "ops/graph.h"

namespace looplm {

namespace {

// In-place lower Cholesky of A [n, n] (row-major; the upper triangle is left as it was). False when
// A is not positive definite.
bool cholesky(std::vector<double>& A, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    double s = A[j * n + j];
    for (int64_t k = 0; k < j; ++k) s -= A[j * n + k] * A[j * n + k];
    if (!(s > 0)) return false;
    const double l = std::sqrt(s);
    A[j * n + j] = l;
#pragma omp parallel for if (n > 256)
    for (int64_t i = j + 1; i < n; ++i) {
      double t = A[i * n + j];
      for (int64_t k = 0; k < j; ++k) t -= A[i * n + k] * A[j * n + k];
      A[i * n + j] = t / l;
    }
  }
  return true;
}

// U, upper triangular with H⁻¹ = Uᵀ U (GPTQ's Cholesky form of the inverse Hessian), row-major.
std::vector<double> inverse_cholesky_upper(std::vector<double> H, int64_t n) {
  if (!cholesky(H, n)) throw Error("GPTQ: the calibration Hessian is not positive definite (too few calibration tokens?)");
  // Linv = L⁻¹ (lower), by forward substitution, one column per thread.
  std::vector<double> Li(n * n, 0.0);
#pragma omp parallel for if (n > 256)
  for (int64_t c = 0; c < n; ++c) {
    Li[c * n + c] = 1.0 / H[c * n + c];
    for (int64_t i = c + 1; i < n; ++i) {
      double s = 0;
      for (int64_t k = c; k < i; ++k) s += H[i * n + k] * Li[k * n + c];
      Li[i * n + c] = -s / H[i * n + i];
    }
  }
  // H⁻¹ = Linvᵀ Linv: (H⁻¹)ij = Σ_{k ≥ max(i, j)} Linv[k, i] Linv[k, j], from Linv's columns as rows
  std::vector<double> LT(n * n, 0.0), Hi(n * n, 0.0);
  for (int64_t k = 0; k < n; ++k)
    for (int64_t i = 0; i <= k; ++i) LT[i * n + k] = Li[k * n + i];
#pragma omp parallel for schedule(dynamic, 8)
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      double t = 0;
      for (int64_t k = i; k < n; ++k) t += LT[i * n + k] * LT[j * n + k];
      Hi[i * n + j] = Hi[j * n + i] = t;
    }
  if (!cholesky(Hi, n)) throw Error("GPTQ: the inverse Hessian lost definiteness (raise the damping)");
  std::vector<double> U(n * n, 0.0);  // U = Mᵀ, M the lower factor of H⁻¹
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i; j < n; ++j) U[i * n + j] = Hi[j * n + i];
  return U;
}

// tr(E H Eᵀ) for E [rows, cols].
double quadratic(const std::vector<double>& E, int64_t rows, int64_t cols, const std::vector<double>& H) {
  double t = 0;
#pragma omp parallel for reduction(+ : t)
  for (int64_t r = 0; r < rows; ++r) {
    const double* e = E.data() + r * cols;
    for (int64_t i = 0; i < cols; ++i) {
      double s = 0;
      for (int64_t j = 0; j < cols; ++j) s += H[i * cols + j] * e[j];
      t += e[i] * s;
    }
  }
  return t;
}

}  // namespace

void gptq_matrix(const float* W0, int64_t R, int64_t C, std::vector<double> H, const WeightFormat& f, double damp,
                 float* Wq, float* grids) {
  LOOPLM_ASSERT(f.choose_grid && f.snap, "gptq: not a quantized format");
  const int64_t gc = f.grid_cols, ng = (C + gc - 1) / gc, gf = f.grid_floats;
  std::vector<double> W(W0, W0 + R * C);
  double mean = 0;
  for (int64_t i = 0; i < C; ++i) {
    if (H[i * C + i] == 0) {  // an input that is always zero: its column does not matter
      H[i * C + i] = 1;
      for (int64_t r = 0; r < R; ++r) W[r * C + i] = 0;
    }
    mean += H[i * C + i] / C;
  }
  for (int64_t i = 0; i < C; ++i) H[i * C + i] += damp * mean;
  const std::vector<double> U = inverse_cholesky_upper(std::move(H), C);
  // Rows are independent given U: each quantizes its columns left to right, pushing every
  // column's error onto the columns to its right.
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t r = 0; r < R; ++r) {
    double* w = W.data() + r * C;
    std::vector<float> group(gc);
    for (int64_t i = 0; i < C; ++i) {
      float* grid = grids + (r * ng + i / gc) * gf;
      if (i % gc == 0) {  // the group's grid from its current (error-updated) values, as GPTQ's groups do
        const int n = (int)std::min(gc, C - i);
        for (int k = 0; k < n; ++k) group[k] = (float)w[i + k];
        f.choose_grid(group.data(), n, grid);
      }
      const float q = f.snap((float)w[i], grid, (int)(i % gc));
      Wq[r * C + i] = q;
      const double e = (w[i] - q) / U[i * C + i];
      const double* u = U.data() + i * C;
      for (int64_t j = i + 1; j < C; ++j) w[j] -= e * u[j];
    }
  }
}

GptqReport quantize_gptq(Model& m, const WeightFormat& f, const GptqOptions& o) {
  if (!f.pack_on_grids) throw UsageError(std::string("gptq: ") + f.name + " is not a quantized format");
  ParamStore& ps = m.params();
  if (ps.packed_format()) throw UsageError("gptq: the model is already packed; calibrate the fp32 model");
  const Config& c = m.config();
  const int T = c.context;
  struct Acc {
    std::vector<double> H;
    int64_t cols = 0, rows = 0;
    std::vector<float> x;  // scratch: one input's xᵀx
    int first_step = -1;
  };
  std::map<const void*, Acc> acc;
  for (const WeightMatrix& w : ps.matrices()) {
    Acc& a = acc[&w];
    a.cols = w.node->cols;
    a.H.assign(a.cols * a.cols, 0.0);
  }
  // Calibration: every input of every matrix, through the fp32 model at its depth R.
  Graph g;
  Graph::NoGrad ng(g);
  g.set_observer([&](Graph&, const TapSite& s, Node* x) {
    if (!s.matrix) return;
    auto it = acc.find(s.matrix);
    if (it == acc.end()) return;
    Acc& a = it->second;
    // first_step_only: the first loop step the matrix runs in (a core block's step 1; a per-loop
    // map's own step; 0 for the prelude, coda and head, which run once)
    if (a.first_step < 0) a.first_step = s.step;
    if (o.first_step_only && s.step != a.first_step) return;
    // xᵀx of this input in fp32 (the fast GEMM; as GPTQ's reference code keeps H), summed in double
    a.x.resize(a.cols * a.cols);
    gemm(true, false, (int)a.cols, (int)a.cols, (int)x->rows, 1.0f, x->v, (int)a.cols, x->v, (int)a.cols, 0.0f,
         a.x.data(), (int)a.cols);
    for (int64_t i = 0; i < a.cols * a.cols; ++i) a.H[i] += a.x[i];
    a.rows += x->rows;
  });
  const int64_t windows = std::min<int64_t>(((int64_t)o.tokens.size()) / T, std::max<int64_t>(1, o.max_tokens / T));
  if (windows < 1) throw UsageError("gptq: the calibration data has fewer tokens than one context (" + std::to_string(T) + ")");
  GptqReport rep;
  for (int64_t w0 = 0; w0 < windows; w0 += o.batch) {
    const int B = (int)std::min<int64_t>(o.batch, windows - w0);
    adapt_threads();  // the pool follows the machine's load (core/threads.h)
    RunOptions ro;
    m.logits(g, o.tokens.data() + w0 * T, B, T, ro);
    g.reset();
    rep.tokens += (int64_t)B * T;
  }
  g.set_observer({});

  // GPTQ per matrix; the packed bytes live in one buffer the ParamStore keeps alive.
  std::vector<std::pair<const WeightMatrix*, size_t>> where;
  size_t total = 0;
  for (const WeightMatrix& w : ps.matrices()) {
    where.push_back({&w, total});
    total += (f.packed_bytes(w.node->rows, w.node->cols) + 63) / 64 * 64;
  }
  auto bytes = std::shared_ptr<uint8_t[]>(new uint8_t[std::max<size_t>(total, 1)]);
  std::map<int, const void*> data;
  for (auto [wp, off] : where) {
    const WeightMatrix& w = *wp;
    const int64_t R = w.node->rows, C = w.node->cols, ng = (C + f.grid_cols - 1) / f.grid_cols;
    Acc& a = acc[wp];
    adapt_threads();
    if (a.rows == 0)
      throw Error("gptq: weight matrix '" + ps.infos()[w.first].name + "' saw no calibration input (is it multiplied outside linear()?)");
    std::vector<float> Wq(R * C), grids(R * ng * f.grid_floats), rtn(R * C);
    gptq_matrix(w.node->v, R, C, a.H, f, o.damp, Wq.data(), grids.data());
    f.pack_on_grids(Wq.data(), grids.data(), R, C, bytes.get() + off);
    data[w.first] = bytes.get() + off;
    // The layer-output error of both methods against this Hessian, relative to the output's size.
    std::vector<uint8_t> tmp(f.packed_bytes(R, C));
    f.pack(w.node->v, R, C, tmp.data());
    f.unpack(tmp.data(), R, C, rtn.data());
    std::vector<double> Eg(R * C), Er(R * C), W(w.node->v, w.node->v + R * C);
    for (int64_t i = 0; i < R * C; ++i) {
      Eg[i] = (double)w.node->v[i] - Wq[i];
      Er[i] = (double)w.node->v[i] - rtn[i];
    }
    const double norm = quadratic(W, R, C, a.H);
    if (norm > 0) {
      rep.gptq_error += quadratic(Eg, R, C, a.H) / norm;
      rep.rtn_error += quadratic(Er, R, C, a.H) / norm;
    }
    ++rep.matrices;
  }
  ps.set_prepacked(f, std::move(data), std::shared_ptr<const void>(bytes, bytes.get()));
  m.prepare_inference(f);
  return rep;
}

}  // namespace looplm
