// Hugging Face tokenizers (tokenizer/hf_tokenizer.h, docs/data.md): the input as a tokenizer.json
// (HfTokenizer::from_json; one that loads then encodes and decodes a fixed text and the input), as
// text encoded and decoded by three built-in tokenizers that reach every part (byte-level BPE with
// added tokens that lstrip / rstrip / need a single word; SentencePiece-style BPE with normalizers,
// byte fallback and fused unk; a Split / Digits / Metaspace / Punctuation pre-tokenizer chain), as
// ids to decode (and to stream: tokenizer/text_stream.h must give decode's text), as an Oniguruma pattern (onig_to_pcre2 and PCRE2), and as a corpus for the BPE
// trainer. Only looplm::Error may come out; an id outside the vocabulary aborts.
#include "fuzz_common.h"

#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/bpe_trainer.h"
#include "tokenizer/hf_pretokenizer.h"
#include "tokenizer/hf_regex.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/hf_unicode.h"
#include "tokenizer/text_stream.h"
#include "tokenizer/tokenizer.h"
#include "looplm/error.h"

using namespace looplm;
using nlohmann::json;

namespace {

json added(int id, const char* content, bool lstrip, bool rstrip, bool single_word, bool normalized, bool special) {
  return {{"id", id}, {"content", content}, {"single_word", single_word}, {"lstrip", lstrip}, {"rstrip", rstrip},
          {"normalized", normalized}, {"special", special}};
}

std::vector<std::shared_ptr<const HfTokenizer>> built_in() {
  std::vector<std::shared_ptr<const HfTokenizer>> out;
  {  // byte-level, GPT-2 style
    json vocab = json::object();
    for (int b = 0; b < 256; ++b) vocab[hf::byte_to_unicode(static_cast<unsigned char>(b))] = b;
    const std::string G = hf::byte_to_unicode(' ');
    json merges = json::array();
    int id = 256;
    for (const auto& [a, b] : std::vector<std::pair<std::string, std::string>>{{G, "t"}, {"h", "e"}, {G + "t", "he"}, {"e", "r"}, {G, G}}) {
      vocab[a + b] = id++;
      merges.push_back(a + " " + b);
    }
    json j = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"ignore_merges", true}}},
              {"normalizer", {{"type", "NFKC"}}},
              {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", json::array({
                  {{"type", "Split"}, {"pattern", {{"Regex", "(?i:'s|'t)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}}},
                   {"behavior", "Isolated"}, {"invert", false}},
                  {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}}},
              {"decoder", {{"type", "ByteLevel"}}},
              {"post_processor", {{"type", "TemplateProcessing"},
                                  {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                                          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
                                  {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {id}}, {"tokens", {"<s>"}}}}}}}},
              {"added_tokens", json::array({added(id, "<s>", false, false, false, false, true),
                                            added(id + 1, "<L>", true, false, false, false, true),
                                            added(id + 2, "<R>", false, true, false, false, false),
                                            added(id + 3, "word", false, false, true, true, false)})}};
    out.push_back(HfTokenizer::from_json(j.dump(), "byte-level"));
  }
  {  // SentencePiece-style
    json vocab = {{"<unk>", 0}, {"\xE2\x96\x81", 1}, {"a", 2}, {"b", 3}, {"\xE2\x96\x81" "a", 4}, {"ab", 5}};
    for (int b = 0; b < 256; b += 3) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      vocab[name] = 6 + b / 3;
    }
    json j = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"\xE2\x96\x81 a", "a b"}}, {"unk_token", "<unk>"},
                         {"byte_fallback", true}, {"fuse_unk", true}}},
              {"normalizer", {{"type", "Sequence"}, {"normalizers", json::array({
                  {{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
                  {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}},
                  {{"type", "Replace"}, {"pattern", {{"Regex", "\\s{2,}"}}}, {"content", "\xE2\x96\x81"}}})}}},
              {"decoder", {{"type", "Sequence"}, {"decoders", json::array({
                  {{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
                  {{"type", "ByteFallback"}}, {{"type", "Fuse"}}, {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 1}}})}}},
              {"added_tokens", json::array({added(0, "<unk>", false, false, false, false, true)})}};
    out.push_back(HfTokenizer::from_json(j.dump(), "sentencepiece"));
  }
  {  // a chain of the other pre-tokenizers over a small character vocabulary
    json vocab = json::object();
    for (char c = ' '; c <= '~'; ++c) vocab[std::string(1, c)] = (int)vocab.size();
    vocab["\xE2\x96\x81"] = (int)vocab.size();
    json j = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}},
              {"normalizer", {{"type", "Sequence"}, {"normalizers", json::array({{{"type", "Lowercase"}}, {{"type", "Strip"}}, {{"type", "NFD"}}})}}},
              {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", json::array({
                  {{"type", "Digits"}, {"individual_digits", true}},
                  {{"type", "Punctuation"}, {"behavior", "Contiguous"}},
                  {{"type", "Split"}, {"pattern", {{"String", "x"}}}, {"behavior", "MergedWithNext"}, {"invert", true}},
                  {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "first"}, {"split", true}},
                  {{"type", "WhitespaceSplit"}}})}}},
              {"decoder", {{"type", "Metaspace"}}}};
    out.push_back(HfTokenizer::from_json(j.dump(), "chain"));
  }
  return out;
}

// must_encode: a built-in tokenizer encodes every valid UTF-8 text (a file from the input may
// legitimately fail, e.g. on PCRE2's match limit).
void exercise(const HfTokenizer& t, std::string_view text, bool must_encode) {
  for (bool special : {false, true}) {
    std::vector<int32_t> ids;
    try {
      ids = t.encode(text, special);
    } catch (const Error& e) {
      if (must_encode && hf::invalid_utf8_at(text) == std::string_view::npos) {
        std::fprintf(stderr, "a built-in tokenizer refused valid UTF-8: %s\n", e.what());
        std::abort();
      }
      return;
    }
    for (int32_t id : ids)
      if (id < 0 || id >= t.vocab_size()) {
        std::fprintf(stderr, "encode returned id %d outside the vocabulary (%d)\n", id, t.vocab_size());
        std::abort();
      }
    t.decode(ids, special);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto tokenizers = built_in();
  static const std::vector<Tokenizer> streamed = [] {  // the same, as the text stream takes them
    std::vector<Tokenizer> v;
    for (const auto& t : tokenizers) v.push_back(Tokenizer::hf_from_json(t->json(), "fuzz"));
    return v;
  }();
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  for (size_t k = 0; k < tokenizers.size(); ++k) {
    const auto& t = tokenizers[k];
    try {
      exercise(*t, in, true);
    } catch (const Error&) {
    }
    std::vector<int32_t> ids;  // the input as little-endian 16-bit ids
    for (size_t i = 0; i + 1 < size; i += 2) ids.push_back(data[i] | (data[i + 1] << 8));
    try {
      t->decode(ids);
    } catch (const Error&) {
    }
    // The same ids in the vocabulary streamed (tokenizer/text_stream.h): the text is decode's, and a
    // stop string made of the input's first bytes cuts it where decode's text first holds it.
    std::vector<int32_t> known;
    for (int32_t id : ids)
      if (id < t->vocab_size() && !t->token(id).empty()) known.push_back(id);
    const Tokenizer& tok = streamed[k];
    const std::string want = tok.decode(known);
    TextStreamer plain(tok, {{}, true});
    const std::string stop = size > 2 ? want.substr(0, std::min<size_t>(data[0] % 5, want.size())) : std::string();
    TextStreamer stopping(tok, {{stop}, true});
    std::string got, cut;
    for (int32_t id : known) got += plain.push(id), cut += stopping.push(id);
    got += plain.finish();
    cut += stopping.finish();
    const size_t at = stop.empty() ? std::string::npos : want.find(stop);
    if (got != want || cut != want.substr(0, at)) {
      std::fprintf(stderr, "the text stream is not decode's text\n");
      std::abort();
    }
  }
  try {  // a tokenizer.json
    const auto t = HfTokenizer::from_json(std::string(in), "fuzz.json");
    exercise(*t, "Hello  world! It's 2024 \xC3\xA9\xF0\x9F\xA4\x97 <s> </s>\n\tend", false);
    exercise(*t, in, false);
  } catch (const Error&) {
  }
  try {  // an Oniguruma pattern
    const hf::Regex re = hf::Regex::compile(in, "fuzz pattern");
    size_t b, e, pos = 0;
    const std::string_view subject = "ab 12 \xC3\xA9 'S\r\n x";
    for (int k = 0; k < 16 && pos <= subject.size() && re.find(subject, pos, b, e); ++k) pos = e > b ? e : b + 1;
  } catch (const Error&) {
  }
  if (size < 4096) {
    try {  // a corpus
      BpeTrainOptions o;
      o.vocab_size = 300;
      const BpeTrainResult r = train_byte_level_bpe(in, o);
      const auto t = HfTokenizer::from_json(r.tokenizer_json, "trained");
      if (t->decode(t->encode(in)) != in) {
        std::fprintf(stderr, "a trained byte-level BPE does not give its corpus back\n");
        std::abort();
      }
    } catch (const Error&) {
    }
  }
  return 0;
}
