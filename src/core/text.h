// Small text helpers for messages: "did you mean" suggestions, a value cut short to quote.
#pragma once
#include <string>
#include <vector>

#include "looplm/util.h"

namespace looplm {

// Levenshtein distance (insertions, deletions, substitutions).
size_t edit_distance(const std::string& a, const std::string& b);
// did_you_mean and brief (a value cut short and made safe to quote, defined in core/text.cpp):
// include/looplm/util.h.

}  // namespace looplm
