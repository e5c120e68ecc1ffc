// `looplm serve`'s request bodies (tools/serve_request.h, docs/serve.md): the input as the JSON
// body of POST /v1/completions, /v1/chat/completions and /apply-template, checked as the server
// checks it, over a stand-in for a model: a byte tokenizer in a vocabulary padded to 300 ids, the
// built-in ChatML template (small render limits), a context of 64. Only looplm::Error and the
// server's HttpError (a 4xx) may come out; what is accepted must be within the limits it was
// checked against (every id in the vocabulary, prompts within the context, counts in range).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"
#include "looplm/error.h"
#include "serve_request.h"
#include "text/chat_template.h"

using namespace looplm;

namespace {
[[noreturn]] void violated(const char* what) {
  std::fprintf(stderr, "fuzz_serve_request: an accepted request breaks its limits: %s\n", what);
  std::abort();
}
#define EXPECT(c) \
  if (!(c)) violated(#c)

const serve::ModelView& view() {
  static const Tokenizer tok = Tokenizer::byte_level();
  static const ChatTemplate chatml = ChatTemplate::builtin("chatml");
  static const serve::ModelView v = [] {
    serve::ModelView m;
    m.id = "fuzz";
    m.vocab_size = 300;  // 256 byte ids and 44 without text (a padded vocabulary)
    m.R = 4;
    m.context = 64;
    m.max_n = 16;
    m.max_sequences = 8;
    m.builtin_chatml = true;
    m.no_text.assign(300, false);
    for (int i = 256; i < 300; ++i) m.no_text[i] = true;
    m.encode_prompt = [](const std::string& text, bool add_bos) {
      std::vector<int32_t> ids = tok.encode_prompt(text, nullptr);
      if (add_bos) ids.insert(ids.begin(), 0);
      return ids;
    };
    m.apply_chat_template = [](const std::string& messages_json, const ChatOptions& o) {
      ChatRenderOptions r;
      r.add_generation_prompt = o.add_generation_prompt;
      r.limits.max_output_bytes = 1 << 20;
      r.limits.max_steps = 200000;
      r.limits.max_items = 1 << 14;
      r.limits.max_range = 10000;
      if (!o.tools_json.empty()) r.tools = nlohmann::ordered_json::parse(o.tools_json);
      if (!o.extra_json.empty()) r.extra = nlohmann::ordered_json::parse(o.extra_json);
      return chatml.render(nlohmann::ordered_json::parse(messages_json), r);
    };
    return m;
  }();
  return v;
}

void check_options(const serve::ModelView& m, const serve::RequestOptions& o) {
  EXPECT(o.opt.max_new >= 0 && o.opt.max_new <= m.context);
  EXPECT(o.opt.temperature >= 0 && o.opt.temperature <= 2);
  EXPECT(o.opt.top_p > 0 && o.opt.top_p <= 1);
  EXPECT(o.opt.top_k >= 0);
  EXPECT(o.opt.logprobs >= -1 && o.opt.logprobs <= 20);
  EXPECT(o.depth >= -1 && o.depth <= 64 * m.R);
  EXPECT(o.stop.size() <= 5);
  for (const auto& [id, bias] : o.opt.logit_bias) {
    EXPECT(id >= 0 && id < m.vocab_size);
    EXPECT(std::isfinite(bias) && bias >= -100 && bias <= 100);
    EXPECT(bias <= 0 || !m.no_text[id]);
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const serve::ModelView& m = view();
  const std::string body(reinterpret_cast<const char*>(data), size);
  try {
    const serve::CompletionRequest r = serve::completion_request(m, body);
    check_options(m, r.o);
    EXPECT(r.n >= 1 && r.n <= m.max_n);
    EXPECT(!r.prompts.empty() && (int64_t)r.prompts.size() * r.n <= m.max_sequences);
    EXPECT(r.logprobs >= -1 && r.logprobs <= 20);
    for (const auto& p : r.prompts) {
      EXPECT(!p.empty() && (int)p.size() <= m.context);
      for (int32_t id : p) EXPECT(id >= 0 && id < m.vocab_size && !m.no_text[id]);
    }
  } catch (const serve::HttpError& e) {
    EXPECT(e.status >= 400 && e.status < 500);
  } catch (const Error&) {
  }
  try {
    const serve::ChatRequest r = serve::chat_request(m, body);
    check_options(m, r.o);
    EXPECT(r.n >= 1 && r.n <= m.max_n);
    EXPECT(!r.prompt.empty() && (int)r.prompt.size() <= m.context);
  } catch (const serve::HttpError& e) {
    EXPECT(e.status >= 400 && e.status < 500);
  } catch (const Error&) {
  }
  try {  // POST /apply-template
    serve::chat_prompt(m, body, serve::parse_body(body));
  } catch (const serve::HttpError& e) {
    EXPECT(e.status >= 400 && e.status < 500);
  } catch (const Error&) {
  }
  return 0;
}
