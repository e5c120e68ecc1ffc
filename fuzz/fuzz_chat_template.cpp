// Chat templates (text/chat_template.h, docs/chat_templates.md): the input as a Jinja template, as
// a converted model carries one or --chat-template names one, parsed and rendered over a fixed
// conversation (tools, non-ASCII text, a tool call) with the limits of a render made small so a
// runaway template ends quickly. Only looplm::Error may come out (SyntaxError, RenderError).
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "looplm/error.h"
#include "text/chat_template.h"

using namespace looplm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi 漢字 🫠 {{ not a tag }}"},
    {"role": "assistant", "content": null, "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]},
    {"role": "tool", "content": "42"},
    {"role": "user", "content": "and?"}])");
  static const nlohmann::ordered_json tools = nlohmann::ordered_json::parse(
      R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}])");
  const std::string source(reinterpret_cast<const char*>(data), size);
  try {
    const ChatTemplate t(source, "fuzz");
    ChatRenderOptions o;
    o.bos_token = "<s>";
    o.eos_token = "</s>";
    o.tools = tools;
    o.extra = {{"enable_thinking", size % 2 == 0}};
    o.now = [] { std::tm tm{}; tm.tm_year = 124; tm.tm_mon = 6; tm.tm_mday = 26; return tm; };
    o.limits.max_output_bytes = 1 << 20;
    o.limits.max_steps = 200000;
    o.limits.max_items = 1 << 14;
    o.limits.max_range = 10000;
    t.render(messages, o);
    o.add_generation_prompt = false;
    t.render(messages, o);
  } catch (const Error&) {
  }
  return 0;
}
