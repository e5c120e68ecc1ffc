#include "serve_engine.h"

#include <algorithm>
#include <chrono>

namespace looplm::serve {

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

size_t complete_utf8(const std::string& s) {
  // Walk back over at most 3 continuation bytes to the last lead byte; keep it only when its
  // character is whole.
  size_t i = s.size(), back = 0;
  while (i > 0 && back < 4 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) --i, ++back;
  if (i == 0) return back ? 0 : s.size();
  const unsigned char lead = (unsigned char)s[i - 1];
  const size_t need = lead < 0x80 ? 1 : (lead >> 5) == 6 ? 2 : (lead >> 4) == 14 ? 3 : (lead >> 3) == 30 ? 4 : 1;
  return back + 1 >= need ? s.size() : i - 1;
}

Engine::Engine(const LanguageModel& lm, const EngineOptions& o) : lm_(lm), o_(o), special_(lm.special_tokens()) {
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
      const int slot = session_for(j->loop).start(j->prompt, j->opt);
      if (slot < 0) {  // (cannot happen: fewer than `parallel` run) back to the front
        std::lock_guard<std::mutex> lk(mu_);
        queue_.push_front(j);
        return;
      }
      j->slot = slot;
      j->queued_s = now_s() - j->submitted;
      running_[j->loop][slot] = j;
      std::lock_guard<std::mutex> lk(mu_);
      metrics_.prompt_tokens += (int64_t)std::min<size_t>(j->prompt.size(), context_);
    } catch (const std::exception& e) {
      finish(*j, "error", e.what());
    }
  }
}

void Engine::emit(Job& j, const SessionToken& t) {
  bool finished = false;
  std::string reason;
  {
    std::lock_guard<std::mutex> lk(j.mu);
    if (j.tokens.empty()) j.first_token_s = now_s() - j.submitted;
    j.tokens.push_back(t);
    if (j.stop_at_eos && special_.eos >= 0 && t.id == special_.eos) {
      finished = true;
      reason = "stop";
    } else {
      std::vector<int32_t> ids;
      ids.reserve(j.tokens.size());
      for (const auto& k : j.tokens) ids.push_back(k.id);
      j.full = lm_.decode_continuation(j.prompt, ids);
      size_t cut = std::string::npos;
      for (const auto& s : j.stop)
        if (!s.empty()) cut = std::min(cut, j.full.find(s));
      std::string text;
      if (cut != std::string::npos) {
        text = j.full.substr(0, cut);
        finished = true;
        reason = "stop";
      } else if (t.last) {
        text = j.full;
        finished = true;
        reason = "length";
      } else {
        // what can be sent now: whole characters, less a tail that may begin a stop string
        size_t n = complete_utf8(j.full), hold = 0;
        for (const auto& s : j.stop)
          for (size_t k = std::min(s.size() - 1, n); k > hold; --k)
            if (j.full.compare(n - k, k, s, 0, k) == 0) {
              hold = k;
              break;
            }
        text = j.full.substr(0, n - hold);
      }
      // the sent text only grows (a tokenizer whose decoding changes earlier text waits)
      if (text.size() >= j.text.size() && text.compare(0, j.text.size(), j.text) == 0) {
        j.text = std::move(text);
        j.visible_tokens = j.tokens.size();
      }
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
    if (!t.last) sessions_[j.loop]->cancel(t.slot);
    running_[j.loop][t.slot] = nullptr;
    finish(j, reason);
  } else {
    j.cv.notify_all();
    if (t.last) running_[j.loop][t.slot] = nullptr;
  }
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
      std::vector<SessionToken> toks;
      try {
        toks = session->step();
      } catch (const std::exception& e) {  // e.g. the checkpoint changed on disk: every job of it ends
        for (auto& j : running_[loop])
          if (j) {
            session->cancel(j->slot);
            finish(*j, "error", e.what());
            j = nullptr;
          }
        continue;
      }
      for (const auto& t : toks)
        if (auto j = running_[loop][t.slot]) emit(*j, t);
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
