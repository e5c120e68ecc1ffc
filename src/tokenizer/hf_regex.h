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
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace looplm::hf {

// The PCRE2 pattern for an Oniguruma pattern; Error naming `origin` and the offset of the
// construct it cannot translate.
std::string onig_to_pcre2(std::string_view pattern, const std::string& origin);
// A literal string as a PCRE2 pattern (every character escaped).
std::string pcre2_quote(std::string_view literal);

// The time matching may take over one input (a text to encode, tokens to decode), over all its
// matches. PCRE2 bounds each match by its match limit, but that counts backtracking points, not
// the characters a loop such as `.*` scans between them: a pattern like (.*a){20}, or a(?=.*z),
// stays far under the limit while scanning the rest of a line at every match, so an input cost
// time in proportion to the square of its longest line (19 a's and 80,000 b's: 14.5 s). PCRE2
// counts nothing that is proportional to that work, so the bound is on time: while a
// MatchBudget lives, the matches on its thread may take kFloorSeconds + kSecondsPerByte per byte
// of the input, far beyond what a real tokenizer needs (docs/data.md), and past that find throws
// Error. Each match runs under a small match limit first, so the clock is read between matches
// and between retries at a doubled limit (up to PCRE2's default, kPerMatch: no match is allowed
// more than before). Without a budget each match is bounded alone, as before. The inner of nested
// budgets counts.
class MatchBudget {
 public:
  static constexpr double kFloorSeconds = 1.0;
  static constexpr double kSecondsPerByte = 5e-6;
  static constexpr uint64_t kPerMatch = 10'000'000;  // PCRE2's default match limit
  explicit MatchBudget(size_t input_bytes);
  ~MatchBudget();
  MatchBudget(const MatchBudget&) = delete;
  MatchBudget& operator=(const MatchBudget&) = delete;

 private:
  friend class Regex;
  void check(const std::string& pattern) const;  // Error once the time is spent
  MatchBudget* outer_;
  size_t input_bytes_;
  std::chrono::steady_clock::time_point start_, deadline_;
  uint32_t matches_ = 0;
};

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
