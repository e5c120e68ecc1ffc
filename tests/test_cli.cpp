// The looplm binary end to end: bad input gets a clear message and exit code 1 (runtime) or
// 2 (usage), never a crash; eval --json prints the loss at every exit.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "train/checkpoint.h"

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

TEST_F(Cli, GenerateGreedyIsDeterministic) {
  CmdResult a = run("generate --checkpoint " + ckpt() + " --prompt hi --max-new 12 --temperature 0");
  CmdResult b = run("generate --checkpoint " + ckpt() + " --prompt hi --max-new 12 --temperature 0");
  ASSERT_EQ(a.code, 0) << a.out;
  EXPECT_EQ(a.out, b.out);
  CmdResult c = run("generate --checkpoint " + ckpt() + " --prompt hi --max-new 12 --temperature 0 --weights bf16");
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
  r = run("eval --checkpoint " + ckpt() + " --data " + dir + "/val.txt --depth 0");
  EXPECT_EQ(r.code, 2) << r.out;
  r = run("frobnicate");
  EXPECT_EQ(r.code, 2) << r.out;
  r = run("eval --checkpoint " + dir + "/missing.safetensors --data " + dir + "/val.txt");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("missing.safetensors"), std::string::npos) << r.out;
}
