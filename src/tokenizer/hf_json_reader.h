// Reading a tokenizer.json quickly (docs/data.md): nlohmann's DOM for everything but the two
// members that are most of the file, model.vocab and model.merges, which go straight into flat
// structures (a 33 MB file made 800,000 small DOM nodes, most of its loading time).
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/hf_string_map.h"

namespace looplm::hf {

struct TokenizerJson {
  nlohmann::json doc;                // model.vocab / model.merges are null here when read below
  bool has_vocab = false, has_merges = false;
  StringMap<int32_t> vocab;          // token -> id; every id checked to be in [0, 2^24)
  std::vector<std::string> merges;   // left, right, left, right, ... ("a b" entries split at the space)
};

// Error naming `origin`: invalid JSON, nesting past io::kMaxJsonDepth, a vocab id that is not an
// integer in range, a merge that is neither "a b" nor ["a", "b"].
TokenizerJson read_tokenizer_json(std::string_view text, const std::string& origin);

}  // namespace looplm::hf
