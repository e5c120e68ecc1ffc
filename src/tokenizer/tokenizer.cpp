#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>

#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/hf_unicode.h"
#include "io/json_input.h"
#include "looplm/error.h"

namespace looplm {

namespace {

// Decodes one code point at s[i]; returns its length in bytes, or 0 for an invalid sequence.
int utf8_next(std::string_view s, size_t i, char32_t& cp) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) { cp = b0; return 1; }
  int len;
  char32_t min;
  if ((b0 & 0xE0) == 0xC0) { len = 2; cp = b0 & 0x1F; min = 0x80; }
  else if ((b0 & 0xF0) == 0xE0) { len = 3; cp = b0 & 0x0F; min = 0x800; }
  else if ((b0 & 0xF8) == 0xF0) { len = 4; cp = b0 & 0x07; min = 0x10000; }
  else return 0;
  if (i + len > s.size()) return 0;
  for (int k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

[[noreturn]] void throw_bad_utf8(std::string_view s, size_t i) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "invalid UTF-8 at byte offset %zu (byte 0x%02X)", i,
                static_cast<unsigned>(static_cast<unsigned char>(s[i])));
  throw Error(std::string(buf) + "; the char tokenizer needs valid UTF-8 text (the byte tokenizer "
              "accepts any bytes)");
}

}  // namespace

std::vector<char32_t> utf8_decode(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    char32_t cp;
    const int n = utf8_next(s, i, cp);
    if (n == 0) throw_bad_utf8(s, i);
    out.push_back(cp);
    i += n;
  }
  return out;
}

void utf8_append(char32_t cp, std::string& out) {
  LOOPLM_ASSERT(cp <= 0x10FFFF, "code point out of range");
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string describe_code_point(char32_t cp) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(cp));
  std::string s = buf;
  if (cp >= 0x20 && cp != 0x7F && !(cp >= 0x80 && cp < 0xA0)) {
    s += " '";
    utf8_append(cp, s);
    s += "'";
  }
  return s;
}

Tokenizer Tokenizer::byte_level() { return Tokenizer(); }

Tokenizer Tokenizer::char_level_from_text(const std::string& utf8_corpus) {
  if (utf8_corpus.empty()) throw Error("cannot build a char tokenizer from an empty corpus");
  std::vector<char32_t> cps = utf8_decode(utf8_corpus);
  std::sort(cps.begin(), cps.end());
  cps.erase(std::unique(cps.begin(), cps.end()), cps.end());
  std::string alphabet;
  for (char32_t cp : cps) utf8_append(cp, alphabet);
  return char_level(alphabet);
}

Tokenizer Tokenizer::char_level(const std::string& alphabet_utf8) {
  std::vector<char32_t> cps;
  try {
    cps = utf8_decode(alphabet_utf8);
  } catch (const Error& e) {
    throw UsageError(std::string("tokenizer_chars: ") + e.what());
  }
  if (cps.empty()) {
    throw UsageError("tokenizer_chars is empty: a char tokenizer needs its alphabet (build it "
                     "from the corpus, e.g. 'looplm data --tokenizer char')");
  }
  Tokenizer t;
  t.kind_ = Kind::Char;
  t.alphabet_ = alphabet_utf8;
  t.cps_ = std::move(cps);
  t.ascii_.fill(-1);
  for (size_t id = 0; id < t.cps_.size(); ++id) {
    const char32_t cp = t.cps_[id];
    bool dup;
    if (cp < 128) {
      dup = t.ascii_[cp] >= 0;
      if (!dup) t.ascii_[cp] = static_cast<int32_t>(id);
    } else {
      dup = !t.other_.emplace(cp, static_cast<int32_t>(id)).second;
    }
    if (dup) {
      throw UsageError("tokenizer_chars: code point " + describe_code_point(cp) +
                       " appears more than once (at id " + std::to_string(id) + ")");
    }
  }
  return t;
}

Tokenizer Tokenizer::hf_from_json(const std::string& json_text, const std::string& origin) {
  // A run reads its tokenizer several times (load, validation, the model's own copy); a file of
  // tens of MB is parsed once. The last two stay alive.
  static std::mutex mu;
  static std::vector<std::shared_ptr<const HfTokenizer>> recent;
  Tokenizer t;
  t.kind_ = Kind::Hf;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& h : recent)
      if (h->json() == json_text) t.hf_ = h;
  }
  if (!t.hf_) {
    t.hf_ = HfTokenizer::from_json(json_text, origin);
    std::lock_guard<std::mutex> lock(mu);
    recent.insert(recent.begin(), t.hf_);
    if (recent.size() > 2) recent.pop_back();
  }
  return t;
}

Tokenizer Tokenizer::hf_from_file(const std::string& path) { return hf_from_json(HfTokenizer::read_file_text(path), path); }

Tokenizer Tokenizer::from_checkpoint(Config cfg, const std::map<std::string, std::string>& metadata, const std::string& file) {
  if (cfg.tokenizer == "hf") {
    const auto it = metadata.find(kTokenizerMetadataKey);
    if (it == metadata.end())
      throw Error(file + ": its config names an hf tokenizer, but the metadata has no '" + std::string(kTokenizerMetadataKey) + "'");
    cfg.tokenizer_json = it->second;
  }
  try {
    return from_config(cfg);
  } catch (const UsageError& e) {
    throw Error(file + ": " + e.what());
  }
}

const std::string& Tokenizer::hf_json() const {
  static const std::string none;
  return hf_ ? hf_->json() : none;
}

int Tokenizer::vocab_size() const {
  return kind_ == Kind::Byte ? 256 : kind_ == Kind::Char ? static_cast<int>(cps_.size()) : hf_->vocab_size();
}

Tokenizer Tokenizer::from_config(const Config& cfg) {
  Tokenizer t;
  if (cfg.tokenizer == "byte") {
    t = byte_level();
  } else if (cfg.tokenizer == "char") {
    t = char_level(cfg.tokenizer_chars);
  } else if (cfg.tokenizer == "hf") {
    if (!cfg.tokenizer_json.empty()) t = hf_from_json(cfg.tokenizer_json, cfg.tokenizer_file.empty() ? "tokenizer.json" : cfg.tokenizer_file);
    else if (!cfg.tokenizer_file.empty()) t = hf_from_file(cfg.tokenizer_file);
    else throw UsageError("tokenizer hf needs its tokenizer.json: --set tokenizer_file=FILE");
  } else {
    throw UsageError("tokenizer: unknown kind '" + io::brief(cfg.tokenizer) + "' (expected byte, char or hf)");
  }
  if (cfg.vocab_size < t.vocab_size()) {
    throw UsageError("vocab_size " + std::to_string(cfg.vocab_size) + " is smaller than the " +
                     t.kind_name() + " tokenizer's vocabulary (" + std::to_string(t.vocab_size()) +
                     ")");
  }
  return t;
}

void Tokenizer::to_config(Config& cfg) const {
  cfg.tokenizer = kind_name();
  cfg.tokenizer_chars = kind_ == Kind::Char ? alphabet_ : std::string();
  cfg.tokenizer_json = kind_ == Kind::Hf ? hf_->json() : std::string();
  cfg.vocab_size = vocab_size();
}

int32_t Tokenizer::id_of(char32_t cp) const {
  if (cp < 128) return ascii_[cp];
  const auto it = other_.find(cp);
  return it == other_.end() ? -1 : it->second;
}

std::vector<int32_t> Tokenizer::encode_with_special(std::string_view text) const {
  return kind_ == Kind::Hf ? hf_->encode(text, true) : encode(text);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  if (kind_ == Kind::Hf) return hf_->encode(text, false);
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  if (kind_ == Kind::Byte) {
    for (char c : text) ids.push_back(static_cast<unsigned char>(c));
    return ids;
  }
  for (size_t i = 0; i < text.size();) {
    char32_t cp;
    const int n = utf8_next(text, i, cp);
    if (n == 0) throw_bad_utf8(text, i);
    const int32_t id = id_of(cp);
    if (id < 0) {
      throw Error("character " + describe_code_point(cp) + " at byte offset " + std::to_string(i) +
                  " is not in the char tokenizer's alphabet (" + std::to_string(cps_.size()) +
                  " symbols); hint: build the alphabet from text that contains it, or use the "
                  "byte tokenizer");
    }
    ids.push_back(id);
    i += n;
  }
  return ids;
}

int32_t Tokenizer::fallback_id() const {
  if (kind_ == Kind::Byte) return ' ';
  if (kind_ == Kind::Hf) {  // what a byte of invalid UTF-8 is read as: U+FFFD's first id
    const std::vector<int32_t> ids = hf_->encode("\xEF\xBF\xBD");
    return ids.empty() ? 0 : ids[0];
  }
  return ascii_[' '] >= 0 ? ascii_[' '] : 0;
}

std::vector<int32_t> Tokenizer::encode_prompt(std::string_view text, std::vector<std::string>* unseen) const {
  if (kind_ == Kind::Byte) return encode(text);
  if (kind_ == Kind::Hf) {
    if (hf::invalid_utf8_at(text) == std::string_view::npos) return encode(text);
    std::vector<std::string> seen;
    for (size_t i = 0; i < text.size();) {
      const size_t at = hf::invalid_utf8_at(text.substr(i));
      if (at == std::string_view::npos) break;
      char b[32];
      std::snprintf(b, sizeof b, "byte 0x%02X (not UTF-8)", (unsigned)(unsigned char)text[i + at]);
      if (std::find(seen.begin(), seen.end(), b) == seen.end()) seen.push_back(b);
      i += at + 1;
    }
    if (unseen) *unseen = std::move(seen);
    return encode(hf::utf8_lossy(text));
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  std::vector<std::string> seen;
  auto note = [&](const std::string& what) {
    if (std::find(seen.begin(), seen.end(), what) == seen.end()) seen.push_back(what);
  };
  for (size_t i = 0; i < text.size();) {
    char32_t cp;
    const int n = utf8_next(text, i, cp);
    if (n == 0) {  // a byte that is not UTF-8
      char b[32];
      std::snprintf(b, sizeof b, "byte 0x%02X (not UTF-8)", (unsigned)(unsigned char)text[i]);
      note(b);
      ids.push_back(fallback_id());
      ++i;
      continue;
    }
    int32_t id = id_of(cp);
    if (id < 0) {
      note(describe_code_point(cp));
      id = fallback_id();
    }
    ids.push_back(id);
    i += n;
  }
  if (unseen) *unseen = std::move(seen);
  return ids;
}

void Tokenizer::append_decoded(int32_t id, std::string& out) const {
  if (id < 0 || id >= vocab_size()) {
    throw Error("token id " + std::to_string(id) + " is outside the " + kind_name() +
                " tokenizer's vocabulary [0, " + std::to_string(vocab_size()) + ")");
  }
  if (kind_ == Kind::Byte) {
    out += static_cast<char>(static_cast<unsigned char>(id));
  } else {
    utf8_append(cps_[id], out);
  }
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  if (kind_ == Kind::Hf) return hf_->decode(ids);
  std::string out;
  out.reserve(ids.size());
  for (int32_t id : ids) append_decoded(id, out);
  return out;
}

std::string Tokenizer::piece(int32_t id) const {
  if (kind_ != Kind::Hf) return decode_one(id);
  if (!hf_->stream_plan().piecewise) return hf_->decode({id});  // (its decoder reads tokens together)
  std::string out;
  hf_->append_piece(id, false, out);
  return out;
}

std::string Tokenizer::decode_one(int32_t id) const {
  if (kind_ == Kind::Hf) return hf_->decode({id});
  std::string out;
  append_decoded(id, out);
  return out;
}

}  // namespace looplm
