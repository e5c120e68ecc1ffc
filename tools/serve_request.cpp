// `looplm serve`'s request checking (serve_request.h): a body's fields, each wrong one a 400 naming it.
#include "serve_request.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <type_traits>

#include "looplm/util.h"

namespace looplm::serve {

namespace {
using nlohmann::json;

// A request's fields, checked (each wrong one: HTTP 400 naming it).
struct Fields {
  const json& j;
  template <class T>
  T get(const char* key, T def) const {
    if (!j.contains(key) || j.at(key).is_null()) return def;
    const json& v = j.at(key);
    if constexpr (std::is_same_v<T, bool>) {
      if (!v.is_boolean()) throw bad(std::string("'") + key + "' must be true or false", key);
      return v.get<bool>();
    } else if constexpr (std::is_integral_v<T>) {
      if (!v.is_number_integer() && !(v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()))
        throw bad(std::string("'") + key + "' must be an integer", key);
      // within ±2^53 (a double's integers; far beyond any real value): no overflowing conversion
      const double d = v.is_number_unsigned() ? (double)v.get<uint64_t>() : v.is_number_integer() ? (double)v.get<int64_t>() : v.get<double>();
      if (std::fabs(d) > 9007199254740992.0) throw bad(std::string("'") + key + "' is out of range", key);
      return (T)d;
    } else if constexpr (std::is_floating_point_v<T>) {
      if (!v.is_number()) throw bad(std::string("'") + key + "' must be a number", key);
      return v.get<double>();
    } else {
      if (!v.is_string()) throw bad(std::string("'") + key + "' must be a string", key);
      return v.get<std::string>();
    }
  }
  bool given(const char* key) const { return j.contains(key) && !j.at(key).is_null(); }
};

void check_model(const ModelView& m, const json& body) {
  if (body.contains("model") && !body["model"].is_null()) {
    if (!body["model"].is_string()) throw bad("'model' must be a string", "model");
    const std::string name = body["model"].get<std::string>();
    if (!name.empty() && name != m.id)
      throw HttpError{400, "the model '" + brief(name) + "' does not exist here: this server serves '" + m.id + "' (GET /v1/models)",
                      "invalid_request_error", "model"};
  }
}

// The prompts of a completions request: a string, a list of strings, a list of ids, or a list of id lists.
std::vector<std::vector<int32_t>> prompts_of(const ModelView& m, const json& p) {
  std::vector<std::vector<int32_t>> out;
  const int V = m.vocab_size;
  auto ids = [&](const json& a) {
    std::vector<int32_t> t;
    for (const json& x : a) {
      if (!x.is_number_integer()) throw bad("a token-id prompt holds integers only", "prompt");
      const int64_t v = x.is_number_unsigned() && x.get<uint64_t>() > (uint64_t)INT64_MAX ? INT64_MAX : x.get<int64_t>();
      if (v < 0 || v >= V) throw bad("prompt token " + std::to_string(v) + " is outside the vocabulary (0.." + std::to_string(V - 1) + ")", "prompt");
      if ((size_t)v < m.no_text.size() && m.no_text[v])
        throw bad("prompt token " + std::to_string(v) + " has no text (the model's vocabulary is padded past its tokenizer's)", "prompt");
      t.push_back((int32_t)v);
    }
    return t;
  };
  const std::string shape = "'prompt' is a string, a list of strings, a list of token ids or a list of such lists";
  if (p.is_string()) {
    out.push_back(m.encode_prompt(p.get<std::string>(), true));
  } else if (p.is_array() && !p.empty() && p[0].is_number_integer()) {
    out.push_back(ids(p));
  } else if (p.is_array() && !p.empty()) {
    for (const json& e : p)
      if (!e.is_string() && !e.is_array()) throw bad(shape, "prompt");
    for (const json& e : p) out.push_back(e.is_string() ? m.encode_prompt(e.get<std::string>(), true) : ids(e));
  } else {
    throw bad(shape, "prompt");
  }
  for (const auto& t : out) {
    if (t.empty()) throw bad("a prompt is empty", "prompt");
    if ((int)t.size() > m.context)
      throw bad("a prompt has " + std::to_string(t.size()) + " tokens and the context holds " + std::to_string(m.context), "prompt");
  }
  return out;
}

// OpenAI's logit_bias: {"token id": bias from -100 to 100}.
std::vector<std::pair<int32_t, float>> logit_bias_of(const ModelView& m, const json& b) {
  if (!b.is_object()) throw bad("'logit_bias' maps token ids (as strings) to numbers from -100 to 100", "logit_bias");
  const int V = m.vocab_size;
  std::vector<std::pair<int32_t, float>> out;
  for (const auto& [key, v] : b.items()) {
    size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(key, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != key.size() || id < 0 || id >= V)
      throw bad("'logit_bias' key '" + brief(key) + "' is not a token id (0.." + std::to_string(V - 1) + ")", "logit_bias");
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < -100 || v.get<double>() > 100)
      throw bad("'logit_bias' of token " + key + " must be a number from -100 to 100", "logit_bias");
    if (v.get<double>() > 0 && (size_t)id < m.no_text.size() && m.no_text[id])
      throw bad("'logit_bias' favours token " + key + ", which has no text (the model's vocabulary is padded past its tokenizer's)", "logit_bias");
    out.push_back({(int32_t)id, (float)v.get<double>()});
  }
  return out;
}

int n_of(const ModelView& m, const json& body) {
  const int64_t n = Fields{body}.get<int64_t>("n", 1);
  if (n < 1 || n > m.max_n) throw bad("'n' must be between 1 and " + std::to_string(m.max_n), "n");
  return (int)n;
}

// Sampling and the looped extensions, shared by completions and chat.
void options_of(const ModelView& m, const json& body, RequestOptions& base, int default_max) {
  const Fields f{body};
  const int ctx = m.context;
  const int64_t max_tokens = f.get<int64_t>("max_tokens", f.get<int64_t>("max_completion_tokens", default_max));
  if (max_tokens < 0) throw bad("'max_tokens' must be >= 0", "max_tokens");
  if (max_tokens > ctx)
    throw bad("'max_tokens' " + std::to_string(max_tokens) + " is beyond the context (" + std::to_string(ctx) + ")", "max_tokens");
  base.opt.max_new = (int)max_tokens;
  base.opt.temperature = f.get<double>("temperature", 1.0);
  if (!(base.opt.temperature >= 0 && base.opt.temperature <= 2)) throw bad("'temperature' must be between 0 and 2", "temperature");
  base.opt.top_p = f.get<double>("top_p", 1.0);
  if (!(base.opt.top_p > 0 && base.opt.top_p <= 1)) throw bad("'top_p' must be greater than 0 and at most 1", "top_p");
  const int64_t top_k = f.get<int64_t>("top_k", 0);
  if (top_k < 0) throw bad("'top_k' must be >= 0", "top_k");
  base.opt.top_k = (int)std::min<int64_t>(top_k, 1 << 30);
  if (f.given("seed")) {
    base.opt.seed = (uint64_t)f.get<int64_t>("seed", 0);
  } else {
    base.opt.seed = std::random_device{}() | (uint64_t)std::random_device{}() << 32;
  }
  if (f.given("stop")) {
    const json& s = body["stop"];
    if (s.is_string()) {
      base.stop.push_back(s.get<std::string>());
    } else if (s.is_array() && s.size() <= 4) {
      for (const json& x : s) {
        if (!x.is_string()) throw bad("'stop' is a string or a list of up to 4 strings", "stop");
        base.stop.push_back(x.get<std::string>());
      }
    } else {
      throw bad("'stop' is a string or a list of up to 4 strings", "stop");
    }
  }
  if (f.given("logit_bias")) base.opt.logit_bias = logit_bias_of(m, body["logit_bias"]);
  // looped extensions
  const int64_t depth = f.get<int64_t>("depth", -1);
  const int max_depth = 64 * std::max(1, m.R);
  if (f.given("depth") && (depth < 0 || depth > max_depth))
    throw bad("'depth' must be between 0 and " + std::to_string(max_depth), "depth");
  base.depth = (int)depth;
  const std::string rule = f.get<std::string>("exit_rule", "fixed");
  try {
    parse_exit_rule(rule);
    base.kv_policy = parse_kv_policy(f.get<std::string>("kv_policy", "per_step"));
  } catch (const UsageError& e) {
    throw bad(e.what(), body.contains("kv_policy") ? "kv_policy" : "exit_rule");
  }
  try {  // the rule is known: what is wrong is its threshold
    base.exit = early_exit(rule, f.get<double>("exit_threshold", std::nan("")), "'exit_rule'", "'exit_threshold'");
  } catch (const UsageError& e) {
    throw bad(e.what(), "exit_threshold");
  }
  if (base.exit.rule != ExitRule::fixed) {
    if (base.depth == 0) throw bad("'exit_rule' " + brief(rule) + " needs loop steps ('depth' 0 runs none)", "exit_rule");
    if (base.exit.rule == ExitRule::gate && !m.exit_gate)
      throw bad("'exit_rule' gate needs a model with a learned exit gate (as Ouro has); this one has none", "exit_rule");
  }
}

// The looped extension 'speculative': true or "auto" (measured: -1), false or 0 (off), or K drafts
// with 'draft_depth' r (1 .. depth - 1). Not with logprobs (drafts have no log-probabilities of the
// full model) nor with an exit rule (drafting runs every token at the full depth).
void speculative_of(const ModelView& m, const json& body, RequestOptions& o) {
  const Fields f{body};
  if (f.given("speculative")) {
    const json& s = body["speculative"];
    if (s.is_boolean()) o.speculative = s.get<bool>() ? -1 : 0;
    else if (s.is_string() && s.get<std::string>() == "auto") o.speculative = -1;
    else if (s.is_number_integer() && s.get<int64_t>() >= 0 && s.get<int64_t>() <= 64) o.speculative = (int)s.get<int64_t>();
    else throw bad("'speculative' is true, \"auto\", false, or a number of drafts from 0 to 64", "speculative");
  }
  const int64_t r = f.get<int64_t>("draft_depth", 0);
  const int depth = o.depth >= 0 ? o.depth : m.R;
  if (o.speculative > 0 && (r < 1 || r >= depth))
    throw bad("'speculative' " + std::to_string(o.speculative) + " needs 'draft_depth' from 1 to " + std::to_string(depth - 1) +
                  " (the loop steps the drafts run), or 'speculative': \"auto\"",
              "draft_depth");
  if (o.speculative <= 0 && f.given("draft_depth"))
    throw bad(o.speculative < 0 ? "'speculative': \"auto\" chooses the draft depth (no 'draft_depth')" : "'draft_depth' goes with 'speculative': K",
              "draft_depth");
  o.draft_depth = (int)r;
  if (o.speculative != 0 && o.opt.logprobs >= 0) throw bad("'logprobs' are not available with 'speculative'", "speculative");
  if (o.speculative != 0 && o.exit.rule != ExitRule::fixed) throw bad("'speculative' runs every token at the full depth: no 'exit_rule'", "speculative");
}

// A request's log-probabilities count: 0..20 (OpenAI's range).
int logprobs_count(const Fields& f, const char* key) {
  const int64_t k = f.get<int64_t>(key, 0);
  if (k < 0 || k > 20) throw bad(std::string("'") + key + "' must be between 0 and 20", key);
  return (int)k;
}

void check_sequences(const ModelView& m, size_t prompts, int n) {
  if ((int64_t)prompts * n > m.max_sequences)
    throw bad("this request makes " + std::to_string((int64_t)prompts * n) + " sequences (prompts x n); the server takes at most " +
                  std::to_string(m.max_sequences) + " at once (--parallel + --queue)",
              "prompt");
}

// Runs a check, turning an exception of the JSON library (a value of a type the code did not
// expect) into a 400: whatever went wrong, the body was the cause.
template <class F>
auto checked(F f) {
  try {
    return f();
  } catch (const json::exception& e) {
    throw bad("the request body has a value of the wrong type (" + brief(plain_message(e), 200) + ")");
  }
}
}  // namespace

json parse_body(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) throw bad("the request body is not valid JSON");
  if (!j.is_object()) throw bad("the request body must be a JSON object");
  return j;
}

CompletionRequest completion_request(const ModelView& m, const std::string& body_text) {
  return checked([&] {
    const json body = parse_body(body_text);
    check_model(m, body);
    if (!body.contains("prompt")) throw bad("'prompt' is missing", "prompt");
    const Fields f{body};
    CompletionRequest r;
    options_of(m, body, r.o, 16);
    r.echo = f.get<bool>("echo", false);
    r.stream = f.get<bool>("stream", false);
    r.logprobs = f.given("logprobs") ? logprobs_count(f, "logprobs") : -1;
    r.o.opt.logprobs = r.logprobs;
    r.o.stop_at_eos = !f.get<bool>("ignore_eos", false);
    r.n = n_of(m, body);
    const json& p = body["prompt"];
    // (the count before the work: a list of many short prompts must not become as many jobs)
    if (p.is_array() && !p.empty() && !p[0].is_number_integer()) check_sequences(m, p.size(), r.n);
    r.prompts = prompts_of(m, p);
    check_sequences(m, r.prompts.size(), r.n);
    if (r.stream && r.echo && r.logprobs >= 0) throw bad("'echo' with 'logprobs' is not available when streaming", "echo");
    speculative_of(m, body, r.o);
    return r;
  });
}

// A request's conversation as the model's prompt text (LanguageModel::apply_chat_template: its
// chat template, or the one --chat-template names). Messages are checked and their content parts
// joined into text; their other fields (tool_calls, name, ...) reach the template as they came,
// keys in their order (tojson prints that order).
std::string chat_prompt(const ModelView& m, const std::string& body_text, const json& body) {
  return checked([&] {
    if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty())
      throw bad("'messages' must be a non-empty list of {role, content}", "messages");
    const auto ordered = nlohmann::ordered_json::parse(body_text);  // (valid: parse_body read it)
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    for (const auto& msg_in : ordered["messages"]) {
      if (!msg_in.is_object() || !msg_in.contains("role") || !msg_in["role"].is_string())
        throw bad("each message needs a 'role' (system, user or assistant) and its 'content'", "messages");
      nlohmann::ordered_json msg = msg_in;
      const auto& c = msg_in.contains("content") ? msg_in["content"] : nlohmann::ordered_json();
      if (c.is_array()) {  // [{type: text, text}]
        std::string content;
        for (const auto& p : c) {
          const bool text_part = p.is_object() && p.contains("type") && p["type"].is_string() && p["type"].get<std::string>() == "text" &&
                                 p.contains("text") && p["text"].is_string();
          if (!text_part) throw bad("only text message parts are understood", "messages");
          content += p["text"].get<std::string>();
        }
        msg["content"] = content;
      } else if (!c.is_string() && !(c.is_null() && msg_in.contains("tool_calls"))) {
        throw bad("a message's 'content' must be text", "messages");
      }
      messages.push_back(std::move(msg));
    }
    ChatOptions o;
    o.add_generation_prompt = Fields{body}.get<bool>("add_generation_prompt", true);
    if (ordered.contains("tools") && !ordered["tools"].is_null()) {
      if (!ordered["tools"].is_array()) throw bad("'tools' must be a list", "tools");
      o.tools_json = ordered["tools"].dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    }
    if (ordered.contains("chat_template_kwargs") && !ordered["chat_template_kwargs"].is_null()) {
      if (!ordered["chat_template_kwargs"].is_object()) throw bad("'chat_template_kwargs' must be an object", "chat_template_kwargs");
      o.extra_json = ordered["chat_template_kwargs"].dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    }
    try {
      return m.apply_chat_template(messages.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace), o);
    } catch (const UsageError& e) {
      throw bad(e.what(), "messages");
    }
  });
}

ChatRequest chat_request(const ModelView& m, const std::string& body_text) {
  return checked([&] {
    const json body = parse_body(body_text);
    check_model(m, body);
    const std::string text = chat_prompt(m, body_text, body);
    const Fields f{body};
    ChatRequest r;
    options_of(m, body, r.o, std::min(256, m.context));
    // The built-in ChatML's end of a turn is text (a model trained here has no special token for it).
    if (m.builtin_chatml) r.o.stop.push_back("<|im_end|>");
    const int top = f.given("top_logprobs") ? logprobs_count(f, "top_logprobs") : 0;
    if (f.get<bool>("logprobs", false)) r.o.opt.logprobs = top;
    speculative_of(m, body, r.o);
    r.n = n_of(m, body);
    check_sequences(m, 1, r.n);
    r.stream = f.get<bool>("stream", false);
    r.prompt = m.encode_prompt(text, false);  // (the template wrote any BOS)
    if (r.prompt.empty()) throw bad("the chat template made an empty prompt", "messages");
    if ((int)r.prompt.size() > m.context) {
      // the conversation's end is what matters: keep its last context - max_tokens tokens
      const int keep = std::max(1, m.context - r.o.opt.max_new);
      r.prompt.erase(r.prompt.begin(), r.prompt.end() - keep);
    }
    return r;
  });
}

}  // namespace looplm::serve
