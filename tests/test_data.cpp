// Tokenizers, data files (every bad file -> looplm::Error naming the file), TokenStream resume,
// eval windows, and (when the test binary knows the looplm binary) `looplm data` end to end.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "tokenizer/tokenizer.h"
#include "looplm/error.h"

namespace fs = std::filesystem;
using looplm::Error;
using looplm::Tokenizer;

namespace {

class DataFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path("/tmp") / ("looplm_test_data_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream f(path(name), std::ios::binary);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return path(name);
  }
  static std::string shard_bytes(int32_t magic, int32_t version, int32_t count,
                                 const std::vector<uint16_t>& toks) {
    std::string b(1024 + 2 * toks.size(), '\0');
    auto put = [&](size_t off, int32_t v) {
      for (int k = 0; k < 4; ++k) b[off + k] = static_cast<char>((static_cast<uint32_t>(v) >> (8 * k)) & 0xFF);
    };
    put(0, magic);
    put(4, version);
    put(8, count);
    for (size_t i = 0; i < toks.size(); ++i) {
      b[1024 + 2 * i] = static_cast<char>(toks[i] & 0xFF);
      b[1024 + 2 * i + 1] = static_cast<char>(toks[i] >> 8);
    }
    return b;
  }
  // Runs f, expects a looplm::Error whose message contains every string in `parts`.
  static void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
    try {
      f();
      ADD_FAILURE() << "no looplm::Error thrown";
    } catch (const Error& e) {
      for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "message '" << e.what() << "' lacks '" << p << "'";
    }
  }

  fs::path dir_;
};

const std::string kUnicode = "Hé said: «naïve» — 漢字 😀\n";

}  // namespace

TEST(Tokenizer, ByteRoundTrip) {
  const Tokenizer t = Tokenizer::byte_level();
  EXPECT_EQ(t.vocab_size(), 256);
  std::string all;
  for (int c = 0; c < 256; ++c) all += static_cast<char>(c);
  const auto ids = t.encode(all + kUnicode);
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(ids[255], 255);
  EXPECT_EQ(ids.size(), all.size() + kUnicode.size());
  EXPECT_EQ(t.decode(ids), all + kUnicode);
  EXPECT_EQ(t.decode_one('A'), "A");
  EXPECT_THROW(t.decode({256}), Error);
  EXPECT_THROW(t.decode_one(-1), Error);
}

TEST(Tokenizer, CharRoundTripMultiByte) {
  const std::string corpus = "abc cab\n" + kUnicode;
  const Tokenizer t = Tokenizer::char_level_from_text(corpus);
  const std::vector<char32_t> cps = looplm::utf8_decode(corpus);
  const std::set<char32_t> uniq(cps.begin(), cps.end());
  EXPECT_EQ(t.vocab_size(), static_cast<int>(uniq.size()));
  // Alphabet is sorted by code point: '\n' first, the emoji (4 bytes) last.
  EXPECT_EQ(t.encode("\n"), std::vector<int32_t>{0});
  EXPECT_EQ(t.encode("😀"), std::vector<int32_t>{t.vocab_size() - 1});
  const auto ids = t.encode(corpus);
  EXPECT_EQ(ids.size(), cps.size());  // one id per code point, not per byte
  EXPECT_EQ(t.decode(ids), corpus);
  EXPECT_EQ(t.decode_one(t.vocab_size() - 1), "😀");
}

TEST(Tokenizer, CharErrors) {
  const Tokenizer t = Tokenizer::char_level_from_text("abc");
  try {
    t.encode("abé");
    FAIL() << "expected Error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("U+00E9"), std::string::npos) << m;
    EXPECT_NE(m.find("hint"), std::string::npos) << m;
  }
  EXPECT_THROW(t.encode("a\xC3"), Error);             // truncated sequence
  EXPECT_THROW(t.encode("\xC0\x80"), Error);          // overlong NUL
  EXPECT_THROW(t.encode("\xED\xA0\x80"), Error);      // surrogate
  EXPECT_THROW(Tokenizer::char_level_from_text("\xFF"), Error);
  EXPECT_THROW(Tokenizer::char_level_from_text(""), Error);
  EXPECT_THROW(Tokenizer::char_level("aba"), looplm::UsageError);  // repeated code point
  EXPECT_THROW(t.decode({3}), Error);
}

TEST(Tokenizer, Config) {
  const Tokenizer t = Tokenizer::char_level_from_text(kUnicode);
  looplm::Config cfg;
  t.to_config(cfg);
  EXPECT_EQ(cfg.tokenizer, "char");
  EXPECT_EQ(cfg.tokenizer_chars, t.alphabet());
  EXPECT_EQ(cfg.vocab_size, t.vocab_size());
  const Tokenizer u = Tokenizer::from_config(cfg);
  EXPECT_EQ(u.encode(kUnicode), t.encode(kUnicode));

  // An explicit, unsorted alphabet keeps its order: id = position.
  cfg.tokenizer_chars = "zé\n";
  cfg.vocab_size = 3;
  EXPECT_EQ(Tokenizer::from_config(cfg).encode("\nzé"), (std::vector<int32_t>{2, 0, 1}));

  Tokenizer::byte_level().to_config(cfg);
  EXPECT_EQ(cfg.tokenizer, "byte");
  EXPECT_EQ(cfg.tokenizer_chars, "");
  EXPECT_EQ(cfg.vocab_size, 256);
  EXPECT_EQ(Tokenizer::from_config(cfg).kind(), Tokenizer::Kind::Byte);

  cfg.tokenizer = "bpe";
  EXPECT_THROW(Tokenizer::from_config(cfg), looplm::UsageError);
  cfg.tokenizer = "char";
  cfg.tokenizer_chars = "";
  EXPECT_THROW(Tokenizer::from_config(cfg), looplm::UsageError);
  cfg.tokenizer = "byte";
  cfg.vocab_size = 100;
  EXPECT_THROW(Tokenizer::from_config(cfg), looplm::UsageError);
}

TEST_F(DataFiles, LlmcShardRoundTrip) {
  std::vector<int32_t> toks = {0, 1, 255, 65535, 300, 7};
  looplm::write_llmc_shard(path("a.bin"), toks);
  EXPECT_EQ(fs::file_size(path("a.bin")), 1024u + 2 * toks.size());
  EXPECT_EQ(looplm::detect_format(path("a.bin")), looplm::DataFormat::LlmcShard);
  // Header layout as llm.c writes it.
  const std::string b = looplm::read_file_bytes(path("a.bin"));
  EXPECT_EQ(b.substr(0, 12), shard_bytes(20240520, 1, 6, {}).substr(0, 12));
  // A char tokenizer with 65536 symbols accepts every id above.
  std::string alpha;
  for (char32_t cp = 0x10000; cp < 0x20000; ++cp) looplm::utf8_append(cp, alpha);
  const Tokenizer big = Tokenizer::char_level(alpha);
  // No temp files left behind.
  int n = 0;
  for ([[maybe_unused]] auto& e : fs::directory_iterator(dir_)) ++n;
  EXPECT_EQ(n, 1);
  // A char shard carries its alphabet beside it (looplm data writes it; here by hand).
  looplm::write_file_atomic(path("a.bin.chars"), alpha);
  EXPECT_EQ(looplm::load_tokens(path("a.bin"), big), toks);

  // An id beyond uint16: llm.c's uint32 layout (magic 20240801, version 7).
  looplm::write_llmc_shard(path("w.bin"), {1, 65536});
  EXPECT_EQ(fs::file_size(path("w.bin")), 1024u + 4 * 2);
  EXPECT_EQ(looplm::read_file_bytes(path("w.bin")).substr(0, 12), shard_bytes(20240801, 7, 2, {}).substr(0, 12));
  expect_error([&] { looplm::write_llmc_shard(path("b.bin"), {1, -1}); }, {"b.bin", "-1", "position 1"});
  EXPECT_FALSE(fs::exists(path("b.bin")));
  // Empty shard is valid.
  looplm::write_llmc_shard(path("e.bin"), {});
  EXPECT_TRUE(looplm::load_tokens(path("e.bin"), Tokenizer::byte_level()).empty());
}

TEST_F(DataFiles, NanoGptHeaderless) {
  const std::string p = write("train.bin", std::string("\x01\x00\xff\x00\x41\x00", 6));
  EXPECT_EQ(looplm::detect_format(p), looplm::DataFormat::NanoGptBin);
  EXPECT_EQ(looplm::load_tokens(p, Tokenizer::byte_level()), (std::vector<int32_t>{1, 255, 65}));
}

TEST_F(DataFiles, JsonlAndText) {
  const std::string p = write("docs.jsonl",
                              "{\"text\": \"first é\", \"id\": 1}\n\n  \n{\"text\": \"second\"}\r\n");
  EXPECT_EQ(looplm::detect_format(p), looplm::DataFormat::Jsonl);
  EXPECT_EQ(looplm::load_text(p), "first é\n\nsecond");
  const Tokenizer byte = Tokenizer::byte_level();
  EXPECT_EQ(byte.decode(looplm::load_tokens(p, byte)), "first é\n\nsecond");
  const Tokenizer chr = Tokenizer::char_level_from_text(looplm::load_text(p));
  EXPECT_EQ(chr.decode(looplm::load_tokens(p, chr)), "first é\n\nsecond");

  const std::string t = write("plain.txt", kUnicode);
  EXPECT_EQ(looplm::detect_format(t), looplm::DataFormat::Text);
  EXPECT_EQ(byte.decode(looplm::load_tokens(t, byte)), kUnicode);
  // A char tokenizer that lacks a character: the error names the file.
  expect_error([&] { looplm::load_tokens(t, chr); }, {"plain.txt", "U+"});
  expect_error([&] { looplm::load_text(path("a.bin")); }, {"a.bin"});
}

TEST_F(DataFiles, BadFiles) {
  const Tokenizer byte = Tokenizer::byte_level();
  auto load = [&](const std::string& p) { return [&byte, p] { looplm::load_tokens(p, byte); }; };

  expect_error(load(path("missing.txt")), {"missing.txt", "No such file"});
  expect_error(load(path("missing.bin")), {"missing.bin", "No such file"});

  // Truncated: header cut short, and tokens cut short.
  std::string good = shard_bytes(20240520, 1, 3, {1, 2, 3});
  expect_error(load(write("trunc_header.bin", good.substr(0, 100))), {"trunc_header.bin", "truncated"});
  expect_error(load(write("trunc_tokens.bin", good.substr(0, good.size() - 1))),
               {"trunc_tokens.bin", "3 tokens", "1029 bytes"});
  // Count mismatch (too many bytes for the count).
  expect_error(load(write("count.bin", shard_bytes(20240520, 1, 2, {1, 2, 3}))),
               {"count.bin", "2 tokens", "trailing"});
  // Wrong version.
  expect_error(load(write("version.bin", shard_bytes(20240520, 2, 3, {1, 2, 3}))),
               {"version.bin", "version 2"});
  // Wrong magic: read as headerless, whose "tokens" are then out of the byte vocabulary.
  expect_error(load(write("magic.bin", shard_bytes(20240521, 1, 3, {1, 2, 3}))),
               {"magic.bin", "20240521", "not the llm.c magic"});
  // Odd-size headerless file.
  expect_error(load(write("odd.bin", std::string("\x01\x00\x02", 3))), {"odd.bin", "odd size"});
  // Out-of-vocab id in a valid shard: first bad id and its position.
  expect_error(load(write("oov.bin", shard_bytes(20240520, 1, 4, {1, 2, 256, 999}))),
               {"oov.bin", "token id 256", "position 2"});
  // Malformed JSONL: bad JSON, not an object, missing key, non-string text.
  expect_error(load(write("bad1.jsonl", "{\"text\": \"ok\"}\n{\"text\": \n")), {"bad1.jsonl:2 is not valid JSON"});
  expect_error(load(write("bad2.jsonl", "\n[1, 2]\n")), {"bad2.jsonl:2:", "object"});
  expect_error(load(write("bad3.jsonl", "{\"txt\": \"x\"}\n")), {"bad3.jsonl:1:", "\"text\""});
  expect_error(load(write("bad4.jsonl", "{\"text\": 5}\n")), {"bad4.jsonl:1:", "string"});
  // Invalid UTF-8 with the char tokenizer.
  const Tokenizer chr = Tokenizer::char_level("ab");
  expect_error([&] { looplm::load_tokens(write("bad.txt", "ab\xFF"), chr); },
               {"bad.txt", "invalid UTF-8", "offset 2"});
}

TEST(TokenStream, DeterministicAndResumable) {
  std::vector<int32_t> toks(1000);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<int32_t>(i);
  const int T = 16, B = 4;
  looplm::TokenStream s(toks, T, B, 42);
  std::vector<std::vector<int32_t>> xs, ys;
  for (int k = 0; k < 5; ++k) {
    std::vector<int32_t> x(B * T), y(B * T);
    s.next_batch(x.data(), y.data());
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < T; ++t) {
        EXPECT_EQ(y[b * T + t], x[b * T + t] + 1);                   // shifted by one
        if (t > 0) {
          EXPECT_EQ(x[b * T + t], x[b * T + t - 1] + 1);  // contiguous window
        }
      }
      EXPECT_LE(y[b * T + T - 1], 999);
    }
    xs.push_back(x);
    ys.push_back(y);
  }
  EXPECT_EQ(s.cursor(), 5u);
  EXPECT_NE(xs[0], xs[1]);

  looplm::TokenStream same(toks, T, B, 42);
  std::vector<int32_t> x(B * T), y(B * T);
  same.next_batch(x.data(), y.data());
  EXPECT_EQ(x, xs[0]);

  looplm::TokenStream resumed(toks, T, B, 42);
  resumed.set_cursor(2);
  for (int k = 2; k < 5; ++k) {
    resumed.next_batch(x.data(), y.data());
    EXPECT_EQ(x, xs[k]) << "batch " << k;
    EXPECT_EQ(y, ys[k]) << "batch " << k;
  }
  EXPECT_EQ(resumed.cursor(), 5u);

  looplm::TokenStream other(toks, T, B, 43);
  other.next_batch(x.data(), y.data());
  EXPECT_NE(x, xs[0]);
}

TEST(TokenStream, CoversAllOffsets) {
  // N = T + 3 -> offsets {0, 1, 2}; all must occur, none beyond.
  std::vector<int32_t> toks = {0, 1, 2, 3, 4, 5};
  looplm::TokenStream s(toks, 3, 1, 7);
  std::set<int32_t> starts;
  for (int k = 0; k < 200; ++k) {
    int32_t x[3], y[3];
    s.next_batch(x, y);
    starts.insert(x[0]);
  }
  EXPECT_EQ(starts, (std::set<int32_t>{0, 1, 2}));
}

TEST(TokenStream, TooShort) {
  try {
    looplm::TokenStream s(std::vector<int32_t>(8), 8, 1, 1, "val.txt");
    FAIL() << "expected Error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("val.txt"), std::string::npos) << m;
    EXPECT_NE(m.find("8 tokens"), std::string::npos) << m;
    EXPECT_NE(m.find("context 8"), std::string::npos) << m;
  }
  EXPECT_NO_THROW(looplm::TokenStream(std::vector<int32_t>(9), 8, 1, 1));
}

TEST(EvalWindows, Consecutive) {
  std::vector<int32_t> toks(10);
  for (int i = 0; i < 10; ++i) toks[i] = i;
  EXPECT_EQ(looplm::eval_windows(toks, 3), 3);  // windows start at 0, 3, 6; 9 needs token 12
  EXPECT_EQ(looplm::eval_windows(toks, 9), 1);
  EXPECT_EQ(looplm::eval_windows(toks, 4), 2);
  int32_t x[3], y[3];
  looplm::eval_window(toks, 3, 2, x, y);
  EXPECT_EQ(std::vector<int32_t>(x, x + 3), (std::vector<int32_t>{6, 7, 8}));
  EXPECT_EQ(std::vector<int32_t>(y, y + 3), (std::vector<int32_t>{7, 8, 9}));
  try {
    looplm::eval_windows(toks, 10, "val.bin");
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("val.bin"), std::string::npos) << e.what();
  }
}

TEST(CounterRng, PureFunctionOfSeedAndCounter) {
  EXPECT_EQ(looplm::counter_rng_u64(1, 5), looplm::counter_rng_u64(1, 5));
  EXPECT_NE(looplm::counter_rng_u64(1, 5), looplm::counter_rng_u64(1, 6));
  EXPECT_NE(looplm::counter_rng_u64(1, 5), looplm::counter_rng_u64(2, 5));
  // Rough uniformity: mean of the top bit over 10^4 draws.
  int ones = 0;
  for (uint64_t i = 0; i < 10000; ++i) ones += looplm::counter_rng_u64(9, i) >> 63;
  EXPECT_NEAR(ones, 5000, 300);  // ~6 sigma
}

#ifdef LOOPLM_BINARY
namespace {
int run_cmd(const std::string& cmd) {
  const int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
}  // namespace

TEST_F(DataFiles, CliDataCommand) {
  const std::string bin = LOOPLM_BINARY;
  const std::string in = write("corpus.txt", kUnicode + "more text\n");
  const std::string out = path("corpus.bin");
  ASSERT_EQ(run_cmd(bin + " data --input " + in + " --tokenizer char --out " + out + " >/dev/null"), 0);
  const std::string chars = looplm::read_file_bytes(out + ".chars");
  const Tokenizer t = Tokenizer::char_level(chars);
  EXPECT_EQ(t.decode(looplm::load_tokens(out, t)), kUnicode + "more text\n");
  // A second input encoded with the first one's alphabet.
  const std::string in2 = write("val.txt", "more");
  ASSERT_EQ(run_cmd(bin + " data --input " + in2 + " --alphabet " + out + ".chars --out " +
                    path("val.bin") + " >/dev/null"),
            0);
  EXPECT_EQ(looplm::read_file_bytes(path("val.bin.chars")), chars);
  EXPECT_EQ(t.decode(looplm::load_tokens(path("val.bin"), t)), "more");
  // Byte level (default).
  ASSERT_EQ(run_cmd(bin + " data --input " + in + " --out " + path("b.bin") + " >/dev/null"), 0);
  EXPECT_EQ(Tokenizer::byte_level().decode(looplm::load_tokens(path("b.bin"), Tokenizer::byte_level())),
            kUnicode + "more text\n");
  EXPECT_FALSE(fs::exists(path("b.bin.chars")));
  // Usage errors exit 2, runtime errors 1, --help 0.
  EXPECT_EQ(run_cmd(bin + " data --help >/dev/null"), 0);
  EXPECT_EQ(run_cmd(bin + " data --out " + path("x.bin") + " 2>/dev/null"), 2);
  EXPECT_EQ(run_cmd(bin + " data --input " + in + " --tokenizer bpe --out " + path("x.bin") + " 2>/dev/null"), 2);
  EXPECT_EQ(run_cmd(bin + " data --input " + in + " --out " + path("x.txt") + " 2>/dev/null"), 2);
  EXPECT_EQ(run_cmd(bin + " data --input " + path("nope.txt") + " --out " + path("x.bin") + " 2>/dev/null"), 1);
}
#endif
