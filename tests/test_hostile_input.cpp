// Crafted input through the looplm binary, as a fault-injection run tried it: checkpoints whose
// header or metadata lie (a format without a byte layout, JSON nested 80,000 levels deep, keys
// given twice, packed lists that point at the wrong bytes or multiply past 64 bits, a config the
// tokenizer cannot serve), configs and flags the same way. Every case is a clean error with exit 1
// (a damaged file) or 2 (a bad command line or config), never a crash, and no message carries a
// library's exception prefix or an unbounded value.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>

#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "model/model_io.h"
#include "test_util.h"

using namespace looplm;
namespace fs = std::filesystem;

namespace {

using looplm::test::CmdResult;

// `looplm ARGS` with `env` before it (VAR=value ...); raw: ARGS is a whole shell command.
CmdResult run(const std::string& args, const std::string& env = "", bool raw = false) {
  return looplm::test::run_shell(raw ? args : env + std::string(LOOPLM_BINARY) + " " + args);
}

// The small model of these tests (seed: its weights), written to `path`.
void save_small_model(const std::string& path, uint64_t seed) {
  Config c;
  c.d_model = 32;
  c.n_heads = 2;
  c.context = 8;
  c.n_core = 1;
  c.R = 2;
  Model m(c);
  m.init_weights(seed);
  save_model(path, m);
}

std::string deep(size_t levels) { return std::string(levels, '[') + std::string(levels, ']'); }

// A safetensors file with its header text replaced by f(header) (the data section kept).
void rewrite_header(const std::string& from, const std::string& to, const std::function<std::string(std::string)>& f) {
  const std::string b = io::read_file(from);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= (uint64_t)(unsigned char)b[i] << (8 * i);
  const std::string h = f(b.substr(8, n));
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = (char)((uint64_t)h.size() >> (8 * i));
  io::write_file_atomic(to, out + h + b.substr(8 + n));
}

// The same with the header parsed, changed and printed again.
void rewrite_json(const std::string& from, const std::string& to, const std::function<void(nlohmann::ordered_json&)>& f) {
  rewrite_header(from, to, [&](std::string h) {
    auto j = nlohmann::ordered_json::parse(h);
    f(j);
    return j.dump();
  });
}

class Hostile : public ::testing::Test {
 protected:
  std::string dir;
  void SetUp() override {
    dir = (fs::temp_directory_path() / ("looplm_test_hostile_" + std::to_string(::getpid()))).string();
    fs::remove_all(dir);
    fs::create_directories(dir);
    save_small_model(dir + "/model.safetensors", 1);
    std::string text;
    for (int i = 0; i < 40; ++i) text += "hello world, ";
    io::write_file_atomic(dir + "/val.txt", text);
  }
  void TearDown() override { fs::remove_all(dir); }
  std::string ckpt() const { return dir + "/model.safetensors"; }

  // `file` through every command that reads a checkpoint: each exits `code` and says `says`.
  void every_reader(const std::string& file, int code, const std::string& says) {
    for (const std::string& cmd : {"eval --checkpoint " + file + " --data " + dir + "/val.txt",
                                   "generate --checkpoint " + file + " -p hello -n 4",
                                   "info --checkpoint " + file + " --no-measure",
                                   "quantize --checkpoint " + file + " --format q8_0 --out " + dir + "/q.safetensors"}) {
      CmdResult r = run(cmd);
      EXPECT_EQ(r.code, code) << cmd << "\n" << r.out.substr(0, 2000);
      EXPECT_NE(r.out.find(says), std::string::npos) << cmd << "\n" << r.out.substr(0, 2000);
      EXPECT_EQ(r.out.find("[json.exception"), std::string::npos) << cmd << "\n" << r.out.substr(0, 2000);
      EXPECT_LT(r.out.size(), 4000u) << cmd << ": a message must stay short";
    }
  }
};

}  // namespace

TEST_F(Hostile, AFormatWithoutAByteLayoutIsRefused) {
  rewrite_json(ckpt(), dir + "/bf16.safetensors", [](auto& j) {
    j["__metadata__"]["weights"] = "bf16";
    j["__metadata__"]["packed"] = "[]";
  });
  every_reader(dir + "/bf16.safetensors", 1, "metadata 'weights' is 'bf16', not a format a checkpoint holds");
  rewrite_json(ckpt(), dir + "/odd.safetensors", [](auto& j) { j["__metadata__"]["weights"] = std::string(5000, 'q'); });
  every_reader(dir + "/odd.safetensors", 1, "not a format a checkpoint holds");
}

TEST_F(Hostile, DeepJsonAnywhereIsRefusedNotOverflowed) {
  // In the header itself, in the config metadata, in a config file, a --set value, a prompts
  // file and a JSONL data file.
  rewrite_header(ckpt(), dir + "/deep_header.safetensors", [](std::string h) {
    return h.substr(0, h.size() - 1) + ",\"x\":" + deep(80000) + "}";
  });
  every_reader(dir + "/deep_header.safetensors", 1, "header nests JSON deeper than 64 levels");
  rewrite_json(ckpt(), dir + "/deep_config.safetensors", [](auto& j) {
    j["__metadata__"]["config"] = "{\"R\": " + deep(80000) + "}";
  });
  every_reader(dir + "/deep_config.safetensors", 1, "nests JSON deeper than 64 levels");

  io::write_file_atomic(dir + "/deep.json", "{\"R\": " + deep(80000) + "}");
  for (const std::string& cmd : {"train --config " + dir + "/deep.json --out " + dir + "/run",
                                 "info --config " + dir + "/deep.json", "bench --config " + dir + "/deep.json"}) {
    CmdResult r = run(cmd);
    EXPECT_EQ(r.code, 2) << cmd << "\n" << r.out.substr(0, 2000);
    EXPECT_NE(r.out.find("nests JSON deeper than 64 levels"), std::string::npos) << cmd << "\n" << r.out.substr(0, 2000);
  }
  CmdResult r = run("info --set R=" + deep(20000));
  EXPECT_EQ(r.code, 2) << r.out.substr(0, 2000);
  EXPECT_LT(r.out.size(), 1000u);

  io::write_file_atomic(dir + "/p.jsonl", "{\"prompt\": " + deep(80000) + "}\n");
  r = run("generate --checkpoint " + ckpt() + " --prompts " + dir + "/p.jsonl -n 2");
  EXPECT_EQ(r.code, 2) << r.out.substr(0, 2000);
  EXPECT_NE(r.out.find("nests JSON deeper"), std::string::npos) << r.out.substr(0, 2000);
  io::write_file_atomic(dir + "/d.jsonl", "{\"text\": " + deep(80000) + "}\n");
  r = run("eval --checkpoint " + ckpt() + " --data " + dir + "/d.jsonl");
  EXPECT_EQ(r.code, 1) << r.out.substr(0, 2000);
  EXPECT_NE(r.out.find("nests JSON deeper"), std::string::npos) << r.out.substr(0, 2000);
}

TEST_F(Hostile, KeysGivenTwiceAreRefusedAtEveryLevel) {
  rewrite_header(ckpt(), dir + "/dup_meta.safetensors", [](std::string h) {
    const size_t at = h.find("\"__metadata__\":{") + 16;
    return h.substr(0, at) + "\"format\":\"pt\"," + h.substr(at);
  });
  every_reader(dir + "/dup_meta.safetensors", 1, "names the key 'format' twice");
  rewrite_header(ckpt(), dir + "/dup_entry.safetensors", [](std::string h) {
    const size_t at = h.find("\"dtype\":\"F32\"");
    return h.substr(0, at) + "\"dtype\":\"F64\"," + h.substr(at);
  });
  every_reader(dir + "/dup_entry.safetensors", 1, "names the key 'dtype' twice");
  io::write_file_atomic(dir + "/dup.json", "{\"R\": 2, \"R\": 3}");
  CmdResult r = run("info --config " + dir + "/dup.json");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("names the key 'R' twice"), std::string::npos) << r.out;
}

TEST_F(Hostile, PackedListsAreCheckedAgainstTheirTensors) {
  CmdResult q = run("quantize --checkpoint " + ckpt() + " --format q8_0 --out " + dir + "/q8.safetensors");
  ASSERT_EQ(q.code, 0) << q.out;
  auto packed_list = [&](const std::function<void(nlohmann::json&)>& f, const std::string& name) {
    rewrite_json(dir + "/q8.safetensors", dir + "/" + name, [&](auto& j) {
      auto p = nlohmann::json::parse(j["__metadata__"]["packed"].template get<std::string>());
      f(p);
      j["__metadata__"]["packed"] = p.dump();
    });
    return dir + "/" + name;
  };
  // Two entries swap their tensors: each would read the other's bytes.
  every_reader(packed_list([](nlohmann::json& p) { std::swap(p[0]["tensor"], p[1]["tensor"]); }, "swapped.safetensors"), 1,
               "its tensor should be 'packed.");
  // rows x cols past 64 bits (2^40 x 2^40), and negative.
  every_reader(packed_list([](nlohmann::json& p) { p[0]["rows"] = 1LL << 40; p[0]["cols"] = 1LL << 40; }, "huge.safetensors"),
               1, "its params hold");
  every_reader(packed_list([](nlohmann::json& p) { p[0]["rows"] = -4; p[0]["cols"] = -8; }, "negative.safetensors"), 1,
               "its params hold");
  every_reader(packed_list([](nlohmann::json& p) { p[0]["params"] = {1, 2}; }, "numbers.safetensors"), 1,
               "\"params\" holds a JSON number");
  every_reader(packed_list([](nlohmann::json& p) { p[0] = "x"; }, "string.safetensors"), 1, "not an object");
}

// A checkpoint whose config its own tokenizer cannot serve is a damaged file (exit 1) for every
// reader, and the same config given on the command line is refused by info as by train (exit 2).
TEST_F(Hostile, ATokenizerTheConfigCannotServe) {
  Config c;
  c.d_model = 32;
  c.n_heads = 2;
  c.context = 8;
  c.vocab_size = 100;  // the byte tokenizer has 256 ids
  Model m(c);
  m.init_weights(1);
  save_model(dir + "/small_vocab.safetensors", m);
  every_reader(dir + "/small_vocab.safetensors", 1, "vocab_size 100 is smaller than the byte tokenizer's vocabulary");
  for (const std::string& cmd : {"train --preset looped --set vocab_size=100 --out " + dir + "/run",
                                 std::string("info --preset looped --set vocab_size=100")}) {
    CmdResult r = run(cmd);
    EXPECT_EQ(r.code, 2) << cmd << "\n" << r.out;
    EXPECT_NE(r.out.find("vocab_size 100 is smaller"), std::string::npos) << cmd << "\n" << r.out;
  }
}

// Attention keeps one head's query and rotated key on the stack: a head wider than that scratch is
// refused by validation (kMaxHeadDim, one constant for both), through d_head or d_model / n_heads.
TEST_F(Hostile, AHeadWiderThanAttentionsScratchIsRefused) {
  const std::string limit = std::to_string(kMaxHeadDim);
  for (const auto& [sets, says] :
       {std::pair{"--set d_head=" + std::to_string(kMaxHeadDim + 2), "from 0 to " + limit},
        std::pair{"--set d_model=" + std::to_string(2 * kMaxHeadDim + 4) + " --set n_heads=2", "at most " + limit}}) {
    CmdResult r = run("info --preset looped --no-measure " + sets);
    EXPECT_EQ(r.code, 2) << sets << "\n" << r.out;
    EXPECT_NE(r.out.find(says), std::string::npos) << sets << "\n" << r.out;
  }
  CmdResult r = run("info --preset looped --no-measure --set d_head=" + std::to_string(kMaxHeadDim) + " --set n_heads=1");
  EXPECT_EQ(r.code, 0) << r.out;
}

// Memory is checked up front, with the figure: a data file too large to hold with its token ids,
// a stream that does not end (/dev/zero), a batch whose KV cache does not fit. LOOPLM_MEMORY_LIMIT
// stands in for a small machine.
TEST_F(Hostile, MemoryIsCheckedUpFrontWithTheFigure) {
  const std::string limit = "LOOPLM_MEMORY_LIMIT=20M ";
  io::write_file_atomic(dir + "/big.txt", std::string(8 << 20, 'a'));
  CmdResult r = run("eval --checkpoint " + ckpt() + " --data " + dir + "/big.txt", limit);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("big.txt (8.4 MB, held with its 32-bit token ids) needs about 41.9 MB; looplm may use 21.0 MB"),
            std::string::npos) << r.out;
  r = run("eval --checkpoint " + ckpt() + " --data /dev/zero", limit);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("/dev/zero gave more than 4.2 MB without ending"), std::string::npos) << r.out;
  std::string prompts;
  for (int i = 0; i < 5000; ++i) prompts += "hello " + std::to_string(i) + "\n";
  io::write_file_atomic(dir + "/many.txt", prompts);
  r = run("generate --checkpoint " + ckpt() + " --prompts " + dir + "/many.txt --batch 5000 -n 8", "LOOPLM_MEMORY_LIMIT=4M ");
  EXPECT_EQ(r.code, 1) << r.out.substr(0, 2000);
  EXPECT_NE(r.out.find("a KV cache for 5000 sequences of up to 8 positions"), std::string::npos) << r.out.substr(0, 2000);
  EXPECT_NE(r.out.find("--batch"), std::string::npos) << r.out.substr(0, 2000);
  r = run("eval --checkpoint " + ckpt() + " --data " + dir + "/val.txt", "LOOPLM_MEMORY_LIMIT=lots ");
  EXPECT_EQ(r.code, 2) << r.out;
  // A long context (as converted models have): its windows' attention scores, and --window.
  Config c;
  c.d_model = 16, c.n_heads = 2, c.n_core = 1, c.context = 4096;
  Model m(c);
  m.init_weights(1);
  save_model(dir + "/long.safetensors", m);
  io::write_file_atomic(dir + "/long.txt", std::string(5000, 'a'));
  r = run("eval --checkpoint " + dir + "/long.safetensors --data " + dir + "/long.txt -t 1", "LOOPLM_MEMORY_LIMIT=64M ");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("scoring windows of 4096 tokens (their attention scores) needs about"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--window"), std::string::npos) << r.out;
  r = run("eval --checkpoint " + dir + "/long.safetensors --data " + dir + "/long.txt -t 1 --window 512", "LOOPLM_MEMORY_LIMIT=64M ");
  EXPECT_EQ(r.code, 0) << r.out;
}

// train reads its validation data once: the end-of-run report uses what it holds, so a FIFO (read
// once, then gone) neither hangs the report nor fails a finished run.
TEST_F(Hostile, TrainReadsItsValidationDataOnce) {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "In the beginning God created the heaven and the earth. ";
  io::write_file_atomic(dir + "/train.txt", text);
  ASSERT_EQ(::mkfifo((dir + "/val.fifo").c_str(), 0644), 0);
  CmdResult r = run("sh -c 'cat " + dir + "/val.txt > " + dir + "/val.fifo; rm " + dir + "/val.fifo' & timeout 120 " +
                        std::string(LOOPLM_BINARY) + " train --preset looped --set d_model=32 --set n_heads=2 --set context=16"
                        " --set batch_size=2 --set eval_every=100 --set eval_batches=1 --set data_train=" + dir + "/train.txt"
                        " --set data_val=" + dir + "/val.fifo --steps 2 --sample-len 8 --out " + dir + "/run; echo exit $?",
                    "", true);
  EXPECT_NE(r.out.find("early-exit table"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("exit 0"), std::string::npos) << r.out;
}

// A checkpoint overwritten in place while generate has it mapped: shrunk (a read past its new end
// is SIGBUS: the handler says what happened, exit 1), or rewritten at the same size (the periodic
// check says so, exit 1; also when the file system keeps reporting the old modification time).
// Replaced by rename, the reader keeps the old file and finishes.
TEST_F(Hostile, ACheckpointOverwrittenWhileInUseIsNamed) {
  save_small_model(dir + "/other.safetensors", 2);  // the same size as ckpt()
  auto served = [&](const std::string& change, const std::string& n) {
    fs::copy_file(ckpt(), dir + "/served.safetensors", fs::copy_options::overwrite_existing);
    // No output from the case before: the script waits for this run's first tokens (the model is
    // loaded by then; a sanitizer build takes a while) before it changes the file.
    fs::remove(dir + "/gen.out");
    fs::remove(dir + "/gen.err");
    // Every step of the script is bounded and logged (served.log), so a failure says where it stopped.
    const std::string script = "timeout 90 " + std::string(LOOPLM_BINARY) + " generate --checkpoint " + dir +
                               "/served.safetensors -p hello --quiet -t 1 -n " + n + " > " + dir + "/gen.out 2> " + dir +
                               "/gen.err & pid=$!\n"
                               "i=0; while [ ! -s " + dir + "/gen.out ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done\n"
                               "echo \"output after $i waits\"\nsleep 0.2\n" + change +
                               "\necho \"changed: $?\"\nwait $pid; echo \"exit $?\"\n";
    io::write_file_atomic(dir + "/served.sh", script);
    run("timeout 120 sh " + dir + "/served.sh > " + dir + "/served.log 2>&1", "", true);
    return io::read_file(dir + "/gen.err") + "\n" + io::read_file(dir + "/served.log");
  };
  std::string err = served(": > " + dir + "/served.safetensors", "100000000");
  EXPECT_NE(err.find("bus error reading a mapped file: a checkpoint in use (" + dir + "/served.safetensors) was truncated"),
            std::string::npos) << err;
  EXPECT_NE(err.find("exit 1"), std::string::npos) << err;
  err = served("dd if=" + dir + "/other.safetensors of=" + dir + "/served.safetensors conv=notrunc status=none", "100000000");
  EXPECT_NE(err.find("served.safetensors changed on disk while in use: it was written to after it was loaded"),
            std::string::npos) << err;
  EXPECT_NE(err.find("exit 1"), std::string::npos) << err;
  // The same, with the old modification time put back (as a file system that caches it would
  // report): the sampled content says so.
  err = served("touch -r " + dir + "/served.safetensors " + dir + "/stamp && dd if=" + dir + "/other.safetensors of=" +
                   dir + "/served.safetensors conv=notrunc status=none && touch -r " + dir + "/stamp " + dir +
                   "/served.safetensors",
               "100000000");
  EXPECT_NE(err.find("served.safetensors changed on disk while in use: it was written to after it was loaded"),
            std::string::npos) << err;
  EXPECT_NE(err.find("exit 1"), std::string::npos) << err;
  err = served("cp " + dir + "/other.safetensors " + dir + "/new.safetensors && mv " + dir + "/new.safetensors " + dir +
                   "/served.safetensors",
               "20000");
  EXPECT_EQ(err.find("error"), std::string::npos) << err;
  EXPECT_NE(err.find("exit 0"), std::string::npos) << err;
}

// A device or a FIFO where a model file should be: refused at once, never read for ever (a
// checkpoint, a tokenizer.json as /dev/zero; a FIFO config.json with no writer in a model
// directory), and convert leaves no OUT.tmp.* behind. `timeout` turns a hang into a failure.
TEST_F(Hostile, DevicesAndFifosAreNotReadForEver) {
  for (const std::string cmd : {"info --checkpoint /dev/zero --no-measure", "generate --checkpoint /dev/zero -p x -n 1",
                                 "tokenize --tokenizer /dev/zero -p x"}) {
    const CmdResult r = run("timeout 20 " + std::string(LOOPLM_BINARY) + " " + cmd, "", true);
    EXPECT_EQ(r.code, 1) << cmd << "\n" << r.out;
    EXPECT_NE(r.out.find("/dev/zero"), std::string::npos) << cmd << "\n" << r.out;
  }
  const std::string src = dir + "/hf";
  fs::create_directories(src);
  ASSERT_EQ(::mkfifo((src + "/config.json").c_str(), 0600), 0);
  const CmdResult r = run("timeout 20 " + std::string(LOOPLM_BINARY) + " convert --from " + src + " --out " + dir + "/out", "", true);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("config.json"), std::string::npos) << r.out;
  for (const auto& e : fs::directory_iterator(dir)) EXPECT_EQ(e.path().filename().string().find("out.tmp"), std::string::npos) << e.path();
}
