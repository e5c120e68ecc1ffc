// The looplm binary end to end: bad input gets a clear message and exit code 1 (runtime) or
// 2 (usage), never a crash; eval --json prints the loss at every exit.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <fstream>

#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "model/model_io.h"

using namespace looplm;
namespace fs = std::filesystem;

namespace {

struct CmdResult {
  int code;
  std::string out;  // stdout + stderr
};

CmdResult run(const std::string& args) {
  std::string cmd = std::string(LOOPLM_BINARY) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

// Run the binary in a child, send SIGINT once `marker` shows in its output, and wait for it to end.
struct Interrupted {
  int status = 0;
  std::string out;
  bool signalled = false;
  double seconds_to_exit = 0;  // from the signal to the end
};
Interrupted interrupt_when(const std::string& args, const std::string& marker) {
  Interrupted r;
  int fds[2];
  if (pipe(fds) != 0) return r;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    std::string cmd = std::string("exec ") + LOOPLM_BINARY + " " + args;
    execl("/bin/sh", "sh", "-c", cmd.c_str(), (char*)nullptr);
    _exit(127);
  }
  close(fds[1]);
  char buf[4096];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  std::chrono::steady_clock::time_point sent;
  for (;;) {
    pollfd pfd{fds[0], POLLIN, 0};
    if (std::chrono::steady_clock::now() > deadline) {  // never hang the suite
      kill(pid, SIGKILL);
      break;
    }
    if (poll(&pfd, 1, 1000) <= 0) continue;
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    r.out.append(buf, n);
    if (!r.signalled && r.out.find(marker) != std::string::npos) {
      kill(pid, SIGINT);
      r.signalled = true;
      sent = std::chrono::steady_clock::now();
    }
  }
  close(fds[0]);
  waitpid(pid, &r.status, 0);
  if (r.signalled) r.seconds_to_exit = std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
  return r;
}

CmdResult run_shell(const std::string& cmd) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

// n times a verse: training text for the small runs below.
std::string verse(int n) {
  std::string text;
  for (int i = 0; i < n; ++i) text += "In the beginning God created the heaven and the earth. ";
  return text;
}

class Cli : public ::testing::Test {
 protected:
  std::string dir;
  void SetUp() override {
    dir = (fs::temp_directory_path() / ("looplm_test_cli_" + std::to_string(::getpid()))).string();
    fs::remove_all(dir);
    fs::create_directories(dir);
    Config c;
    c.d_model = 16;
    c.n_heads = 2;
    c.context = 8;
    c.n_core = 1;
    c.R = 3;
    Model m(c);
    m.init_weights(1);
    save_model(dir + "/model.safetensors", m);
    std::string text;
    for (int i = 0; i < 20; ++i) text += "hello world, ";
    io::write_file_atomic(dir + "/val.txt", text.data(), text.size());
  }
  void TearDown() override { fs::remove_all(dir); }
  std::string ckpt() const { return dir + "/model.safetensors"; }
};

}  // namespace

TEST_F(Cli, EvalJsonHasLossByDepth) {
  CmdResult r = run("eval --checkpoint " + ckpt() + " --data " + dir + "/val.txt --json");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["loss_by_depth"].size(), 3u);
  EXPECT_DOUBLE_EQ(j["loss"].get<double>(), j["loss_by_depth"][2].get<double>());
  EXPECT_EQ(j["tokens"].get<int>(), (260 - 1) / 8 * 8);
  EXPECT_GT(j["loss"].get<double>(), 4.0);  // an untrained byte model is near ln 256 = 5.5
}

// eval --window: windows shorter than the context, and a usage error past it.
TEST_F(Cli, EvalWindow) {
  CmdResult r = run("eval --checkpoint " + ckpt() + " --data " + dir + "/val.txt --window 5 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tokens"].get<int>(), (260 - 1) / 5 * 5);
  EXPECT_EQ(j["windows"].get<int>(), (260 - 1) / 5);
  r = run("eval --checkpoint " + ckpt() + " --data " + dir + "/val.txt --window 100000");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("window 100000 is outside"), std::string::npos) << r.out;
}

// bench --decode-only times generation alone (no training keys) in the formats named, here the
// checkpoint's own and q4_0; with no format it is a usage error.
TEST_F(Cli, BenchDecodeOnly) {
  CmdResult r = run("bench --checkpoint " + ckpt() + " --decode-only --weights fp32,q4_0 -r 1 -n 4 -p 8 --gen-batch 2 -t 1 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  EXPECT_GT(j["decode_tokens_per_s"].get<double>(), 0);
  EXPECT_GT(j["decode_q4_0_tokens_per_s"].get<double>(), 0);
  EXPECT_GT(j["decode_batch_q4_0_tokens_per_s"].get<double>(), 0);
  // a looped model (R = 3) has a loop-as-draft row per format: generate --speculative auto's speed
  EXPECT_GT(j["decode_speculative_tokens_per_s"].get<double>(), 0);
  EXPECT_GT(j["decode_speculative_q4_0_tokens_per_s"].get<double>(), 0);
  EXPECT_FALSE(j.contains("train_tokens_per_s"));
  EXPECT_FALSE(j.contains("decode_bf16_tokens_per_s"));  // not named
  // the fraction is the repetition's tokens/s over the read rate measured beside it (one here)
  const double read = j["read_gbps"].get<double>(), frac = j["decode_q4_0_bandwidth_fraction"].get<double>();
  EXPECT_GT(read, 0);
  EXPECT_NEAR(frac, j["decode_q4_0_tokens_per_s"].get<double>() * j["weight_bytes_per_token_q4_0"].get<double>() / (read * 1e9),
              1e-9 * frac);
  EXPECT_EQ(j["decode_q4_0_bandwidth_fraction_stddev"].get<double>(), 0);
  r = run("bench --checkpoint " + ckpt() + " --decode-only --weights fp32 -r 1 -n 4 -p 8 --gen-batch 1 -t 1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("| generation tg4 fp32, loop-as-draft auto: "), std::string::npos) << r.out;  // what auto chose
  r = run("bench --preset bench-dense --decode-only --weights none -r 1");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("no format to time"), std::string::npos) << r.out;
}

TEST_F(Cli, GenerateGreedyIsDeterministic) {
  CmdResult a = run("generate --checkpoint " + ckpt() + " --prompt hi --max-new 12 --temperature 0 --quiet");
  CmdResult b = run("generate --checkpoint " + ckpt() + " --prompt hi --max-new 12 --temperature 0 --quiet");
  ASSERT_EQ(a.code, 0) << a.out;
  EXPECT_EQ(a.out, b.out);
  CmdResult c = run("generate --checkpoint " + ckpt() + " --prompt hi --max-new 12 --temperature 0 --weights bf16 --quiet");
  ASSERT_EQ(c.code, 0) << c.out;
  EXPECT_EQ(c.out.substr(0, 2), "hi");
  EXPECT_EQ(c.out.size(), a.out.size());  // 12 byte tokens either way (the bytes may differ)
}

TEST_F(Cli, TruncatedCheckpoint) {
  std::string bytes = io::read_file(ckpt());
  io::write_file_atomic(dir + "/cut.safetensors", bytes.data(), bytes.size() - 100);
  CmdResult r = run("eval --checkpoint " + dir + "/cut.safetensors --data " + dir + "/val.txt");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("cut.safetensors"), std::string::npos) << r.out;
}

TEST_F(Cli, CorruptHeader) {
  std::string bytes = io::read_file(ckpt());
  bytes[12] = '#';  // inside the JSON header
  io::write_file_atomic(dir + "/bad.safetensors", bytes.data(), bytes.size());
  CmdResult r = run("generate --checkpoint " + dir + "/bad.safetensors --prompt x");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("bad.safetensors"), std::string::npos) << r.out;
}

TEST_F(Cli, WrongTensorShape) {
  // Same tensors, but the config says d_ff = 32 while the weights were made with 4d = 64.
  auto f = io::SafetensorsFile::open(ckpt());
  auto cfg = nlohmann::json::parse(f.metadata().at("config"));
  cfg["d_ff"] = 32;
  std::vector<io::TensorRef> t;
  for (auto& n : f.names()) {
    auto& info = f.get(n);
    t.push_back({n, info.dtype, info.shape, info.data});
  }
  io::write_safetensors(dir + "/shape.safetensors", t, {{"format", "pt"}, {"config", cfg.dump()}});
  CmdResult r = run("eval --checkpoint " + dir + "/shape.safetensors --data " + dir + "/val.txt");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("mlp.up.weight"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[64, 16]"), std::string::npos) << r.out;
}

TEST_F(Cli, UnknownConfigKey) {
  CmdResult r = run("train --preset looped --set d_modle=64 --out " + dir + "/run");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("d_modle"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("d_model"), std::string::npos) << r.out;  // the hint
  std::ofstream(dir + "/c.json") << R"({"d_model": 64, "n_layers": 3})";
  r = run("train --config " + dir + "/c.json --out " + dir + "/run");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("n_layers"), std::string::npos) << r.out;
}

TEST_F(Cli, BadFlagValues) {
  CmdResult r = run("generate --checkpoint " + ckpt() + " --prompt x --temperature hot");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("temperature"), std::string::npos) << r.out;
  r = run("generate --checkpoint " + ckpt() + " --prompt x --weights int3");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("weights"), std::string::npos) << r.out;
  r = run("train --preset looped --set R=two --out " + dir + "/run");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("R"), std::string::npos) << r.out;
  r = run("train --preset looped --set block=transformer --out " + dir + "/run");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("pre_norm"), std::string::npos) << r.out;
  r = run("train --preset nosuch --out " + dir + "/run");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("looped"), std::string::npos) << r.out;  // lists the presets
  r = run("eval --checkpoint " + ckpt() + " --data " + dir + "/val.txt --depth -1");
  EXPECT_EQ(r.code, 2) << r.out;
  r = run("frobnicate");
  EXPECT_EQ(r.code, 2) << r.out;
  r = run("genrate --prompt x");  // one command table: the usage lists it, the suggestion comes from it
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("did you mean 'generate'"), std::string::npos) << r.out;
  r = run("--help");
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* cmd : {"train", "eval", "generate", "bench", "data", "info", "quantize", "tokenize", "export", "convert", "serve"})
    EXPECT_NE(r.out.find(std::string("\n  ") + cmd + " "), std::string::npos) << cmd << "\n" << r.out;
  r = run("eval --checkpoint " + dir + "/missing.safetensors --data " + dir + "/val.txt");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("missing.safetensors"), std::string::npos) << r.out;
}

// Ctrl-C during training: the run finishes its step, writes a checkpoint, says so and exits 130;
// --resume continues from that step. (The CLI takes signals on its own thread: tools/signals.h.)
TEST_F(Cli, InterruptedTrainingCheckpointsAndResumes) {
  const std::string text = verse(400);
  io::write_file_atomic(dir + "/train.txt", text.data(), text.size());
  const std::string args = "train --preset looped --set d_model=32 --set n_heads=2 --set context=16 --set batch_size=4"
                           " --set data_train=" + dir + "/train.txt --set data_val=" + dir + "/val.txt"
                           " --set eval_every=1000000 --set eval_batches=1 --set log_every=1 --out " + dir + "/run";
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    std::string cmd = std::string("exec ") + LOOPLM_BINARY + " " + args + " --steps 1000000";
    execl("/bin/sh", "sh", "-c", cmd.c_str(), (char*)nullptr);
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  bool signalled = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  for (;;) {
    pollfd pfd{fds[0], POLLIN, 0};
    if (std::chrono::steady_clock::now() > deadline) {  // never hang the suite
      kill(pid, SIGKILL);
      ADD_FAILURE() << "no clean stop within 120 s:\n" << out;
      break;
    }
    if (poll(&pfd, 1, 1000) <= 0) continue;
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, n);
    if (!signalled && out.find("step 3/") != std::string::npos) {
      kill(pid, SIGINT);
      signalled = true;
    }
  }
  close(fds[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_TRUE(signalled) << out;
  ASSERT_TRUE(WIFEXITED(st)) << "killed instead of stopping cleanly:\n" << out;
  EXPECT_EQ(WEXITSTATUS(st), 130) << out;
  const size_t at = out.find("interrupted: checkpoint written at step ");
  ASSERT_NE(at, std::string::npos) << out;
  const int step = std::stoi(out.substr(at + 40));
  EXPECT_GE(step, 3);
  ASSERT_TRUE(fs::exists(dir + "/run/checkpoint.json"));
  CmdResult r = run(args + " --steps 1000000 --resume --stop-after " + std::to_string(step + 2));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("resumed " + dir + "/run at step " + std::to_string(step)), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("step " + std::to_string(step + 2) + "/"), std::string::npos) << r.out;
}

TEST_F(Cli, EvalJsonHasDiagnosticsAndDepthZero) {
  CmdResult r = run("eval --checkpoint " + ckpt() + " --data " + dir + "/val.txt --json --depth 5");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["diagnostics"]["state_cosine"].size(), 5u);  // r = 1..depth, also beyond R = 3
  EXPECT_DOUBLE_EQ(j["loss"].get<double>(), j["loss_by_depth"][2].get<double>());
  r = run("eval --checkpoint " + ckpt() + " --data " + dir + "/val.txt --json --depth 0");
  ASSERT_EQ(r.code, 0) << r.out;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["depth"].get<int>(), 0);
  EXPECT_GT(j["loss"].get<double>(), 4.0);
}

TEST_F(Cli, EvalEarlyExit) {
  CmdResult r = run("eval --checkpoint " + ckpt() + " --data " + dir + "/val.txt --json --exit-rule kl --exit-threshold 1e9");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["mean_steps"].get<double>(), 2.0);  // kl decides from step 2 on
  EXPECT_EQ(j["exit_fraction"].size(), 3u);
  EXPECT_NEAR(j["loss"].get<double>(), j["loss_by_depth"][1].get<double>(), 1e-6);
  EXPECT_EQ(j["exit_rule"], "kl");
  r = run("eval --checkpoint " + ckpt() + " --data " + dir + "/val.txt --exit-rule entropy --exit-threshold 0.5");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("at each token's exit: entropy < 0.5, "), std::string::npos) << r.out;
  r = run("eval --checkpoint " + ckpt() + " --data " + dir + "/val.txt --exit-rule kl");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("needs a finite --exit-threshold"), std::string::npos) << r.out;
  r = run("eval --checkpoint " + ckpt() + " --data " + dir + "/val.txt --exit-threshold 0.1");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("no effect with --exit-rule fixed"), std::string::npos) << r.out;
  r = run("eval --checkpoint " + ckpt() + " --data " + dir + "/val.txt --exit-rule soon --exit-threshold 0.1");
  EXPECT_EQ(r.code, 2) << r.out;
}

// eval --kv-policy scores through incremental decoding: the per_step loss is the full pass's, the
// JSON says the policy and its memory; mean keeps fewer bytes per token.
TEST_F(Cli, EvalKvPolicy) {
  const std::string base = "eval --checkpoint " + ckpt() + " --data " + dir + "/val.txt --json";
  CmdResult r = run(base);
  ASSERT_EQ(r.code, 0) << r.out;
  const double full = nlohmann::json::parse(r.out)["loss"].get<double>();
  r = run(base + " --kv-policy per_step");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_NEAR(j["loss"].get<double>(), full, 1e-5);
  EXPECT_EQ(j["kv_policy"], "per_step");
  EXPECT_EQ(j["incremental"], true);
  const double per_step_bytes = j["kv_bytes_per_token"].get<double>();
  r = run(base + " --kv-policy mean --exit-rule kl --exit-threshold 0.01");
  ASSERT_EQ(r.code, 0) << r.out;
  j = nlohmann::json::parse(r.out);
  EXPECT_LT(j["kv_bytes_per_token"].get<double>(), per_step_bytes);
  EXPECT_LE(j["mean_steps"].get<double>(), 3.0);
  r = run("eval --checkpoint " + ckpt() + " --data " + dir + "/val.txt --kv-policy last");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("decoded one at a time (kv policy last, kv cache fp32)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bytes per token kept by the policy"), std::string::npos) << r.out;
  EXPECT_EQ(run(base + " --kv-policy newest").code, 2);
  // --kv-cache alone scores incrementally too, through an int8 cache: close to the fp32 cache's loss
  // (tests/test_decoder.cpp bounds it), a quarter of the bytes plus a 4-byte scale per head vector
  r = run(base + " --kv-cache int8");
  ASSERT_EQ(r.code, 0) << r.out;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["kv_cache"], "int8");
  EXPECT_NEAR(j["loss"].get<double>(), full, 1e-2 * full);
  EXPECT_LT(j["kv_bytes_per_token"].get<double>(), 0.5 * per_step_bytes);  // below bf16 even at this model's 8-wide heads
  EXPECT_EQ(run(base + " --kv-cache int4").code, 2);
  r = run(base + " --depth 0 --exit-rule kl --exit-threshold 0.1");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("needs loop steps"), std::string::npos) << r.out;
}

// generate --prompts: lines or JSONL, decoded together; each sequence is what it is alone (seed +
// its index), with either KV cache; bad files and a bad --kv-cache are named.
TEST_F(Cli, GeneratePrompts) {
  const std::string lines = "hi\n\nhello\nab\n";
  io::write_file_atomic(dir + "/p.txt", lines.data(), lines.size());
  CmdResult r = run("generate --checkpoint " + ckpt() + " --prompts " + dir + "/p.txt -n 6 --temperature 0.9 --seed 3 --batch 2");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("3 sequences, batches of 2"), std::string::npos) << r.out;
  CmdResult one = run("generate --checkpoint " + ckpt() + " --prompt hello -n 6 --temperature 0.9 --seed 4 --quiet");
  ASSERT_EQ(one.code, 0) << one.out;
  EXPECT_NE(r.out.find("---------------\n" + one.out), std::string::npos) << r.out << "\n" << one.out;  // the second sequence
  const std::string jl = "{\"prompt\": \"hi\"}\n{\"text\": \"ab\", \"id\": 7}\n";
  io::write_file_atomic(dir + "/p.jsonl", jl.data(), jl.size());
  r = run("generate --checkpoint " + ckpt() + " --prompts " + dir + "/p.jsonl -n 5 --quiet --exit-rule entropy --exit-threshold 3 --kv-policy first");
  ASSERT_EQ(r.code, 0) << r.out;
  size_t at = 0, n = 0;
  for (size_t nl; (nl = r.out.find('\n', at)) != std::string::npos; at = nl + 1, ++n) {
    auto j = nlohmann::json::parse(r.out.substr(at, nl - at));
    EXPECT_EQ(j["prompt"], n == 0 ? "hi" : "ab");
    EXPECT_EQ(j["tokens"].size(), 5u);
    EXPECT_FALSE(j["completion"].get<std::string>().empty());
  }
  EXPECT_EQ(n, 2u);
  // One prompt in a --prompts file takes the same path as many: JSONL stays JSONL, a text file's
  // prompt is echoed (as --prompt's is).
  io::write_file_atomic(dir + "/one.jsonl", "{\"prompt\": \"hello\"}\n");
  r = run("generate --checkpoint " + ckpt() + " --prompts " + dir + "/one.jsonl -n 6 --temperature 0.9 --seed 4 --quiet");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j1 = nlohmann::json::parse(r.out);
  EXPECT_EQ(j1["prompt"], "hello");
  EXPECT_EQ(j1["tokens"].size(), 6u);
  std::string bytes;  // the byte tokenizer: each id is a byte (the completion replaces invalid UTF-8)
  for (int t : j1["tokens"]) bytes += (char)t;
  EXPECT_EQ("hello" + bytes + "\n", one.out);
  io::write_file_atomic(dir + "/one.txt", "hello\n");
  r = run("generate --checkpoint " + ckpt() + " --prompts " + dir + "/one.txt -n 6 --temperature 0.9 --seed 4 --quiet");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out, one.out);
  const std::string bad = "{\"prompt\": \"hi\"}\n{\"prompt\": 3}\n";
  io::write_file_atomic(dir + "/bad.jsonl", bad.data(), bad.size());
  r = run("generate --checkpoint " + ckpt() + " --prompts " + dir + "/bad.jsonl");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("bad.jsonl line 2"), std::string::npos) << r.out;
  io::write_file_atomic(dir + "/empty.txt", "\n\n", 2);
  r = run("generate --checkpoint " + ckpt() + " --prompts " + dir + "/empty.txt");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("holds no prompts"), std::string::npos) << r.out;
  r = run("generate --checkpoint " + ckpt() + " --prompts " + dir + "/p.txt --prompt hi");
  EXPECT_EQ(r.code, 2) << r.out;
  // a bf16 KV cache: the batch still gives each sequence its own decoding (with that cache)
  r = run("generate --checkpoint " + ckpt() + " --prompts " + dir + "/p.txt -n 6 --temperature 0.9 --seed 3 --batch 2 --kv-cache bf16");
  ASSERT_EQ(r.code, 0) << r.out;
  one = run("generate --checkpoint " + ckpt() + " --prompt hello -n 6 --temperature 0.9 --seed 4 --quiet --kv-cache bf16");
  ASSERT_EQ(one.code, 0) << one.out;
  EXPECT_NE(r.out.find("---------------\n" + one.out), std::string::npos) << r.out << "\n" << one.out;
  // and an int8 one
  r = run("generate --checkpoint " + ckpt() + " --prompts " + dir + "/p.txt -n 6 --temperature 0.9 --seed 3 --batch 2 --kv-cache int8");
  ASSERT_EQ(r.code, 0) << r.out;
  one = run("generate --checkpoint " + ckpt() + " --prompt hello -n 6 --temperature 0.9 --seed 4 --quiet --kv-cache int8");
  ASSERT_EQ(one.code, 0) << one.out;
  EXPECT_NE(r.out.find("---------------\n" + one.out), std::string::npos) << r.out << "\n" << one.out;
  r = run("generate --checkpoint " + ckpt() + " --prompt hi --kv-cache fp16");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("kv-cache"), std::string::npos) << r.out;
}

// quantize writes a checkpoint that eval, generate and info read as it is; its errors name the
// problem (a quantized input, a directory as --out, an unknown format).
TEST_F(Cli, Quantize) {
  const std::string q = dir + "/model.q8_0.safetensors";
  CmdResult r = run("quantize --checkpoint " + ckpt() + " --format q8_0 --out " + q);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("as q8_0 (rtn)"), std::string::npos) << r.out;
  r = run("eval --checkpoint " + q + " --data " + dir + "/val.txt --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const double lq = nlohmann::json::parse(r.out)["loss"].get<double>();
  r = run("eval --checkpoint " + ckpt() + " --data " + dir + "/val.txt --json");
  const double l = nlohmann::json::parse(r.out)["loss"].get<double>();
  EXPECT_NEAR(lq, l, 0.01 * l);
  EXPECT_NE(lq, l);
  r = run("generate --checkpoint " + q + " --prompt hi -n 5 --quiet");
  EXPECT_EQ(r.code, 0) << r.out;
  r = run("info --checkpoint " + q + " --no-measure --json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["weights"], "q8_0");
  // q4_k by GPTQ: eval reads it, its loss near fp32's
  const std::string qk = dir + "/model.q4_k.safetensors";
  r = run("quantize --checkpoint " + ckpt() + " --format q4_k --method gptq --calib " + dir + "/val.txt --out " + qk);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("as q4_k (gptq)"), std::string::npos) << r.out;
  r = run("eval --checkpoint " + qk + " --data " + dir + "/val.txt --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const double lk = nlohmann::json::parse(r.out)["loss"].get<double>();
  EXPECT_NEAR(lk, l, 0.05 * l);
  r = run("quantize --checkpoint " + q + " --format q4_0 --out " + dir + "/again.safetensors");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("already q8_0"), std::string::npos) << r.out;
  r = run("quantize --checkpoint " + ckpt() + " --format q4_0 --out " + dir);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("is a directory"), std::string::npos) << r.out;
  EXPECT_EQ(run("quantize --checkpoint " + ckpt() + " --format q3 --out " + dir + "/x.safetensors").code, 2);
  r = run("eval --checkpoint " + ckpt() + " --data " + dir + "/val.txt --weights q5");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("unknown weight format 'q5'"), std::string::npos) << r.out;
}

// generate --speculative K --draft-depth r prints what greedy decoding prints, with the acceptance
// line; the two flags go together; greedy generation of 1000 tokens or more drafts by default (auto).
TEST_F(Cli, GenerateSpeculative) {
  CmdResult plain = run("generate --checkpoint " + ckpt() + " --prompt hi -n 20 --temperature 0 --quiet");
  CmdResult spec = run("generate --checkpoint " + ckpt() + " --prompt hi -n 20 --speculative 2 --draft-depth 1 --quiet");
  ASSERT_EQ(plain.code, 0) << plain.out;
  ASSERT_EQ(spec.code, 0) << spec.out;
  EXPECT_EQ(spec.out, plain.out);
  CmdResult r = run("generate --checkpoint " + ckpt() + " --prompt hi -n 20 --speculative 2 --draft-depth 2");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("speculative: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("accepted"), std::string::npos) << r.out;
  EXPECT_EQ(run("generate --checkpoint " + ckpt() + " --prompt hi --speculative 2").code, 2);
  r = run("generate --checkpoint " + ckpt() + " --prompt hi --speculative 2 --draft-depth 3");  // = R
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--draft-depth must be from 1"), std::string::npos) << r.out;
  // auto: the same text, and the line that says what ran and why
  r = run("generate --checkpoint " + ckpt() + " --prompt hi -n 20 --speculative auto");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.substr(0, plain.out.size()), plain.out);
  EXPECT_NE(r.out.find("speculative auto: "), std::string::npos) << r.out;
  EXPECT_EQ(plain.out.find("speculative"), std::string::npos) << plain.out;  // --quiet
  EXPECT_EQ(run("generate --checkpoint " + ckpt() + " --prompt hi -n 20 --temperature 0").out.find("speculative auto"), std::string::npos)
      << "greedy under 1000 tokens decodes plainly unless auto is asked for";
  // greedy from 1000 tokens: auto by default (the same text), --speculative 0 turns it off
  const CmdResult long_plain = run("generate --checkpoint " + ckpt() + " --prompt hi -n 1000 --temperature 0 --speculative 0 --quiet");
  ASSERT_EQ(long_plain.code, 0) << long_plain.out;
  EXPECT_EQ(run("generate --checkpoint " + ckpt() + " --prompt hi -n 1000 --temperature 0 --quiet").out, long_plain.out);
  r = run("generate --checkpoint " + ckpt() + " --prompt hi -n 1000 --temperature 0");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("speculative auto: "), std::string::npos) << r.out;
  EXPECT_EQ(run("generate --checkpoint " + ckpt() + " --prompt hi -n 1000 --temperature 0 --speculative 0").out.find("speculative"),
            std::string::npos);
  r = run("generate --checkpoint " + ckpt() + " --prompt hi --speculative auto --draft-depth 1");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("chooses the draft depth"), std::string::npos) << r.out;
  r = run("generate --checkpoint " + ckpt() + " --prompt hi --speculative fast --draft-depth 1");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--speculative takes K"), std::string::npos) << r.out;
}

TEST_F(Cli, HugeIntegerIsRejectedNotNarrowed) {
  // 4294967424 = 2^32 + 128 would read as 128 after a 32-bit narrowing.
  CmdResult r = run("train --preset looped --set d_model=4294967424 --out " + dir + "/run");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("from 1 to 65536"), std::string::npos) << r.out;
  r = run("train --preset looped --config " + dir + "/none.json --out " + dir + "/run");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--preset and --config"), std::string::npos) << r.out;
}

TEST_F(Cli, HelpConfigListsEveryKey) {
  CmdResult r = run("train --help-config");
  ASSERT_EQ(r.code, 0) << r.out;
  for (const std::string& k : Config::keys()) EXPECT_NE(r.out.find("  " + k + " = "), std::string::npos) << k;
  EXPECT_NE(r.out.find("pre_norm, parallel, sandwich"), std::string::npos) << r.out;
}

// --set on --resume: the keys that are safe to change apply, any other is refused with a message;
// the end-of-training report covers eval_batches x batch_size windows and says so.
TEST_F(Cli, ResumeWithSetAndBoundedReport) {
  const std::string text = verse(400);
  io::write_file_atomic(dir + "/train.txt", text.data(), text.size());
  io::write_file_atomic(dir + "/bigval.txt", text.data(), text.size());  // 22,000 tokens
  const std::string args = "train --preset looped --set d_model=32 --set n_heads=2 --set context=16 --set batch_size=4"
                           " --set data_train=" + dir + "/train.txt --set data_val=" + dir + "/bigval.txt"
                           " --set eval_every=2 --set eval_batches=2 --sample-len 5 --out " + dir + "/run";
  CmdResult r = run(args + " --steps 4 --stop-after 2");
  ASSERT_EQ(r.code, 0) << r.out;
  r = run("train --out " + dir + "/run --resume --set d_model=64 --steps 4");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("d_model"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("may change on --resume"), std::string::npos) << r.out;
  r = run("train --out " + dir + "/run --resume --set lr=0.0005 --steps 4");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("lr=0.0005"), std::string::npos) << r.out;  // the config block shows it
  EXPECT_NE(r.out.find("resumed " + dir + "/run at step 2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("validation: 128 tokens, the first 8 windows"), std::string::npos) << r.out;
  EXPECT_EQ(nlohmann::json::parse(io::read_file(dir + "/run/config.json"))["lr"].get<double>(), 0.0005);
}

// A run directory is never lost by accident; --resume says what it does; the last K checkpoints
// and the best one are kept.
TEST_F(Cli, RunDirectoriesAreSafe) {
  const std::string text = verse(400);
  io::write_file_atomic(dir + "/train.txt", text.data(), text.size());
  const std::string args = "train --preset looped --set d_model=32 --set n_heads=2 --set context=16 --set batch_size=4"
                           " --set data_train=" + dir + "/train.txt --set data_val=" + dir + "/val.txt"
                           " --set eval_every=1 --set eval_batches=1 --set keep_checkpoints=2 --sample-len 0 --out " +
                           dir + "/run";
  CmdResult r = run(args + " --resume --steps 4");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("no checkpoint in " + dir + "/run, starting a new run"), std::string::npos) << r.out;
  // Four checkpoints written, the last two kept; the best by validation loss beside them.
  std::vector<std::string> kept;
  for (auto& e : fs::directory_iterator(dir + "/run/checkpoints")) kept.push_back(e.path().filename().string());
  std::sort(kept.begin(), kept.end());
  EXPECT_EQ(kept, (std::vector<std::string>{"model_step00000003.safetensors", "model_step00000004.safetensors",
                                            "train_state_step00000004.safetensors"}));
  EXPECT_TRUE(fs::exists(dir + "/run/model.best.safetensors"));
  const std::string before = io::read_file(dir + "/run/model.safetensors");

  r = run(args + " --steps 4");  // neither --resume nor --overwrite: refused, nothing touched
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("already holds a run (checkpoint at step 4)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--overwrite"), std::string::npos) << r.out;
  EXPECT_TRUE(io::read_file(dir + "/run/model.safetensors") == before);

  r = run(args + " --steps 4 --resume");  // finished: says so (and prints the report)
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("is complete: step 4 of 4"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("early-exit table"), std::string::npos) << r.out;
  r = run(args + " --steps 6 --resume");  // a larger --steps extends it
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("resumed " + dir + "/run at step 4"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("step 6/6"), std::string::npos) << r.out;

  r = run(args + " --steps 2 --overwrite");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("removed the previous run"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir + "/run/checkpoints/model_step00000006.safetensors"));
  EXPECT_TRUE(fs::exists(dir + "/run/checkpoints/model_step00000002.safetensors"));
  r = run(args + " --resume --overwrite");
  EXPECT_EQ(r.code, 2) << r.out;
}

// Ctrl-C during eval and during train's end-of-training report: the process ends at once (by the
// signal, as usual) and says what that means.
TEST_F(Cli, InterruptEvalAndReportPromptly) {
  const std::string text = verse(40000);
  io::write_file_atomic(dir + "/big.txt", text.data(), text.size());  // 2.2 MB: seconds of eval
  Interrupted e = interrupt_when("eval --checkpoint " + ckpt() + " --data " + dir + "/big.txt --progress on", "windows,");
  ASSERT_TRUE(e.signalled) << e.out;
  EXPECT_TRUE(WIFSIGNALED(e.status) && WTERMSIG(e.status) == SIGINT) << e.out;
  EXPECT_LT(e.seconds_to_exit, 5.0);
  EXPECT_NE(e.out.find("looplm eval: interrupted (nothing was written)"), std::string::npos) << e.out;

  io::write_file_atomic(dir + "/train.txt", text.data(), 30000);
  Interrupted t = interrupt_when("train --preset looped --set d_model=32 --set n_heads=2 --set context=16 --set batch_size=4"
                                 " --set data_train=" + dir + "/train.txt --set data_val=" + dir + "/val.txt"
                                 " --set eval_batches=1 --steps 2 --sample-len 100000000 --out " + dir + "/run",
                                 "sample (temperature");
  ASSERT_TRUE(t.signalled) << t.out;
  EXPECT_TRUE(WIFSIGNALED(t.status) && WTERMSIG(t.status) == SIGINT) << t.out;
  EXPECT_LT(t.seconds_to_exit, 5.0);
  EXPECT_NE(t.out.find("interrupted during the end-of-training report; the run in " + dir + "/run is complete and saved (step 2)"),
            std::string::npos) << t.out;
}

TEST_F(Cli, EvalDefaultsToTheCheckpointsValidationData) {
  // The fixture's checkpoint names data/kjv/val.txt (the default), which may not exist here: save
  // one whose data_val is the fixture's file.
  Config c;
  c.d_model = 16;
  c.n_heads = 2;
  c.context = 8;
  c.n_core = 1;
  c.data_val = dir + "/val.txt";
  Model m(c);
  m.init_weights(2);
  save_model(dir + "/m2.safetensors", m);
  CmdResult r = run("eval --checkpoint " + dir + "/m2.safetensors --json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["tokens"].get<int>(), (260 - 1) / 8 * 8);
}

// Loading checks values: a NaN tensor is named (exit 1) unless --allow-nonfinite, and eval never
// exits 0 with a loss that is not finite.
TEST_F(Cli, NonFiniteCheckpoints) {
  auto f = io::SafetensorsFile::open(ckpt());
  std::vector<std::vector<float>> keep;
  std::vector<io::TensorRef> t;
  for (auto& n : f.names()) {
    keep.push_back(f.read_f32(n, f.get(n).shape));
    if (n == "core.0.mlp.up.weight") keep.back()[5] = std::nanf("");
    t.push_back({n, io::DType::F32, f.get(n).shape, keep.back().data()});
  }
  io::write_safetensors(dir + "/nan.safetensors", t, f.metadata());
  CmdResult r = run("eval --checkpoint " + dir + "/nan.safetensors --data " + dir + "/val.txt");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("tensor 'core.0.mlp.up.weight' holds NaN"), std::string::npos) << r.out;
  r = run("eval --checkpoint " + dir + "/nan.safetensors --data " + dir + "/val.txt --allow-nonfinite --json");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("the loss is not finite"), std::string::npos) << r.out;
  r = run("generate --checkpoint " + dir + "/nan.safetensors --prompt hi");
  EXPECT_EQ(r.code, 1) << r.out;
  // Loaded anyway, generate refuses the logits as eval refuses the loss, on every path (sampled,
  // greedy, batched, speculative), instead of sampling from NaN.
  io::write_file_atomic(dir + "/two.txt", "hello\nworld\n");
  for (const std::string& how : {std::string(" -p hello"), std::string(" -p hello --temperature 0"),
                                 " --prompts " + dir + "/two.txt", std::string(" -p hello --speculative 2 --draft-depth 1")}) {
    r = run("generate --checkpoint " + dir + "/nan.safetensors --allow-nonfinite -n 4" + how);
    EXPECT_EQ(r.code, 1) << how << "\n" << r.out;
    EXPECT_NE(r.out.find("the model's next-token logits are not finite (NaN"), std::string::npos) << how << "\n" << r.out;
  }
  // quantize --allow-nonfinite keeps the NaN (its block's scale is NaN), so the quantized file is
  // refused as the fp32 one is, not loaded as finite, wrong weights
  for (const char* fmt : {"q8_0", "q4_0", "q4_k"}) {
    const std::string q = dir + "/nan." + fmt + ".safetensors";
    r = run("quantize --checkpoint " + dir + "/nan.safetensors --format " + fmt + " --allow-nonfinite --out " + q);
    ASSERT_EQ(r.code, 0) << fmt << r.out;
    r = run("eval --checkpoint " + q + " --data " + dir + "/val.txt");
    EXPECT_EQ(r.code, 1) << fmt << r.out;
    EXPECT_NE(r.out.find("NaN"), std::string::npos) << fmt << r.out;
  }
}

// The char tokenizer end to end: `looplm data --tokenizer char` writes the alphabet beside the
// shard, train and eval pick it up; a shard of another tokenizer is an error, not a number.
TEST_F(Cli, CharTokenizerShardsEndToEnd) {
  std::string text;
  for (int i = 0; i < 300; ++i) text += "And God said, Let there be light: and there was light. ";
  io::write_file_atomic(dir + "/t.txt", text.data(), text.size());
  io::write_file_atomic(dir + "/v.txt", text.data(), 3000);
  ASSERT_EQ(run("data --input " + dir + "/t.txt --tokenizer char --out " + dir + "/t.bin").code, 0);
  ASSERT_TRUE(fs::exists(dir + "/t.bin.chars"));
  ASSERT_EQ(run("data --input " + dir + "/v.txt --alphabet " + dir + "/t.bin.chars --out " + dir + "/v.bin").code, 0);
  ASSERT_EQ(run("data --input " + dir + "/v.txt --out " + dir + "/vb.bin").code, 0);  // a byte shard
  const std::string args = "train --preset looped --set d_model=32 --set n_heads=2 --set context=16 --set batch_size=4"
                           " --set eval_batches=1 --sample-len 0 --steps 2 --set tokenizer=char";
  CmdResult r = run(args + " --set data_train=" + dir + "/t.bin --set data_val=" + dir + "/v.bin --out " + dir + "/run");
  ASSERT_EQ(r.code, 0) << r.out;
  r = run("eval --checkpoint " + dir + "/run --data " + dir + "/v.bin --json");
  ASSERT_EQ(r.code, 0) << r.out;
  r = run("eval --checkpoint " + dir + "/run --data " + dir + "/vb.bin");  // char model, byte shard
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("not written by a char tokenizer"), std::string::npos) << r.out;
  r = run("eval --checkpoint " + ckpt() + " --data " + dir + "/v.bin");  // byte model, char shard
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("written by a char tokenizer"), std::string::npos) << r.out;
}

TEST_F(Cli, MessagesAPersonCanRead) {
  CmdResult r = run("generate --checkpoint " + ckpt() + " --prompt x --max-new -1");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("must be at least 0, got -1"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("1797693"), std::string::npos) << r.out;  // no DBL_MAX in full
  r = run("generate --checkpoint " + ckpt() + " --prompt x --top-p 0");
  EXPECT_NE(r.out.find("greater than 0 and at most 1"), std::string::npos) << r.out;
  r = run("train --config " + dir + " --out " + dir + "/run");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("is a directory"), std::string::npos) << r.out;
  io::write_file_atomic(dir + "/bad.jsonl", std::string("{\"text\": \"a\"\n"));
  r = run("data --input " + dir + "/bad.jsonl --out " + dir + "/b.bin");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("bad.jsonl:1"), std::string::npos) << r.out;  // names the file and line
  EXPECT_EQ(r.out.find("json.exception"), std::string::npos) << r.out;
  r = run("eval --checkpoint " + ckpt() + " --data " + dir);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("Is a directory"), std::string::npos) << r.out;
  // A prompt longer than the context (8) is cut with a warning.
  r = run("generate --checkpoint " + ckpt() + " --prompt 0123456789abc --max-new 2 --temperature 0");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("the prompt has 13 tokens and the context holds 8: the first 5 are not seen"), std::string::npos) << r.out;
}

// What users of llama.cpp and nanoGPT expect: --version, short flags, the prompt from a file or
// standard input, several samples, a timing summary; train's --print-config and richer metrics;
// the loss plot.
TEST_F(Cli, FamiliarFlagsAndOutputs) {
  CmdResult r = run("--version");
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out.rfind(std::string("looplm ") + kVersion, 0), 0u) << r.out;
  EXPECT_NE(r.out.find("\nCPU features used: "), std::string::npos) << r.out;
  // built from a git clone (and git at hand): the commit it was built at (the binary may be older
  // than the tree's last commit when the test runs without a build, so only the form is checked)
  if (run_shell(std::string("git -C ") + LOOPLM_SOURCE_DIR + " rev-parse HEAD").code == 0) {
    EXPECT_TRUE(std::regex_search(r.out, std::regex("^looplm [0-9.]+ \\(git [0-9a-f]{12}(-dirty)?\\)\n"))) << r.out;
  }
  io::write_file_atomic(dir + "/prompt.txt", std::string("hello"));
  r = run("generate --checkpoint " + ckpt() + " --prompt-file " + dir + "/prompt.txt -n 4 -t 1 --num-samples 2 --temperature 0");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.rfind("hello", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("---------------\nhello"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("prompt: 10 tokens in"), std::string::npos) << r.out;  // two samples of 5
  EXPECT_NE(r.out.find("generation: 8 tokens in"), std::string::npos) << r.out;
  r = run("generate --checkpoint " + ckpt() + " --prompt-file - -n 2 --seed 1 < " + dir + "/prompt.txt");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.rfind("hello", 0), 0u) << r.out;
  r = run("generate --checkpoint " + ckpt());
  EXPECT_EQ(r.code, 2) << r.out;

  r = run("train --preset gpt --set R=3 --print-config");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["R"].get<int>(), 3);
  r = run("train --help");
  EXPECT_NE(r.out.find("Presets: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("docs/config.md"), std::string::npos) << r.out;

  const std::string text = verse(400);
  io::write_file_atomic(dir + "/train.txt", text.data(), text.size());
  r = run("train --preset looped --set d_model=32 --set n_heads=2 --set context=16 --set batch_size=4 --set eval_every=2"
          " --set eval_batches=1 --set data_train=" + dir + "/train.txt --set data_val=" + dir + "/val.txt"
          " --steps 4 --sample-len 0 --out " + dir + "/run");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("| MFU "), std::string::npos) << r.out;
  std::ifstream m(dir + "/run/metrics.jsonl");
  int train_rows = 0, val_rows = 0;
  for (std::string line; std::getline(m, line);) {
    auto j = nlohmann::json::parse(line);
    if (j["split"] == "train") {
      ++train_rows;
      EXPECT_TRUE(j.contains("elapsed_s") && j.contains("tokens_seen") && j.contains("mfu")) << line;
      EXPECT_EQ(j["tokens_seen"].get<double>(), 64.0 * train_rows);
    } else if (j["split"] == "val") {
      ++val_rows;
    }
  }
  EXPECT_EQ(train_rows, 4);
  EXPECT_EQ(val_rows, 2);
  if (std::system("command -v gnuplot >/dev/null") != 0) GTEST_SKIP() << "gnuplot not installed (scripts/install_deps.sh --test)";
  r = run_shell(std::string(LOOPLM_SOURCE_DIR) + "/scripts/plot_metrics.sh " + dir + "/run");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string png = io::read_file(dir + "/run/loss.png");
  EXPECT_EQ(png.substr(1, 3), "PNG");
}

// bench: repetitions with mean ± stddev, prompt processing and generation as their own rows, a
// markdown table by default, --json and --csv.
TEST_F(Cli, BenchFormats) {
  const std::string args = "bench --preset bench-tiny --set d_model=32 --set n_heads=2 --steps 1 -r 2 -n 4 -p 8 -t 1";
  CmdResult r = run(args);
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* row : {"| train (", "| prompt processing pp8 fp32 |", "| generation tg4 bf16 |", " ± "})
    EXPECT_NE(r.out.find(row), std::string::npos) << row << "\n" << r.out;
  // meanwhile, a line per metric as it is measured (stderr)
  EXPECT_NE(r.out.find("bench: generation tg4 bf16: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(repetition 2 of 2)"), std::string::npos) << r.out;
  r = run(args + " --csv");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.rfind("metric,mean,stddev\n", 0), 0u) << r.out;
  r = run(args + " --json");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["repetitions"].get<int>(), 2);
  EXPECT_GT(j["prompt_tokens_per_s"].get<double>(), 0);
  EXPECT_GT(j["decode_bf16_tokens_per_s"].get<double>(), 0);
  EXPECT_TRUE(j.contains("train_tokens_per_s_stddev"));
  EXPECT_GT(j["eval_tokens_per_s"].get<double>(), 0);
  EXPECT_GT(j["quantize_tokens_per_s"].get<double>(), 0);
  EXPECT_FALSE(j.contains("decode_speculative_tokens_per_s"));  // R = 1: no loop to draft from
  // A fixed count of 2 or more threads waits with a short spin (tools/wait_policy.cpp); the
  // adaptive default keeps OpenMP's own, and a user's own choice is kept.
  EXPECT_EQ(j["threads_mode"].get<std::string>(), "1");  // one thread never waits for another
  const std::string adaptive = "bench --preset bench-tiny --set d_model=32 --set n_heads=2 --steps 1 -r 1 -n 2 -p 4 --json";
  r = run(adaptive);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["threads_mode"].get<std::string>().find("GOMP"), std::string::npos) << r.out;
  r = run(adaptive + " -t 2");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["threads_mode"].get<std::string>(), "2, GOMP_SPINCOUNT=1000") << r.out;
  r = run_shell("GOMP_SPINCOUNT=5 " + std::string(LOOPLM_BINARY) + " " + adaptive + " --threads=2 2>&1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(nlohmann::json::parse(r.out)["threads_mode"].get<std::string>().find("GOMP_SPINCOUNT=5"), std::string::npos) << r.out;
  EXPECT_EQ(run(args + " --json --csv").code, 2);
}

// looplm info: the layout, parameter and FLOP counts as the components declare them, and the
// dense controls of a looped config (RecurrentGPT's 4 unique blocks at R = 4 cost about what 12
// dense blocks do: the iso-FLOP pairing of docs/systems.md, RecurrentGPT, at ~1/3 of the parameters).
TEST_F(Cli, InfoReportsLayoutFlopsAndDenseControls) {
  CmdResult r = run("info --preset recurrent_gpt --json");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  const Config c = load_preset("recurrent_gpt");
  int64_t params = 0;
  for (const ParamInfo& p : Model::layout(c)) params += (int64_t)p.numel;
  EXPECT_EQ(j["params"].get<int64_t>(), params);
  EXPECT_EQ(j["params_non_embedding"].get<int64_t>() + j["params_embedding"].get<int64_t>(), params);
  EXPECT_EQ(j["unrolled_depth"].get<int>(), 10);
  const double d = c.d_model;
  const auto& f = j["flops_per_token_parts"];
  EXPECT_DOUBLE_EQ(f["rule_per_step"].get<double>(), 10 * d * d);  // W_proj and f_g: 10d² (docs/systems.md)
  // one pre_norm block: 2·(4d² + 8d²) multiply-adds plus attention over T/2 keys
  EXPECT_DOUBLE_EQ(f["prelude"].get<double>(), 24 * d * d + 2.0 * c.context * d);
  const double infer = f["prelude"].get<double>() + c.R * (f["core_per_step"].get<double>() + f["rule_per_step"].get<double>()) +
                       f["coda"].get<double>() + f["head"].get<double>();
  EXPECT_DOUBLE_EQ(j["infer_flops_per_token"].get<double>(), infer);
  EXPECT_DOUBLE_EQ(j["train_flops_per_token"].get<double>(), 3 * infer);
  EXPECT_EQ(j["iso_flop_dense"]["n_core"].get<int>(), 12);
  EXPECT_EQ(j["iso_param_dense"]["n_core"].get<int>(), 4);
  EXPECT_NEAR((double)j["params_non_embedding"].get<int64_t>() / j["iso_flop_dense"]["params_non_embedding"].get<int64_t>(), 0.37, 0.02);
  EXPECT_GT(j["activation_bytes_per_token"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(j["kv_cache_bytes_per_token"].get<double>(), 2 * d * 4 * 10);

  r = run("info --checkpoint " + ckpt());  // a checkpoint's config, as text
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("layout: 0 + 1 x 3 + 0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("iso-FLOP:  n_core = 3"), std::string::npos) << r.out;
  EXPECT_EQ(run("info --preset nope").code, 2);
  EXPECT_EQ(run("info --preset gpt --checkpoint " + ckpt()).code, 2);
  EXPECT_EQ(run("info --checkpoint " + dir + "/missing.safetensors").code, 1);
}
