// The machine's memory read rate (backend/cpu/gemm.h): the reference for how close memory-bound
// decoding comes to what the memory allows (bench/README.md).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/cpu/gemm.h"

namespace looplm {

double measure_read_gbps(size_t bytes, int reps) {
  const size_t n = bytes / sizeof(uint64_t);
  std::vector<uint64_t> buf(n);
  for (size_t i = 0; i < n; ++i) buf[i] = i;  // touched: the pages exist before timing
  double best = 0;
  volatile uint64_t sink = 0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    uint64_t total = 0;
    // Each thread XORs its contiguous share with 8 independent lanes (the compiler vectorizes
    // it): a pure streaming read, as a matrix-vector product reads its weights.
#pragma omp parallel reduction(^ : total)
    {
      const int t = omp_get_thread_num(), nt = omp_get_num_threads();
      const size_t lo = n * t / nt, hi = n * (t + 1) / nt;
      uint64_t acc[8] = {};
      size_t i = lo;
      for (; i + 8 <= hi; i += 8)
        for (int k = 0; k < 8; ++k) acc[k] ^= buf[i + k];
      for (; i < hi; ++i) acc[0] ^= buf[i];
      for (int k = 0; k < 8; ++k) total ^= acc[k];
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sink = sink ^ total;
    best = std::max(best, (double)(n * sizeof(uint64_t)) / s / 1e9);
  }
  (void)sink;
  return best;
}

}  // namespace looplm
