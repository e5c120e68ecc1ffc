#include "tokenizer/hf_pretokenizer.h"

#include <array>

#include "tokenizer/hf_json.h"
#include "tokenizer/hf_regex.h"
#include "tokenizer/hf_unicode.h"

namespace looplm::hf {

namespace {

struct ByteTable {
  std::array<std::string, 256> to_char;
  std::array<char32_t, 256> cp{};
  ByteTable() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      cp[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      char32_t c = cp[b];
      std::string& s = to_char[b];
      if (c < 0x80) s += static_cast<char>(c);
      else { s += static_cast<char>(0xC0 | (c >> 6)); s += static_cast<char>(0x80 | (c & 0x3F)); }
    }
  }
};
const ByteTable& table() {
  static const ByteTable t;
  return t;
}

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

Behavior parse_behavior(const std::string& s, const std::string& where) {
  if (s == "Removed") return Behavior::Removed;
  if (s == "Isolated") return Behavior::Isolated;
  if (s == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (s == "MergedWithNext") return Behavior::MergedWithNext;
  if (s == "Contiguous") return Behavior::Contiguous;
  bad(where + ".behavior", "'" + io::brief(s) + "' is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
}

struct Seg {
  size_t b, e;
  bool match;
};

// The pieces of w: matches of re flagged, the text between them not (the Rust library's
// Pattern::find_matches over Oniguruma's iterator, which skips an empty match that touches the
// previous match).
void find_segments(std::string_view w, const Regex& re, std::vector<Seg>& segs) {
  segs.clear();
  size_t prev = 0, search = 0;
  size_t last_match_end = std::string_view::npos;
  size_t b, e;
  while (search <= w.size() && re.find(w, search, b, e)) {
    if (b == e && last_match_end == search) {
      if (search >= w.size()) break;
      search += cp_len(static_cast<unsigned char>(w[search]));
      continue;
    }
    if (prev != b) segs.push_back({prev, b, false});
    segs.push_back({b, e, true});
    prev = e;
    last_match_end = e;
    if (b == e) {
      if (e >= w.size()) break;
      search = e + cp_len(static_cast<unsigned char>(w[e]));
    } else {
      search = e;
    }
  }
  if (prev != w.size()) segs.push_back({prev, w.size(), false});
}

// Rust's NormalizedString::split: the behaviour decides what the matches become; empty pieces go.
void apply_behavior(std::string_view w, std::vector<Seg>& segs, Behavior bh, bool invert,
                    std::vector<std::string_view>& out) {
  if (invert)
    for (Seg& s : segs) s.match = !s.match;
  auto emit = [&](size_t b, size_t e) {
    if (e > b) out.push_back(w.substr(b, e - b));
  };
  switch (bh) {
    case Behavior::Removed:
      for (const Seg& s : segs)
        if (!s.match) emit(s.b, s.e);
      return;
    case Behavior::Isolated:
      for (const Seg& s : segs) emit(s.b, s.e);
      return;
    case Behavior::MergedWithPrevious: {
      std::vector<Seg> acc;
      bool prev_match = false;
      for (const Seg& s : segs) {
        if (s.match && !prev_match && !acc.empty()) acc.back().e = s.e;
        else acc.push_back(s);
        prev_match = s.match;
      }
      for (const Seg& s : acc) emit(s.b, s.e);
      return;
    }
    case Behavior::MergedWithNext: {
      std::vector<Seg> acc;
      bool prev_match = false;
      for (size_t k = segs.size(); k-- > 0;) {
        const Seg& s = segs[k];
        if (s.match && !prev_match && !acc.empty()) acc.back().b = s.b;
        else acc.push_back(s);
        prev_match = s.match;
      }
      for (size_t k = acc.size(); k-- > 0;) emit(acc[k].b, acc[k].e);
      return;
    }
    case Behavior::Contiguous: {
      std::vector<Seg> acc;
      bool prev_match = false;
      for (const Seg& s : segs) {
        if (s.match == prev_match && !acc.empty()) acc.back().e = s.e;
        else acc.push_back(s);
        prev_match = s.match;
      }
      for (const Seg& s : acc) emit(s.b, s.e);
      return;
    }
  }
}

void split_all(std::vector<std::string_view>& words, const Regex& re, Behavior bh, bool invert) {
  std::vector<std::string_view> out;
  out.reserve(words.size() * 2);
  std::vector<Seg> segs;
  for (std::string_view w : words) {
    find_segments(w, re, segs);
    apply_behavior(w, segs, bh, invert, out);
  }
  words.swap(out);
}

class Sequence final : public PreTokenizer {
 public:
  std::vector<std::unique_ptr<PreTokenizer>> parts;
  void run(std::vector<std::string_view>& words, WordArena& arena, bool at_start) const override {
    for (const auto& p : parts) p->run(words, arena, at_start);
  }
};

class Split final : public PreTokenizer {
 public:
  Regex re;
  Behavior behavior = Behavior::Isolated;
  bool invert = false;
  void run(std::vector<std::string_view>& words, WordArena&, bool) const override {
    split_all(words, re, behavior, invert);
  }
};

// GPT-2's pattern, as the Rust library's ByteLevel runs it.
constexpr const char* kGpt2Pattern = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

class ByteLevel final : public PreTokenizer {
 public:
  bool add_prefix_space = false, use_regex = true, raw_bytes = false;
  Regex re;
  void run(std::vector<std::string_view>& words, WordArena& arena, bool) const override {
    if (add_prefix_space)
      for (std::string_view& w : words)
        if (!w.empty() && w[0] != ' ') w = arena.keep(" " + std::string(w));
    if (use_regex) split_all(words, re, Behavior::Isolated, false);
    if (raw_bytes) return;
    const ByteTable& t = table();
    for (std::string_view& w : words) {
      std::string m;
      m.reserve(w.size() * 2);
      for (char c : w) m += t.to_char[static_cast<unsigned char>(c)];
      w = arena.keep(std::move(m));
    }
  }
};

class Metaspace final : public PreTokenizer {
 public:
  std::string replacement = "\xE2\x96\x81";  // U+2581
  enum { Always, First, Never } scheme = Always;
  bool split = true;
  Regex re;  // the replacement, literally
  void run(std::vector<std::string_view>& words, WordArena& arena, bool at_start) const override {
    for (size_t k = 0; k < words.size(); ++k) {
      std::string s;
      s.reserve(words[k].size() + 8);
      for (char c : words[k]) {
        if (c == ' ') s += replacement;
        else s += c;
      }
      const bool prepend = scheme == Always || (scheme == First && at_start && k == 0);
      if (prepend && !s.empty() && s.compare(0, replacement.size(), replacement) != 0) s.insert(0, replacement);
      words[k] = arena.keep(std::move(s));
    }
    if (split) split_all(words, re, Behavior::MergedWithNext, false);
  }
};

}  // namespace

const std::string& byte_to_unicode(unsigned char b) { return table().to_char[b]; }

int unicode_to_byte(char32_t c) {
  static const auto inverse = [] {
    std::array<int16_t, 512> inv;
    inv.fill(-1);
    for (int b = 0; b < 256; ++b) inv[table().cp[b]] = static_cast<int16_t>(b);
    return inv;
  }();
  return c < inverse.size() ? inverse[c] : -1;
}

int count_byte_level(const nlohmann::json& j) {
  if (!j.is_object()) return 0;
  const auto t = j.find("type");
  if (t == j.end() || !t->is_string()) return 0;
  if (*t == "ByteLevel") return 1;
  int n = 0;
  const auto list = j.find("pretokenizers");
  if (*t == "Sequence" && list != j.end() && list->is_array())
    for (const auto& p : *list) n += count_byte_level(p);
  return n;
}

bool ends_with_byte_level(const nlohmann::json& j) {
  if (!j.is_object()) return false;
  const auto t = j.find("type");
  if (t == j.end() || !t->is_string()) return false;
  if (*t == "ByteLevel") return true;
  const auto list = j.find("pretokenizers");
  return *t == "Sequence" && list != j.end() && list->is_array() && !list->empty() && ends_with_byte_level(list->back());
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j, const std::string& where,
                                                 const PreTokenizerOptions& o) {
  if (j.is_null()) return nullptr;
  const std::string type = str_member(j, "type", where);
  if (type == "Sequence") {
    auto seq = std::make_unique<Sequence>();
    const auto& list = array_member(j, "pretokenizers", where);
    for (size_t i = 0; i < list.size(); ++i) {
      auto p = make_pre_tokenizer(list[i], where + ".pretokenizers[" + std::to_string(i) + "]", o);
      if (p) seq->parts.push_back(std::move(p));
    }
    return seq;
  }
  if (type == "Split") {
    auto s = std::make_unique<Split>();
    const nlohmann::json* pat = member(j, "pattern", where);
    if (!pat) bad(where, "no \"pattern\"");
    if (const nlohmann::json* str = member(*pat, "String", where + ".pattern")) {
      if (!str->is_string() || str->get<std::string>().empty())
        bad(where + ".pattern.String", "expected a non-empty string, got " + io::brief_json(*str));
      s->re = Regex::compile(str->get<std::string>(), where + ".pattern", true);
    } else if (const nlohmann::json* re = member(*pat, "Regex", where + ".pattern")) {
      if (!re->is_string()) bad(where + ".pattern.Regex", "expected a string, got " + io::brief_json(*re));
      s->re = Regex::compile(re->get<std::string>(), where + ".pattern");
    } else {
      bad(where + ".pattern", "expected {\"String\": ...} or {\"Regex\": ...}");
    }
    s->behavior = parse_behavior(str_member(j, "behavior", where), where);
    s->invert = bool_member(j, "invert", where, false);
    return s;
  }
  if (type == "ByteLevel") {
    auto b = std::make_unique<ByteLevel>();
    b->add_prefix_space = bool_member(j, "add_prefix_space", where, true);
    b->use_regex = bool_member(j, "use_regex", where, true);
    b->raw_bytes = o.raw_bytes;
    if (b->use_regex) b->re = Regex::compile(kGpt2Pattern, where + " (GPT-2's pattern)");
    return b;
  }
  if (type == "Metaspace") {
    auto m = std::make_unique<Metaspace>();
    m->replacement = str_member(j, "replacement", where, "\xE2\x96\x81");
    size_t n = 0;
    if (m->replacement.empty() || invalid_utf8_at(m->replacement) != std::string::npos ||
        (next_cp(m->replacement, n), n != m->replacement.size()))
      bad(where + ".replacement", "expected one character, got '" + io::brief(m->replacement) + "'");
    if (member(j, "prepend_scheme", where)) {
      const std::string s = str_member(j, "prepend_scheme", where);
      if (s == "always") m->scheme = Metaspace::Always;
      else if (s == "first") m->scheme = Metaspace::First;
      else if (s == "never") m->scheme = Metaspace::Never;
      else bad(where + ".prepend_scheme", "'" + io::brief(s) + "' is not one of always, first, never");
    } else {
      m->scheme = bool_member(j, "add_prefix_space", where, true) ? Metaspace::Always : Metaspace::Never;
    }
    m->split = bool_member(j, "split", where, true);
    m->re = Regex::compile(m->replacement, where, true);
    return m;
  }
  if (type == "Digits") {
    auto s = std::make_unique<Split>();
    const bool individual = bool_member(j, "individual_digits", where, false);
    s->re = Regex::compile("\\p{N}", where);
    s->behavior = individual ? Behavior::Isolated : Behavior::Contiguous;
    return s;
  }
  if (type == "Whitespace") {
    auto s = std::make_unique<Split>();
    s->re = Regex::compile("\\w+|[^\\w\\s]+", where);
    s->behavior = Behavior::Removed;
    s->invert = true;
    return s;
  }
  if (type == "WhitespaceSplit") {
    auto s = std::make_unique<Split>();
    s->re = Regex::compile("\\s", where);
    s->behavior = Behavior::Removed;
    return s;
  }
  if (type == "Punctuation") {
    auto s = std::make_unique<Split>();
    s->re = Regex::compile("[\\p{P}\\x{21}-\\x{2F}\\x{3A}-\\x{40}\\x{5B}-\\x{60}\\x{7B}-\\x{7E}]", where);
    s->behavior = member(j, "behavior", where) ? parse_behavior(str_member(j, "behavior", where), where) : Behavior::Isolated;
    return s;
  }
  bad(where, "pre-tokenizer type '" + io::brief(type) +
                 "' is not supported (supported: Sequence, Split, ByteLevel, Metaspace, Digits, Whitespace, "
                 "WhitespaceSplit, Punctuation)");
}

}  // namespace looplm::hf
