#include "serve_engine.h"

#include <algorithm>
#include <chrono>

namespace looplm::serve {

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

Engine::Engine(const LanguageModel& lm, const EngineOptions& o) : lm_(lm), o_(o), eos_ids_(lm.special_tokens().eos_ids) {
  // The default settings' session now: a KV cache that does not fit is an error at start (naming
  // the memory it needs), not a failure of every request.
  context_ = session_for(LoopSettings{}).context();
  thread_ = std::thread([this] { run(); });
}

DecodeSession& Engine::session_for(const LoopSettings& loop) {
  auto& session = sessions_[loop];
  if (!session) {
    SessionOptions so;
    so.slots = o_.parallel;
    so.context = o_.context;
    so.depth = loop.depth;
    so.exit = loop.exit;
    so.kv_policy = loop.kv_policy;
    so.kv_cache = o_.kv_cache;
    try {
      session = std::make_unique<DecodeSession>(lm_, so);
    } catch (...) {
      sessions_.erase(loop);
      throw;
    }
    running_[loop].assign(o_.parallel, nullptr);
  }
  return *session;
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

bool Engine::submit(const std::shared_ptr<Job>& job) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if ((int)queue_.size() >= o_.queue) return false;
    job->submitted = now_s();
    queue_.push_back(job);
    ++metrics_.requests;
    metrics_.waiting = (int)queue_.size();
  }
  cv_.notify_all();
  return true;
}

EngineMetrics Engine::metrics() {
  std::lock_guard<std::mutex> lk(mu_);
  return metrics_;
}

void Engine::finish(Job& j, const std::string& reason, const std::string& error) {
  {
    std::lock_guard<std::mutex> lk(j.mu);
    if (reason == "cancelled" || reason == "error") j.kept = j.tokens.size();
    j.done = true;
    j.finish_reason = reason;
    j.error = error;
  }
  j.cv.notify_all();
  if (reason == "cancelled") {
    std::lock_guard<std::mutex> lk(mu_);
    ++metrics_.cancelled;
  }
}

void Engine::count_running() {
  int running = 0;
  for (auto& [loop, jobs] : running_)
    for (auto& j : jobs) running += j != nullptr;
  std::lock_guard<std::mutex> lk(mu_);
  metrics_.running = running;
}

// Jobs from the queue into free slots while fewer than `parallel` sequences run. A prompt runs
// here (its prefill), between two token steps of the others.
void Engine::admit() {
  for (;;) {
    int running = 0;
    for (auto& [loop, jobs] : running_)
      for (auto& j : jobs) running += j != nullptr;
    std::shared_ptr<Job> j;
    bool alone = false;  // nothing else decodes or waits
    {
      std::lock_guard<std::mutex> lk(mu_);
      metrics_.running = running;
      if (queue_.empty() || running >= o_.parallel) return;
      j = queue_.front();
      queue_.pop_front();
      metrics_.waiting = (int)queue_.size();
      alone = running == 0 && queue_.empty();
    }
    if (j->cancelled) {
      finish(*j, "cancelled");
      continue;
    }
    try {
      if (j->score_prompt >= 0) {
        std::vector<TokenLogprob> scores = lm_.prompt_logprobs(j->prompt, j->loop.depth, j->score_prompt);
        std::lock_guard<std::mutex> lk(j->mu);
        j->prompt_scores = std::move(scores);
      }
      if (j->opt.max_new == 0) {  // nothing to make
        finish(*j, "length");
        continue;
      }
      j->stream = std::make_unique<TextStream>(lm_.text_stream({j->stop, false}));
      j->queued_s = now_s() - j->submitted;
      {
        std::lock_guard<std::mutex> lk(mu_);
        metrics_.prompt_tokens += (int64_t)std::min<size_t>(j->prompt.size(), context_);
      }
      std::vector<int32_t> prompt = j->prompt;
      SequenceOptions opt = j->opt;
      if (j->speculative != 0) {
        if (!alone) {
          j->speculative_ran = "in the batch: other requests were decoding or waiting";
        } else if (decode_alone(j)) {
          continue;  // done
        } else {  // another request came: the rest decodes in the batch, after the tokens made
          for (const SessionToken& t : j->tokens) prompt.push_back(t.id);
          opt.max_new -= (int)j->tokens.size();
        }
      }
      const int slot = session_for(j->loop).start(prompt, opt);
      if (slot < 0) throw Error("no free slot although fewer than --parallel sequences run");  // (cannot happen)
      j->slot = slot;
      running_[j->loop][slot] = j;
    } catch (const std::exception& e) {
      finish(*j, "error", e.what());
    }
  }
}

// A speculative job while nothing else decodes: loop-as-draft (LanguageModel::generate with the
// request's speculative settings), each token into the job as it comes. True when the job is
// over; false when another job arrived first (the caller decodes the rest in a session: continuous
// batching reads the weights once for every sequence, which drafting for one cannot beat).
bool Engine::decode_alone(const std::shared_ptr<Job>& jp) {
  Job& j = *jp;
  GenerateOptions g;
  g.max_new = j.opt.max_new;
  g.temperature = j.opt.temperature;
  g.top_k = j.opt.top_k;
  g.top_p = j.opt.top_p;
  g.seed = j.opt.seed;
  g.logit_bias = j.opt.logit_bias;
  g.depth = j.loop.depth;
  g.kv_cache = o_.kv_cache;
  g.ignore_eos = true;  // end tokens and stop strings: emit's, as in a session
  g.speculative = j.speculative;
  g.draft_depth = j.draft_depth;
  GenerateStats st;
  g.stats = &st;
  const int depth = lm_.config().depth_or_R(j.loop.depth);
  struct Over {
    bool handed_on;
  };
  int made = 0;
  bool handed_on = false;
  std::string reason = "cancelled";  // unless a token ends it
  try {
    lm_.generate(j.prompt, g, [&](int32_t id) {
      SessionToken t;
      t.slot = -1;
      t.id = id;
      t.steps = depth;
      t.last = ++made >= g.max_new;
      const std::string over = emit(j, t, nullptr);
      if (!over.empty()) reason = over;
      if (!over.empty() || j.cancelled) throw Over{false};
      std::lock_guard<std::mutex> lk(mu_);
      if (stopping_) throw Over{false};
      if (!queue_.empty()) throw Over{true};
    });
  } catch (const Over& o) {
    handed_on = o.handed_on;
  }
  std::string ran = st.speculative_why;
  if (ran.empty()) ran = std::to_string(j.speculative) + " drafts at depth " + std::to_string(j.draft_depth);
  if (handed_on) ran += "; after " + std::to_string(made) + " tokens the rest decoded in the batch (another request came)";
  {
    std::lock_guard<std::mutex> lk(j.mu);
    j.speculative_ran = ran;
  }
  if (!handed_on) finish(j, reason);
  return !handed_on;
}

// A token into its job's text; when the job is over with it, the reason it finishes ("stop",
// "length"; the caller finishes it), else "". `session`: the job's, for its KV bytes per position
// (none: decode_alone).
std::string Engine::emit(Job& j, const SessionToken& t, const DecodeSession* session) {
  bool finished = false;
  std::string reason;
  {
    std::lock_guard<std::mutex> lk(j.mu);
    if (j.tokens.empty()) j.first_token_s = now_s() - j.submitted;
    j.tokens.push_back(t);
    j.text_start.push_back(j.stream->text_bytes());
    const bool end_token = j.stop_at_eos && std::find(eos_ids_.begin(), eos_ids_.end(), t.id) != eos_ids_.end();
    if (end_token) {
      finished = true;
      reason = "stop";
    } else {
      j.text += j.stream->push(t.id);
      if (j.stream->stopped()) {
        finished = true;
        reason = "stop";
      } else if (t.last) {
        finished = true;
        reason = "length";
      }
    }
    if (finished) {
      j.text += j.stream->finish();
      if (end_token) j.kept = j.tokens.size() - 1;
      else if (reason == "length") j.kept = j.tokens.size();
      else j.kept = (size_t)std::count_if(j.text_start.begin(), j.text_start.end(), [&](size_t b) { return b < j.text.size(); });
    }
    j.text_end.push_back(j.text.size());
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    ++metrics_.completion_tokens;
    metrics_.loop_steps += t.steps;
  }
  if (finished && session) {
    std::lock_guard<std::mutex> lk(j.mu);
    j.kv_bytes_per_token = session->kv_bytes_per_token();
  }
  if (!finished) j.cv.notify_all();
  return reason;
}

void Engine::run() {
  for (;;) {
    bool any = false;
    for (auto& [loop, jobs] : running_)
      for (auto& j : jobs) any = any || j;
    {
      std::unique_lock<std::mutex> lk(mu_);
      if (!any) cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) break;
    }
    // clients that left: their slots are free before anyone is admitted
    for (auto& [loop, jobs] : running_)
      for (auto& j : jobs)
        if (j && j->cancelled) {
          sessions_[loop]->cancel(j->slot);
          finish(*j, "cancelled");
          j = nullptr;
        }
    admit();
    for (auto& [loop, session] : sessions_) {
      if (session->active() == 0) continue;
      // Each token goes to its job before the pass (a client sees it a pass sooner), and a job that
      // ends with it (an end token, a stop string) spends no pass on it.
      auto to_job = [&](const SessionToken& t) {
        auto j = running_[loop][t.slot];
        if (!j) return true;
        try {
          const std::string reason = emit(*j, t, session.get());
          if (reason.empty()) return false;
          running_[loop][t.slot] = nullptr;
          finish(*j, reason);
          return true;
        } catch (const std::exception& e) {  // (a token the tokenizer cannot write): this job ends, the others go on
          running_[loop][t.slot] = nullptr;
          finish(*j, "error", e.what());
          return true;
        }
      };
      try {
        session->step(to_job);
      } catch (const std::exception& e) {  // e.g. the checkpoint changed on disk: every job of it ends
        for (auto& j : running_[loop])
          if (j) {
            session->cancel(j->slot);
            finish(*j, "error", e.what());
            j = nullptr;
          }
      }
    }
    count_running();
    // Sessions with other settings than the default are dropped when idle (their KV cache is memory).
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      if (it->first.key() != LoopSettings{}.key() && it->second->active() == 0) {
        running_.erase(it->first);
        it = sessions_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // stopping: whatever still runs or waits ends as cancelled
  for (auto& [loop, jobs] : running_)
    for (auto& j : jobs)
      if (j) finish(*j, "cancelled");
  std::deque<std::shared_ptr<Job>> rest;
  {
    std::lock_guard<std::mutex> lk(mu_);
    rest.swap(queue_);
  }
  for (auto& j : rest) finish(*j, "cancelled");
}

}  // namespace looplm::serve
