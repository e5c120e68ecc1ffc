// Deterministic evaluation (SPEC §3): noise off, fixed depth, consecutive non-overlapping windows
// of `context` tokens with targets shifted by one; the mean token loss at every exit r = 1..depth
// and the cosine similarity of successive loop states.
#pragma once
#include <cstdint>
#include <vector>

#include "looplm/looplm.h"
#include "model/model.h"

namespace looplm {

// max_windows < 0: all windows.
EvalResult evaluate_tokens(const Model& m, const std::vector<int32_t>& tokens, int depth, int batch,
                           int64_t max_windows = -1);

}  // namespace looplm
