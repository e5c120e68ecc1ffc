// `looplm serve` end to end (docs/serve.md): the binary listens on 127.0.0.1 and a cpp-httplib
// client calls it as any HTTP client would. Greedy answers are byte-identical to `looplm generate`
// alone, also for requests that arrive while others decode; the lm-eval request shape gets the
// log-probabilities `looplm eval` computes; bad input gets OpenAI-style errors with the right
// status; a client that leaves frees its slot; SIGTERM finishes what is in flight and exits 0.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <regex>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "test_util.h"

using namespace looplm;
using nlohmann::json;
using test::run_shell;
using test::TempDir;

namespace {

const std::string kBin = LOOPLM_BINARY;

// A `looplm serve` child process on a free port (--port 0; the port is read from its first line).
struct ServerProcess {
  pid_t pid = -1;
  int port = 0;
  std::string log;
  ServerProcess(const std::string& args, const std::string& log_path) : log(log_path) {
    pid = fork();
    if (pid == 0) {
      const std::string cmd = "exec " + kBin + " serve --port 0 " + args + " >" + log_path + " 2>&1";
      execl("/bin/sh", "sh", "-c", cmd.c_str(), (char*)nullptr);
      _exit(127);
    }
    const std::regex line("on http://127\\.0\\.0\\.1:([0-9]+)/");
    for (int i = 0; i < 600 && port == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      std::ifstream f(log_path);
      const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      std::smatch m;
      if (std::regex_search(text, m, line)) port = std::stoi(m[1]);
      int st;
      if (waitpid(pid, &st, WNOHANG) == pid) {
        pid = -1;
        ADD_FAILURE() << "looplm serve exited: " << text;
        return;
      }
    }
  }
  // Signals the server and returns its exit status (-1: it had to be killed).
  int stop(int sig = SIGTERM, int timeout_s = 30) {
    if (pid < 0) return -1;
    kill(pid, sig);
    for (int i = 0; i < timeout_s * 50; ++i) {
      int st;
      if (waitpid(pid, &st, WNOHANG) == pid) {
        pid = -1;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    pid = -1;
    return -1;
  }
  ~ServerProcess() { stop(SIGKILL, 5); }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(60, 0);
    return c;
  }
};

// One counter or gauge of the server's /metrics; -1 when it cannot be read.
double metric_of(ServerProcess& s, const std::string& name) {
  auto r = s.client().Get("/metrics");
  const std::regex re("\n" + name + " ([0-9.]+)");
  std::smatch m;
  return r && std::regex_search(r->body, m, re) ? std::stod(m[1]) : -1.0;
}

json post(const ServerProcess& s, const std::string& path, const json& body, int* status = nullptr) {
  auto r = s.client().Post(path, body.dump(), "application/json");
  if (!r) {
    ADD_FAILURE() << "no answer from " << path;
    return {};
  }
  if (status) *status = r->status;
  else EXPECT_EQ(r->status, 200) << r->body;
  return json::parse(r->body, nullptr, false);
}

// A POST whose answer is read as it comes: `on_data` returns false to close the connection.
void stream_post(httplib::Client& c, const std::string& path, const std::string& body,
                 const std::function<bool(const char*, size_t)>& on_data) {
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body;
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) { return on_data(d, n); };
  c.send(req);
}

// The text of a greedy `looplm generate` (its stdout is the prompt, the text and a newline).
std::string cli_generate(const std::string& ckpt, const std::string& prompt, int n, const std::string& extra = "") {
  const auto r = run_shell(kBin + " generate --checkpoint " + ckpt + " -p '" + prompt + "' -n " + std::to_string(n) +
                           " --temperature 0 --quiet " + extra + " 2>/dev/null");
  EXPECT_EQ(r.code, 0);
  return r.out.substr(prompt.size(), r.out.size() - prompt.size() - 1);
}

// Random weights (train --steps 0) of the `looped` preset over a character vocabulary of
// printable ASCII (every answer is valid UTF-8 and compares byte for byte with the CLI's), in
// dir/`out`, from dir/text.txt.
void random_char_model(const TempDir& dir, const std::string& out, int d_model, int context, int lines) {
  std::string text = test::corpus(lines);
  for (int c = 32; c < 127; ++c) text += (char)c;
  std::ofstream(dir / "text.txt", std::ios::binary) << text << "\n";
  const auto r = run_shell(kBin + " train --preset looped --set steps=0 --set d_model=" + std::to_string(d_model) +
                           " --set n_heads=4 --set context=" + std::to_string(context) + " --set init_std=0.2 --set tokenizer=char --data " +
                           (dir / "text.txt") + " --out " + (dir / out) + " --quiet -t 1");
  ASSERT_EQ(r.code, 0) << r.out;
}

class Serve : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir = new TempDir("serve");
    // What is served does not depend on the weights' values. A looped model, so the looped
    // extensions have steps to save; a context long enough that a request lasts while others arrive.
    random_char_model(*dir, "run", 96, 256, 300);
  }
  static void TearDownTestSuite() {
    delete dir;
    dir = nullptr;
  }
  static std::string ckpt() { return *dir / "run"; }
  static TempDir* dir;
};
TempDir* Serve::dir = nullptr;

}  // namespace

TEST_F(Serve, CompletionsAreGenerateAloneEvenWhileOthersDecode) {
  ServerProcess s("--checkpoint " + ckpt() + " --parallel 3 -t 1", *dir / "serve1.log");
  ASSERT_GT(s.port, 0);
  const std::vector<std::string> prompts = {"In the beginning", "And God said", "Let there be light", "The earth was",
                                            "without form"};
  std::vector<std::string> want;
  for (const auto& p : prompts) want.push_back(cli_generate(ckpt(), p, 40));
  // alone, then five at once (three slots: two wait, and join as others finish)
  EXPECT_EQ(post(s, "/v1/completions", {{"prompt", prompts[0]}, {"max_tokens", 40}, {"temperature", 0}})["choices"][0]["text"], want[0]);
  std::vector<std::string> got(prompts.size());
  std::vector<std::thread> th;
  for (size_t i = 0; i < prompts.size(); ++i)
    th.emplace_back([&, i] {
      std::this_thread::sleep_for(std::chrono::milliseconds(15 * i));  // arriving while others decode
      got[i] = post(s, "/v1/completions", {{"prompt", prompts[i]}, {"max_tokens", 40}, {"temperature", 0}})["choices"][0]["text"];
    });
  for (auto& t : th) t.join();
  EXPECT_EQ(got, want);
  // a list of prompts and n samples: sample i uses seed + i, as generate --num-samples
  const json r = post(s, "/v1/completions", {{"prompt", {"In the", "And"}}, {"max_tokens", 12}, {"temperature", 0.9}, {"seed", 7}, {"n", 2}});
  ASSERT_EQ(r["choices"].size(), 4u);
  const auto sampled = run_shell(kBin + " generate --checkpoint " + ckpt() + " -p 'And' -n 12 --temperature 0.9 --seed 8 --quiet 2>/dev/null");
  EXPECT_EQ("And" + r["choices"][3]["text"].get<std::string>() + "\n", sampled.out);
  EXPECT_EQ(r["usage"]["completion_tokens"], 48);
  // early exit: the steps each token used, as generate's own decoding
  const json e = post(s, "/v1/completions", {{"prompt", prompts[1]}, {"max_tokens", 30}, {"temperature", 0},
                                             {"exit_rule", "entropy"}, {"exit_threshold", 5.2}, {"kv_policy", "last"}});
  EXPECT_EQ(e["choices"][0]["text"], cli_generate(ckpt(), prompts[1], 30, "--exit-rule entropy --exit-threshold 5.2 --kv-policy last"));
  ASSERT_EQ(e["choices"][0]["looplm"]["steps"].size(), 30u);
  EXPECT_EQ(s.stop(), 0);
}

// lm-evaluation-harness's loglikelihood request (token-id prompts, echo, logprobs 1, max_tokens
// 1): the prompt's log-probabilities are the ones `looplm eval` averages over the same tokens.
TEST_F(Serve, LmEvalRequestShapeScoresAsEval) {
  ServerProcess s("--checkpoint " + ckpt() + " -t 1", *dir / "serve2.log");
  ASSERT_GT(s.port, 0);
  std::string text;
  for (int i = 0; i < 12; ++i) text += "And God saw the light, that it was good. ";
  text = text.substr(0, 200);
  std::ofstream(*dir / "score.txt", std::ios::binary) << text;
  const json tok = post(s, "/tokenize", {{"prompt", text}, {"add_special_tokens", false}});
  ASSERT_EQ(tok["tokens"].size(), 200u);
  const json r = post(s, "/v1/completions", {{"model", "run"}, {"prompt", {tok["tokens"]}}, {"temperature", 0}, {"max_tokens", 1},
                                             {"logprobs", 1}, {"echo", true}, {"seed", 1234}});
  const json& lp = r["choices"][0]["logprobs"];
  ASSERT_EQ(lp["token_logprobs"].size(), 201u);  // the prompt and the one new token
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  double sum = 0;
  for (int t = 1; t < 200; ++t) sum += lp["token_logprobs"][t].get<double>();
  // eval over one window of 199 tokens: predictions of tokens 1..199 from positions 0..198
  const auto ev = run_shell(kBin + " eval --checkpoint " + ckpt() + " --data " + (*dir / "score.txt") + " --window 199 --json -t 1 2>/dev/null");
  ASSERT_EQ(ev.code, 0) << ev.out;
  const double loss = json::parse(ev.out)["loss"];
  // the server's log-softmax in double over float32 logits, eval's float32 cross-entropy: ~1e-6
  EXPECT_NEAR(-sum / 199, loss, 2e-5 * loss);
  // greedy check as lm-eval does it: the top entry holds the chosen token
  EXPECT_EQ(lp["top_logprobs"][5].size(), 1u);
  EXPECT_EQ(r["choices"][0]["text"].get<std::string>().substr(0, 200), text);  // echo
  // the remote-tokenizer routes
  const json back = post(s, "/detokenize", {{"tokens", tok["tokens"]}});
  EXPECT_EQ(back["prompt"], text);
  EXPECT_EQ(back["content"], text);
  const json t2 = post(s, "/tokenize", {{"content", "abc"}});
  ASSERT_EQ(t2["tokens"].size(), 3u);
  EXPECT_EQ(post(s, "/detokenize", {{"tokens", t2["tokens"]}})["prompt"], "abc");
  auto info = s.client().Get("/tokenizer_info");
  ASSERT_TRUE(info);
  const json ti = json::parse(info->body);
  EXPECT_TRUE(ti.contains("eos_token"));
  EXPECT_EQ(ti["model_max_length"], 256);
  EXPECT_EQ(s.stop(), 0);
}

TEST_F(Serve, BadInputGetsOpenAiErrorsAndTheServerGoesOn) {
  ServerProcess s("--checkpoint " + ckpt() + " --api-key sekret --max-body 4096 -t 1", *dir / "serve3.log");
  ASSERT_GT(s.port, 0);
  httplib::Headers auth = {{"Authorization", "Bearer sekret"}};
  auto call = [&](const std::string& body, int want, const std::string& mentions, const httplib::Headers& h) {
    auto r = s.client().Post("/v1/completions", h, body, "application/json");
    ASSERT_TRUE(r) << body;
    EXPECT_EQ(r->status, want) << body << " -> " << r->body;
    const json e = json::parse(r->body, nullptr, false);
    ASSERT_TRUE(e.is_object() && e.contains("error")) << r->body;
    EXPECT_NE(e["error"]["message"].get<std::string>().find(mentions), std::string::npos) << r->body;
  };
  // a long greedy request decodes while the bad ones come
  std::future<std::string> busy = std::async(std::launch::async, [&] {
    auto r = s.client().Post("/v1/completions", auth, R"({"prompt": "And God said", "max_tokens": 120, "depth": 40, "temperature": 0})",
                             "application/json");
    return r && r->status == 200 ? json::parse(r->body)["choices"][0]["text"].get<std::string>() : std::string("failed");
  });
  call(R"({"prompt": "x"})", 401, "API key", {});
  call(R"({"prompt": "x"})", 401, "API key", {{"Authorization", "Bearer wrong"}});
  call(R"({"prompt": "x", )", 400, "not valid JSON", auth);
  call(R"([1, 2])", 400, "JSON object", auth);
  call(R"({"max_tokens": 3})", 400, "'prompt' is missing", auth);
  call(R"({"prompt": 5})", 400, "'prompt' is", auth);
  call(R"({"prompt": "x", "max_tokens": "ten"})", 400, "'max_tokens' must be an integer", auth);
  call(R"({"prompt": "x", "max_tokens": 100000})", 400, "beyond the context (256)", auth);
  call(R"({"prompt": "x", "temperature": -1})", 400, "'temperature'", auth);
  call(R"({"prompt": "x", "top_p": 0})", 400, "'top_p'", auth);
  call(R"({"prompt": "x", "model": "gpt-4"})", 400, "does not exist here", auth);
  call(R"({"prompt": [5, 3000]})", 400, "outside the vocabulary", auth);
  call(R"({"prompt": "x", "exit_rule": "kl"})", 400, "exit_threshold", auth);
  call(R"({"prompt": "x", "exit_rule": "sometimes", "exit_threshold": 1})", 400, "sometimes", auth);
  call(R"({"prompt": "x", "exit_rule": "gate", "exit_threshold": 0.5})", 400, "exit gate", auth);
  call(R"({"prompt": "x", "exit_threshold": 0.5})", 400, "no effect with 'exit_rule' fixed", auth);  // the library's one check
  call(json({{"prompt", std::string(300, 'a')}}).dump(), 400, "context holds 256", auth);
  call(json({{"prompt", std::string(5000, 'a')}}).dump(), 413, "larger than", auth);
  call(R"({"prompt": "x", "max_tokens": 1e300})", 400, "'max_tokens' is out of range", auth);
  {  // curl -d's default type: read as any body, within --max-body (the library's own reader capped it at 8 KB)
    auto r = s.client().Post("/v1/completions", auth, json({{"prompt", std::string(3000, 'a')}, {"max_tokens", 1}}).dump(),
                             "application/x-www-form-urlencoded");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body;
    EXPECT_NE(r->body.find("context holds 256"), std::string::npos) << r->body;
    r = s.client().Post("/v1/completions", auth, std::string(9000, 'a'), "application/x-www-form-urlencoded");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 413);
  }
  // /health needs no key; the server still answers properly after all that
  // none of it changed another request's answer: a greedy one that ran through all of the above
  EXPECT_EQ(busy.get(), cli_generate(ckpt(), "And God said", 120, "--depth 40"));
  auto h = s.client().Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  auto ok = s.client().Post("/v1/completions", auth, R"({"prompt": "In", "max_tokens": 4, "temperature": 0})", "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  EXPECT_EQ(json::parse(ok->body)["choices"][0]["text"], cli_generate(ckpt(), "In", 4));
  EXPECT_EQ(s.stop(), 0);
}

// One slot and a queue of one: a third request is refused with 429 and Retry-After; a streaming
// client that leaves frees the slot at once; /metrics counts what happened.
TEST_F(Serve, FullQueueDisconnectsAndMetrics) {
  ServerProcess s("--checkpoint " + ckpt() + " --parallel 1 --queue 1 -t 1", *dir / "serve4.log");
  ASSERT_GT(s.port, 0);
  auto metric = [&](const std::string& name) { return metric_of(s, name); };
  // A: a stream that the client drops after its first chunk
  std::atomic<bool> dropped{false};
  std::thread a([&] {
    httplib::Client c = s.client();
    int chunks = 0;
    stream_post(c, "/v1/completions", R"({"prompt": "In", "max_tokens": 250, "stream": true, "temperature": 0})",
                [&](const char*, size_t) { return ++chunks < 2; });  // false: the client closes
    dropped = true;
  });
  a.join();
  EXPECT_TRUE(dropped);
  for (int i = 0; i < 200 && metric("looplm_requests_cancelled_total") < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(metric("looplm_requests_cancelled_total"), 1);
  EXPECT_EQ(metric("looplm_requests_running"), 0) << "the dropped stream's slot is free";
  // B holds the slot (200 tokens of 200 loop steps each: most of a second here), C waits in the
  // queue, D is refused
  std::thread b([&] { post(s, "/v1/completions", {{"prompt", "In"}, {"max_tokens", 200}, {"depth", 200}, {"temperature", 0}}); });
  for (int i = 0; i < 500 && metric("looplm_requests_running") < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  std::thread c([&] { post(s, "/v1/completions", {{"prompt", "And"}, {"max_tokens", 5}, {"temperature", 0}}); });
  for (int i = 0; i < 500 && metric("looplm_requests_waiting") < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  auto d = s.client().Post("/v1/completions", R"({"prompt": "x", "max_tokens": 5})", "application/json");
  b.join();
  c.join();
  ASSERT_TRUE(d);
  EXPECT_EQ(d->status, 429) << d->body;
  EXPECT_EQ(d->get_header_value("Retry-After"), "1");
  EXPECT_EQ(json::parse(d->body)["error"]["type"], "server_busy");
  EXPECT_EQ(metric("looplm_requests_total"), 3);  // A, B, C
  EXPECT_GE(metric("looplm_completion_tokens_total"), 2 + 200 + 5);
  // A's tokens at the preset's R = 4, B's at 200, C's at 4
  const double steps = metric("looplm_loop_steps_total"), tokens = metric("looplm_completion_tokens_total");
  EXPECT_DOUBLE_EQ(steps, 200 * 200 + 4 * (tokens - 200));
  EXPECT_EQ(s.stop(), 0);
}

// SIGTERM while a stream runs: the stream ends with [DONE] and all its tokens, new requests are
// refused, and the server exits 0.
TEST_F(Serve, SigtermFinishesWhatIsInFlight) {
  ServerProcess s("--checkpoint " + ckpt() + " -t 1", *dir / "serve5.log");
  ASSERT_GT(s.port, 0);
  std::string body;
  std::atomic<int> chunks{0};
  std::thread a([&] {
    httplib::Client c = s.client();
    stream_post(c, "/v1/completions", R"({"prompt": "In", "max_tokens": 200, "depth": 200, "stream": true, "temperature": 0})",
                [&](const char* p, size_t n) {
                  body.append(p, n);
                  ++chunks;
                  return true;
                });
  });
  while (chunks < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  kill(s.pid, SIGTERM);
  EXPECT_LT(chunks.load(), 150) << "the stream was still running when the signal came";
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto late = s.client().Get("/health");  // while the stream finishes: refused (503), or no listener already
  if (late) {
    EXPECT_EQ(late->status, 503);
  }
  a.join();
  EXPECT_NE(body.find("data: [DONE]"), std::string::npos);
  EXPECT_NE(body.find("\"finish_reason\":\"length\""), std::string::npos);
  std::string text;
  for (size_t at = 0; (at = body.find("data: {", at)) != std::string::npos; ++at) {
    const json j = json::parse(body.substr(at + 6, body.find("\n\n", at) - at - 6));
    if (!j["choices"].empty()) text += j["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, cli_generate(ckpt(), "In", 200, "--depth 200"));
  EXPECT_EQ(s.stop(SIGTERM), 0);
  // the server's own words on stopping, not the trainer's
  std::ifstream f(*dir / "serve5.log");
  const std::string log((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(log.find("looplm serve: stopping: no new requests"), std::string::npos) << log;
  EXPECT_EQ(log.find("checkpoint"), std::string::npos) << log;
}

// --context bounds each sequence's KV cache (a model trained to a long context): requests that fit
// make what generate makes; longer ones are refused; a cache that cannot fit stops the server at
// start with the memory it needs, not every request later.
TEST_F(Serve, ContextBoundsTheCache) {
  ServerProcess s("--checkpoint " + ckpt() + " --context 64 -t 1", *dir / "serve9.log");
  ASSERT_GT(s.port, 0);
  EXPECT_EQ(post(s, "/v1/completions", {{"prompt", "In the beginning"}, {"max_tokens", 40}, {"temperature", 0}})["choices"][0]["text"],
            cli_generate(ckpt(), "In the beginning", 40));
  int status = 0;
  const json e = post(s, "/v1/completions", {{"prompt", std::string(80, 'a')}, {"max_tokens", 4}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_NE(e["error"]["message"].get<std::string>().find("the context holds 64"), std::string::npos) << e.dump();
  auto info = s.client().Get("/tokenizer_info");
  ASSERT_TRUE(info);
  EXPECT_EQ(json::parse(info->body)["model_max_length"], 64);
  auto models = s.client().Get("/v1/models");  // what the page fits its max tokens to
  ASSERT_TRUE(models);
  EXPECT_EQ(json::parse(models->body)["data"][0]["looplm"]["context"], 64);
  EXPECT_EQ(s.stop(), 0);
  const auto r = run_shell("LOOPLM_MEMORY_LIMIT=1M " + kBin + " serve --checkpoint " + ckpt() + " --parallel 64 --port 0 -t 1");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("LOOPLM_MEMORY_LIMIT"), std::string::npos) << r.out;
}

TEST_F(Serve, ChatModelsAndThePage) {
  ServerProcess s("--checkpoint " + ckpt() + " --model-name mine -t 1", *dir / "serve6.log");
  ASSERT_GT(s.port, 0);
  const json r = post(s, "/v1/chat/completions", {{"model", "mine"}, {"messages", {{{"role", "user"}, {"content", "Hello"}}}},
                                                  {"max_tokens", 8}, {"temperature", 0}});
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["choices"][0]["message"]["role"], "assistant");
  // ChatML around the conversation, then the model's own continuation
  const std::string chatml = "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n";
  std::string want = cli_generate(ckpt(), chatml, 8);
  if (auto cut = want.find("<|im_end|>"); cut != std::string::npos) want = want.substr(0, cut);
  EXPECT_EQ(r["choices"][0]["message"]["content"], want);
  auto m = s.client().Get("/v1/models");
  ASSERT_TRUE(m);
  EXPECT_EQ(json::parse(m->body)["data"][0]["id"], "mine");
  auto page = s.client().Get("/");
  ASSERT_TRUE(page);
  for (const char* id : {"id=\"prompt\"", "id=\"generate\"", "id=\"output\"", "id=\"threshold\""})
    EXPECT_NE(page->body.find(id), std::string::npos) << id;
  // curl, as the README calls it
  const std::string base = "http://127.0.0.1:" + std::to_string(s.port);
  const auto c = run_shell("curl -s " + base + "/v1/completions -H 'Content-Type: application/json' -d '{\"model\": \"mine\", "
                           "\"prompt\": \"In the\", \"max_tokens\": 12, \"temperature\": 0}'");
  if (c.code == 127) {
    std::printf("note: no curl here; its call was not made\n");
  } else {
    ASSERT_EQ(c.code, 0) << c.out;
    EXPECT_EQ(json::parse(c.out)["choices"][0]["text"], cli_generate(ckpt(), "In the", 12));
    const auto sse = run_shell("curl -sN " + base + "/v1/completions -d '{\"prompt\": \"In the\", \"max_tokens\": 12, \"temperature\": 0, \"stream\": true}'");
    EXPECT_NE(sse.out.find("data: [DONE]"), std::string::npos) << sse.out;
  }
  auto none = s.client().Get("/v2/nothing");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 404);
  EXPECT_EQ(s.stop(), 0);
}

namespace {
// The npm clients (tests/serve_clients/setup.sh): their cache, or "" with the reason.
std::string clients_cache(std::string* why) {
  return test::npm_cache(LOOPLM_SOURCE_DIR, "LOOPLM_SERVE_CLIENTS", "looplm-serve-clients", "serve_clients/setup.sh", why);
}
std::string quoted(const std::string& s) {  // one shell word
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}
}  // namespace

// The official openai npm client: completions (plain and streamed: the CLI's greedy text), chat,
// models, and the server's errors raised as the client's (400, 401).
TEST_F(Serve, OpenAiNpmClient) {
  std::string why;
  const std::string cache = clients_cache(&why);
  if (cache.empty()) GTEST_SKIP() << "the openai npm client is not installed and could not be: " << why;
  ServerProcess s("--checkpoint " + ckpt() + " --api-key sekret --model-name mine -t 1", *dir / "serve7.log");
  ASSERT_GT(s.port, 0);
  const json expected = {{"prompt", "In the beginning"}, {"max_tokens", 40}, {"text", cli_generate(ckpt(), "In the beginning", 40)}};
  const auto r = run_shell("node " + std::string(LOOPLM_SOURCE_DIR) + "/tests/serve_clients/openai_client.mjs " + quoted(cache) +
                           " http://127.0.0.1:" + std::to_string(s.port) + "/v1 mine sekret " + quoted(expected.dump()));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\"ok\":true"), std::string::npos) << r.out;
  EXPECT_EQ(s.stop(), 0);
}

// The page at / in Debian's chromium (headless, puppeteer-core): typing a prompt and pressing
// Generate streams the greedy text, a span per token carrying its loop steps; an exit rule with a
// threshold typed in gives shallower, lighter tokens.
TEST_F(Serve, PageInARealBrowser) {
  const std::string chromium = "/usr/bin/chromium";
  if (!std::filesystem::exists(chromium)) GTEST_SKIP() << "no chromium (scripts/install_deps.sh --test installs Debian's)";
  std::string why;
  const std::string cache = clients_cache(&why);
  if (cache.empty()) GTEST_SKIP() << "puppeteer-core is not installed and could not be: " << why;
  ServerProcess s("--checkpoint " + ckpt() + " -t 1", *dir / "serve8.log");
  ASSERT_GT(s.port, 0);
  // entropy < 10 holds at every exit of a 96-symbol vocabulary (at most ln 96 = 4.6): every token leaves after one step
  const json expected = {{"prompt", "In the beginning"}, {"max_tokens", 30}, {"text", cli_generate(ckpt(), "In the beginning", 30)},
                         {"R", 4}, {"entropy_threshold", 10}};
  const auto r = run_shell("node " + std::string(LOOPLM_SOURCE_DIR) + "/tests/serve_clients/page.mjs " + quoted(cache) + " " + chromium +
                           " http://127.0.0.1:" + std::to_string(s.port) + "/ " + quoted(expected.dump()));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\"ok\":true"), std::string::npos) << r.out;
  EXPECT_EQ(s.stop(), 0);
}

// ---------------------------------------------------------------- text the vocabulary splits
// A byte-level BPE trained here on text full of 4-byte characters and new emoji (so most of them
// are split across tokens), random weights: the answers are full of characters that arrive over
// several tokens, and of invalid byte runs (U+FFFD). The server's text, plain and streamed, is
// `looplm generate`'s, and decode of the tokens it made; a stop string that is one of those split
// characters cuts the text before it.
namespace {
class ServeText : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir = new TempDir("serve_text");
    std::string text;
    const char* pieces[] = {"𠀋", "𠂢", "𠃌", "𡈽", "𡌛", "🫠", "🫨", "🪿", "🧑🏽‍🚀", "한국어", "漢字", " word ", "\n"};
    uint32_t x = 12345;
    for (int i = 0; i < 6000; ++i) {
      x = x * 1103515245u + 12345u;
      text += pieces[(x >> 16) % 13];
    }
    std::ofstream(*dir / "text.txt", std::ios::binary) << text;
    auto r = run_shell(kBin + " data --input " + (*dir / "text.txt") + " --tokenizer-train bpe --vocab-size 300 --out " + (*dir / "bpe"));
    ASSERT_EQ(r.code, 0) << r.out;
    r = run_shell(kBin + " train --preset looped --set steps=0 --set d_model=64 --set n_heads=4 --set context=256 --set init_std=0.3 "
                  "--set tokenizer=hf --set tokenizer_file=" + (*dir / "bpe/tokenizer.json") + " --data " + (*dir / "text.txt") +
                  " --out " + (*dir / "run") + " --quiet -t 1");
    ASSERT_EQ(r.code, 0) << r.out;
  }
  static void TearDownTestSuite() {
    delete dir;
    dir = nullptr;
  }
  static std::string ckpt() { return *dir / "run"; }
  static TempDir* dir;
};
TempDir* ServeText::dir = nullptr;

// The completion's text from the server-sent events of a streamed request.
std::string streamed_text(const ServerProcess& s, const json& body, std::string* finish = nullptr) {
  auto c = s.client();
  std::string sse, text;
  stream_post(c, "/v1/completions", body.dump(), [&](const char* d, size_t n) {
    sse.append(d, n);
    return true;
  });
  for (size_t at = 0; (at = sse.find("data: {", at)) != std::string::npos; ++at) {
    const json j = json::parse(sse.substr(at + 6, sse.find("\n\n", at) - at - 6));
    if (j["choices"].empty()) continue;
    text += j["choices"][0]["text"].get<std::string>();
    if (finish && !j["choices"][0]["finish_reason"].is_null()) *finish = j["choices"][0]["finish_reason"];
  }
  return text;
}
}  // namespace

TEST_F(ServeText, SplitCharactersArriveWholeAndNothingIsCut) {
  ServerProcess s("--checkpoint " + ckpt() + " -t 1", *dir / "serve.log");
  ASSERT_GT(s.port, 0);
  // the CLI's batch output holds each sample's text and token ids
  const std::vector<std::string> prompts = {"𠀋𠂢", "한국어 word", "🫠🫨", " word 漢"};
  {
    std::ofstream f(*dir / "prompts.jsonl");
    for (const auto& p : prompts) f << json{{"prompt", p}}.dump() << "\n";
  }
  const auto g = run_shell(kBin + " generate --checkpoint " + ckpt() + " --prompts " + (*dir / "prompts.jsonl") +
                           " -n 80 --temperature 0 --ignore-eos --quiet 2>/dev/null");
  ASSERT_EQ(g.code, 0) << g.out;
  std::istringstream lines(g.out);
  size_t split = 0;
  for (const auto& p : prompts) {
    SCOPED_TRACE(p);
    std::string line;
    std::getline(lines, line);
    const json cli = json::parse(line);
    const std::string want = cli["completion"];
    const json body = {{"prompt", p}, {"max_tokens", 80}, {"temperature", 0}, {"ignore_eos", true}};
    const json r = post(s, "/v1/completions", body);
    EXPECT_EQ(r["choices"][0]["text"], want);
    EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
    json sb = body;
    sb["stream"] = true;
    EXPECT_EQ(streamed_text(s, sb), want);
    // through loop-as-draft (the request decodes alone): the same text, whole and streamed
    for (const json& spec : {json{{"speculative", 3}, {"draft_depth", 1}}, json{{"speculative", "auto"}}}) {
      json sp = body;
      sp.update(spec);
      EXPECT_EQ(post(s, "/v1/completions", sp)["choices"][0]["text"], want) << spec.dump();
      sp["stream"] = true;
      EXPECT_EQ(streamed_text(s, sp), want) << spec.dump();
    }
    // decode of the ids the model made (their first token continues the prompt: a byte-level
    // vocabulary decodes token by token, so decode alone gives the same text)
    EXPECT_EQ(post(s, "/detokenize", {{"tokens", cli["tokens"]}})["prompt"], want);
    // the tokens that are parts of characters: logprobs names them by their bytes
    const json lp = post(s, "/v1/completions", {{"prompt", p}, {"max_tokens", 80}, {"temperature", 0}, {"ignore_eos", true},
                                                {"logprobs", 2}})["choices"][0]["logprobs"];
    ASSERT_EQ(lp["tokens"].size(), 80u);
    size_t last = 0;
    for (size_t k = 0; k < 80; ++k) {
      const std::string t = lp["tokens"][k];
      split += t.rfind("bytes:", 0) == 0;
      const size_t off = lp["text_offset"][k];
      EXPECT_GE(off, last);
      last = off;
    }
  }
  EXPECT_GT(split, 5u) << "the answers should hold characters split across tokens";
  EXPECT_EQ(s.stop(), 0);
}

TEST_F(ServeText, StopStringsInsideSplitCharacters) {
  ServerProcess s("--checkpoint " + ckpt() + " -t 1", *dir / "serve_stop.log");
  ASSERT_GT(s.port, 0);
  const json body = {{"prompt", "🫠🫨"}, {"max_tokens", 80}, {"temperature", 0}, {"ignore_eos", true}};
  const std::string full = post(s, "/v1/completions", body)["choices"][0]["text"];
  // every 4-byte character of the answer as the stop string, and one with the character before it
  int tried = 0;
  for (size_t i = 0; i + 4 <= full.size() && tried < 6; ++i) {
    if ((static_cast<unsigned char>(full[i]) & 0xF8) != 0xF0) continue;
    for (const std::string& stop : {full.substr(i, 4), i > 0 && (full[i - 1] & 0xC0) != 0x80 ? full.substr(i - 1, 5) : full.substr(i, 4)}) {
      SCOPED_TRACE(stop);
      json b = body;
      b["stop"] = {stop};
      const json r = post(s, "/v1/completions", b);
      EXPECT_EQ(r["choices"][0]["text"], full.substr(0, full.find(stop)));
      EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
      b["stream"] = true;
      std::string finish;
      EXPECT_EQ(streamed_text(s, b, &finish), full.substr(0, full.find(stop)));
      EXPECT_EQ(finish, "stop");
    }
    ++tried;
  }
  EXPECT_GT(tried, 0) << "the answer holds no 4-byte character: " << full;
  EXPECT_EQ(s.stop(), 0);
}

// ---------------------------------------------------------------- a model's own conventions
// A checkpoint that carries what `convert` reads from a published model (Config::text): an end
// token, a chat template that refuses a system message. Written here from a char model trained
// here: generation stops at the end token (ignore_eos goes on), chat renders the template,
// /apply-template shows it, --chat-template overrides it, and each request leaves a log line.
#include "model/model.h"
#include "model/model_io.h"

namespace {
const std::string kTemplate =
    "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('this model takes no system message') }}"
    "{% endif %}[{{ m.role }}] {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}[assistant] {% endif %}";

class ServeOwnConventions : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir = new TempDir("serve_own");
    random_char_model(*dir, "plain", 64, 128, 100);
    if (HasFatalFailure()) return;
    // the greedy answer to the prompt, and the first character new in it after the third: the end token
    free_text = cli_generate(*dir / "plain", "[user] Hi\n[assistant] ", 40);
    size_t k = 3;
    while (k < free_text.size() && free_text.find(free_text[k]) < k) ++k;
    ASSERT_LT(k, free_text.size()) << free_text;
    end_char = free_text[k];
    auto m = load_model(*dir / "plain/model.safetensors");
    Config c = m->config();
    c.text.eos_token_ids = {(int32_t)c.tokenizer_chars.find(end_char)};
    c.text.chat_template = kTemplate;
    Model m2(c);
    std::copy(m->params().values().begin(), m->params().values().end(), m2.params().values().begin());
    std::filesystem::create_directories(*dir / "own");
    save_model(*dir / "own/model.safetensors", m2);
  }
  static void TearDownTestSuite() {
    delete dir;
    dir = nullptr;
  }
  static std::string ckpt() { return *dir / "own"; }
  static TempDir* dir;
  static std::string free_text;
  static char end_char;
};
TempDir* ServeOwnConventions::dir = nullptr;
std::string ServeOwnConventions::free_text;
char ServeOwnConventions::end_char = 0;
}  // namespace

TEST_F(ServeOwnConventions, EndTokensTemplateLogitBiasAndTheLog) {
  ServerProcess s("--checkpoint " + ckpt() + " -t 1", *dir / "serve.log");
  ASSERT_GT(s.port, 0);
  const std::string prompt = "[user] Hi\n[assistant] ";
  const std::string cut = free_text.substr(0, free_text.find(end_char));
  // the end token ends the answer (not part of it); ignore_eos goes on
  json r = post(s, "/v1/completions", {{"prompt", prompt}, {"max_tokens", 40}, {"temperature", 0}});
  EXPECT_EQ(r["choices"][0]["text"], cut);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  r = post(s, "/v1/completions", {{"prompt", prompt}, {"max_tokens", 40}, {"temperature", 0}, {"ignore_eos", true}});
  EXPECT_EQ(r["choices"][0]["text"], free_text);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(cli_generate(ckpt(), prompt, 40), cut);  // generate stops there too
  EXPECT_EQ(cli_generate(ckpt(), prompt, 40, "--ignore-eos"), free_text);
  auto info = s.client().Get("/tokenizer_info");
  ASSERT_TRUE(info);
  const json ti = json::parse(info->body);
  EXPECT_EQ(ti["eos_token_ids"].size(), 1u);
  EXPECT_EQ(ti["eos_token"], std::string(1, end_char));
  EXPECT_EQ(ti["chat_template"], kTemplate);
  // chat: the model's template, the same text /apply-template shows, answered as a completion of it
  const json convo = {{{"role", "user"}, {"content", "Hi"}}};
  EXPECT_EQ(post(s, "/apply-template", {{"messages", convo}})["prompt"], prompt);
  r = post(s, "/v1/chat/completions", {{"messages", convo}, {"max_tokens", 40}, {"temperature", 0}});
  EXPECT_EQ(r["choices"][0]["message"]["content"], cut);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  // the template refuses: a 400 with its own message
  int status = 0;
  r = post(s, "/v1/chat/completions", {{"messages", {{{"role", "system"}, {"content", "x"}}, {{"role", "user"}, {"content", "Hi"}}}}},
           &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(r["error"]["message"], "this model takes no system message");
  // logit_bias: +100 forces a token, a bad entry is a 400 naming it
  r = post(s, "/v1/completions", {{"prompt", prompt}, {"max_tokens", 5}, {"temperature", 0}, {"logit_bias", {{"40", 100}}}});
  const std::string forced = r["choices"][0]["text"];
  EXPECT_EQ(forced.size(), 5u);
  EXPECT_EQ(forced, std::string(5, forced[0]));
  for (const json& bad : {json{{"x", 1}}, json{{"100000", 1}}, json{{"3", "a"}}, json{{"3", 200}}, json::array()}) {
    r = post(s, "/v1/completions", {{"prompt", prompt}, {"max_tokens", 5}, {"logit_bias", bad}}, &status);
    EXPECT_EQ(status, 400) << bad.dump();
    EXPECT_EQ(r["error"]["param"], "logit_bias") << bad.dump();
  }
  EXPECT_EQ(s.stop(), 0);
  // one line per request: the answered ones with their tokens and finish, the refused with their status
  std::ifstream f(*dir / "serve.log");
  const std::string log((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(log.find("route=/v1/completions status=200 prompt_tokens=22 completion_tokens=40 mean_steps=4.0 finish=length"),
            std::string::npos) << log;
  EXPECT_NE(log.find("finish=stop"), std::string::npos) << log;
  EXPECT_NE(log.find("route=/v1/chat/completions status=400 error=\"this model takes no system message\""), std::string::npos) << log;
}

TEST_F(ServeOwnConventions, ChatTemplateOverrideAndJsonLog) {
  ServerProcess s("--checkpoint " + ckpt() + " --chat-template chatml --log-format json -t 1", *dir / "serve_chatml.log");
  ASSERT_GT(s.port, 0);
  const json convo = {{{"role", "system"}, {"content", "S"}}, {{"role", "user"}, {"content", "Hi"}}};
  EXPECT_EQ(post(s, "/apply-template", {{"messages", convo}})["prompt"],
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  post(s, "/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 3}, {"temperature", 0}});
  EXPECT_EQ(s.stop(), 0);
  std::ifstream f(*dir / "serve_chatml.log");
  std::string line;
  int requests = 0;
  while (std::getline(f, line))
    if (!line.empty() && line[0] == '{') {
      const json j = json::parse(line);
      if (j.value("route", "") == "/v1/completions") {
        ++requests;
        EXPECT_EQ(j["prompt_tokens"], 2);
        EXPECT_EQ(j["completion_tokens"], 3);
        EXPECT_TRUE(j.contains("ms") && j.contains("mean_steps") && j.contains("id"));
      }
    }
  EXPECT_EQ(requests, 1);
  // a name that is neither a built-in nor a file: exit 2 before listening
  const auto bad = run_shell(kBin + " serve --checkpoint " + ckpt() + " --chat-template nonesuch --port 0");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("nonesuch"), std::string::npos) << bad.out;
}

// ---------------------------------------------------------------- attacks (docs/serve.md, "Limits")
// What an independent attack on the server found, each as a test: bodies past --max-body however
// they are framed or encoded, slow connections, pipelined requests, a client that leaves a whole
// (non-streamed) request, client errors answered 5xx. Raw sockets: what an HTTP client would not send.
namespace {

// A raw TCP connection to the server (from `from`, another loopback address, when given: a
// different client address for the per-client connection cap).
struct Raw {
  int fd = -1;
  explicit Raw(int port, const char* from = nullptr) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (from) {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      inet_pton(AF_INET, from, &a.sin_addr);
      EXPECT_EQ(::bind(fd, (sockaddr*)&a, sizeof a), 0) << "bind " << from;
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (::connect(fd, (sockaddr*)&a, sizeof a) != 0) {
      ADD_FAILURE() << "connect";
      ::close(fd);
      fd = -1;
    }
  }
  ~Raw() { close(); }
  void close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  bool send(const std::string& s) { return fd >= 0 && ::send(fd, s.data(), s.size(), MSG_NOSIGNAL) == (ssize_t)s.size(); }
  // Reads until the server closes, `done(text)` holds or `timeout_s` passes; `closed`: it closed.
  std::string read(double timeout_s, const std::function<bool(const std::string&)>& done = nullptr, bool* closed = nullptr) {
    std::string got;
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    if (closed) *closed = false;
    while (fd >= 0 && std::chrono::steady_clock::now() < until && !(done && done(got))) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      char buf[65536];
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) {
        if (closed) *closed = true;
        break;
      }
      got.append(buf, (size_t)n);
    }
    return got;
  }
};

// The status of the first response in `text` (0: none).
int status_of(const std::string& text) { return text.rfind("HTTP/1.1 ", 0) == 0 ? std::atoi(text.c_str() + 9) : 0; }

// Whole responses in `text` (each with a Content-Length body).
int responses_in(const std::string& text) {
  int n = 0;
  for (size_t at = 0;;) {
    const size_t head = text.find("\r\n\r\n", at);
    if (head == std::string::npos) return n;
    const std::regex len("Content-Length: ([0-9]+)", std::regex::icase);
    std::smatch m;
    const std::string h = text.substr(at, head - at);
    const size_t body = std::regex_search(h, m, len) ? std::stoul(m[1]) : 0;
    if (text.size() < head + 4 + body) return n;
    ++n;
    at = head + 4 + body;
  }
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::string post_head(const std::string& path, const std::string& headers) {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + headers + "\r\n";
}
}  // namespace

// --max-body counts a body's bytes as they arrive, however framed; encodings are refused, and a
// Content-Length that cannot be right is answered at once, before any of the body is read.
TEST_F(Serve, AttackBodiesAreBoundedHoweverFramed) {
  ServerProcess s("--checkpoint " + ckpt() + " --max-body 4096 -t 1", *dir / "attack_body.log");
  ASSERT_GT(s.port, 0);
  auto chunked = [](const std::string& body, size_t piece) {
    std::string out;
    char len[32];
    for (size_t at = 0; at < body.size(); at += piece) {
      const std::string part = body.substr(at, piece);
      std::snprintf(len, sizeof len, "%zx\r\n", part.size());
      out += len + part + "\r\n";
    }
    return out + "0\r\n\r\n";
  };
  // (status, seconds to the answer, the server closed the connection after it)
  auto exchange = [&](const std::string& request, double timeout_s = 10) {
    Raw r(s.port);
    const auto t0 = std::chrono::steady_clock::now();
    r.send(request);
    bool closed = false;
    const std::string got = r.read(timeout_s, [](const std::string& t) { return responses_in(t) >= 1; });
    const double took = seconds_since(t0);
    r.read(2, nullptr, &closed);
    return std::tuple<int, double, bool, std::string>{status_of(got), took, closed, got};
  };
  const std::string small = json({{"prompt", std::string(3000, 'a')}}).dump();
  // a chunked body within the limit is read; one past it is refused as it passes the limit
  auto [st, took, closed, text] = exchange(post_head("/tokenize", "Transfer-Encoding: chunked\r\n") + chunked(small, 100));
  EXPECT_EQ(st, 200) << text;
  EXPECT_FALSE(closed);
  std::string big = json({{"prompt", std::string(40000, 'a')}}).dump();
  std::tie(st, took, closed, text) = exchange(post_head("/tokenize", "Transfer-Encoding: chunked\r\n") + chunked(big, 1000));
  EXPECT_EQ(st, 413) << text;
  EXPECT_TRUE(closed);
  std::tie(st, took, closed, text) = exchange(post_head("/tokenize", "Transfer-Encoding: chunked\r\n") + chunked(big.substr(0, 5000), 1));
  EXPECT_EQ(st, 413) << text;  // one-byte chunks: their decoded bytes are what counts
  // no body is inflated: every Content-Encoding but identity is refused before the body is read
  for (const std::string ce : {"gzip", "deflate", "br", "GZIP", "x-custom", "gzip, identity"}) {
    std::tie(st, took, closed, text) = exchange(post_head("/tokenize", "Content-Encoding: " + ce + "\r\nContent-Length: 10\r\n") + "0123456789");
    EXPECT_EQ(st, 415) << ce << ": " << text;
    EXPECT_TRUE(closed) << ce;
  }
  std::tie(st, took, closed, text) =
      exchange(post_head("/tokenize", "Content-Encoding: identity\r\nContent-Length: " + std::to_string(small.size()) + "\r\n") + small);
  EXPECT_EQ(st, 200) << text;
  // Content-Lengths that cannot be right: answered at once (not after the read timeout), closed
  for (const auto& [cl, want] : std::vector<std::pair<std::string, int>>{
           {"-1", 400}, {"abc", 400}, {"12abc", 400}, {"99999999999", 413}, {"99999999999999999999999999999", 413}, {"4097", 413}}) {
    std::tie(st, took, closed, text) = exchange(post_head("/tokenize", "Content-Length: " + cl + "\r\n") + "{}");
    EXPECT_EQ(st, want) << cl << ": " << text;
    EXPECT_LT(took, 2.0) << cl;
    EXPECT_TRUE(closed) << cl;
  }
  std::tie(st, took, closed, text) = exchange(post_head("/tokenize", "Content-Length: 2\r\nContent-Length: 3\r\n") + "{}");
  EXPECT_EQ(st, 400) << text;
  std::tie(st, took, closed, text) = exchange(post_head("/tokenize", "Content-Length: 2\r\nTransfer-Encoding: chunked\r\n") + "{}");
  EXPECT_EQ(st, 400) << text;
  std::tie(st, took, closed, text) = exchange(post_head("/tokenize", "Transfer-Encoding: gzip, chunked\r\n") + "0\r\n\r\n");
  EXPECT_EQ(st, 501) << text;
  // a POST without a length (its body would run to the connection's end), a body on GET, multipart, an unknown route
  std::tie(st, took, closed, text) = exchange(post_head("/tokenize", ""), 3);
  EXPECT_EQ(st, 411) << text;
  EXPECT_LT(took, 2.0);
  std::tie(st, took, closed, text) = exchange("GET /health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(big, 1000));
  EXPECT_EQ(st, 400) << text;
  std::tie(st, took, closed, text) = exchange(
      "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=xx\r\nContent-Length: 4\r\n\r\n--xx");
  EXPECT_EQ(st, 415) << text;
  std::tie(st, took, closed, text) = exchange(post_head("/nope", "Transfer-Encoding: chunked\r\n") + chunked(big, 1000));
  EXPECT_EQ(st, 404) << text;
  // headers without end
  {
    Raw r(s.port);
    r.send("GET /health HTTP/1.1\r\n");
    std::string flood;
    for (int i = 0; i < 2000; ++i) flood += "X-Pad-" + std::to_string(i) + ": " + std::string(100, 'p') + "\r\n";
    r.send(flood);
    bool closed2 = false;
    const std::string got = r.read(5, [](const std::string& t) { return responses_in(t) >= 1; });
    EXPECT_EQ(status_of(got), 431) << got.substr(0, 300);
    r.read(2, nullptr, &closed2);
    EXPECT_TRUE(closed2);
  }
  // the server is well
  auto h = s.client().Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(s.stop(), 0);
}

// A request has --request-timeout to arrive, however slowly its bytes come; one client address
// holds at most --max-conns-per-client connections. So slow clients from one address leave the
// pool's other threads to everyone else, and each is cut at its deadline.
TEST_F(Serve, AttackSlowClientsAreCutAndOthersAreServed) {
  // --parallel 1 --queue 0: a pool of 8 connection threads
  ServerProcess s("--checkpoint " + ckpt() + " --parallel 1 --queue 0 --request-timeout 3 --max-conns-per-client 4 -t 1",
                  *dir / "attack_slow.log");
  ASSERT_GT(s.port, 0);
  const std::string request = "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 20\r\n\r\n{\"prompt\": \"abcdef\"}";
  std::vector<std::unique_ptr<Raw>> slow;
  for (int i = 0; i < 10; ++i) slow.push_back(std::make_unique<Raw>(s.port));
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> got(slow.size());
  std::vector<double> closed_at(slow.size(), -1);
  std::atomic<bool> stop{false};
  // one byte a second on each connection, noting when the server closes it
  std::thread sender([&] {
    for (size_t k = 0; k < request.size() && !stop; ++k) {
      for (size_t i = 0; i < slow.size(); ++i) {
        if (closed_at[i] >= 0) continue;
        slow[i]->send(std::string(1, request[k]));
        bool closed = false;
        got[i] += slow[i]->read(0.01, nullptr, &closed);
        if (closed) closed_at[i] = seconds_since(t0);
      }
      for (int w = 0; w < 50 && !stop; ++w) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        for (size_t i = 0; i < slow.size(); ++i) {
          if (closed_at[i] >= 0) continue;
          bool closed = false;
          got[i] += slow[i]->read(0.0, nullptr, &closed);
          if (closed) closed_at[i] = seconds_since(t0);
        }
      }
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  // another client is answered at once, while the slow ones hold their threads
  {
    Raw other(s.port, "127.0.0.2");
    const auto t1 = std::chrono::steady_clock::now();
    other.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    const std::string h = other.read(5, [](const std::string& t) { return responses_in(t) >= 1; });
    EXPECT_EQ(status_of(h), 200) << h;
    EXPECT_LT(seconds_since(t1), 1.0);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(4000));
  stop = true;
  sender.join();
  int refused = 0, cut = 0;
  for (size_t i = 0; i < slow.size(); ++i) {
    if (status_of(got[i]) == 429) {
      ++refused;
      EXPECT_GE(closed_at[i], 0) << "a refused connection is closed";
      EXPECT_LT(closed_at[i], 1.5);
    } else {
      ++cut;
      EXPECT_EQ(status_of(got[i]), 408) << got[i];
      EXPECT_GE(closed_at[i], 2.5) << "cut at its deadline (3 s), not before";
      EXPECT_LT(closed_at[i], 5.0) << "cut at its deadline (3 s)";
    }
  }
  EXPECT_EQ(refused, 6);
  EXPECT_EQ(cut, 4);
  auto h = s.client().Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(s.stop(), 0);
}

// Requests pipelined in one write are each answered, in order.
TEST_F(Serve, AttackPipelinedRequestsAreAnsweredInOrder) {
  ServerProcess s("--checkpoint " + ckpt() + " -t 1", *dir / "attack_pipeline.log");
  ASSERT_GT(s.port, 0);
  const std::string body = R"({"prompt": "abc"})";
  Raw r(s.port);
  r.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
         "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + body +
         "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::string got = r.read(10, [](const std::string& t) { return responses_in(t) >= 3; });
  ASSERT_EQ(responses_in(got), 3) << got;
  const size_t a = got.find("\"status\":\"ok\""), b = got.find("\"tokens\""), c = got.find("\"object\":\"list\"");
  EXPECT_TRUE(a != std::string::npos && b != std::string::npos && c != std::string::npos) << got;
  EXPECT_TRUE(a < b && b < c) << got;
  EXPECT_EQ(s.stop(), 0);
}

// A whole (non-streamed) request whose client leaves is cancelled, as a stream's is: its slot is
// free at the next token boundary, not when its last token is made.
TEST_F(Serve, AttackAClientThatLeavesAWholeRequestFreesItsSlot) {
  ServerProcess s("--checkpoint " + ckpt() + " --parallel 1 -t 1", *dir / "attack_leave.log");
  ASSERT_GT(s.port, 0);
  auto metric = [&](const std::string& name) { return metric_of(s, name); };
  // 250 tokens of 256 loop steps: more than a second of work here
  const std::string body = R"({"prompt": "In", "max_tokens": 250, "depth": 256, "temperature": 0})";
  {
    Raw r(s.port);
    r.send(post_head("/v1/completions", "Content-Length: " + std::to_string(body.size()) + "\r\n") + body);
    for (int i = 0; i < 500 && metric("looplm_requests_running") < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_EQ(metric("looplm_requests_running"), 1);
  }  // the client closes
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 200 && metric("looplm_requests_cancelled_total") < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(metric("looplm_requests_cancelled_total"), 1);
  EXPECT_LT(seconds_since(t0), 1.0);
  EXPECT_EQ(metric("looplm_requests_running"), 0);
  // the next request finds the slot free
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_EQ(post(s, "/v1/completions", {{"prompt", "In"}, {"max_tokens", 4}, {"temperature", 0}})["choices"][0]["text"],
            cli_generate(ckpt(), "In", 4));
  EXPECT_LT(seconds_since(t1), 2.0);
  EXPECT_EQ(s.stop(), 0);
  std::ifstream f(*dir / "attack_leave.log");
  const std::string log((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(log.find("status=499"), std::string::npos) << log;
}

// Errors of the client's making are 4xx, whatever their kind.
TEST_F(Serve, AttackClientErrorsAre4xx) {
  ServerProcess s("--checkpoint " + ckpt() + " --parallel 2 --queue 2 -t 1", *dir / "attack_4xx.log");
  ASSERT_GT(s.port, 0);
  auto call = [&](const std::string& path, const std::string& body, int want, const std::string& mentions) {
    auto r = s.client().Post(path, body, "application/json");
    ASSERT_TRUE(r) << body;
    EXPECT_EQ(r->status, want) << body << " -> " << r->body;
    EXPECT_NE(r->body.find(mentions), std::string::npos) << body << " -> " << r->body;
  };
  call("/v1/completions", R"({"prompt": "x", "logprobs": -1})", 400, "'logprobs' must be between 0 and 20");
  call("/v1/completions", R"({"prompt": "x", "logprobs": -1000000000000000})", 400, "'logprobs'");
  call("/v1/completions", R"({"prompt": "x", "logprobs": 21})", 400, "'logprobs'");
  call("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": -5})", 400, "'top_logprobs'");
  call("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 1e300})", 400, "'top_logprobs'");
  call("/v1/chat/completions", R"({"messages": [{"role": "user", "content": [{"type": 5, "text": "x"}]}]})", 400, "text message parts");
  call("/v1/chat/completions", R"({"messages": [{"role": "user", "content": [{"type": "text", "text": 7}]}]})", 400, "text message parts");
  call("/v1/completions", R"({"prompt": [18446744073709551615]})", 400, "outside the vocabulary");
  // more sequences than the server takes at once (--parallel + --queue): never a 429 to retry
  call("/v1/completions", R"({"prompt": ["a", "b", "c"], "n": 2, "max_tokens": 1})", 400, "at most 4");
  std::string many = "[";
  for (int i = 0; i < 50000; ++i) many += std::string(i ? "," : "") + "\"a\"";
  call("/v1/completions", R"({"prompt": )" + many + R"(], "max_tokens": 1})", 400, "at most 4");
  call("/tokenize", R"({"prompt": "x", "with_pieces": "yes"})", 400, "'with_pieces'");
  auto h = s.client().Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(s.stop(), 0);
}

// A model whose vocabulary is padded past its tokenizer's (as many converted models are): ids
// the tokenizer has no text for are the request's error (400), not the server's.
TEST_F(ServeText, AttackPaddedVocabularyIdsAre4xx) {
  auto m = load_model(*dir / "run/model.safetensors");
  Config c = m->config();
  const int tokenizer_size = c.vocab_size;
  c.vocab_size = tokenizer_size + 40;
  Model padded(c);
  std::filesystem::create_directories(*dir / "padded");
  save_model(*dir / "padded/model.safetensors", padded);
  ServerProcess s("--checkpoint " + (*dir / "padded") + " -t 1", *dir / "padded.log");
  ASSERT_GT(s.port, 0);
  const int pad = tokenizer_size + 5;
  int st = 0;
  json r = post(s, "/detokenize", {{"tokens", {65, pad}}}, &st);
  EXPECT_EQ(st, 400) << r;
  EXPECT_NE(r.dump().find(std::to_string(pad)), std::string::npos) << r;
  r = post(s, "/v1/completions", {{"prompt", {65, pad}}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 1}}, &st);
  EXPECT_EQ(st, 400) << r;
  r = post(s, "/v1/completions", {{"prompt", "a"}, {"max_tokens", 1}, {"logit_bias", {{std::to_string(pad), 100}}}}, &st);
  EXPECT_EQ(st, 400) << r;  // forcing a token that has no text
  EXPECT_NE(r.dump().find("no text"), std::string::npos) << r;
  r = post(s, "/detokenize", {{"tokens", {65, 66}}}, &st);
  EXPECT_EQ(st, 200) << r;
  EXPECT_EQ(s.stop(), 0);
}
