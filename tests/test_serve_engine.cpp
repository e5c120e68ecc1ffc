// The server's engine in-process (tools/serve_engine.h, the looplm_serve library): what HTTP
// clients see through `looplm serve` (tests/test_serve.cpp), checked here without a socket or a
// child process: jobs decode what generate() makes alone while others share the pass, text comes in
// whole characters with a stop string held back, a full queue refuses, a cancelled job frees its
// slot, and an echo's prompt is scored by the engine as the full pass scores it.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include "looplm/looplm.h"
#include "serve_engine.h"
#include "serve_openai.h"

using namespace looplm;
using serve::Engine;
using serve::EngineOptions;
using serve::Job;

namespace {

// A byte-level model with random weights: its samples are random bytes, so characters split
// across tokens (and invalid UTF-8) come all the time.
LanguageModel byte_model(uint64_t seed = 3) {
  Config c = load_preset("looped");
  c.d_model = 32;
  c.n_heads = 2;
  c.context = 64;
  c.R = 3;
  c.init_std = 0.3;
  return LanguageModel::from_config(c, seed);
}

std::shared_ptr<Job> job(const std::string& prompt_text, const LanguageModel& lm, int max_new, uint64_t seed, double temperature = 1.0) {
  auto j = std::make_shared<Job>();
  j->prompt = lm.encode(prompt_text);
  j->opt.max_new = max_new;
  j->opt.seed = seed;
  j->opt.temperature = temperature;
  j->stop_at_eos = false;
  return j;
}

// Waits (at most a minute) for the job to finish; false if it did not.
bool wait(Job& j) {
  std::unique_lock<std::mutex> lk(j.mu);
  return j.cv.wait_for(lk, std::chrono::seconds(60), [&] { return j.done; });
}

// Waits until the job has made at least n tokens (or finished).
void wait_tokens(Job& j, size_t n) {
  std::unique_lock<std::mutex> lk(j.mu);
  j.cv.wait_for(lk, std::chrono::seconds(60), [&] { return j.done || j.tokens.size() >= n; });
}

// Whether byte b of `text` is inside a well-formed UTF-8 character (after its first byte). The byte
// tokenizer gives invalid bytes as they are, so only well-formed characters can be split.
bool inside_character(const std::string& text, size_t b) {
  auto cont = [&](size_t i) { return i < text.size() && ((unsigned char)text[i] & 0xC0) == 0x80; };
  size_t p = b;
  while (p > 0 && b - p < 3 && cont(p)) --p;
  if (p == b) return false;
  const unsigned char lead = (unsigned char)text[p];
  const size_t len = lead >= 0xF0 && lead <= 0xF4 ? 4 : lead >= 0xE0 && lead <= 0xEF ? 3 : lead >= 0xC2 && lead <= 0xDF ? 2 : 1;
  if (p + len <= b) return false;
  for (size_t i = p + 1; i < p + len; ++i)
    if (!cont(i)) return false;
  return true;
}

std::vector<int32_t> ids_of(const Job& j, size_t count) {
  std::vector<int32_t> ids;
  for (size_t k = 0; k < count; ++k) ids.push_back(j.tokens[k].id);
  return ids;
}

}  // namespace

// Five jobs through two slots (three wait, and join as others finish): each makes generate()'s
// tokens for its prompt, seed and temperature alone, and its text is their decoded continuation.
TEST(ServeEngine, JobsMakeWhatGenerateMakesAlone) {
  const LanguageModel lm = byte_model();
  Engine engine(lm, EngineOptions{2, 8, "fp32", 0});
  std::vector<std::shared_ptr<Job>> jobs;
  const char* prompts[] = {"In the beginning", "And", "The light was good and", "x", "Let there be"};
  for (int i = 0; i < 5; ++i) {
    jobs.push_back(job(prompts[i], lm, 10 + 7 * i, 100 + i, i % 2 ? 0.0 : 0.9));
    ASSERT_TRUE(engine.submit(jobs.back()));
  }
  int64_t made = 0;
  for (int i = 0; i < 5; ++i) {
    Job& j = *jobs[i];
    ASSERT_TRUE(wait(j)) << "job " << i;
    EXPECT_EQ(j.finish_reason, "length");
    GenerateOptions g;
    g.max_new = j.opt.max_new;
    g.seed = j.opt.seed;
    g.temperature = j.opt.temperature;
    g.ignore_eos = true;
    const std::vector<int32_t> alone = lm.generate(j.prompt, g);
    EXPECT_EQ(ids_of(j, j.tokens.size()), alone) << "job " << i;
    EXPECT_EQ(j.kept, j.tokens.size());
    EXPECT_EQ(j.text, lm.decode_continuation(j.prompt, alone)) << "job " << i;
    made += (int64_t)j.tokens.size();
  }
  const serve::EngineMetrics m = engine.metrics();
  EXPECT_EQ(m.requests, 5);
  EXPECT_EQ(m.completion_tokens, made);
  EXPECT_EQ(m.running, 0);
  EXPECT_EQ(m.waiting, 0);
}

// Random bytes: a token that leaves a character unfinished adds no text (held back) and the next
// one brings it whole, so every piece ends on a character boundary; the text, all told, is the
// tokens' decoded continuation. With a stop string (two characters of that text, past its middle),
// the text is the same text up to the stop's first occurrence, and never holds the stop.
TEST(ServeEngine, TextComesInWholeCharactersAndTheStopIsHeldBack) {
  const LanguageModel lm = byte_model(5);
  Engine engine(lm, EngineOptions{2, 8, "fp32", 0});
  auto whole = job("Some text", lm, 60, 7);
  ASSERT_TRUE(engine.submit(whole));
  ASSERT_TRUE(wait(*whole));
  const std::string& text = whole->text;
  EXPECT_EQ(text, lm.decode_continuation(whole->prompt, ids_of(*whole, whole->kept)));
  int held = 0;
  for (size_t k = 0; k < whole->text_end.size(); ++k) {
    const size_t end = whole->text_end[k];
    EXPECT_FALSE(inside_character(text, end)) << "token " << k << "'s text ends inside a character";
    held += k > 0 && end == whole->text_end[k - 1];
  }
  EXPECT_GT(held, 0) << "no token was held back: the check above saw no split character";

  // the stop: the two characters from the first boundary past the middle
  size_t from = text.size() / 2;
  while (from < text.size() && ((unsigned char)text[from] & 0xC0) == 0x80) ++from;
  size_t to = from;
  for (int c = 0; c < 2 && to < text.size(); ++c)
    for (++to; to < text.size() && ((unsigned char)text[to] & 0xC0) == 0x80;) ++to;
  ASSERT_LT(from, to);
  const std::string stop = text.substr(from, to - from);
  auto stopped = job("Some text", lm, 60, 7);
  stopped->stop = {stop};
  ASSERT_TRUE(engine.submit(stopped));
  ASSERT_TRUE(wait(*stopped));
  EXPECT_EQ(stopped->finish_reason, "stop");
  EXPECT_EQ(stopped->text, text.substr(0, text.find(stop)));
  EXPECT_EQ(stopped->text.find(stop), std::string::npos);
  for (size_t k = 0; k < stopped->text_end.size(); ++k) EXPECT_LE(stopped->text_end[k], stopped->text.size());
  // the tokens it kept are those whose text begins before the stop
  EXPECT_EQ(ids_of(*stopped, stopped->kept), ids_of(*whole, stopped->kept));
  EXPECT_LT(stopped->tokens.size(), whole->tokens.size());  // it ended at the stop: no more tokens made
}

// One slot and a queue of one: a second job waits, a third is refused; the first, cancelled,
// ends as "cancelled" and frees its slot for the second, which then runs to its end.
TEST(ServeEngine, AFullQueueRefusesAndACancelledJobFreesItsSlot) {
  const LanguageModel lm = byte_model();
  Engine engine(lm, EngineOptions{1, 1, "fp32", 0});
  auto a = job("first", lm, 1 << 20, 1);  // runs until cancelled
  auto b = job("second", lm, 12, 2);
  auto c = job("third", lm, 12, 3);
  ASSERT_TRUE(engine.submit(a));
  wait_tokens(*a, 2);
  ASSERT_TRUE(engine.submit(b));
  EXPECT_FALSE(engine.submit(c));  // the queue is full
  {
    std::lock_guard<std::mutex> lk(b->mu);
    EXPECT_TRUE(b->tokens.empty());  // waiting: the one slot is a's
  }
  a->cancelled = true;
  engine.wake();
  ASSERT_TRUE(wait(*a));
  EXPECT_EQ(a->finish_reason, "cancelled");
  ASSERT_TRUE(wait(*b));
  EXPECT_EQ(b->finish_reason, "length");
  EXPECT_EQ(b->tokens.size(), 12u);
  const serve::EngineMetrics m = engine.metrics();
  EXPECT_EQ(m.cancelled, 1);
  EXPECT_EQ(m.requests, 2);
}

// An echo with logprobs and nothing to make: the engine scores the prompt (no slot) with the
// full pass's log-softmax and its most likely tokens; the OpenAI shape lists them after a null.
TEST(ServeEngine, AnEchoedPromptIsScoredAsTheFullPassScoresIt) {
  const LanguageModel lm = byte_model();
  Engine engine(lm, EngineOptions{1, 4, "fp32", 0});
  serve::CompletionRequest r;
  r.prompts = {lm.encode("And God said")};
  r.o.opt.max_new = 0;
  r.o.depth = 2;
  r.echo = true;
  r.logprobs = 3;
  auto jobs = serve::openai::jobs_for(r.prompts, 1, r.o, r.logprobs);
  ASSERT_FALSE(jobs[0]->done);
  ASSERT_TRUE(engine.submit(jobs[0]));
  ASSERT_TRUE(wait(*jobs[0]));
  const Job& j = *jobs[0];
  EXPECT_EQ(j.finish_reason, "length");
  EXPECT_TRUE(j.tokens.empty());
  const int V = lm.config().vocab_size, T = (int)j.prompt.size();
  ASSERT_EQ((int)j.prompt_scores.size(), T - 1);
  const std::vector<float> z = lm.forward_logits(j.prompt, 2);
  for (int t = 1; t < T; ++t) {
    const float* row = z.data() + (size_t)(t - 1) * V;
    double mx = row[0], sum = 0;
    for (int v = 1; v < V; ++v) mx = std::max(mx, (double)row[v]);
    for (int v = 0; v < V; ++v) sum += std::exp(row[v] - mx);
    const double lse = mx + std::log(sum);
    const TokenLogprob& s = j.prompt_scores[t - 1];
    EXPECT_EQ(s.id, j.prompt[t]);
    EXPECT_NEAR(s.logprob, row[j.prompt[t]] - lse, 1e-12);  // the same sums in the same order
    ASSERT_EQ(s.top.size(), 3u);
    for (int v = 0; v < V; ++v) EXPECT_LE(row[v] - lse, s.top[0].second + 1e-12);
    EXPECT_GE(s.top[0].second, s.top[1].second);
    EXPECT_GE(s.top[1].second, s.top[2].second);
  }
  const nlohmann::json body = serve::openai::completion({"cmpl-1", 0, "m"}, lm, jobs, r);
  const auto& lp = body["choices"][0]["logprobs"];
  ASSERT_EQ((int)lp["token_logprobs"].size(), T);
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_DOUBLE_EQ(lp["token_logprobs"][1].get<double>(), j.prompt_scores[0].logprob);
  EXPECT_EQ(body["choices"][0]["text"].get<std::string>(), serve::openai::prompt_text(lm, j.prompt));
  EXPECT_EQ(body["looplm"]["depth"], 2);
}

// A request's 'speculative' (loop-as-draft) while its sequence decodes alone: generate()'s greedy
// tokens, and the answer says what ran; "auto" measures and says what it chose.
TEST(ServeEngine, ASpeculativeJobAloneDecodesAsGenerateDoes) {
  const LanguageModel lm = byte_model();
  Engine engine(lm, EngineOptions{2, 8, "fp32", 0});
  GenerateOptions g;
  g.max_new = 40;
  g.temperature = 0;
  g.ignore_eos = true;
  for (int K : {4, -1}) {
    auto j = job("In the beginning", lm, 40, 1, 0.0);
    j->speculative = K;
    j->draft_depth = K > 0 ? 1 : 0;
    ASSERT_TRUE(engine.submit(j));
    ASSERT_TRUE(wait(*j));
    EXPECT_EQ(j->finish_reason, "length");
    EXPECT_EQ(ids_of(*j, j->tokens.size()), lm.generate(j->prompt, g)) << "K " << K;
    EXPECT_EQ(j->text, lm.decode_continuation(j->prompt, ids_of(*j, j->kept)));
    if (K > 0) EXPECT_NE(j->speculative_ran.find("4 drafts at depth 1"), std::string::npos) << j->speculative_ran;
    else EXPECT_FALSE(j->speculative_ran.empty());
  }
}

// Another request arriving while a speculative one decodes alone: the first hands the rest of its
// sequence to the batch at the next token (its text is still greedy decoding's, and it says so),
// and both finish. A cancelled speculative job ends as "cancelled".
TEST(ServeEngine, ASpeculativeJobHandsOnWhenAnotherArrives) {
  Config c = load_preset("looped");
  c.d_model = 32;
  c.n_heads = 2;
  c.context = 1024;  // prompt and tokens fit: no window restart, so the tokens are generate()'s
  c.R = 3;
  c.init_std = 0.3;
  const LanguageModel lm = LanguageModel::from_config(c, 4);
  Engine engine(lm, EngineOptions{2, 8, "fp32", 0});
  bool handed_on = false;
  for (int attempt = 0; attempt < 3 && !handed_on; ++attempt) {
    auto a = job("Let there be", lm, 900, 1, 0.0);
    a->speculative = 2;
    a->draft_depth = 1;
    auto b = job("light", lm, 10, 2);
    ASSERT_TRUE(engine.submit(a));
    wait_tokens(*a, 3);
    ASSERT_TRUE(engine.submit(b));
    ASSERT_TRUE(wait(*a));
    ASSERT_TRUE(wait(*b));
    EXPECT_EQ(a->finish_reason, "length");
    EXPECT_EQ(b->finish_reason, "length");
    GenerateOptions g;
    g.max_new = 900;
    g.temperature = 0;
    g.ignore_eos = true;
    EXPECT_EQ(ids_of(*a, a->tokens.size()), lm.generate(a->prompt, g));
    handed_on = a->speculative_ran.find("another request came") != std::string::npos;
  }
  EXPECT_TRUE(handed_on) << "the first job finished before the second arrived, three times";
  auto cancelled = job("Let there be", lm, 900, 1, 0.0);
  cancelled->speculative = 2;
  cancelled->draft_depth = 1;
  ASSERT_TRUE(engine.submit(cancelled));
  wait_tokens(*cancelled, 2);
  cancelled->cancelled = true;
  ASSERT_TRUE(wait(*cancelled));
  EXPECT_TRUE(cancelled->finish_reason == "cancelled" || cancelled->tokens.size() == 900u) << cancelled->finish_reason;
}

// 'speculative' in a request: true / "auto" / K with 'draft_depth'; refused with logprobs, an exit
// rule, a draft depth out of range or without K.
TEST(ServeEngine, SpeculativeRequestsAreChecked) {
  serve::ModelView m;
  m.id = "m";
  m.vocab_size = 256;
  m.R = 4;
  m.context = 64;
  m.encode_prompt = [](const std::string& text, bool) {
    std::vector<int32_t> ids;
    for (unsigned char ch : text) ids.push_back(ch);
    return ids;
  };
  auto parse = [&](const std::string& body) { return serve::completion_request(m, body).o; };
  EXPECT_EQ(parse(R"({"prompt": "a", "speculative": true})").speculative, -1);
  EXPECT_EQ(parse(R"({"prompt": "a", "speculative": "auto"})").speculative, -1);
  EXPECT_EQ(parse(R"({"prompt": "a", "speculative": false})").speculative, 0);
  const auto k = parse(R"({"prompt": "a", "speculative": 4, "draft_depth": 2})");
  EXPECT_EQ(k.speculative, 4);
  EXPECT_EQ(k.draft_depth, 2);
  for (const char* bad : {R"({"prompt": "a", "speculative": 4})", R"({"prompt": "a", "speculative": 4, "draft_depth": 4})",
                          R"({"prompt": "a", "speculative": "auto", "draft_depth": 1})", R"({"prompt": "a", "draft_depth": 1})",
                          R"({"prompt": "a", "speculative": "fast"})", R"({"prompt": "a", "speculative": true, "logprobs": 2})",
                          R"({"prompt": "a", "speculative": true, "exit_rule": "kl", "exit_threshold": 0.1})"}) {
    try {
      parse(bad);
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const serve::HttpError& e) {
      EXPECT_EQ(e.status, 400) << bad;
    }
  }
}
