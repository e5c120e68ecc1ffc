// Tokenizers (docs/data.md).
//  * byte: id = byte value, vocab 256. Any byte string round-trips.
//  * char: id = index of a Unicode code point in an alphabet (UTF-8 string, no duplicates).
//    Built from a corpus the alphabet is its sorted unique code points; the alphabet is stored in
//    Config::tokenizer_chars so a checkpoint alone reconstructs the tokenizer.
//  * hf: a Hugging Face tokenizer.json (tokenizer/hf_tokenizer.h). The text lives in
//    Config::tokenizer_json, read from Config::tokenizer_file when a run starts and stored in the
//    checkpoint's metadata (docs/format.md).
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "looplm/config.h"

namespace looplm {

class HfTokenizer;

// The checkpoint metadata key of an hf tokenizer's JSON (the name GGUF gives the same text).
inline constexpr const char* kTokenizerMetadataKey = "tokenizer.huggingface.json";

class Tokenizer {
 public:
  enum class Kind { Byte, Char, Hf };

  static Tokenizer byte_level();
  // Alphabet = sorted unique code points of the corpus. Error on invalid UTF-8 or an empty corpus.
  static Tokenizer char_level_from_text(const std::string& utf8_corpus);
  // Alphabet given explicitly (id = position of the code point in `alphabet_utf8`, order kept).
  // UsageError on invalid UTF-8, an empty alphabet or a repeated code point.
  static Tokenizer char_level(const std::string& alphabet_utf8);
  // A Hugging Face tokenizer.json (its text, or a file); Error naming the file and the problem.
  // Parsed tokenizers are shared: the same text twice is parsed once.
  static Tokenizer hf_from_json(const std::string& json_text, const std::string& origin);
  static Tokenizer hf_from_file(const std::string& path);
  // cfg.tokenizer "byte" | "char" (alphabet from cfg.tokenizer_chars) | "hf" (cfg.tokenizer_json,
  // or else the file cfg.tokenizer_file); UsageError for anything else, or when cfg.vocab_size is
  // smaller than the tokenizer's vocabulary.
  static Tokenizer from_config(const Config& cfg);
  // A checkpoint's: its config's, an hf tokenizer's text taken from the metadata (Error naming
  // `file` when it is missing).
  static Tokenizer from_checkpoint(Config cfg, const std::map<std::string, std::string>& metadata, const std::string& file);
  // Sets cfg.tokenizer, cfg.tokenizer_chars ("" unless char), cfg.tokenizer_json ("" unless hf)
  // and cfg.vocab_size.
  void to_config(Config& cfg) const;

  Kind kind() const { return kind_; }
  const char* kind_name() const { return kind_ == Kind::Byte ? "byte" : kind_ == Kind::Char ? "char" : "hf"; }
  int vocab_size() const;
  // The Hugging Face tokenizer (nullptr unless hf), and its tokenizer.json text ("" unless hf).
  const HfTokenizer* hf() const { return hf_.get(); }
  const std::string& hf_json() const;
  // The char alphabet as UTF-8 (empty for byte level).
  const std::string& alphabet() const { return alphabet_; }

  // Char level: Error on invalid UTF-8 or a code point outside the alphabet (named, with a hint).
  // Hf: Error on invalid UTF-8.
  std::vector<int32_t> encode(std::string_view text) const;
  // Hf: with the special tokens its post-processor adds (e.g. <s> first); the others: encode.
  std::vector<int32_t> encode_with_special(std::string_view text) const;
  // A prompt: as encode, but a character outside the alphabet (or a byte of invalid UTF-8) becomes
  // the fallback id (fallback_id()) instead of an error; `unseen` gets each such character once,
  // described (describe_code_point), in order. Byte level: encode. Hf: a byte of invalid UTF-8
  // becomes U+FFFD (noted in `unseen`); every character has ids.
  std::vector<int32_t> encode_prompt(std::string_view text, std::vector<std::string>* unseen) const;
  // The id that stands for an unseen character: the space when the alphabet has one (the most
  // common character of text, so the model reads a word break), else the alphabet's first symbol.
  int32_t fallback_id() const;
  // Error on an id outside [0, vocab_size).
  std::string decode(const std::vector<int32_t>& ids) const;
  std::string decode_one(int32_t id) const;
  // The raw bytes token `id` adds to a text it continues (a byte token: part of a character; a
  // SentencePiece word: with its leading space), as the text stream joins them.
  std::string piece(int32_t id) const;

 private:
  Tokenizer() = default;
  void append_decoded(int32_t id, std::string& out) const;

  Kind kind_ = Kind::Byte;
  std::string alphabet_;                         // char level: UTF-8 of cps_ in id order
  std::vector<char32_t> cps_;                    // id -> code point
  std::array<int32_t, 128> ascii_{};             // fast path: ASCII code point -> id, -1 if absent
  std::unordered_map<char32_t, int32_t> other_;  // non-ASCII code point -> id
  std::shared_ptr<const HfTokenizer> hf_;
  int32_t id_of(char32_t cp) const;              // a char alphabet's id of cp, -1 if absent
};

// Strict UTF-8 (no overlongs, surrogates or code points above U+10FFFF). Error naming the byte
// offset of the first bad sequence.
std::vector<char32_t> utf8_decode(std::string_view s);
void utf8_append(char32_t cp, std::string& out);
// "U+00E9 'é'" (control characters are shown escaped), for error messages.
std::string describe_code_point(char32_t cp);

}  // namespace looplm
