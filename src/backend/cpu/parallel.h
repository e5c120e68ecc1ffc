// Parallel loops that stay off OpenMP's runtime where they would run on one thread anyway.
// libgomp enters GOMP_parallel even when a `parallel ... if (false)` clause or a pool of one thread
// makes the region serial, and each entry costs ~1.1 µs (a futex syscall on these VMs: 1e5 empty
// regions, `if (0)` or one thread alike). Batch-1 decoding runs ~63 such regions per token on a
// 6-layer model (its norms, residual adds, activations, attention and products), so plain loops
// decide first.
#pragma once
#include <algorithm>
#include <atomic>
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

// Streams of weights split between threads that do not read at the same rate. A matrix-vector
// product streams its weights once; split statically, the thread that finishes its share first
// waits at the region's end while the other streams alone (vCPUs that share a host do not stream at
// one rate: bench/README.md, "Memory bandwidth", has the measurement). OpenMP's
// dynamic schedule balances them but interleaves the threads' streams chunk by chunk, which with
// small chunks ran slower still. So each thread starts on its own contiguous share and takes
// chunks from its front; a thread whose share is done takes the back half of the largest share
// left and goes on from there, so every stream stays a few long sequential runs.
//
// A share is [lo, hi) in chunks, both packed in one 64-bit word so that the owner's claim at the
// front and a thief's cut at the back are each one compare-and-swap that sees the other's.
struct alignas(64) ChunkShare {
  std::atomic<uint64_t> range{0};
  static uint64_t pack(uint32_t lo, uint32_t hi) { return (uint64_t)hi << 32 | lo; }
  // The front chunk, if any is left.
  bool take_front(uint32_t& c) {
    uint64_t v = range.load(std::memory_order_relaxed);
    for (;;) {
      const uint32_t lo = (uint32_t)v, hi = (uint32_t)(v >> 32);
      if (lo >= hi) return false;
      if (range.compare_exchange_weak(v, pack(lo + 1, hi), std::memory_order_relaxed)) {
        c = lo;
        return true;
      }
    }
  }
  // The back half of what is left (its last chunk when one is left).
  bool cut_back(uint32_t& lo_out, uint32_t& hi_out) {
    uint64_t v = range.load(std::memory_order_relaxed);
    for (;;) {
      const uint32_t lo = (uint32_t)v, hi = (uint32_t)(v >> 32);
      if (lo >= hi) return false;
      const uint32_t mid = lo + (hi - lo) / 2;
      if (range.compare_exchange_weak(v, pack(lo, mid), std::memory_order_relaxed)) {
        lo_out = mid, hi_out = hi;
        return true;
      }
    }
  }
  uint32_t left() const {
    const uint64_t v = range.load(std::memory_order_relaxed);
    const uint32_t lo = (uint32_t)v, hi = (uint32_t)(v >> 32);
    return hi > lo ? hi - lo : 0;
  }
};

// The weights per chunk that the matrix-vector products hand out: one claim (a compare-and-swap on
// the thread's own cache line) per 32 KB. Claiming several chunks at once, for fewer locked
// instructions, measured no faster (bench/README.md, "Memory bandwidth").
constexpr int64_t kBalancedChunkBytes = 32768;

// f(lo, count) over [0, n) in chunks of `grain` items (the last may be shorter), balanced as above
// when `big` and the pool has threads; else one call on the calling thread. Each item is computed
// by the same f whichever thread takes it, so results do not depend on the thread count or timing.
template <class F>
void parallel_balanced(int64_t n, int64_t grain, bool big, F&& f) {
  constexpr int kMaxShares = 64;
  const int nt = big ? omp_get_max_threads() : 1;
  const int64_t chunks = (n + grain - 1) / grain;
  if (nt <= 1 || chunks <= 1) {
    if (n > 0) f(int64_t(0), n);
    return;
  }
  if (nt > kMaxShares || chunks >= (int64_t(1) << 32)) {  // beyond the shares kept here: the static split
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) f(c * grain, std::min(grain, n - c * grain));
    return;
  }
  ChunkShare share[kMaxShares];
  for (int t = 0; t < nt; ++t) share[t].range.store(ChunkShare::pack((uint32_t)(chunks * t / nt), (uint32_t)(chunks * (t + 1) / nt)));
  // A region given fewer threads than asked leaves shares without an owner: the others take them.
#pragma omp parallel num_threads(nt)
  {
    ChunkShare& mine = share[omp_get_thread_num()];
    for (;;) {
      uint32_t c;
      while (mine.take_front(c)) f((int64_t)c * grain, std::min(grain, n - (int64_t)c * grain));
      int victim = -1;
      uint32_t most = 0;
      for (int t = 0; t < nt; ++t)
        if (const uint32_t l = share[t].left(); l > most) most = l, victim = t;
      if (victim < 0) break;  // nothing left anywhere (a share only grows by its own thread's cut)
      uint32_t lo, hi;
      if (share[victim].cut_back(lo, hi)) mine.range.store(ChunkShare::pack(lo, hi), std::memory_order_relaxed);
    }
  }
}

}  // namespace looplm
