#include "core/text.h"

#include <algorithm>
#include <cstdio>

namespace looplm {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

namespace {
ArgumentSpelling& spelling() {
  static ArgumentSpelling s;
  return s;
}
}  // namespace

void set_argument_spelling(const ArgumentSpelling& s) { spelling() = s; }
const ArgumentSpelling& argument_spelling() { return spelling(); }
std::string set_arg(const std::string& key, const std::string& value) {
  const ArgumentSpelling& s = spelling();
  return s.set_prefix + key + s.set_key_end + (value.empty() ? "" : s.set_value_sep + value);
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  if (word.size() > 64) return "";
  std::string best;
  size_t bd = SIZE_MAX;
  for (const std::string& c : candidates) {
    const size_t d = edit_distance(word, c);
    if (d < bd) {
      bd = d;
      best = c;
    }
  }
  return bd <= 3 && 2 * bd < std::max<size_t>(word.size(), 2) ? best : "";
}

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
    const unsigned char b0 = b(0);
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range (Unicode Table 3-7)
    if (b0 < 0x80) need = 0;
    else if (b0 >= 0xC2 && b0 <= 0xDF) need = 1;
    else if (b0 >= 0xE0 && b0 <= 0xEF) need = 2, lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
    else if (b0 >= 0xF0 && b0 <= 0xF4) need = 3, lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
    else return false;
    if (need > 0 && i + need >= s.size()) return false;
    for (size_t k = 1; k <= need; ++k)
      if (k == 1 ? (b(k) < lo || b(k) > hi) : (b(k) < 0x80 || b(k) > 0xBF)) return false;
    i += need + 1;
  }
  return true;
}

std::string clean_up_tokenization(std::string_view text) {
  // transformers applies the replacements one after another over the whole string, in this order.
  static const std::pair<const char*, const char*> rules[] = {{" .", "."},     {" ?", "?"},     {" !", "!"},    {" ,", ","},
                                                              {" ' ", "'"},    {" n't", "n't"}, {" 'm", "'m"},  {" 's", "'s"},
                                                              {" 've", "'ve"}, {" 're", "'re"}};
  std::string s(text);
  for (const auto& [from, to] : rules) {
    const std::string_view f(from), t(to);
    std::string out;
    size_t at = 0;
    for (size_t hit; (hit = s.find(f, at)) != std::string::npos; at = hit + f.size()) {
      out.append(s, at, hit - at);
      out.append(t);
    }
    if (at == 0) continue;
    out.append(s, at, std::string::npos);
    s.swap(out);
  }
  return s;
}

std::string token_label(std::string_view bytes) {
  if (valid_utf8(bytes)) return std::string(bytes);
  std::string out = "bytes:";
  char buf[8];
  for (unsigned char c : bytes) {
    std::snprintf(buf, sizeof buf, "\\x%02x", c);
    out += buf;
  }
  return out;
}

// (Never cut inside a UTF-8 character; control bytes become '?', so a value from a request or a
// file cannot break a log line.)
std::string brief(std::string_view s, size_t max) {
  size_t n = s.size() > max ? max : s.size();
  while (n < s.size() && n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) --n;  // not inside a UTF-8 character
  std::string out(s.substr(0, n));
  for (char& c : out)
    if ((unsigned char)c < 0x20 || c == 0x7f) c = '?';
  if (s.size() > max) out += "...";
  return out;
}

}  // namespace looplm
