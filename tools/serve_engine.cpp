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
    {
      std::lock_guard<std::mutex> lk(mu_);
      metrics_.running = running;
      if (queue_.empty() || running >= o_.parallel) return;
      j = queue_.front();
      queue_.pop_front();
      metrics_.waiting = (int)queue_.size();
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
      const int slot = session_for(j->loop).start(j->prompt, j->opt);
      if (slot < 0) {  // (cannot happen: fewer than `parallel` run) back to the front
        std::lock_guard<std::mutex> lk(mu_);
        queue_.push_front(j);
        return;
      }
      j->slot = slot;
      j->stream = std::make_unique<TextStream>(lm_.text_stream({j->stop, false}));
      j->queued_s = now_s() - j->submitted;
      running_[j->loop][slot] = j;
      std::lock_guard<std::mutex> lk(mu_);
      metrics_.prompt_tokens += (int64_t)std::min<size_t>(j->prompt.size(), context_);
    } catch (const std::exception& e) {
      finish(*j, "error", e.what());
    }
  }
}

// A token into its job's text; true when the job is over (its slot ends with this token).
bool Engine::emit(Job& j, const SessionToken& t) {
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
  if (finished || t.last) {
    std::lock_guard<std::mutex> lk(j.mu);
    j.kv_bytes_per_token = sessions_[j.loop]->kv_bytes_per_token();
  }
  if (finished) {
    running_[j.loop][t.slot] = nullptr;
    finish(j, reason);
    return true;
  }
  j.cv.notify_all();
  if (t.last) running_[j.loop][t.slot] = nullptr;
  return t.last;
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
          return emit(*j, t);
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
