// The Replace step tokenizer.json files use both as a normalizer and as a decoder: every
// non-overlapping match of a pattern ({"String": ...} or {"Regex": ...}) replaced by `content`.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/hf_regex.h"

namespace looplm::hf {

struct ReplaceRule {
  std::string literal;  // a String pattern
  Regex regex;          // a Regex pattern
  std::string content;
  // From the step's JSON object; Error naming `where` for a missing or malformed pattern.
  static ReplaceRule parse(const nlohmann::json& j, const std::string& where);
  // s with every match replaced; s is left as it is when nothing matches. An empty regex match
  // replaces nothing (the search steps over one character), as the Rust library does.
  void apply(std::string& s) const;
  // A String pattern of one character: its matches never span two tokens' strings.
  bool single_character() const;
};

}  // namespace looplm::hf
