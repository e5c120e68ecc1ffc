// What a LanguageModel holds (include/looplm/looplm.h): the model and its tokenizer. Shared by the
// library's files that build on a loaded model (language_model.cpp, session.cpp).
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "looplm/looplm.h"
#include "infer/speculative.h"
#include "model/model.h"

namespace looplm {

class ChatTemplate;

struct LanguageModel::Impl {
  std::unique_ptr<Model> model;
  Tokenizer tok;
  LanguageModel::SpecialTokens special;  // special_tokens_of(config, tok)
  std::vector<int32_t> textless;         // ids the tokenizer cannot write (mask_textless), ascending
  // What chat renders (infer/chat.cpp): the model's template, a built-in or a file's; or, when the
  // model's own does not parse, nothing and the reason (chat is then refused, naming it).
  std::shared_ptr<const ChatTemplate> chat;
  std::string chat_origin, chat_error;
  // What `--speculative auto` measured, per (depth, KV cache, threads) (speculative_auto.cpp).
  std::mutex speculative_mu;
  std::map<std::tuple<int, std::string, int>, SpeculativeChoice> speculative_choice;
  explicit Impl(std::unique_ptr<Model> m);
  ~Impl();
};

// UsageError naming the first id of `prompt` the tokenizer cannot write (`which`: "prompt 2").
void check_prompt_has_text(const LanguageModel::Impl& impl, const std::vector<int32_t>& prompt, const std::string& which);

// The model's own chat template parsed (or the built-in chatml without one) into impl.chat.
void init_chat_template(LanguageModel::Impl& impl);

// A model's end and begin tokens: its own conventions (Config::text) where it has them, else a
// Hugging Face tokenizer's special tokens found by name (models trained here).
LanguageModel::SpecialTokens special_tokens_of(const Config& c, const Tokenizer& tok);

}  // namespace looplm
