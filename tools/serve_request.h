// `looplm serve`'s request checking (docs/serve.md): a completions or chat request's JSON body
// into the options, prompts and sample count its jobs run with. No HTTP library and no loaded
// model here (a ModelView says what the checks need of one), so the fuzz target
// fuzz/fuzz_serve_request.cpp compiles this file as the server does: whatever a body holds, only
// an HttpError (a 4xx naming the field) or a looplm::Error comes out.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "looplm/looplm.h"

namespace looplm::serve {

// An OpenAI-style error: {"error": {"message", "type", "param", "code"}}, with its HTTP status.
struct HttpError {
  int status;
  std::string message, type, param;
  HttpError(int st, std::string msg, std::string ty = "invalid_request_error", std::string pa = "")
      : status(st), message(std::move(msg)), type(std::move(ty)), param(std::move(pa)) {}
};
inline HttpError bad(const std::string& msg, const std::string& param = "") { return HttpError(400, msg, "invalid_request_error", param); }

// What the checks need of the served model.
struct ModelView {
  std::string id;             // the model's name in requests and answers
  int vocab_size = 0;         // ids a prompt may hold: 0..vocab_size-1
  int R = 1;                  // trained loop steps ('depth' goes to 64 R)
  int context = 0;            // positions a sequence may use (the engine's)
  int max_n = 16;             // samples per prompt
  int max_sequences = 68;     // prompts x n of one request: what the engine can take at once (--parallel + --queue)
  bool exit_gate = false;     // the model has a learned exit gate
  bool builtin_chatml = false;  // chat renders the built-in ChatML (its end of turn is text)
  // Ids the tokenizer has no text for (a vocabulary padded past the tokenizer's): empty, none.
  std::vector<bool> no_text;
  std::function<std::vector<int32_t>(const std::string& text, bool add_bos)> encode_prompt;
  std::function<std::string(const std::string& messages_json, const ChatOptions&)> apply_chat_template;
};

// Sampling, stop strings and the looped extensions of a request (what its jobs copy).
struct RequestOptions {
  SequenceOptions opt;
  int depth = -1;
  EarlyExit exit;
  KvPolicy kv_policy = KvPolicy::per_step;
  std::vector<std::string> stop;
  bool stop_at_eos = true;
  // Self-speculative decoding (loop-as-draft): K drafts at draft_depth, or -1 ("auto" / true);
  // it runs while the request's sequence decodes alone (serve_engine.h).
  int speculative = 0, draft_depth = 0;
};

struct CompletionRequest {
  RequestOptions o;
  std::vector<std::vector<int32_t>> prompts;
  int n = 1;
  bool echo = false, stream = false;
  int logprobs = -1;  // -1: none; 0..20
};

struct ChatRequest {
  RequestOptions o;
  std::vector<int32_t> prompt;  // the rendered conversation, its end kept if it is longer than the context
  int n = 1;
  bool stream = false;
};

// The body as a JSON object (400: not JSON, or not an object).
nlohmann::json parse_body(const std::string& text);
// POST /v1/completions and /v1/chat/completions: every field checked (400 naming it).
CompletionRequest completion_request(const ModelView& m, const std::string& body_text);
ChatRequest chat_request(const ModelView& m, const std::string& body_text);
// POST /apply-template: the text chat would run.
std::string chat_prompt(const ModelView& m, const std::string& body_text, const nlohmann::json& body);

}  // namespace looplm::serve
