// Chat templates (docs/chat_templates.md): a model's Jinja chat_template rendered as transformers'
// tokenizer.apply_chat_template(messages, tokenize=False, ...) renders it, byte for byte, or a
// built-in template chosen by name (`--chat-template NAME`).
#pragma once
#include <ctime>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/jinja.h"

namespace looplm {

struct ChatRenderOptions {
  bool add_generation_prompt = true;
  // The special tokens as transformers passes them (their text); absent when the model has none,
  // which leaves the name undefined in the template.
  std::optional<std::string> bos_token, eos_token;
  // A list of tool schemas, and documents; the template sees None when absent (as transformers
  // passes tools=None, documents=None).
  std::optional<nlohmann::ordered_json> tools, documents;
  // More template variables (a JSON object), as apply_chat_template's **kwargs: e.g.
  // {"enable_thinking": false} for Qwen 3. They override bos_token / eos_token.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  // strftime_now()'s clock (the local time to format); empty: the current time.
  std::function<std::tm()> now;
  jinja::Limits limits;
};

class ChatTemplate {
 public:
  // `origin` names the template in errors (a file, or "builtin:chatml"). Throws
  // jinja::SyntaxError (a looplm::Error) when the source does not parse.
  ChatTemplate(std::string_view source, std::string origin);

  // A built-in template (builtin_names()); throws UsageError for another name.
  static ChatTemplate builtin(const std::string& name);
  static std::vector<std::string> builtin_names();

  // The prompt text for `messages` (a JSON list of {role, content, ...}). Keeps the order of keys
  // in the messages and tools (tojson prints them in that order, as Python does), so requests
  // should be parsed as nlohmann::ordered_json; the nlohmann::json overload sees keys sorted.
  // Throws jinja::RenderError (a looplm::UsageError): the message of the template's
  // raise_exception() verbatim (e.g. roles out of order), or another error named with the
  // template and line.
  std::string render(const nlohmann::ordered_json& messages, const ChatRenderOptions& options = {}) const;
  std::string render(const nlohmann::json& messages, const ChatRenderOptions& options = {}) const;

  const std::string& origin() const { return origin_; }
  const std::string& source() const { return source_; }

 private:
  std::string origin_, source_;
  jinja::Template template_;
};

}  // namespace looplm
