// The regular expressions of Hugging Face tokenizer.json files (docs/data.md, "Hugging Face
// tokenizers"). The files are written for Oniguruma (Ruby syntax), which the Rust library compiles
// them with; they run here on PCRE2 (UTF + UCP, JIT when available) after a translation of the
// constructs whose meaning differs between the two engines:
//   \s \S       Oniguruma: the White_Space property (has U+0085); PCRE2: Z + tab..CR (lacks it)
//   \w \W \b \B Oniguruma: Alphabetic, M, Nd, Pc; PCRE2: L, N, _
//   \d \D       \p{Nd} (the same, written out)
//   \h \H       Oniguruma: a hex digit; PCRE2: horizontal space
//   \v          Oniguruma: the VT character; PCRE2: vertical space
//   [:alpha:] and the other POSIX classes inside brackets: Oniguruma's Unicode meaning
//   ^ $         line anchors at \n in both (PCRE2_MULTILINE, newline = LF)
// Constructs that PCRE2 cannot express with Oniguruma's meaning (nested classes, && intersections,
// \W or \H inside brackets, inline options other than i and x) are refused with an error.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace looplm::hf {

// The PCRE2 pattern for an Oniguruma pattern; Error naming `origin` and the offset of the
// construct it cannot translate.
std::string onig_to_pcre2(std::string_view pattern, const std::string& origin);
// A literal string as a PCRE2 pattern (every character escaped).
std::string pcre2_quote(std::string_view literal);

class Regex {
 public:
  Regex() = default;
  // Compiles an Oniguruma pattern (translated) or, with `literal`, a plain string. Error naming
  // `origin` and the problem for a pattern that does not compile.
  static Regex compile(std::string_view pattern, const std::string& origin, bool literal = false);

  bool valid() const { return static_cast<bool>(impl_); }
  // The first match at or after `start` in `subject`, which must be valid UTF-8 (checked by the
  // caller: matching skips PCRE2's own check, which would cost O(n) per call). Returns false when
  // there is none. A match may be empty.
  bool find(std::string_view subject, size_t start, size_t& match_begin, size_t& match_end) const;
  const std::string& source() const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

}  // namespace looplm::hf
