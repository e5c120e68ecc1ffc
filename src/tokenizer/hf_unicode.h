// Unicode helpers shared by the Hugging Face tokenizer's parts (docs/data.md). Text reaching them
// has been checked as UTF-8 once, at the start of encoding, so they decode without checks.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace looplm::hf {

// The code point at s[i] (valid UTF-8 assumed); advances i past it.
inline char32_t next_cp(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) { ++i; return b0; }
  if (b0 < 0xE0) { const char32_t c = ((b0 & 0x1F) << 6) | (s[i + 1] & 0x3F); i += 2; return c; }
  if (b0 < 0xF0) {
    const char32_t c = ((b0 & 0x0F) << 12) | ((s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
    i += 3;
    return c;
  }
  const char32_t c = ((b0 & 0x07) << 18) | ((s[i + 1] & 0x3F) << 12) | ((s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
  i += 4;
  return c;
}
// The start of the code point that ends at s[i-1].
inline size_t prev_cp_start(std::string_view s, size_t i) {
  do --i; while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80);
  return i;
}
inline size_t cp_len(unsigned char lead) { return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4; }

// Offset of the first byte that does not start valid UTF-8 (strict: no overlongs, surrogates or
// code points above U+10FFFF), or npos when all of s is valid.
size_t invalid_utf8_at(std::string_view s);
// The bytes at the end of s that begin a character still missing bytes (0 when s ends whole or
// with an ill-formed sequence): what a text arriving in pieces holds back until the next piece.
size_t utf8_pending_tail(std::string_view s);
// Invalid sequences replaced by U+FFFD, one per maximal ill-formed subpart (as Rust's
// String::from_utf8_lossy and the WHATWG decoder do).
std::string utf8_lossy(std::string_view bytes);

// Unicode properties (ICU): the White_Space property (Rust's char::is_whitespace), and a word
// character as the regex crate's \w reads it (Alphabetic, M, Nd, Pc, Join_Control).
bool is_white_space(char32_t c);
bool is_word_char(char32_t c);

}  // namespace looplm::hf
