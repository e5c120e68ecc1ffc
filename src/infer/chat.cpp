// Chat on a loaded model (include/looplm/looplm.h, LanguageModel::apply_chat_template): the
// model's chat template, a built-in or a file's, rendered by text/chat_template.h.
#include <sys/stat.h>

#include "infer/language_model_impl.h"
#include "io/json_input.h"
#include "looplm/looplm.h"
#include "looplm/util.h"
#include "text/chat_template.h"

namespace looplm {

namespace {
constexpr const char* kOwnTemplate = "the model's chat template";
}  // namespace

LanguageModel::Impl::~Impl() = default;

void init_chat_template(LanguageModel::Impl& impl) {
  const std::string& own = impl.model->config().text.chat_template;
  if (own.empty()) {
    impl.chat = std::make_shared<const ChatTemplate>(ChatTemplate::builtin("chatml"));
    impl.chat_origin = "builtin:chatml";
    return;
  }
  impl.chat_origin = kOwnTemplate;
  try {
    impl.chat = std::make_shared<const ChatTemplate>(own, kOwnTemplate);
  } catch (const Error& e) {  // the model still generates; chat says why it cannot
    impl.chat_error = e.what();
  }
}

std::vector<std::string> chat_template_names() { return ChatTemplate::builtin_names(); }

void LanguageModel::use_chat_template(const std::string& name_or_file) {
  Impl& im = *impl_;
  const auto names = ChatTemplate::builtin_names();
  if (std::find(names.begin(), names.end(), name_or_file) != names.end()) {
    im.chat = std::make_shared<const ChatTemplate>(ChatTemplate::builtin(name_or_file));
    im.chat_origin = "builtin:" + name_or_file;
    im.chat_error.clear();
    return;
  }
  struct stat st;
  if (::stat(name_or_file.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    throw UsageError("--chat-template '" + brief(name_or_file) + "' is neither a built-in template (" + joined(names) +
                     ") nor a file");
  std::string text = read_file_bytes(name_or_file);
  // A tokenizer_config.json: its chat_template (a string, or the list's "default").
  if (name_or_file.size() >= 5 && name_or_file.compare(name_or_file.size() - 5, 5, ".json") == 0) {
    const nlohmann::json j = io::parse_json(text, name_or_file, true);
    const nlohmann::json* t = j.is_object() && j.contains("chat_template") ? &j["chat_template"] : nullptr;
    std::string found;
    if (t && t->is_string()) found = t->get<std::string>();
    else if (t && t->is_array())
      for (const auto& e : *t)
        if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string())
          found = e["template"].get<std::string>();
    if (found.empty()) throw UsageError(name_or_file + ": no chat_template in it (a string, or a list with one named \"default\")");
    text = found;
  }
  im.chat = std::make_shared<const ChatTemplate>(text, name_or_file);
  im.chat_origin = name_or_file;
  im.chat_error.clear();
}

std::string LanguageModel::chat_template_origin() const { return impl_->chat_origin; }

std::string LanguageModel::apply_chat_template(const std::string& messages_json, const ChatOptions& o) const {
  const Impl& im = *impl_;
  if (!im.chat)
    throw UsageError(im.chat_origin + " cannot be rendered by this looplm (" + im.chat_error +
                     "); give one it can with --chat-template NAME|FILE (built-in: " + joined(chat_template_names()) + ")");
  const auto messages = io::parse_json<nlohmann::ordered_json>(messages_json, "messages", true);
  if (!messages.is_array()) throw UsageError("messages must be a list of {role, content}");
  ChatRenderOptions r;
  r.add_generation_prompt = o.add_generation_prompt;
  if (im.special.bos >= 0) r.bos_token = im.special.bos_text;
  if (im.special.eos >= 0) r.eos_token = im.special.eos_text;
  if (!o.tools_json.empty()) r.tools = io::parse_json<nlohmann::ordered_json>(o.tools_json, "tools", true);
  if (!o.extra_json.empty()) {
    r.extra = io::parse_json<nlohmann::ordered_json>(o.extra_json, "chat_template_kwargs", true);
    if (!r.extra.is_object()) throw UsageError("chat_template_kwargs must be an object of template variables");
  }
  return im.chat->render(messages, r);
}

}  // namespace looplm
