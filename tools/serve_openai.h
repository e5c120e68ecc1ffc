// The server's OpenAI schema (docs/serve.md): a checked request into engine jobs, and jobs into
// OpenAI's answer shapes (completions, chat, their streamed chunks, log-probabilities, usage) and
// the llama-server routes' bodies (tokenize, detokenize, tokenizer_info, metrics). No HTTP here:
// cmd_serve.cpp's routes call these, and the tests call them in-process.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "looplm/looplm.h"
#include "serve_engine.h"
#include "serve_request.h"

namespace looplm::serve::openai {

using Jobs = std::vector<std::shared_ptr<Job>>;

// Jobs for every (prompt, sample), prompt-major: sample i of a prompt uses seed + i (as generate
// --num-samples). score_prompt >= 0 (echo with logprobs): the first sample of each prompt scores
// it with that many likely tokens. A job with nothing to make and nothing to score is done already.
Jobs jobs_for(const std::vector<std::vector<int32_t>>& prompts, int n, const RequestOptions& o, int score_prompt = -1);

// What every object of one answer shares.
struct Head {
  std::string id;   // "cmpl-7", "chatcmpl-8"
  int64_t created;  // Unix seconds
  std::string model;
};

// Characters of UTF-8 text (what OpenAI's text_offset counts).
size_t chars(const std::string& s);
// A prompt's text as decode writes it (echo), whole UTF-8.
std::string prompt_text(const LanguageModel& lm, const std::vector<int32_t>& ids);

// ---------------------------------------------------------------- POST /v1/completions
// The whole answer once every job is done (jobs as jobs_for made them for `r`).
nlohmann::json completion(const Head& h, const LanguageModel& lm, const Jobs& jobs, const CompletionRequest& r);
// One streamed chunk of choice k: `text` its next piece (with the echoed prompt before the
// first), tokens [from, to), `done` when it is the last.
nlohmann::json completion_chunk(const Head& h, const LanguageModel& lm, const Job& j, size_t k, const std::string& text,
                                size_t from, size_t to, bool done, int logprobs);
nlohmann::json completion_last(const Head& h, const LanguageModel& lm, const Jobs& jobs, const CompletionRequest& r);

// ---------------------------------------------------------------- POST /v1/chat/completions
nlohmann::json chat(const Head& h, const Jobs& jobs, int n);
nlohmann::json chat_chunk(const Head& h, const Job& j, size_t k, const std::string& delta, size_t from, size_t to, bool done,
                          bool first);
nlohmann::json chat_last(const Head& h, const Jobs& jobs, int n);

// OpenAI's usage: a prompt counts once for its n samples.
nlohmann::json usage(const Jobs& jobs, int n);
// The looped summary of finished jobs: loop steps per token and the KV policy's bytes per position.
nlohmann::json loop_summary(const Jobs& jobs, int depth);

// ---------------------------------------------------------------- llama-server's routes
nlohmann::json tokenize(const LanguageModel& lm, const std::string& body_text, int context);
nlohmann::json detokenize(const LanguageModel& lm, const std::string& body_text);
nlohmann::json tokenizer_info(const LanguageModel& lm, int context);
// /v1/models; `context`: the positions a request may use (the engine's: --context, or the model's).
nlohmann::json models(const LanguageModel& lm, const std::string& id, int64_t created, int context);
std::string metrics_text(const EngineMetrics& m);  // Prometheus' text format

}  // namespace looplm::serve::openai
