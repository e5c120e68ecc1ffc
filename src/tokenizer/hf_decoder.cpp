#include "tokenizer/hf_decoder.h"

#include "tokenizer/hf_json.h"
#include "tokenizer/hf_pretokenizer.h"
#include "tokenizer/hf_regex.h"
#include "tokenizer/hf_replace.h"
#include "tokenizer/hf_unicode.h"

namespace looplm::hf {

namespace {

// One character of a decoder's config ("content", "replacement").
std::string one_char(const nlohmann::json& j, const char* key, const std::string& where, const char* fallback) {
  const std::string s = str_member(j, key, where, fallback);
  size_t n = 0;
  if (s.empty() || invalid_utf8_at(s) != std::string::npos || (next_cp(s, n), n != s.size()))
    bad(where + "." + key, "expected one character, got '" + io::brief(s) + "'");
  return s;
}

class Sequence final : public Decoder {
 public:
  std::vector<std::unique_ptr<Decoder>> parts;
  void run(std::vector<std::string>& t) const override {
    for (const auto& p : parts) p->run(t);
  }
  bool piece(std::string& s, PieceState& st) const override {
    for (const auto& p : parts)
      if (!p->piece(s, st)) return false;
    return true;
  }
};

// A step that rewrites the text after a Strip at its ends would move what the stream strips.
bool after_end_strip(const PieceState& st) { return st.strip_start + st.strip_stop > 0; }

// All tokens to bytes through GPT-2's table (a token with a character outside it is kept as its
// own bytes), then one string, invalid UTF-8 replaced.
class ByteLevel final : public Decoder {
 public:
  void run(std::vector<std::string>& t) const override {
    std::string bytes;
    for (const std::string& tok : t) {
      const size_t mark = bytes.size();
      bool mapped = true;
      for (size_t i = 0; i < tok.size() && mapped;) {
        const int b = unicode_to_byte(next_cp(tok, i));
        if (b < 0) mapped = false;
        else bytes += static_cast<char>(b);
      }
      if (!mapped) {
        bytes.resize(mark);
        bytes += tok;
      }
    }
    t.assign(1, utf8_lossy(bytes));
  }
  bool piece(std::string& s, PieceState& st) const override {
    // Over one fused string a single character outside the table keeps all of it raw: not per token.
    if (st.fused || after_end_strip(st)) return false;
    std::string bytes;
    for (size_t i = 0; i < s.size();) {
      const int b = unicode_to_byte(next_cp(s, i));
      if (b < 0) return st.fused = true;  // kept as its own bytes (s unchanged)
      bytes += static_cast<char>(b);
    }
    s = std::move(bytes);
    return st.fused = true;
  }
};

// The replacement character becomes a space; in the first token (when a prefix was prepended)
// it is dropped, as the Rust library does.
class Metaspace final : public Decoder {
 public:
  std::string replacement;
  bool drop_first = true;
  void run(std::vector<std::string>& t) const override {
    for (size_t k = 0; k < t.size(); ++k) {
      std::string out;
      const std::string& s = t[k];
      for (size_t i = 0; i < s.size();) {
        if (s.compare(i, replacement.size(), replacement) == 0) {
          if (!(k == 0 && drop_first)) out += ' ';
          i += replacement.size();
        } else {
          out += s[i++];
        }
      }
      t[k] = std::move(out);
    }
  }
  bool piece(std::string& s, PieceState& st) const override {
    if (st.fused || after_end_strip(st)) return false;  // (then the whole text is "the first token")
    std::vector<std::string> one{std::move(s)};
    Metaspace m = *this;
    m.drop_first = drop_first && st.first;
    m.run(one);
    s = std::move(one[0]);
    return true;
  }
};

// Runs of <0xXX> tokens become their bytes as text; a run that is not valid UTF-8 becomes one
// U+FFFD per byte.
class ByteFallback final : public Decoder {
 public:
  static int byte_of(const std::string& s) {
    if (s.size() != 6 || s.compare(0, 3, "<0x") != 0 || s[5] != '>') return -1;
    auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; };
    const int h = hex(s[3]), l = hex(s[4]);
    return h < 0 || l < 0 ? -1 : h * 16 + l;
  }
  void run(std::vector<std::string>& t) const override {
    std::vector<std::string> out;
    std::string run;
    auto flush = [&]() {
      if (run.empty()) return;
      if (invalid_utf8_at(run) == std::string::npos) out.push_back(run);
      else
        for (size_t i = 0; i < run.size(); ++i) out.emplace_back("\xEF\xBF\xBD");
      run.clear();
    };
    for (std::string& s : t) {
      const int b = byte_of(s);
      if (b >= 0) {
        run += static_cast<char>(b);
        continue;
      }
      flush();
      out.push_back(std::move(s));
    }
    flush();
    t.swap(out);
  }
  bool piece(std::string& s, PieceState& st) const override {
    if (st.fused || after_end_strip(st)) return false;
    st.byte_fallback = true;
    if (const int b = byte_of(s); b >= 0) {
      s.assign(1, static_cast<char>(b));
      st.byte_token = true;
    }
    return true;
  }
};

class Fuse final : public Decoder {
 public:
  void run(std::vector<std::string>& t) const override {
    std::string all;
    for (const std::string& s : t) all += s;
    t.assign(1, std::move(all));
  }
  bool piece(std::string&, PieceState& st) const override { return st.fused = true; }
};

// Up to `start` leading and `stop` trailing copies of one character cut from every token.
class Strip final : public Decoder {
 public:
  std::string content;
  size_t start = 0, stop = 0;
  void run(std::vector<std::string>& t) const override {
    for (std::string& s : t) {
      size_t b = 0, e = s.size();
      for (size_t k = 0; k < start && s.compare(b, content.size(), content) == 0 && b < e; ++k) b += content.size();
      for (size_t k = 0; k < stop && e >= b + content.size() && s.compare(e - content.size(), content.size(), content) == 0; ++k)
        e -= content.size();
      s = s.substr(b, e - b);
    }
  }
  bool piece(std::string& s, PieceState& st) const override {
    if (!st.fused) {  // each token's own ends
      std::vector<std::string> one{std::move(s)};
      run(one);
      s = std::move(one[0]);
      return true;
    }
    if (after_end_strip(st)) return false;
    st.strip = content;
    st.strip_start = start;
    st.strip_stop = stop;
    return true;
  }
};

class Replace final : public Decoder {
 public:
  ReplaceRule rule;
  void run(std::vector<std::string>& t) const override {
    for (std::string& s : t) rule.apply(s);
  }
  bool piece(std::string& s, PieceState& st) const override {
    // Over fused text a pattern may span two tokens, unless it is one character.
    if (after_end_strip(st)) return false;
    if (st.fused && !rule.single_character()) return false;
    rule.apply(s);
    return true;
  }
};

// BPEDecoder: the end-of-word suffix becomes a space (none after the last token).
class BpeSuffix final : public Decoder {
 public:
  std::string suffix;
  void run(std::vector<std::string>& t) const override {
    for (size_t k = 0; k < t.size(); ++k) {
      std::string out;
      const std::string& s = t[k];
      for (size_t i = 0; i < s.size();) {
        if (!suffix.empty() && s.compare(i, suffix.size(), suffix) == 0) {
          if (k + 1 < t.size()) out += ' ';
          i += suffix.size();
        } else {
          out += s[i++];
        }
      }
      t[k] = std::move(out);
    }
  }
  bool piece(std::string&, PieceState&) const override { return false; }  // the last token's suffix differs
};

}  // namespace

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = str_member(j, "type", where);
  if (type == "Sequence") {
    auto seq = std::make_unique<Sequence>();
    const auto& list = array_member(j, "decoders", where);
    for (size_t i = 0; i < list.size(); ++i) {
      auto d = make_decoder(list[i], where + ".decoders[" + std::to_string(i) + "]");
      if (d) seq->parts.push_back(std::move(d));
    }
    return seq;
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevel>();
  if (type == "Metaspace") {
    auto m = std::make_unique<Metaspace>();
    m->replacement = one_char(j, "replacement", where, "\xE2\x96\x81");
    if (member(j, "prepend_scheme", where)) m->drop_first = str_member(j, "prepend_scheme", where) != "never";
    else m->drop_first = bool_member(j, "add_prefix_space", where, true);
    return m;
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallback>();
  if (type == "Fuse") return std::make_unique<Fuse>();
  if (type == "Strip") {
    auto s = std::make_unique<Strip>();
    s->content = one_char(j, "content", where, nullptr);
    s->start = static_cast<size_t>(int_member(j, "start", where, 0));
    s->stop = static_cast<size_t>(int_member(j, "stop", where, 0));
    return s;
  }
  if (type == "Replace") {
    auto r = std::make_unique<Replace>();
    r->rule = ReplaceRule::parse(j, where);
    return r;
  }
  if (type == "BPEDecoder") {
    auto b = std::make_unique<BpeSuffix>();
    b->suffix = str_member(j, "suffix", where, "</w>");
    return b;
  }
  bad(where, "decoder type '" + io::brief(type) +
                 "' is not supported (supported: Sequence, ByteLevel, Metaspace, ByteFallback, Fuse, Strip, "
                 "Replace, BPEDecoder)");
}

}  // namespace looplm::hf
