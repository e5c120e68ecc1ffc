// Parallel loops that stay off OpenMP's runtime where they would run on one thread anyway.
// libgomp enters GOMP_parallel even when a `parallel ... if (false)` clause or a pool of one thread
// makes the region serial, and each entry costs ~1.1 µs (a futex syscall on these VMs: 1e5 empty
// regions, `if (0)` or one thread alike). Batch-1 decoding runs ~63 such regions per token on a
// 6-layer model (its norms, residual adds, activations, attention and products), so plain loops
// decide first.
#pragma once
#include <algorithm>
#include <cstdint>
#include <omp.h>

namespace looplm {

// True when a region would have more than one thread (outside any region: the pool's size).
inline bool pool_has_threads() { return omp_get_max_threads() > 1; }

// f(i) for i in [0, n): OpenMP's static schedule when `big` and the pool has threads, else a plain
// loop on the calling thread (the same iterations; kernels that need thread-count independent
// results are written so already, ops/kernels.h).
template <class I, class F>
void parallel_for(I n, bool big, F&& f) {
  if (!big || !pool_has_threads()) {
    for (I i = 0; i < n; ++i) f(i);
    return;
  }
#pragma omp parallel for schedule(static)
  for (I i = 0; i < n; ++i) f(i);
}

// Split [0, n) into one contiguous span per thread (64-element aligned, so threads never share a
// cache line) and run f(lo, count) on each; small n runs on the calling thread.
template <class F>
void parallel_spans(int64_t n, F f, int64_t min_parallel = 1 << 14) {
  if (n < min_parallel || !pool_has_threads()) { f(int64_t(0), n); return; }
#pragma omp parallel
  {
    const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
    const int64_t chunk = ((n + nt - 1) / nt + 63) / 64 * 64;
    const int64_t lo = std::min(n, id * chunk), hi = std::min(n, lo + chunk);
    if (hi > lo) f(lo, hi - lo);
  }
}

}  // namespace looplm
