// The server's engine (docs/serve.md): one thread that owns the model's decode sessions and runs
// continuous batching. HTTP threads submit Jobs and wait on them; the engine admits a job into a
// free slot at the next token boundary, steps every running sequence one token per pass, turns
// tokens into text (a TextStream per job: whole characters, a possible stop string held back), and
// finishes a job at max_tokens, a stop string, one of the model's end tokens, or when its client left.
// A job may score its prompt first (one full pass, its turn between two token steps); a job with
// nothing to make (max_new 0) only does that.
// Built on the public API only (include/looplm/looplm.h).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "looplm/looplm.h"

namespace looplm::serve {

// The loop settings a batch shares (a request's looped extensions); requests with other settings
// decode in a session of their own.
struct LoopSettings {
  int depth = -1;
  EarlyExit exit;
  KvPolicy kv_policy = KvPolicy::per_step;
  auto key() const { return std::tuple(depth, (int)exit.rule, exit.threshold, (int)kv_policy); }
  bool operator<(const LoopSettings& o) const { return key() < o.key(); }
};

struct Job {
  // what to do (set before submit)
  std::vector<int32_t> prompt;
  SequenceOptions opt;
  LoopSettings loop;
  std::vector<std::string> stop;  // the text ends before the first of these
  bool stop_at_eos = true;         // the model's end tokens end the text (not included)
  int speculative = 0, draft_depth = 0;  // loop-as-draft (RequestOptions'), while it decodes alone
  int score_prompt = -1;           // >= 0: score the prompt first (echo with logprobs), with that many
                                   // likely tokens each (LanguageModel::prompt_logprobs, at loop.depth)

  // what happened (read under `mu`, waited for on `cv`)
  std::mutex mu;
  std::condition_variable cv;
  std::vector<TokenLogprob> prompt_scores;  // score_prompt's: the prompt's tokens after the first
  std::vector<SessionToken> tokens;  // every token made (also those cut by a stop string, and an end token)
  std::string text;                  // the completion's text so far, ready to send
  std::vector<size_t> text_end;      // per token: the size of `text` once it was made (a token's piece
                                     // is text[text_end[k-1], text_end[k]); empty while held back)
  std::vector<size_t> text_start;    // per token: where its text begins in the final text (TextStream::text_bytes)
  size_t kept = 0;                   // once done: the tokens whose text the answer holds (not an end
                                     // token, nor those after a stop string began)
  bool done = false;
  std::string finish_reason;         // "length", "stop"; "cancelled"; "error" (with `error`)
  std::string error;
  double queued_s = 0, first_token_s = 0;  // seconds from submit to a slot, and to the first token
  double kv_bytes_per_token = 0;            // what its session's KV policy keeps per position (at its end)
  std::string speculative_ran;              // with `speculative`: what decoded it, and why

  std::atomic<bool> cancelled{false};  // set by the HTTP side (client gone); the engine frees the slot
  // engine-side state
  int slot = -1;
  std::unique_ptr<TextStream> stream;  // the tokens' text (TextStream: whole characters, stop strings)
  double submitted = 0;
};

struct EngineOptions {
  int parallel = 4;       // sequences decoding at once, over all sessions
  int queue = 64;         // jobs waiting beyond those; more is refused (HTTP 429)
  std::string kv_cache = "fp32";
  int context = 0;        // positions per sequence (SessionOptions::context; 0: the model's)
};

struct EngineMetrics {
  int64_t requests = 0, prompt_tokens = 0, completion_tokens = 0, loop_steps = 0, cancelled = 0;
  int running = 0, waiting = 0;
};

class Engine {
 public:
  Engine(const LanguageModel& lm, const EngineOptions& o);
  ~Engine();  // stops the thread; jobs still queued finish as "cancelled"
  // false: the queue is full (the caller answers 429).
  bool submit(const std::shared_ptr<Job>& job);
  void wake() { cv_.notify_all(); }  // after setting a job's `cancelled`
  EngineMetrics metrics();
  const LanguageModel& model() const { return lm_; }
  int context() const { return context_; }  // the positions a sequence may use

 private:
  void run();
  void admit();
  std::string emit(Job& j, const SessionToken& t, const DecodeSession* session);
  bool decode_alone(const std::shared_ptr<Job>& j);
  void finish(Job& j, const std::string& reason, const std::string& error = "");
  void count_running();  // metrics_.running from running_
  DecodeSession& session_for(const LoopSettings& loop);
  const LanguageModel& lm_;
  EngineOptions o_;
  std::vector<int32_t> eos_ids_;  // the model's end tokens
  std::mutex mu_;  // queue_, metrics_, stopping_
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  EngineMetrics metrics_;
  bool stopping_ = false;
  int context_ = 0;
  // engine thread only
  std::map<LoopSettings, std::unique_ptr<DecodeSession>> sessions_;
  std::map<LoopSettings, std::vector<std::shared_ptr<Job>>> running_;  // per session, by slot
  std::thread thread_;
};

}  // namespace looplm::serve
