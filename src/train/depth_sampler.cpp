#include "train/depth_sampler.h"

#include <algorithm>
#include <cmath>

#include "core/rng.h"

namespace looplm {

int sample_depth(const Config& c, uint64_t step) {
  Rng rng(c.seed, kStreamDepth, step);
  if (c.depth_sampler == "uniform") return 1 + (int)rng.below((uint64_t)c.R);
  if (c.depth_sampler == "poisson_lognormal") {
    const double s = c.depth_sigma;
    double tau = std::exp(std::log((double)c.R) - s * s / 2 + s * rng.normal());
    int hi = c.depth_max > 0 ? c.depth_max : 3 * c.R;
    return std::clamp(rng.poisson(tau) + 1, 1, hi);
  }
  return c.R;
}

int max_depth(const Config& c) {
  if (c.depth_sampler == "poisson_lognormal") return c.depth_max > 0 ? c.depth_max : 3 * c.R;
  return c.R;
}

}  // namespace looplm
