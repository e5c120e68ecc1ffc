// A newcomer's own text (docs/data.md, "Your own text"): `looplm train --data FILE` holds out the
// file's last val_split for validation, eval finds it from any directory, the final sample starts
// from the validation text, a char model reads unseen prompt characters as its fallback.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "test_util.h"

namespace fs = std::filesystem;
using looplm::test::CmdResult;
using looplm::test::run_shell;

namespace {

class OwnText : public ::testing::Test {
 protected:
  std::string dir;
  void SetUp() override {
    dir = (fs::temp_directory_path() / ("looplm_test_own_" + std::to_string(::getpid()))).string();
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::string text;
    for (int i = 0; i < 400; ++i) text += "the quick brown fox jumps over the lazy dog " + std::to_string(i % 10) + "\n";
    text += "held out: every line from here is validation\n";
    for (int i = 0; i < 60; ++i) text += "a lazy dog sleeps in the sun " + std::to_string(i % 10) + "\n";
    looplm::io::write_file_atomic(dir + "/mine.txt", text);
  }
  void TearDown() override { fs::remove_all(dir); }
  std::string bin() const { return LOOPLM_BINARY; }
  static constexpr const char* kSmall =
      " --set d_model=32 --set n_heads=2 --set context=16 --set batch_size=4 --set eval_every=100"
      " --set eval_batches=1 -t 1";
};

}  // namespace

TEST_F(OwnText, TrainOnAFileEvaluateAndGenerate) {
  // 1. train: the last 10% of the file is validation, and the sample starts from it.
  CmdResult r = run_shell("cd " + dir + " && " + bin() + " train --data mine.txt --set tokenizer=char --steps 2" + kSmall +
                          " --sample-len 8 --out run");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("validation: the last 10% of " + dir + "/mine.txt (val_split)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("the prompt is the start of the validation text"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("And God said"), std::string::npos) << r.out;
  const auto cfg = nlohmann::json::parse(looplm::io::read_file(dir + "/run/config.json"));
  EXPECT_EQ(cfg["data_train"], dir + "/mine.txt");  // absolute: the run evaluates from anywhere
  EXPECT_EQ(cfg["data_val"], "");
  // The held-out part is the file's end: 10% of its characters.
  const size_t chars = fs::file_size(dir + "/mine.txt");
  // 2. eval from another directory, on the run's own validation data.
  r = run_shell("cd / && " + bin() + " eval --checkpoint " + dir + "/run --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto e = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  const int64_t held = (int64_t)chars - (int64_t)(chars - (size_t)std::llround(chars * 0.1));
  EXPECT_EQ(e["windows"].get<int64_t>(), (held - 1) / 16) << r.out;
  // 3. generate: a character the alphabet lacks is read as the fallback, with a warning.
  r = run_shell(bin() + " generate --checkpoint " + dir + "/run -p 'the café ZZ' -n 4 --quiet");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("warning: the prompt has characters the model's alphabet does not: U+00E9 'é', U+005A 'Z'; "
                       "each was read as ' '"),
            std::string::npos)
      << r.out;
  // 4. Changing what the held-out part is, on resume, is refused: it would change the training data.
  r = run_shell(bin() + " train --out " + dir + "/run --resume --steps 4 --set data_val=" + dir + "/mine.txt");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("holds out the end of data_train for validation"), std::string::npos) << r.out;
}

// One data key without the other: the run says what it validates or trains on.
TEST_F(OwnText, OneDataKeyGetsANote) {
  CmdResult r = run_shell(bin() + " train --preset looped --set data_train=" + dir + "/mine.txt --print-config");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("note: data_train is set and data_val is not: validating on the last 10% of"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\"data_val\": \"\""), std::string::npos) << r.out;
  r = run_shell(bin() + " train --preset looped --set data_val=" + dir + "/mine.txt --print-config");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("note: data_val is set and data_train is not: training on data/kjv/train.txt"), std::string::npos)
      << r.out;
  r = run_shell(bin() + " train --preset looped --data " + dir + "/mine.txt --set data_train=x --print-config");
  EXPECT_EQ(r.code, 2) << r.out;
}

// A char alphabet covers the validation file as well as the training file.
TEST_F(OwnText, CharAlphabetFromTrainAndValidation) {
  looplm::io::write_file_atomic(dir + "/val.txt", "Ω the quick brown fox jumps over the lazy dog 1\n");
  std::string val;
  for (int i = 0; i < 10; ++i) val += "Ω the quick brown fox jumps over the lazy dog 1\n";
  looplm::io::write_file_atomic(dir + "/val.txt", val);
  CmdResult r = run_shell(bin() + " train --preset looped --set tokenizer=char --set data_train=" + dir +
                          "/mine.txt --set data_val=" + dir + "/val.txt --steps 1" + kSmall + " --sample-len 0 --quiet --out " +
                          dir + "/run");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto cfg = nlohmann::json::parse(looplm::io::read_file(dir + "/run/config.json"));
  EXPECT_NE(cfg["tokenizer_chars"].get<std::string>().find("Ω"), std::string::npos);
}

// Messages that point the way.
TEST_F(OwnText, MessagesPointTheWay) {
  CmdResult r = run_shell(bin() + " train --data " + dir + "/mine.txt --steps 2" + kSmall + " --sample-len 0 --quiet --out " +
                          dir + "/run");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string ck = " --checkpoint " + dir + "/run";
  // An unknown option gets the nearest real one; a stray value is named.
  r = run_shell(bin() + " generate" + ck + " -p hi --temprature 0.5");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("unknown option '--temprature' (did you mean --temperature?)"), std::string::npos) << r.out;
  r = run_shell(bin() + " generate" + ck + " hello there");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("unexpected argument 'hello'"), std::string::npos) << r.out;
  r = run_shell(bin() + " train --preset loped --out " + dir + "/x");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("unknown preset 'loped' (did you mean 'looped'?)"), std::string::npos) << r.out;
  // --help-config with a preset shows its values beside the defaults.
  r = run_shell(bin() + " train --preset recurrent_gpt --help-config");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("with their values in preset recurrent_gpt"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("loop_rule = \"gated\"   (default \"residual\")"), std::string::npos) << r.out;
  // A random seed by default, printed; --seed repeats the sample.
  r = run_shell(bin() + " generate" + ck + " -p the -n 12");
  ASSERT_EQ(r.code, 0) << r.out;
  const size_t at = r.out.find("seed: ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string seed = r.out.substr(at + 6, r.out.find(' ', at + 6) - at - 6);
  const std::string sample = r.out.substr(r.out.find("the"), 15);
  CmdResult again = run_shell(bin() + " generate" + ck + " -p the -n 12 --seed " + seed + " --quiet");
  EXPECT_EQ(again.out.substr(0, 15), sample) << r.out << "\n" << again.out;
  // Notes for options that change nothing, and for a depth far beyond the trained one.
  r = run_shell(bin() + " generate" + ck + " -p the -n 2 --kv-policy last --depth 40");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("note: --kv-policy last changes nothing without --exit-rule"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("note: --depth 40 is far beyond the trained R = 4"), std::string::npos) << r.out;
  // eval's table marks the trained R and the best exit, with train's column names.
  r = run_shell(bin() + " eval" + ck);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("| r | loss | bits/token | accuracy | state_cosine |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| 4 (trained R)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" best |"), std::string::npos) << r.out;
  // data on an empty file is an error, not an empty shard.
  looplm::io::write_file_atomic(dir + "/empty.txt", "");
  r = run_shell(bin() + " data --input " + dir + "/empty.txt --out " + dir + "/empty.bin");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("holds no text"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir + "/empty.bin"));
}

// A run that failed before its first checkpoint (divergence, a model too large) does not block
// the retry into the same --out; a model too large is refused with the figure.
TEST_F(OwnText, ARetryAfterAnEarlyFailureIsNotBlocked) {
  const std::string args = " train --data " + dir + "/mine.txt --steps 40" + std::string(kSmall) +
                           " --set eval_every=1000 --sample-len 0 --quiet --out " + dir + "/run";
  CmdResult r = run_shell(bin() + args + " --set lr=1e6 --set warmup=0");
  ASSERT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("diverged"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir + "/run/checkpoint.json"));
  r = run_shell(bin() + args);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("stopped before its first checkpoint (no weights); starting over"), std::string::npos) << r.out;
  r = run_shell("LOOPLM_MEMORY_LIMIT=20M " + bin() + args + "2 --set d_model=512 --set n_heads=4");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("parameters with its gradients and AdamW moments needs about"), std::string::npos) << r.out;
}
