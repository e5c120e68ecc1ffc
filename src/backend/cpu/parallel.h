// Split [0, n) into one contiguous span per thread (64-element aligned, so threads never share a
// cache line) and run f(lo, count) on each; small n runs on the calling thread.
#pragma once
#include <algorithm>
#include <cstdint>
#include <omp.h>

namespace looplm {

template <class F>
void parallel_spans(int64_t n, F f, int64_t min_parallel = 1 << 14) {
  if (n < min_parallel) { f(int64_t(0), n); return; }
#pragma omp parallel
  {
    const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
    const int64_t chunk = ((n + nt - 1) / nt + 63) / 64 * 64;
    const int64_t lo = std::min(n, id * chunk), hi = std::min(n, lo + chunk);
    if (hi > lo) f(lo, hi - lo);
  }
}

}  // namespace looplm
