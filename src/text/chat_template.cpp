#include "text/chat_template.h"

#include <algorithm>
#include <utility>

namespace looplm {

namespace {

// ChatML as looplm serve has always written it (and as Ouro's template renders it): per message
// "<|im_start|>ROLE\nCONTENT<|im_end|>\n", then "<|im_start|>assistant\n" for the reply. Content is
// text, or a list of {type: text, text} parts joined.
constexpr std::string_view kChatml = R"jinja(
{%- for message in messages -%}
  {%- if message.role is not string -%}
    {{- raise_exception("each message needs a 'role' (system, user or assistant) and its 'content'") -}}
  {%- endif -%}
  {%- if message.content is string -%}
    {%- set content = message.content -%}
  {%- elif message.content is defined and message.content is sequence and message.content is not mapping -%}
    {%- set parts = namespace(text='') -%}
    {%- for part in message.content -%}
      {%- if part is mapping and part.type == 'text' and part.text is string -%}
        {%- set parts.text = parts.text + part.text -%}
      {%- else -%}
        {{- raise_exception('only text message parts are understood') -}}
      {%- endif -%}
    {%- endfor -%}
    {%- set content = parts.text -%}
  {%- else -%}
    {{- raise_exception("a message's 'content' must be text") -}}
  {%- endif -%}
  {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|im_start|>assistant\n' -}}
{%- endif -%}
)jinja";

struct Builtin {
  const char* name;
  std::string_view source;
};
constexpr Builtin kBuiltins[] = {{"chatml", kChatml}};

}  // namespace

ChatTemplate::ChatTemplate(std::string_view source, std::string origin)
    : origin_(std::move(origin)), source_(source), template_(source, "chat template " + origin_) {}

ChatTemplate ChatTemplate::builtin(const std::string& name) {
  for (const Builtin& b : kBuiltins)
    if (name == b.name) return ChatTemplate(b.source, std::string("builtin:") + b.name);
  std::string names;
  for (const std::string& n : builtin_names()) names += (names.empty() ? "" : ", ") + n;
  throw UsageError("unknown chat template '" + name + "' (built-in templates: " + names + ")");
}

std::vector<std::string> ChatTemplate::builtin_names() {
  std::vector<std::string> names;
  for (const Builtin& b : kBuiltins) names.emplace_back(b.name);
  return names;
}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, const ChatRenderOptions& options) const {
  // apply_chat_template's call: render(messages=, tools=, documents=, add_generation_prompt=,
  // **special_tokens_map, **kwargs)
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
  vars["messages"] = messages;
  vars["tools"] = options.tools ? *options.tools : nullptr;
  vars["documents"] = options.documents ? *options.documents : nullptr;
  vars["add_generation_prompt"] = options.add_generation_prompt;
  if (options.bos_token) vars["bos_token"] = *options.bos_token;
  if (options.eos_token) vars["eos_token"] = *options.eos_token;
  if (!options.extra.is_null()) {
    if (!options.extra.is_object()) throw UsageError("extra chat template variables must be a JSON object");
    for (const auto& [key, value] : options.extra.items()) {
      if (key == "messages" || key == "tools" || key == "documents" || key == "add_generation_prompt")
        throw UsageError("the chat template variable '" + key + "' is set by the request itself");
      vars[key] = value;
    }
  }
  jinja::RenderOptions ro;
  ro.limits = options.limits;
  ro.now = options.now;
  try {
    return template_.render(vars, ro);
  } catch (const jinja::RenderError& e) {
    if (e.raised()) throw;  // the template's own message, for the client
    throw jinja::RenderError("chat template " + origin_ + ", line " + std::to_string(e.line()) + ": " + e.what(), false,
                             e.line());
  }
}

std::string ChatTemplate::render(const nlohmann::json& messages, const ChatRenderOptions& options) const {
  nlohmann::ordered_json ordered;
  try {
    ordered = nlohmann::ordered_json::parse(messages.dump());
  } catch (const nlohmann::json::exception& e) {
    throw UsageError("messages: " + plain_message(e));
  }
  return render(ordered, options);
}

}  // namespace looplm
