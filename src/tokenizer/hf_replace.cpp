#include "tokenizer/hf_replace.h"

#include "tokenizer/hf_json.h"
#include "tokenizer/hf_unicode.h"

namespace looplm::hf {

ReplaceRule ReplaceRule::parse(const nlohmann::json& j, const std::string& where) {
  ReplaceRule r;
  r.content = str_member(j, "content", where);
  const nlohmann::json* pat = member(j, "pattern", where);
  if (!pat) bad(where, "no \"pattern\"");
  if (const nlohmann::json* s = member(*pat, "String", where + ".pattern")) {
    if (!s->is_string() || s->get<std::string>().empty())
      bad(where + ".pattern.String", "expected a non-empty string, got " + io::brief_json(*s));
    r.literal = s->get<std::string>();
  } else if (const nlohmann::json* re = member(*pat, "Regex", where + ".pattern")) {
    if (!re->is_string()) bad(where + ".pattern.Regex", "expected a string, got " + io::brief_json(*re));
    r.regex = Regex::compile(re->get<std::string>(), where + ".pattern");
  } else {
    bad(where + ".pattern", "expected {\"String\": ...} or {\"Regex\": ...}");
  }
  return r;
}

bool ReplaceRule::single_character() const {
  return !regex.valid() && !literal.empty() && literal.size() == cp_len(static_cast<unsigned char>(literal[0]));
}

void ReplaceRule::apply(std::string& s) const {
  std::string out;
  size_t from = 0;
  if (!regex.valid()) {
    if (s.find(literal) == std::string::npos) return;
    for (size_t at; (at = s.find(literal, from)) != std::string::npos; from = at + literal.size()) {
      out.append(s, from, at - from);
      out += content;
    }
  } else {
    size_t b, e, search = 0;
    while (search <= s.size() && regex.find(s, search, b, e)) {
      if (e == b) {  // an empty match replaces nothing; step over one character
        if (b >= s.size()) break;
        search = b + cp_len(static_cast<unsigned char>(s[b]));
        continue;
      }
      out.append(s, from, b - from);
      out += content;
      from = search = e;
    }
    if (from == 0 && out.empty()) return;
  }
  out.append(s, from, std::string::npos);
  s = std::move(out);
}

}  // namespace looplm::hf
