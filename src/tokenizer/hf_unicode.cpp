#include "tokenizer/hf_unicode.h"

#include <unicode/uchar.h>

namespace looplm::hf {

namespace {
// Length of the well-formed prefix of the sequence at s[i] (Unicode Table 3-7), and whether it
// is a whole character: {n, true} for a valid character of n bytes, {n, false} for a maximal
// ill-formed subpart of n >= 1 bytes.
std::pair<size_t, bool> scan(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char b0 = b(0);
  if (b0 < 0x80) return {1, true};
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) need = 1;
  else if (b0 >= 0xE0 && b0 <= 0xEF) { need = 2; if (b0 == 0xE0) lo = 0xA0; if (b0 == 0xED) hi = 0x9F; }
  else if (b0 >= 0xF0 && b0 <= 0xF4) { need = 3; if (b0 == 0xF0) lo = 0x90; if (b0 == 0xF4) hi = 0x8F; }
  else return {1, false};
  for (size_t k = 1; k <= need; ++k) {
    if (i + k >= s.size()) return {k, false};
    const unsigned char c = b(k);
    if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) return {k, false};
  }
  return {need + 1, true};
}
}  // namespace

size_t invalid_utf8_at(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) { ++i; continue; }
    const auto [n, ok] = scan(s, i);
    if (!ok) return i;
    i += n;
  }
  return std::string_view::npos;
}

size_t utf8_pending_tail(std::string_view s) {
  // A character is at most 4 bytes, so only a lead byte among the last 3 can still be waiting.
  for (size_t j = s.size() > 3 ? s.size() - 3 : 0; j < s.size(); ++j) {
    const auto b = static_cast<unsigned char>(s[j]);
    if (b < 0xC2 || b > 0xF4) continue;
    const auto [n, ok] = scan(s, j);
    if (!ok && j + n >= s.size()) return s.size() - j;
  }
  return 0;
}

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto [n, ok] = scan(s, i);
    if (ok) out.append(s.substr(i, n));
    else out += "\xEF\xBF\xBD";
    i += n;
  }
  return out;
}

bool is_white_space(char32_t c) { return u_isUWhiteSpace(static_cast<UChar32>(c)); }

bool is_word_char(char32_t c) {
  const auto u = static_cast<UChar32>(c);
  if (u_hasBinaryProperty(u, UCHAR_ALPHABETIC) || u_hasBinaryProperty(u, UCHAR_JOIN_CONTROL)) return true;
  const int8_t t = u_charType(u);
  return t == U_NON_SPACING_MARK || t == U_ENCLOSING_MARK || t == U_COMBINING_SPACING_MARK ||
         t == U_DECIMAL_DIGIT_NUMBER || t == U_CONNECTOR_PUNCTUATION;
}

}  // namespace looplm::hf
