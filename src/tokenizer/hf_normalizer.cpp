#include "tokenizer/hf_normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/casemap.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>

#include <vector>

#include "tokenizer/hf_json.h"
#include "tokenizer/hf_regex.h"
#include "tokenizer/hf_replace.h"
#include "tokenizer/hf_unicode.h"

namespace looplm::hf {

namespace {

bool all_below(const std::string& s, unsigned char limit) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= limit) return false;
  return true;
}

class Sequence final : public Normalizer {
 public:
  std::vector<std::unique_ptr<Normalizer>> parts;
  void apply(std::string& s) const override {
    for (const auto& p : parts) p->apply(s);
  }
};

class Unicode final : public Normalizer {
 public:
  enum Form { NFC, NFD, NFKC, NFKD };
  Unicode(Form f, const std::string& where) : form_(f) {
    UErrorCode st = U_ZERO_ERROR;
    n_ = f == NFC ? icu::Normalizer2::getNFCInstance(st) : f == NFD ? icu::Normalizer2::getNFDInstance(st)
       : f == NFKC ? icu::Normalizer2::getNFKCInstance(st) : icu::Normalizer2::getNFKDInstance(st);
    if (U_FAILURE(st)) bad(where, std::string("ICU cannot load its normalization data: ") + u_errorName(st));
  }
  void apply(std::string& s) const override {
    // Text below U+0300 (no lead byte 0xCC or above) is in NFC already: no combining marks, no
    // composition-excluded characters. ASCII is in every form.
    if (all_below(s, form_ == NFC ? 0xCC : 0x80)) return;
    UErrorCode st = U_ZERO_ERROR;
    if (n_->isNormalizedUTF8(icu::StringPiece(s.data(), (int32_t)s.size()), st) && U_SUCCESS(st)) return;
    st = U_ZERO_ERROR;
    std::string out;
    icu::StringByteSink<std::string> sink(&out, (int32_t)s.size());
    n_->normalizeUTF8(0, icu::StringPiece(s.data(), (int32_t)s.size()), sink, nullptr, st);
    if (U_FAILURE(st)) throw Error(std::string("Unicode normalization failed: ") + u_errorName(st));
    s = std::move(out);
  }

 private:
  Form form_;
  const icu::Normalizer2* n_ = nullptr;
};

class Lowercase final : public Normalizer {
 public:
  void apply(std::string& s) const override {
    if (all_below(s, 0x80)) {
      for (char& c : s)
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      return;
    }
    UErrorCode st = U_ZERO_ERROR;
    std::string out;
    icu::StringByteSink<std::string> sink(&out, (int32_t)s.size());
    icu::CaseMap::utf8ToLower("", 0, icu::StringPiece(s.data(), (int32_t)s.size()), sink, nullptr, st);
    if (U_FAILURE(st)) throw Error(std::string("lowercasing failed: ") + u_errorName(st));
    s = std::move(out);
  }
};

class Strip final : public Normalizer {
 public:
  bool left = true, right = true;
  void apply(std::string& s) const override {
    size_t b = 0, e = s.size();
    if (left)
      while (b < e) {
        size_t i = b;
        if (!is_white_space(next_cp(s, i))) break;
        b = i;
      }
    if (right)
      while (e > b) {
        const size_t p = prev_cp_start(s, e);
        size_t i = p;
        if (!is_white_space(next_cp(s, i))) break;
        e = p;
      }
    s = s.substr(b, e - b);
  }
};

class Prepend final : public Normalizer {
 public:
  std::string text;
  void apply(std::string& s) const override {
    if (!s.empty()) s.insert(0, text);  // an empty piece stays empty (as the Rust library does)
  }
};

class Replace final : public Normalizer {
 public:
  ReplaceRule rule;
  void apply(std::string& s) const override { rule.apply(s); }
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = str_member(j, "type", where);
  if (type == "Sequence") {
    auto seq = std::make_unique<Sequence>();
    const auto& list = array_member(j, "normalizers", where);
    for (size_t i = 0; i < list.size(); ++i) {
      auto n = make_normalizer(list[i], where + ".normalizers[" + std::to_string(i) + "]");
      if (n) seq->parts.push_back(std::move(n));
    }
    return seq;
  }
  if (type == "NFC") return std::make_unique<Unicode>(Unicode::NFC, where);
  if (type == "NFD") return std::make_unique<Unicode>(Unicode::NFD, where);
  if (type == "NFKC") return std::make_unique<Unicode>(Unicode::NFKC, where);
  if (type == "NFKD") return std::make_unique<Unicode>(Unicode::NFKD, where);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Strip") {
    auto s = std::make_unique<Strip>();
    s->left = bool_member(j, "strip_left", where, true);
    s->right = bool_member(j, "strip_right", where, true);
    return s;
  }
  if (type == "Prepend") {
    auto p = std::make_unique<Prepend>();
    p->text = str_member(j, "prepend", where);
    return p;
  }
  if (type == "Replace") {
    auto r = std::make_unique<Replace>();
    r->rule = ReplaceRule::parse(j, where);
    return r;
  }
  bad(where, "normalizer type '" + io::brief(type) +
                 "' is not supported (supported: Sequence, NFC, NFD, NFKC, NFKD, Lowercase, Strip, Prepend, Replace)");
}

}  // namespace looplm::hf
