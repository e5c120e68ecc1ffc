// Training depth per step (docs/config.md, depth_sampler), a pure function of (seed, step) so runs
// resume exactly:
//   fixed: R;  uniform: r ~ U{1..R};
//   poisson_lognormal (Huginn): r = Poisson(LogNormal(ln R − σ²/2, σ)) + 1, clipped to [1, depth_max or 3R].
#pragma once
#include <cstdint>

#include "looplm/config.h"

namespace looplm {
int sample_depth(const Config& c, uint64_t step);
// The largest depth the sampler can draw (what training plans its memory for).
int max_depth(const Config& c);
}
