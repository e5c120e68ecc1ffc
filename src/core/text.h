// Small text helpers for messages: "did you mean" suggestions.
#pragma once
#include <string>
#include <vector>

#include "looplm/util.h"

namespace looplm {

// Levenshtein distance (insertions, deletions, substitutions).
size_t edit_distance(const std::string& a, const std::string& b);
// did_you_mean: include/looplm/util.h.

}  // namespace looplm
