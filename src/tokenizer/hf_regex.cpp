#include "tokenizer/hf_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "io/json_input.h"
#include "looplm/error.h"

namespace looplm::hf {

namespace {

// Oniguruma's word characters (Unicode "Word" without Join_Control).
constexpr const char* kWordChars = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}";

[[noreturn]] void refuse(const std::string& origin, std::string_view pattern, size_t at, const std::string& what) {
  throw Error(origin + ": regex " + io::brief(std::string(pattern), 120) + ": " + what + " at offset " +
              std::to_string(at) + " (Oniguruma syntax that PCRE2 cannot run with the same meaning)");
}

size_t utf8_len(unsigned char b) { return b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 1; }

bool is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// \p{..} / \P{..} / \x{..} copied whole; returns the index after the closing brace.
size_t copy_braced(std::string_view p, size_t i, std::string& out, const std::string& origin) {
  const size_t close = p.find('}', i);
  if (close == std::string_view::npos) refuse(origin, p, i, "an unterminated '{'");
  out.append(p.substr(i, close + 1 - i));
  return close + 1;
}

// A POSIX bracket "[:name:]" at p[i] (inside a class): its Unicode set, as Oniguruma defines it.
size_t posix_class(std::string_view p, size_t i, std::string& out, const std::string& origin) {
  const size_t close = p.find(":]", i + 2);
  if (close == std::string_view::npos) refuse(origin, p, i, "an unterminated POSIX bracket");
  std::string name(p.substr(i + 2, close - i - 2));
  const bool neg = !name.empty() && name[0] == '^';
  if (neg) name.erase(0, 1);
  struct P { const char* name; const char* set; const char* negated; };
  static const P table[] = {
      {"alpha", "\\p{Alphabetic}", "\\P{Alphabetic}"}, {"alnum", "\\p{Alphabetic}\\p{Nd}", nullptr},
      {"digit", "\\p{Nd}", "\\P{Nd}"},                  {"lower", "\\p{Lowercase}", "\\P{Lowercase}"},
      {"upper", "\\p{Uppercase}", "\\P{Uppercase}"},    {"space", "\\p{White_Space}", "\\P{White_Space}"},
      {"blank", "\\t\\p{Zs}", nullptr},                 {"punct", "\\p{P}\\p{S}", nullptr},
      {"cntrl", "\\p{Cc}", "\\P{Cc}"},                  {"word", kWordChars, nullptr},
      {"xdigit", "0-9A-Fa-f", nullptr}};
  for (const P& e : table) {
    if (name != e.name) continue;
    if (neg && !e.negated) refuse(origin, p, i, "the negated POSIX class [:^" + name + ":]");
    out += neg ? e.negated : e.set;
    return close + 2;
  }
  refuse(origin, p, i, "the POSIX class [:" + name + ":]");
}

}  // namespace

std::string pcre2_quote(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}-/#").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

std::string onig_to_pcre2(std::string_view p, const std::string& origin) {
  std::string out;
  out.reserve(p.size() * 2);
  const std::string word_class = std::string("[") + kWordChars + "]";
  const std::string non_word_class = std::string("[^") + kWordChars + "]";
  size_t i = 0;
  bool in_class = false;
  size_t class_start = 0;  // index just after "[" or "[^": a ']' there is literal
  while (i < p.size()) {
    const char c = p[i];
    if (c == '\\') {
      if (i + 1 >= p.size()) refuse(origin, p, i, "a trailing backslash");
      const char e = p[i + 1];
      switch (e) {
        case 's': out += "\\p{White_Space}"; i += 2; continue;
        case 'S': out += "\\P{White_Space}"; i += 2; continue;
        case 'd': out += "\\p{Nd}"; i += 2; continue;
        case 'D': out += "\\P{Nd}"; i += 2; continue;
        case 'v': out += "\\x{0B}"; i += 2; continue;
        case 'w': out += in_class ? kWordChars : word_class; i += 2; continue;
        case 'h': out += in_class ? "0-9A-Fa-f" : "[0-9A-Fa-f]"; i += 2; continue;
        case 'W':
        case 'H':
          if (in_class) refuse(origin, p, i, std::string("\\") + e + " inside brackets");
          out += e == 'W' ? non_word_class : "[^0-9A-Fa-f]";
          i += 2;
          continue;
        case 'b':
        case 'B':
          if (in_class) refuse(origin, p, i, std::string("\\") + e + " inside brackets");
          // Oniguruma's boundary between its word characters and the rest, spelled with lookarounds.
          {
            auto look = [&](const char* kind) { out += kind; out += word_class; out += ')'; };
            out += "(?:";
            look("(?<!");
            look(e == 'b' ? "(?=" : "(?!");
            out += '|';
            look("(?<=");
            look(e == 'b' ? "(?!" : "(?=");
            out += ')';
          }
          i += 2;
          continue;
        case 'u':
          if (i + 6 <= p.size() && is_hex(p[i + 2]) && is_hex(p[i + 3]) && is_hex(p[i + 4]) &&
              is_hex(p[i + 5])) {
            out += "\\x{" + std::string(p.substr(i + 2, 4)) + "}";
            i += 6;
            continue;
          }
          refuse(origin, p, i, "\\u without four hex digits");
        case 'p':
        case 'P':
        case 'x':
          if (i + 2 < p.size() && p[i + 2] == '{') {
            i = copy_braced(p, i, out, origin);
            continue;
          }
          break;
        default:
          break;
      }
      // Any other escape means the same in both engines (\n \t \r \f \a \e \. \A \z \Z \G ...).
      const size_t n = 1 + utf8_len(static_cast<unsigned char>(e));
      out.append(p.substr(i, n));
      i += n;
      continue;
    }
    if (in_class) {
      if (c == ']' && i != class_start) {
        in_class = false;
        out += c;
        ++i;
        continue;
      }
      if (c == '[') {
        if (i + 1 < p.size() && p[i + 1] == ':') {
          i = posix_class(p, i, out, origin);
          continue;
        }
        refuse(origin, p, i, "a nested character class");
      }
      if (c == '&' && i + 1 < p.size() && p[i + 1] == '&') refuse(origin, p, i, "a class intersection (&&)");
    } else {
      if (c == '[') {
        in_class = true;
        out += c;
        ++i;
        if (i < p.size() && p[i] == '^') {
          out += '^';
          ++i;
        }
        class_start = i;
        continue;
      }
      if (c == '(' && i + 2 < p.size() && p[i + 1] == '?') {
        // Inline options: Oniguruma's (Ruby's) m is PCRE2's s (dot matches newline).
        size_t j = i + 2;
        while (j < p.size() && (p[j] == 'i' || p[j] == 'm' || p[j] == 'x' || p[j] == '-')) ++j;
        if (j > i + 2 && j < p.size() && (p[j] == ':' || p[j] == ')')) {
          out += "(?";
          for (size_t k = i + 2; k < j; ++k) out += p[k] == 'm' ? 's' : p[k];
          i = j;
          continue;
        }
        if (j < p.size() && ((p[j] >= 'a' && p[j] <= 'z') || (p[j] >= 'A' && p[j] <= 'Z')))
          refuse(origin, p, i, "an inline option or group kind PCRE2 reads differently");
      }
    }
    const size_t n = utf8_len(static_cast<unsigned char>(c));
    out.append(p.substr(i, n));
    i += n;
  }
  if (in_class) refuse(origin, p, p.size(), "an unterminated character class");
  return out;
}

struct Regex::Impl {
  std::string source;
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Impl() { pcre2_code_free(code); }
};

namespace {
// Per-thread match data and JIT stack: a compiled pattern is shared by threads, these are not.
struct MatchScratch {
  pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* mc = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  MatchScratch() { pcre2_jit_stack_assign(mc, nullptr, stack); }
  ~MatchScratch() {
    pcre2_match_data_free(md);
    pcre2_match_context_free(mc);
    pcre2_jit_stack_free(stack);
  }
};
MatchScratch& scratch() {
  thread_local MatchScratch s;
  return s;
}
std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}
}  // namespace

Regex Regex::compile(std::string_view pattern, const std::string& origin, bool literal) {
  auto impl = std::make_shared<Impl>();
  impl->source = literal ? pcre2_quote(pattern) : onig_to_pcre2(pattern, origin);
  pcre2_compile_context* cc = pcre2_compile_context_create(nullptr);
  pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
  int err = 0;
  PCRE2_SIZE at = 0;
  impl->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(impl->source.data()), impl->source.size(),
                             PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &err, &at, cc);
  pcre2_compile_context_free(cc);
  if (!impl->code) {
    throw Error(origin + ": regex " + io::brief(std::string(pattern), 120) + " does not compile: " + pcre2_message(err) +
                " (at offset " + std::to_string(at) + " of its PCRE2 form " + io::brief(impl->source, 200) + ")");
  }
  impl->jit = pcre2_jit_compile(impl->code, PCRE2_JIT_COMPLETE) == 0;
  Regex r;
  r.impl_ = std::move(impl);
  return r;
}

const std::string& Regex::source() const {
  static const std::string none;
  return impl_ ? impl_->source : none;
}

namespace {
thread_local MatchBudget* current_budget = nullptr;
// The first try's match limit under a budget: small, so the clock is read often even where each
// unit of the limit stands for a scan of the whole rest of the text.
constexpr uint64_t kFirstLimit = 64;
// The clock is read every this many matches (a read costs about as much as a short match).
constexpr uint32_t kMatchesPerCheck = 16;
}  // namespace

MatchBudget::MatchBudget(size_t input_bytes)
    : outer_(current_budget), input_bytes_(input_bytes), start_(std::chrono::steady_clock::now()) {
  deadline_ = start_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                           std::chrono::duration<double>(kFloorSeconds + kSecondsPerByte * (double)input_bytes));
  current_budget = this;
}

MatchBudget::~MatchBudget() { current_budget = outer_; }

void MatchBudget::check(const std::string& pattern) const {
  const auto now = std::chrono::steady_clock::now();
  if (now <= deadline_) return;
  char why[160];
  std::snprintf(why, sizeof why, " bytes took %.1f s, past its budget (%g s + %g us a byte)",
                std::chrono::duration<double>(now - start_).count(), kFloorSeconds, kSecondsPerByte * 1e6);
  throw Error("regex " + io::brief(pattern, 120) + ": matching a text of " + std::to_string(input_bytes_) + why +
              ": the pattern rescans the rest of the text at each match");
}

bool Regex::find(std::string_view s, size_t start, size_t& b, size_t& e) const {
  MatchScratch& m = scratch();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  auto match = [&](uint64_t limit) {
    pcre2_set_match_limit(m.mc, (uint32_t)limit);
    int rc;
    if (impl_->jit) {
      rc = pcre2_jit_match(impl_->code, subject, s.size(), start, PCRE2_NO_UTF_CHECK, m.md, m.mc);
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // a deep backtrack: the interpreter keeps its stack on the heap
        rc = pcre2_match(impl_->code, subject, s.size(), start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, m.md, m.mc);
    } else {
      rc = pcre2_match(impl_->code, subject, s.size(), start, PCRE2_NO_UTF_CHECK, m.md, m.mc);
    }
    return rc;
  };
  MatchBudget* budget = current_budget;
  int rc;
  if (!budget) {
    rc = match(MatchBudget::kPerMatch);
  } else {
    if (++budget->matches_ % kMatchesPerCheck == 0) budget->check(impl_->source);
    // A match that needs more than the first limit is tried again at twice the limit (at most
    // twice the work it needs), the clock read before each try.
    uint64_t limit = kFirstLimit;
    rc = match(limit);
    while (rc == PCRE2_ERROR_MATCHLIMIT && limit < MatchBudget::kPerMatch) {
      budget->check(impl_->source);
      limit = std::min<uint64_t>(2 * limit, MatchBudget::kPerMatch);
      rc = match(limit);
    }
  }
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) throw Error("regex " + io::brief(impl_->source, 120) + ": matching failed: " + pcre2_message(rc));
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(m.md);
  b = ov[0];
  e = ov[1];
  return true;
}

}  // namespace looplm::hf
