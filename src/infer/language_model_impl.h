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
  explicit Impl(std::unique_ptr<Model> m) : model(std::move(m)), tok(Tokenizer::from_config(model->config())) {}
};

}  // namespace looplm
