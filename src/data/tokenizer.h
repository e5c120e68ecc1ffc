// Tokenizers (docs/data.md).
//  * byte: id = byte value, vocab 256. Any byte string round-trips.
//  * char: id = index of a Unicode code point in an alphabet (UTF-8 string, no duplicates).
//    Built from a corpus the alphabet is its sorted unique code points; the alphabet is stored in
//    Config::tokenizer_chars so a checkpoint alone reconstructs the tokenizer.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "looplm/config.h"

namespace looplm {

class Tokenizer {
 public:
  enum class Kind { Byte, Char };

  static Tokenizer byte_level();
  // Alphabet = sorted unique code points of the corpus. Error on invalid UTF-8 or an empty corpus.
  static Tokenizer char_level_from_text(const std::string& utf8_corpus);
  // Alphabet given explicitly (id = position of the code point in `alphabet_utf8`, order kept).
  // UsageError on invalid UTF-8, an empty alphabet or a repeated code point.
  static Tokenizer char_level(const std::string& alphabet_utf8);
  // cfg.tokenizer "byte" | "char" (alphabet from cfg.tokenizer_chars); UsageError for anything else,
  // or when cfg.vocab_size is smaller than the tokenizer's vocabulary.
  static Tokenizer from_config(const Config& cfg);
  // Sets cfg.tokenizer, cfg.tokenizer_chars ("" for byte) and cfg.vocab_size.
  void to_config(Config& cfg) const;

  Kind kind() const { return kind_; }
  const char* kind_name() const { return kind_ == Kind::Byte ? "byte" : "char"; }
  int vocab_size() const { return kind_ == Kind::Byte ? 256 : static_cast<int>(cps_.size()); }
  // The char alphabet as UTF-8 (empty for byte level).
  const std::string& alphabet() const { return alphabet_; }

  // Char level: Error on invalid UTF-8 or a code point outside the alphabet (named, with a hint).
  std::vector<int32_t> encode(std::string_view text) const;
  // A prompt: as encode, but a character outside the alphabet (or a byte of invalid UTF-8) becomes
  // the fallback id (fallback_id()) instead of an error; `unseen` gets each such character once,
  // described (describe_code_point), in order. Byte level: encode.
  std::vector<int32_t> encode_prompt(std::string_view text, std::vector<std::string>* unseen) const;
  // The id that stands for an unseen character: the space when the alphabet has one (the most
  // common character of text, so the model reads a word break), else the alphabet's first symbol.
  int32_t fallback_id() const;
  // Error on an id outside [0, vocab_size).
  std::string decode(const std::vector<int32_t>& ids) const;
  std::string decode_one(int32_t id) const;

 private:
  Tokenizer() = default;
  void append_decoded(int32_t id, std::string& out) const;

  Kind kind_ = Kind::Byte;
  std::string alphabet_;                         // char level: UTF-8 of cps_ in id order
  std::vector<char32_t> cps_;                    // id -> code point
  std::array<int32_t, 128> ascii_{};             // fast path: ASCII code point -> id, -1 if absent
  std::unordered_map<char32_t, int32_t> other_;  // non-ASCII code point -> id
  int32_t id_of(char32_t cp) const;              // a char alphabet's id of cp, -1 if absent
};

// Strict UTF-8 (no overlongs, surrogates or code points above U+10FFFF). Error naming the byte
// offset of the first bad sequence.
std::vector<char32_t> utf8_decode(std::string_view s);
void utf8_append(char32_t cp, std::string& out);
// "U+00E9 'é'" (control characters are shown escaped), for error messages.
std::string describe_code_point(char32_t cp);

}  // namespace looplm
