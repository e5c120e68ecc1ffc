#include "serve_openai.h"

#include <algorithm>
#include <cstdio>

#include "looplm/util.h"

namespace looplm::serve::openai {

using nlohmann::json;

Jobs jobs_for(const std::vector<std::vector<int32_t>>& prompts, int n, const RequestOptions& o, int score_prompt) {
  Jobs jobs;
  for (const auto& p : prompts)
    for (int i = 0; i < n; ++i) {
      auto j = std::make_shared<Job>();
      j->prompt = p;
      j->opt = o.opt;
      j->opt.seed = o.opt.seed + (uint64_t)i;
      j->loop.depth = o.depth;
      j->loop.exit = o.exit;
      j->loop.kv_policy = o.kv_policy;
      j->stop = o.stop;
      j->stop_at_eos = o.stop_at_eos;
      j->speculative = o.speculative;
      j->draft_depth = o.draft_depth;
      j->score_prompt = i == 0 ? score_prompt : -1;
      if (j->opt.max_new == 0 && j->score_prompt < 0) {
        j->done = true;
        j->finish_reason = "length";
      }
      jobs.push_back(j);
    }
  return jobs;
}

size_t chars(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::string prompt_text(const LanguageModel& lm, const std::vector<int32_t>& ids) {
  TextStream ts = lm.text_stream({{}, true});
  std::string text;
  for (int32_t id : ids) text += ts.push(id);
  return text + ts.finish();
}

namespace {

// A token as OpenAI's logprobs name it: its bytes as text, or "bytes:\\x.." for part of a character.
std::string label(const LanguageModel& lm, int32_t id) { return token_label(lm.token_piece(id)); }

json alternatives(const LanguageModel& lm, const std::vector<std::pair<int32_t, double>>& top) {
  json alt = json::object();
  for (const auto& [id, lp] : top) alt[label(lm, id)] = lp;
  return alt;
}

// Characters of `text` before byte b, counted on from the last call (b only grows).
struct CharCounter {
  const std::string& text;
  size_t bytes = 0, chars = 0;
  size_t to(size_t b) {
    b = std::min(b, text.size());
    for (; bytes < b; ++bytes) chars += ((unsigned char)text[bytes] & 0xC0) != 0x80;
    return chars;
  }
};

// OpenAI's logprobs object for the echoed prompt (its first entry null; the rest the engine's
// scores of it, `scores`) and the kept completion tokens. text_offset: where each token's text
// begins in the choice's text, in characters.
json logprobs_of(const LanguageModel& lm, const Job& j, const std::vector<TokenLogprob>* scores, const std::string& prefix_text) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  auto add = [&](int32_t id, json lp, json alt, size_t offset) {
    tokens.push_back(label(lm, id));
    lps.push_back(lp);
    tops.push_back(alt);
    offsets.push_back(offset);
  };
  if (scores) {
    TextStream prompt_stream = lm.text_stream({{}, true});  // the prompt's text as decode writes it (prefix_text)
    CharCounter counted{prefix_text};
    for (size_t t = 0; t < j.prompt.size(); ++t) {
      const size_t offset = counted.to(prompt_stream.text_bytes());
      prompt_stream.push(j.prompt[t]);
      if (t == 0) {
        add(j.prompt[0], json(), json(), offset);
      } else {
        const TokenLogprob& s = (*scores)[t - 1];
        add(j.prompt[t], s.logprob, alternatives(lm, s.top), offset);
      }
    }
  }
  const size_t base = chars(prefix_text);
  CharCounter counted{j.text};
  for (size_t k = 0; k < j.kept; ++k) {
    const auto& t = j.tokens[k];
    add(t.id, t.logprob, alternatives(lm, t.top), base + counted.to(j.text_start[k]));
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json steps_of(const Job& j, size_t from, size_t to) {
  json s = json::array();
  for (size_t k = from; k < to && k < j.tokens.size(); ++k) s.push_back(j.tokens[k].steps);
  return s;
}

double mean_steps(const Job& j, size_t kept) {
  double s = 0;
  for (size_t k = 0; k < kept; ++k) s += j.tokens[k].steps;
  return kept ? s / kept : 0;
}

void require_no_error(const Job& j) {
  if (j.finish_reason == "error") throw HttpError{500, j.error, "server_error"};
}

int depth_of(const LanguageModel& lm, const CompletionRequest& r) { return lm.config().depth_or_R(r.o.depth); }

}  // namespace

json usage(const Jobs& jobs, int n) {
  int64_t p = 0, c = 0;
  for (size_t k = 0; k < jobs.size(); ++k) {
    if (k % n == 0) p += (int64_t)jobs[k]->prompt.size();  // a prompt counts once for its n samples
    c += (int64_t)jobs[k]->tokens.size();
  }
  return {{"prompt_tokens", p}, {"completion_tokens", c}, {"total_tokens", p + c}};
}

json loop_summary(const Jobs& jobs, int depth) {
  double steps = 0, kv = 0;
  size_t tokens = 0;
  for (const auto& j : jobs) {
    std::lock_guard<std::mutex> lk(j->mu);
    for (const auto& t : j->tokens) steps += t.steps;
    tokens += j->tokens.size();
    kv = std::max(kv, j->kv_bytes_per_token);
  }
  return {{"depth", depth}, {"mean_steps", tokens ? steps / tokens : 0.0}, {"kv_bytes_per_token", kv}};
}

json completion(const Head& h, const LanguageModel& lm, const Jobs& jobs, const CompletionRequest& r) {
  json choices = json::array();
  double steps = 0, kv_bytes = 0;
  int64_t counted = 0;
  for (size_t k = 0; k < jobs.size(); ++k) {
    const Job& j = *jobs[k];
    require_no_error(j);
    const size_t kept = j.kept;
    const std::string prefix = r.echo ? prompt_text(lm, j.prompt) : "";
    const std::vector<TokenLogprob>* scores = r.echo ? &jobs[k - k % r.n]->prompt_scores : nullptr;  // the prompt's first sample scored it
    json c = {{"index", k}, {"text", prefix + j.text}, {"finish_reason", j.finish_reason},
              {"logprobs", r.logprobs >= 0 ? logprobs_of(lm, j, scores, prefix) : json()},
              {"looplm", {{"steps", steps_of(j, 0, kept)}, {"mean_steps", mean_steps(j, kept)}}}};
    if (!j.speculative_ran.empty()) c["looplm"]["speculative"] = j.speculative_ran;
    choices.push_back(c);
    for (size_t q = 0; q < kept; ++q) steps += j.tokens[q].steps;
    counted += (int64_t)kept;
    kv_bytes = std::max(kv_bytes, j.kv_bytes_per_token);
  }
  return {{"id", h.id}, {"object", "text_completion"}, {"created", h.created}, {"model", h.model}, {"choices", choices},
          {"usage", usage(jobs, r.n)},
          {"looplm", {{"depth", depth_of(lm, r)}, {"mean_steps", counted ? steps / counted : 0.0}, {"kv_bytes_per_token", kv_bytes}}}};
}

json completion_chunk(const Head& h, const LanguageModel& lm, const Job& j, size_t k, const std::string& text, size_t from,
                      size_t to, bool done, int logprobs) {
  json c = {{"index", k}, {"text", text}, {"logprobs", json()}, {"finish_reason", done ? json(j.finish_reason) : json()},
            {"looplm", {{"steps", steps_of(j, from, to)}}}};
  if (done && !j.speculative_ran.empty()) c["looplm"]["speculative"] = j.speculative_ran;
  const size_t shown = done ? std::min(to, j.kept) : to;  // not an end token, nor past a stop string
  if (logprobs >= 0 && shown > from) {
    c["logprobs"] = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()}};
    for (size_t q = from; q < shown; ++q) {
      c["logprobs"]["tokens"].push_back(label(lm, j.tokens[q].id));
      c["logprobs"]["token_logprobs"].push_back(j.tokens[q].logprob);
      c["logprobs"]["top_logprobs"].push_back(alternatives(lm, j.tokens[q].top));
    }
  }
  return {{"id", h.id}, {"object", "text_completion"}, {"created", h.created}, {"model", h.model}, {"choices", {c}}};
}

json completion_last(const Head& h, const LanguageModel& lm, const Jobs& jobs, const CompletionRequest& r) {
  return {{"id", h.id}, {"object", "text_completion"}, {"created", h.created}, {"model", h.model}, {"choices", json::array()},
          {"usage", usage(jobs, r.n)}, {"looplm", loop_summary(jobs, depth_of(lm, r))}};
}

json chat(const Head& h, const Jobs& jobs, int n) {
  json choices = json::array();
  for (size_t k = 0; k < jobs.size(); ++k) {
    const Job& j = *jobs[k];
    require_no_error(j);
    const size_t kept = j.kept;
    choices.push_back({{"index", k}, {"message", {{"role", "assistant"}, {"content", j.text}}}, {"finish_reason", j.finish_reason},
                       {"logprobs", json()}, {"looplm", {{"steps", steps_of(j, 0, kept)}, {"mean_steps", mean_steps(j, kept)}}}});
    if (!j.speculative_ran.empty()) choices.back()["looplm"]["speculative"] = j.speculative_ran;
  }
  return {{"id", h.id}, {"object", "chat.completion"}, {"created", h.created}, {"model", h.model}, {"choices", choices}, {"usage", usage(jobs, n)}};
}

json chat_chunk(const Head& h, const Job& j, size_t k, const std::string& delta, size_t from, size_t to, bool done, bool first) {
  json d = json::object();
  if (first) d["role"] = "assistant";
  if (!delta.empty()) d["content"] = delta;
  json c = {{"index", k}, {"delta", d}, {"finish_reason", done ? json(j.finish_reason) : json()}, {"looplm", {{"steps", steps_of(j, from, to)}}}};
  if (done && !j.speculative_ran.empty()) c["looplm"]["speculative"] = j.speculative_ran;
  return {{"id", h.id}, {"object", "chat.completion.chunk"}, {"created", h.created}, {"model", h.model}, {"choices", {c}}};
}

json chat_last(const Head& h, const Jobs& jobs, int n) {
  return {{"id", h.id}, {"object", "chat.completion.chunk"}, {"created", h.created}, {"model", h.model}, {"choices", json::array()},
          {"usage", usage(jobs, n)}};
}

json tokenize(const LanguageModel& lm, const std::string& body_text, int context) {
  const json body = parse_body(body_text);
  const char* key = body.contains("prompt") ? "prompt" : "content";
  if (!body.contains(key) || !body[key].is_string()) throw bad("give the text as 'prompt' (or 'content')", "prompt");
  const std::vector<int32_t> ids = lm.encode(body[key].get<std::string>());
  json out = {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", context}};
  if (body.contains("with_pieces") && !body["with_pieces"].is_null() && !body["with_pieces"].is_boolean())
    throw bad("'with_pieces' must be true or false", "with_pieces");
  if (body.value("with_pieces", json(false)).is_boolean() && body.value("with_pieces", json(false)).get<bool>()) {
    json pieces = json::array();
    for (int32_t id : ids) pieces.push_back({{"id", id}, {"piece", label(lm, id)}});
    out["tokens"] = pieces;
  }
  return out;
}

json detokenize(const LanguageModel& lm, const std::string& body_text) {
  const json body = parse_body(body_text);
  if (!body.contains("tokens") || !body["tokens"].is_array()) throw bad("give the ids as 'tokens'", "tokens");
  std::vector<int32_t> ids;
  const int V = lm.config().vocab_size;
  for (const json& x : body["tokens"]) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= V)
      throw bad("'tokens' holds ids 0.." + std::to_string(V - 1), "tokens");
    ids.push_back((int32_t)x.get<int64_t>());
  }
  std::string text;
  try {
    text = lm.decode(ids);
  } catch (const Error& e) {  // an id the tokenizer has no text for (a model's vocabulary padded past its tokenizer's)
    throw bad(e.what(), "tokens");
  }
  return {{"prompt", text}, {"content", text}};
}

json tokenizer_info(const LanguageModel& lm, int context) {
  const auto sp = lm.special_tokens();
  const Config& c = lm.config();
  auto or_null = [](const std::string& s) { return s.empty() ? json() : json(s); };
  auto id_or_null = [](int32_t id) { return id < 0 ? json() : json(id); };
  return {{"eos_token", or_null(sp.eos_text)}, {"eos_token_id", id_or_null(sp.eos)},
          {"eos_token_ids", sp.eos_ids}, {"bos_token", or_null(sp.bos_text)},
          {"bos_token_id", id_or_null(sp.bos)}, {"add_bos_token", sp.add_bos},
          {"pad_token", json()}, {"chat_template", or_null(lm.chat_template())}, {"chat_template_used", lm.chat_template_origin()},
          {"tokenizer_class", c.tokenizer},
          {"vocab_size", c.vocab_size}, {"model_max_length", context}};
}

json models(const LanguageModel& lm, const std::string& id, int64_t created, int context) {
  const Config& c = lm.config();
  json m = {{"id", id}, {"object", "model"}, {"created", created}, {"owned_by", "looplm"},
            {"looplm", {{"R", c.R}, {"context", context}, {"vocab_size", c.vocab_size}, {"n_params", lm.n_params()},
                        {"exit_gate", lm.has_exit_gate()}}}};
  return {{"object", "list"}, {"data", {m}}};
}

std::string metrics_text(const EngineMetrics& m) {
  char buf[2048];
  std::snprintf(buf, sizeof buf,
                "# HELP looplm_requests_total Sequences submitted (a request with n prompts x samples counts each).\n"
                "# TYPE looplm_requests_total counter\nlooplm_requests_total %lld\n"
                "# HELP looplm_prompt_tokens_total Prompt tokens run.\n# TYPE looplm_prompt_tokens_total counter\nlooplm_prompt_tokens_total %lld\n"
                "# HELP looplm_completion_tokens_total Tokens generated.\n# TYPE looplm_completion_tokens_total counter\nlooplm_completion_tokens_total %lld\n"
                "# HELP looplm_loop_steps_total Loop steps run for the generated tokens.\n# TYPE looplm_loop_steps_total counter\nlooplm_loop_steps_total %lld\n"
                "# HELP looplm_loop_steps_per_token Mean loop steps per generated token.\n# TYPE looplm_loop_steps_per_token gauge\nlooplm_loop_steps_per_token %.4f\n"
                "# HELP looplm_requests_cancelled_total Sequences ended because their client went away.\n# TYPE looplm_requests_cancelled_total counter\nlooplm_requests_cancelled_total %lld\n"
                "# HELP looplm_requests_running Sequences decoding now.\n# TYPE looplm_requests_running gauge\nlooplm_requests_running %d\n"
                "# HELP looplm_requests_waiting Sequences waiting for a slot.\n# TYPE looplm_requests_waiting gauge\nlooplm_requests_waiting %d\n",
                (long long)m.requests, (long long)m.prompt_tokens, (long long)m.completion_tokens, (long long)m.loop_steps,
                m.completion_tokens ? (double)m.loop_steps / (double)m.completion_tokens : 0.0, (long long)m.cancelled,
                m.running, m.waiting);
  return buf;
}

}  // namespace looplm::serve::openai
