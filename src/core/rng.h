// Counter-based random numbers: every draw is a pure function of (seed, stream, counter), so a run
// is reproducible and resumable from a step number alone, and draws can be made in parallel.
#pragma once
#include <cmath>
#include <cstdint>

namespace looplm {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A small sequential generator whose whole state is (key, counter): seed it from (seed, purpose, step).
struct Rng {
  uint64_t key, counter = 0;
  explicit Rng(uint64_t seed, uint64_t stream = 0, uint64_t step = 0)
      : key(splitmix64(splitmix64(seed ^ 0x6a09e667f3bcc909ULL) ^ stream) ^ splitmix64(step + 0x3c6ef372fe94f82bULL)) {}
  uint64_t next_u64() { return splitmix64(key ^ splitmix64(counter++)); }
  double uniform() { return (next_u64() >> 11) * 0x1.0p-53; }           // [0, 1)
  uint64_t below(uint64_t n) { return next_u64() % n; }                  // bias < n / 2^64
  double normal() {                                                      // Box-Muller
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  int poisson(double lambda) {  // Knuth for small lambda, normal approximation beyond
    if (lambda > 60) {
      double x = std::round(lambda + std::sqrt(lambda) * normal());
      return x < 0 ? 0 : int(x);
    }
    double L = std::exp(-lambda), p = 1.0;
    int k = 0;
    do { ++k; p *= uniform(); } while (p > L);
    return k - 1;
  }
};

// Named streams so that adding a new random draw never shifts another one.
enum RngStream : uint64_t { kStreamInit = 1, kStreamDepth = 2, kStreamData = 3, kStreamNoise = 4, kStreamSample = 5,
                        kStreamState = 6 };

}  // namespace looplm
