// Small text helpers for messages: "did you mean" suggestions.
#pragma once
#include <string>
#include <vector>

namespace looplm {

// Levenshtein distance (insertions, deletions, substitutions).
size_t edit_distance(const std::string& a, const std::string& b);
// The candidate nearest to `word` when it is within a few edits (at most 3, and less than half of
// `word`'s length), else "". Words over 64 bytes get no suggestion.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace looplm
