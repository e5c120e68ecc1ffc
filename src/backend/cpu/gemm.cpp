#include "backend/cpu/gemm.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include "looplm/error.h"

namespace looplm {

void gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc) {
  if (M == 0 || N == 0) return;
  if (M == 1 && !ta && tb && alpha == 1.0f && (beta == 0.0f || beta == 1.0f)) {
    gemv_rows(N, K, B, ldb, A, C, beta == 1.0f);  // x W^T for one row: batch-1 decoding
    return;
  }
  dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  LOOPLM_ASSERT(st == dnnl_success, "dnnl_sgemm failed");
}

void gemm_fixed_split(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                      int ldb, float beta, float* C, int ldc) {
  constexpr int kTile = 128;  // C tiles of 128 x 128: enough of them to share, big enough to run fast
  const int tm = (M + kTile - 1) / kTile, tn = (N + kTile - 1) / kTile;
#pragma omp parallel for schedule(dynamic, 1)  // always a parallel region: oneDNN inside stays single-threaded
  for (int t = 0; t < tm * tn; ++t) {
    const int i0 = (t / tn) * kTile, j0 = (t % tn) * kTile;
    const int m = std::min(kTile, M - i0), n = std::min(kTile, N - j0);
    const float* a = ta ? A + i0 : A + (int64_t)i0 * lda;  // op(A) rows i0..
    const float* b = tb ? B + (int64_t)j0 * ldb : B + j0;  // op(B) columns j0..
    // Inside the parallel region oneDNN runs on the calling thread alone.
    dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, K, alpha, a, lda, b, ldb, beta,
                                  C + (int64_t)i0 * ldc + j0, ldc);
    LOOPLM_ASSERT(st == dnnl_success, "dnnl_sgemm failed");
  }
}

double measure_gemm_gflops(int M, int d, int f, int reps, const std::string& precision) {
  const bool bf16 = precision == "bf16";
  LOOPLM_ASSERT(bf16 || precision == "fp32", "measure_gemm_gflops: precision is fp32 or bf16");
  auto product = [bf16](int m, int n, int k, const float* a, const float* b, float* c) {
    if (bf16) gemm_fixed_split_bf16(false, true, m, n, k, 1.0f, a, k, b, k, 0.0f, c, n);
    else gemm(false, true, m, n, k, 1.0f, a, k, b, k, 0.0f, c, n);
  };
  const int shapes[][3] = {{M, 3 * d, d}, {M, f, d}, {M, d, f}};
  double best = 0;
  for (auto& s : shapes) {
    std::vector<float> A((size_t)s[0] * s[2], 0.5f), Bm((size_t)s[1] * s[2], 0.25f), C((size_t)s[0] * s[1]);
    product(s[0], s[1], s[2], A.data(), Bm.data(), C.data());  // warm-up
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      product(s[0], s[1], s[2], A.data(), Bm.data(), C.data());
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    // The best repetition, not the median: this is the peak a training rate is a fraction of, and
    // on a shared machine a median probe can come out below what training then reaches.
    std::sort(t.begin(), t.end());
    best = std::max(best, 2.0 * s[0] * s[1] * s[2] / t[0] / 1e9);
  }
  return best;
}

void gemm(bool ta, bool tb, int M, int N, int K, double alpha, const double* A, int lda, const double* B,
          int ldb, double beta, double* C, int ldc) {
#pragma omp parallel for
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double s = 0;
      for (int k = 0; k < K; ++k) s += (ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
      C[i * ldc + j] = alpha * s + (beta == 0 ? 0.0 : beta * C[i * ldc + j]);
    }
}

}  // namespace looplm
