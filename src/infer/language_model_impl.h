// What a LanguageModel holds (include/looplm/looplm.h): the model and its tokenizer. Shared by the
// library's files that build on a loaded model (language_model.cpp, session.cpp).
#pragma once
#include <memory>

#include "data/tokenizer.h"
#include "looplm/looplm.h"
#include "model/model.h"

namespace looplm {

struct LanguageModel::Impl {
  std::unique_ptr<Model> model;
  Tokenizer tok;
  LanguageModel::SpecialTokens special;  // special_tokens_of(config, tok)
  explicit Impl(std::unique_ptr<Model> m);
};

// A model's end and begin tokens: its own conventions (Config::text) where it has them, else a
// Hugging Face tokenizer's special tokens found by name (models trained here).
LanguageModel::SpecialTokens special_tokens_of(const Config& c, const Tokenizer& tok);

}  // namespace looplm
