// A Jinja interpreter for chat templates: lexer, parser and a tree-walking evaluator with Python's
// value semantics, written to render exactly what jinja2 3.1 renders under transformers'
// settings (src/text/jinja.h, docs/chat_templates.md). Sections:
//   Unicode helpers · values · Python printing (str, repr, float repr) · json.dumps · lexer ·
//   syntax tree · parser · interpreter (scopes, operators, attributes, loops, macros) ·
//   string methods · %-formatting and str.format · filters · tests · globals · Template.
//
// Limits (jinja.h: Limits): output and any one string <= 32 MiB, lists built by the template
// <= 2^20 items, range() <= 100000 items (the sandbox's MAX_RANGE, same message), nested macro
// calls / recursive loops <= 100, data nesting <= 256, template nesting (parser) <= 200 levels,
// and a work budget of 5M steps (statements, iterations, calls, and one step per 64 bytes of
// every string built), so a hostile template ends with a RenderError instead of running away.
// Python integers are unbounded; ours are 64-bit and overflow is an error.
#include "text/jinja.h"

#include <unicode/uchar.h>
#include <unicode/ustring.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/hf_unicode.h"

namespace looplm::jinja {

namespace {

using ojson = nlohmann::ordered_json;

// Errors raised while rendering carry no line; Interp::render adds the line being rendered.
[[noreturn]] void fail(const std::string& msg) { throw RenderError(msg, false, 0); }

// ============================================================================ Unicode helpers
// Strings are UTF-8 (validated on the way in); Python counts and indexes code points.

using hf::next_cp;  // (valid UTF-8: strings are checked on the way in)

void put_cp(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

std::u32string to_u32(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out += next_cp(s, i);
  return out;
}

std::string from_u32(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) put_cp(out, c);
  return out;
}

size_t cp_count(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// Strict UTF-8 (no overlongs, surrogates or code points above U+10FFFF).
bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
    const unsigned char b0 = b(0);
    if (b0 < 0x80) { ++i; continue; }
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF) need = 1;
    else if (b0 >= 0xE0 && b0 <= 0xEF) { need = 2; if (b0 == 0xE0) lo = 0xA0; if (b0 == 0xED) hi = 0x9F; }
    else if (b0 >= 0xF0 && b0 <= 0xF4) { need = 3; if (b0 == 0xF0) lo = 0x90; if (b0 == 0xF4) hi = 0x8F; }
    else return false;
    if (i + need >= s.size()) return false;
    for (size_t k = 1; k <= need; ++k) {
      const unsigned char c = b(k);
      if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) return false;
    }
    i += need + 1;
  }
  return true;
}

// str.isspace() / the regex \s of Python (Unicode White_Space as CPython defines it).
bool py_space(char32_t c) {
  return (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// The line boundaries of str.splitlines() (\r\n counts as one).
bool py_linebreak(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 || c == 0x2028 ||
         c == 0x2029;
}

// str.isprintable() of one character: not Cc, Cf, Cs, Co, Cn, Zl, Zp, or Zs other than ' '.
bool py_printable(char32_t c) {
  if (c == ' ') return true;
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_CONTROL_CHAR: case U_FORMAT_CHAR: case U_SURROGATE: case U_PRIVATE_USE_CHAR: case U_UNASSIGNED:
    case U_LINE_SEPARATOR: case U_PARAGRAPH_SEPARATOR: case U_SPACE_SEPARATOR:
      return false;
    default:
      return true;
  }
}

bool is_ascii(std::string_view s) {
  for (unsigned char c : s)
    if (c >= 0x80) return false;
  return true;
}

// Python's full case mappings (str.upper/lower, and title case for capitalize) through ICU's root
// locale, which applies the same unconditional SpecialCasing rules (ß -> SS, final sigma).
enum class Case { Upper, Lower, Title, Fold };
std::string map_case(std::string_view s, Case mode) {
  if (is_ascii(s) && mode != Case::Title) {
    std::string out(s);
    for (char& c : out)
      if (mode == Case::Upper) { if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 32); }
      else if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
    return out;
  }
  std::u16string in(s.size() + 1, u'\0');
  int32_t n = 0;
  UErrorCode err = U_ZERO_ERROR;
  u_strFromUTF8(reinterpret_cast<UChar*>(in.data()), static_cast<int32_t>(in.size()), &n, s.data(),
                static_cast<int32_t>(s.size()), &err);
  in.resize(static_cast<size_t>(n));
  std::u16string out(in.size() * 3 + 8, u'\0');
  err = U_ZERO_ERROR;
  auto* o = reinterpret_cast<UChar*>(out.data());
  const auto* i = reinterpret_cast<const UChar*>(in.data());
  const auto cap = static_cast<int32_t>(out.size()), len = static_cast<int32_t>(in.size());
  switch (mode) {
    case Case::Upper: n = u_strToUpper(o, cap, i, len, "", &err); break;
    case Case::Lower: n = u_strToLower(o, cap, i, len, "", &err); break;
    case Case::Title: n = u_strToTitle(o, cap, i, len, nullptr, "", &err); break;
    case Case::Fold: n = u_strFoldCase(o, cap, i, len, U_FOLD_CASE_DEFAULT, &err); break;
  }
  if (U_FAILURE(err)) fail("case mapping failed");
  out.resize(static_cast<size_t>(n));
  std::string r(out.size() * 3 + 1, '\0');
  err = U_ZERO_ERROR;
  u_strToUTF8(r.data(), static_cast<int32_t>(r.size()), &n, reinterpret_cast<const UChar*>(out.data()),
              static_cast<int32_t>(out.size()), &err);
  r.resize(static_cast<size_t>(n));
  return r;
}

std::string cp_str(char32_t c) {
  std::string s;
  put_cp(s, c);
  return s;
}

bool is_cased(char32_t c) { return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_CASED); }
bool is_lower_cp(char32_t c) { return u_isULowercase(static_cast<UChar32>(c)); }
bool is_upper_cp(char32_t c) { return u_isUUppercase(static_cast<UChar32>(c)); }
bool is_title_cp(char32_t c) { return u_istitle(static_cast<UChar32>(c)); }
// str.isalpha / isdecimal / isdigit / isnumeric of one character, by general category.
bool is_alpha_cp(char32_t c) {
  const auto t = u_charType(static_cast<UChar32>(c));
  return t == U_UPPERCASE_LETTER || t == U_LOWERCASE_LETTER || t == U_TITLECASE_LETTER || t == U_MODIFIER_LETTER ||
         t == U_OTHER_LETTER;
}
bool is_decimal_cp(char32_t c) { return u_charType(static_cast<UChar32>(c)) == U_DECIMAL_DIGIT_NUMBER; }
bool is_numeric_cp(char32_t c) {
  return u_getIntPropertyValue(static_cast<UChar32>(c), UCHAR_NUMERIC_TYPE) != U_NT_NONE;
}
bool is_digit_cp(char32_t c) {
  const int t = u_getIntPropertyValue(static_cast<UChar32>(c), UCHAR_NUMERIC_TYPE);
  return t == U_NT_DECIMAL || t == U_NT_DIGIT;
}
// The regex \w of Python for str patterns: alphanumeric (isalnum) or '_'.
bool is_word_cp(char32_t c) { return c == '_' || is_alpha_cp(c) || is_numeric_cp(c); }

// ============================================================================ values
// Python's value kinds as Jinja sees them. Lists and dicts are immutable once built (the sandbox
// forbids mutation), so values share them freely; namespaces are the one mutable object.

struct Value;
using Vec = std::vector<Value>;

enum class K : uint8_t { Undef, None, Bool, Int, Float, Str, List, Dict, Func, Ns, Loop, Iter };
// What a List value is in Python (printing and a few operations differ).
enum class Fl : uint8_t { List, Tuple, Items, Keys, Values, Range };

struct Interp;
struct Args {
  Vec pos;
  std::vector<std::pair<std::string, Value>> kw;
};

struct Value {
  K k = K::Undef;
  bool markup = false;  // a str made by |safe or |escape (markupsafe.Markup)
  union {
    bool b;
    int64_t i = 0;
    double f;
  };
  std::shared_ptr<void> p;  // Str: std::string; List: ListObj; Dict: DictObj; ... Undef: UndefObj

  bool is(K kind) const { return k == kind; }
  bool is_num() const { return k == K::Bool || k == K::Int || k == K::Float; }
  bool is_intlike() const { return k == K::Bool || k == K::Int; }
  int64_t as_int() const { return k == K::Bool ? (b ? 1 : 0) : i; }
  double as_float() const { return k == K::Float ? f : static_cast<double>(as_int()); }
  const std::string& str() const { return *static_cast<const std::string*>(p.get()); }
  template <class T> T& obj() const { return *static_cast<T*>(p.get()); }
};

struct UndefObj {
  std::string msg;  // what an operation on it raises (jinja2.Undefined._undefined_message)
};
struct ListObj {
  Vec v;
  Fl fl = Fl::List;
  int64_t r0 = 0, r1 = 0, r2 = 1;  // Range: start, stop, step (for printing)
};
struct FuncObj {
  std::string name;
  bool macro = false;
  std::function<Value(Interp&, Args&)> fn;
};
struct IterObj {  // a one-shot iterator: generators of filters, reversed()
  Vec v;
  size_t pos = 0;
  std::string type = "generator";
};
struct DictObj;
struct NsObj;
struct LoopObj;

Value undef(std::string msg) {
  Value v;
  v.p = std::make_shared<UndefObj>(UndefObj{std::move(msg)});
  return v;
}
Value none() { Value v; v.k = K::None; return v; }
Value boolean(bool b) { Value v; v.k = K::Bool; v.b = b; return v; }
Value integer(int64_t i) { Value v; v.k = K::Int; v.i = i; return v; }
Value real(double f) { Value v; v.k = K::Float; v.f = f; return v; }
Value string(std::string s, bool markup = false) {
  Value v;
  v.k = K::Str;
  v.markup = markup;
  v.p = std::make_shared<std::string>(std::move(s));
  return v;
}
Value list(Vec items, Fl fl = Fl::List) {
  Value v;
  v.k = K::List;
  auto o = std::make_shared<ListObj>();
  o->v = std::move(items);
  o->fl = fl;
  v.p = std::move(o);
  return v;
}
Value iterator(Vec items, std::string type = "generator") {
  Value v;
  v.k = K::Iter;
  auto o = std::make_shared<IterObj>();
  o->v = std::move(items);
  o->type = std::move(type);
  v.p = std::move(o);
  return v;
}
Value func(std::string name, std::function<Value(Interp&, Args&)> fn, bool macro = false) {
  Value v;
  v.k = K::Func;
  v.p = std::make_shared<FuncObj>(FuncObj{std::move(name), macro, std::move(fn)});
  return v;
}

const char* type_name(const Value& v) {
  switch (v.k) {
    case K::Undef: return "Undefined";
    case K::None: return "NoneType";
    case K::Bool: return "bool";
    case K::Int: return "int";
    case K::Float: return "float";
    case K::Str: return v.markup ? "Markup" : "str";
    case K::List:
      switch (v.obj<ListObj>().fl) {
        case Fl::List: return "list";
        case Fl::Tuple: return "tuple";
        case Fl::Items: return "dict_items";
        case Fl::Keys: return "dict_keys";
        case Fl::Values: return "dict_values";
        case Fl::Range: return "range";
      }
      return "list";
    case K::Dict: return "dict";
    case K::Func: return v.obj<FuncObj>().macro ? "Macro" : "builtin_function_or_method";
    case K::Ns: return "Namespace";
    case K::Loop: return "LoopContext";
    case K::Iter: return v.obj<IterObj>().type.c_str();
  }
  return "object";
}

// jinja2.utils.object_type_repr, for "... has no attribute ..." messages.
std::string object_type_repr(const Value& v) {
  if (v.k == K::None) return "None";
  if (v.k == K::Ns) return "jinja2.utils.Namespace object";
  if (v.k == K::Loop) return "jinja2.runtime.LoopContext object";
  return std::string(type_name(v)) + " object";
}

// Python's hash equality classes, as keys of an index: 1, 1.0 and True are the same key.
std::string hash_key(const Value& v) {
  switch (v.k) {
    case K::Str: return "s" + v.str();
    case K::Bool: case K::Int: return "i" + std::to_string(v.as_int());
    case K::Float: {
      double ip;
      if (std::modf(v.f, &ip) == 0.0 && std::fabs(v.f) < 9.2e18) return "i" + std::to_string(static_cast<int64_t>(v.f));
      return "f" + std::to_string(std::bit_cast<uint64_t>(v.f));
    }
    case K::None: return "n";
    case K::Undef: return "u";
    case K::List:
      if (v.obj<ListObj>().fl == Fl::Tuple) {
        std::string k = "t(";
        for (const Value& e : v.obj<ListObj>().v) { const std::string h = hash_key(e); k += std::to_string(h.size()) + ":" + h; }
        return k + ")";
      }
      break;
    default:
      break;
  }
  fail(std::string("unhashable type: '") + type_name(v) + "'");
}

// Heterogeneous lookup: find a std::string key by string_view without building one.
struct SvHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using Index = std::unordered_map<std::string, size_t, SvHash, std::equal_to<>>;

// A Python dict: insertion-ordered, keyed by value equality. String keys (nearly all of them)
// have their own index, so attribute lookups do not allocate.
struct DictObj {
  std::vector<std::pair<Value, Value>> items;
  Index strs, others;  // str keys; hash_key() of the other keys

  const Value* find_str(std::string_view key) const {
    const auto it = strs.find(key);
    return it == strs.end() ? nullptr : &items[it->second].second;
  }
  const Value* find(const Value& key) const {
    if (key.k == K::Str) return find_str(key.str());
    const auto it = others.find(hash_key(key));
    return it == others.end() ? nullptr : &items[it->second].second;
  }
  void set(const Value& key, Value v) {
    auto [it, fresh] = key.k == K::Str ? strs.emplace(key.str(), items.size()) : others.emplace(hash_key(key), items.size());
    if (fresh) items.emplace_back(key, std::move(v));
    else items[it->second].second = std::move(v);
  }
};

struct NsObj {
  DictObj attrs;
};

Value dict(DictObj d) {
  Value v;
  v.k = K::Dict;
  v.p = std::make_shared<DictObj>(std::move(d));
  return v;
}

bool truthy(const Value& v) {
  switch (v.k) {
    case K::Undef: case K::None: return false;
    case K::Bool: return v.b;
    case K::Int: return v.i != 0;
    case K::Float: return v.f != 0.0;
    case K::Str: return !v.str().empty();
    case K::List: return !v.obj<ListObj>().v.empty();
    case K::Dict: return !v.obj<DictObj>().items.empty();
    default: return true;
  }
}

[[noreturn]] void undefined_error(const Value& u) { fail(u.obj<UndefObj>().msg); }

// ============================================================================ Python printing

// float.__repr__: the shortest digits that round-trip, in Python's layout.
std::string float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // [-]d[.ddd]e[+-]XX
  std::string sign;
  if (sci[0] == '-') { sign = "-"; sci.erase(0, 1); }
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp = std::stoi(sci.substr(e + 1));
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int decpt = exp + 1, nd = static_cast<int>(digits.size());
  std::string out = sign;
  if (decpt <= -4 || decpt > 16) {
    out += digits[0];
    if (nd > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    return out + eb;
  }
  if (decpt <= 0) return out + "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
  if (decpt >= nd) return out + digits + std::string(static_cast<size_t>(decpt - nd), '0') + ".0";
  return out + digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
}

void hex_escape(std::string& out, char32_t c) {
  char b[16];
  if (c <= 0xFF) std::snprintf(b, sizeof b, "\\x%02x", static_cast<unsigned>(c));
  else if (c <= 0xFFFF) std::snprintf(b, sizeof b, "\\u%04x", static_cast<unsigned>(c));
  else std::snprintf(b, sizeof b, "\\U%08x", static_cast<unsigned>(c));
  out += b;
}

// repr() of a str: single quotes unless the text has ' and no ", printable characters as they are.
std::string str_repr(std::string_view s, bool ascii = false) {
  const bool dq = s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (size_t i = 0; i < s.size();) {
    const char32_t c = next_cp(s, i);
    if (c == static_cast<char32_t>(q) || c == '\\') { out += '\\'; out += static_cast<char>(c); }
    else if (c == '\t') out += "\\t";
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c < 0x20 || c == 0x7F) hex_escape(out, c);
    else if (c < 0x7F) out += static_cast<char>(c);
    else if (!ascii && py_printable(c)) put_cp(out, c);
    else hex_escape(out, c);
  }
  out += q;
  return out;
}

// ascii(): a repr with its non-ASCII characters escaped.
std::string ascii_escape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = next_cp(s, i);
    if (c < 0x80) out += static_cast<char>(c);
    else hex_escape(out, c);
  }
  return out;
}

void check_depth(int depth, int max) {
  if (depth > max) fail("maximum nesting depth exceeded (nested lists, dicts or namespaces)");
}

std::string to_str(const Value& v, int max_depth = 256);
void repr_into(std::string& out, const Value& v, int depth, int max_depth);

void repr_seq(std::string& out, const Vec& items, const char* open, const char* close, int depth, int max_depth) {
  out += open;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    repr_into(out, items[i], depth + 1, max_depth);
  }
  out += close;
}

void repr_dict(std::string& out, const DictObj& d, int depth, int max_depth) {
  out += '{';
  bool first = true;
  for (const auto& [k, v] : d.items) {
    if (!first) out += ", ";
    first = false;
    repr_into(out, k, depth + 1, max_depth);
    out += ": ";
    repr_into(out, v, depth + 1, max_depth);
  }
  out += '}';
}

std::string loop_repr(const Value& v);

void repr_into(std::string& out, const Value& v, int depth, int max_depth) {
  check_depth(depth, max_depth);
  switch (v.k) {
    case K::Undef: out += "Undefined"; return;
    case K::Str:
      if (v.markup) { out += "Markup(" + str_repr(v.str()) + ")"; return; }
      out += str_repr(v.str());
      return;
    case K::List: {
      const ListObj& l = v.obj<ListObj>();
      switch (l.fl) {
        case Fl::List: repr_seq(out, l.v, "[", "]", depth, max_depth); return;
        case Fl::Tuple:
          repr_seq(out, l.v, "(", l.v.size() == 1 ? ",)" : ")", depth, max_depth);
          return;
        case Fl::Items: repr_seq(out, l.v, "dict_items([", "])", depth, max_depth); return;
        case Fl::Keys: repr_seq(out, l.v, "dict_keys([", "])", depth, max_depth); return;
        case Fl::Values: repr_seq(out, l.v, "dict_values([", "])", depth, max_depth); return;
        case Fl::Range:
          out += "range(" + std::to_string(l.r0) + ", " + std::to_string(l.r1);
          if (l.r2 != 1) out += ", " + std::to_string(l.r2);
          out += ")";
          return;
      }
      return;
    }
    case K::Dict: repr_dict(out, v.obj<DictObj>(), depth, max_depth); return;
    case K::Ns:
      out += "<Namespace ";
      repr_dict(out, v.obj<NsObj>().attrs, depth, max_depth);
      out += ">";
      return;
    default: out += to_str(v, max_depth); return;
  }
}

// str(): what {{ value }} prints.
std::string to_str(const Value& v, int max_depth) {
  switch (v.k) {
    case K::Undef: return "";
    case K::None: return "None";
    case K::Bool: return v.b ? "True" : "False";
    case K::Int: return std::to_string(v.i);
    case K::Float: return float_repr(v.f);
    case K::Str: return v.str();
    case K::Func: {
      const FuncObj& fn = v.obj<FuncObj>();
      if (!fn.macro) return "<built-in method " + fn.name + ">";
      return fn.name.empty() ? "<Macro anonymous>" : "<Macro '" + fn.name + "'>";  // a call block's caller has no name
    }
    case K::Loop: return loop_repr(v);
    case K::Iter: return "<" + v.obj<IterObj>().type + " object>";
    default: {
      std::string out;
      repr_into(out, v, 0, max_depth);
      return out;
    }
  }
}

// ============================================================================ json.dumps
// transformers' tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None,
// sort_keys=False), i.e. separators ", " and ": " (",", ": " with an indent).

struct JsonOpts {
  bool ensure_ascii = false;
  bool indent = false;
  std::string indent_str;
  std::string item_sep = ", ", key_sep = ": ";
  bool sort_keys = false;
  int max_depth = 256;
};

void json_str(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    const char32_t c = next_cp(s, i);
    char b[16];
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
          if (c > 0xFFFF) {
            const char32_t v = c - 0x10000;
            std::snprintf(b, sizeof b, "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                          static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
          } else {
            std::snprintf(b, sizeof b, "\\u%04x", static_cast<unsigned>(c));
          }
          out += b;
        } else {
          out.append(s.substr(start, i - start));
        }
    }
  }
  out += '"';
}

[[noreturn]] void not_serializable(const Value& v) {
  fail(std::string("Object of type ") + type_name(v) + " is not JSON serializable");
}

int py_order(const Value& a, const Value& b, const char* op, const Value& lhs, const Value& rhs);

// A dict key as json.dumps writes it (str, or int / float / bool / None converted).
std::string json_key(const Value& k) {
  switch (k.k) {
    case K::Str: return k.str();
    case K::Bool: return k.b ? "true" : "false";
    case K::Int: return std::to_string(k.i);
    case K::Float:
      if (std::isnan(k.f)) return "NaN";
      if (std::isinf(k.f)) return k.f > 0 ? "Infinity" : "-Infinity";
      return float_repr(k.f);
    case K::None: return "null";
    default: fail(std::string("keys must be str, int, float, bool or None, not ") + type_name(k));
  }
}

void json_dump(std::string& out, const Value& v, const JsonOpts& o, int level) {
  check_depth(level, o.max_depth);
  const auto newline = [&](int lv) {
    out += '\n';
    for (int i = 0; i < lv; ++i) out += o.indent_str;
  };
  switch (v.k) {
    case K::None: out += "null"; return;
    case K::Bool: out += v.b ? "true" : "false"; return;
    case K::Int: out += std::to_string(v.i); return;
    case K::Float:
      if (std::isnan(v.f)) out += "NaN";
      else if (std::isinf(v.f)) out += v.f > 0 ? "Infinity" : "-Infinity";
      else out += float_repr(v.f);
      return;
    case K::Str: json_str(out, v.str(), o.ensure_ascii); return;
    case K::List: {
      const ListObj& l = v.obj<ListObj>();
      if (l.fl != Fl::List && l.fl != Fl::Tuple) not_serializable(v);
      if (l.v.empty()) { out += "[]"; return; }
      out += '[';
      for (size_t i = 0; i < l.v.size(); ++i) {
        if (i) out += o.item_sep;
        if (o.indent) newline(level + 1);
        json_dump(out, l.v[i], o, level + 1);
      }
      if (o.indent) newline(level);
      out += ']';
      return;
    }
    case K::Dict: {
      const DictObj& d = v.obj<DictObj>();
      if (d.items.empty()) { out += "{}"; return; }
      std::vector<const std::pair<Value, Value>*> items;
      for (const auto& kv : d.items) items.push_back(&kv);
      if (o.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return py_order(a->first, b->first, "<", a->first, b->first) == -1; });
      out += '{';
      bool first = true;
      for (const auto* kv : items) {
        if (!first) out += o.item_sep;
        first = false;
        if (o.indent) newline(level + 1);
        json_str(out, json_key(kv->first), o.ensure_ascii);
        out += o.key_sep;
        json_dump(out, kv->second, o, level + 1);
      }
      if (o.indent) newline(level);
      out += '}';
      return;
    }
    default: not_serializable(v);
  }
}

// ============================================================================ comparison

bool py_eq(const Value& a, const Value& b, int depth = 0) {
  if (depth > 512) fail("maximum nesting depth exceeded in comparison");
  if (a.is_num() && b.is_num()) {
    if (a.k == K::Float || b.k == K::Float) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.k != b.k) return false;
  switch (a.k) {
    case K::Undef: case K::None: return true;
    case K::Str: return a.str() == b.str();
    case K::List: {
      const ListObj &x = a.obj<ListObj>(), &y = b.obj<ListObj>();
      if (x.fl != y.fl) return false;
      if (x.fl == Fl::Values) return a.p == b.p;  // dict_values compare by identity
      if (x.v.size() != y.v.size()) return false;
      if (x.fl == Fl::Keys || x.fl == Fl::Items) {  // set-like views: order does not matter
        for (const Value& e : x.v) {
          bool found = false;
          for (const Value& f : y.v)
            if (py_eq(e, f, depth + 1)) { found = true; break; }
          if (!found) return false;
        }
        return true;
      }
      for (size_t i = 0; i < x.v.size(); ++i)
        if (!py_eq(x.v[i], y.v[i], depth + 1)) return false;
      return true;
    }
    case K::Dict: {
      const DictObj &x = a.obj<DictObj>(), &y = b.obj<DictObj>();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* w = y.find(k);
        if (!w || !py_eq(v, *w, depth + 1)) return false;
      }
      return true;
    }
    default: return a.p == b.p;  // identity
  }
}

[[noreturn]] void order_error(const char* op, const Value& a, const Value& b) {
  fail(std::string("'") + op + "' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

// -1, 0 or 1 as Python orders a and b (numbers, str, and lists or tuples of those); 2 when
// unordered (nan). Otherwise Python's TypeError for `lhs op rhs`.
int py_order(const Value& a, const Value& b, const char* op, const Value& lhs, const Value& rhs) {
  if (a.k == K::Undef) undefined_error(a);
  if (b.k == K::Undef) undefined_error(b);
  if (a.is_num() && b.is_num()) {
    if (a.k == K::Float || b.k == K::Float) {
      const double x = a.as_float(), y = b.as_float();
      if (std::isnan(x) || std::isnan(y)) return 2;
      return x < y ? -1 : x > y ? 1 : 0;
    }
    return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
  }
  if (a.k == K::Str && b.k == K::Str) {  // UTF-8 order is code point order
    const int c = a.str().compare(b.str());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.k == K::List && b.k == K::List) {
    const ListObj &x = a.obj<ListObj>(), &y = b.obj<ListObj>();
    if (x.fl == y.fl && (x.fl == Fl::List || x.fl == Fl::Tuple)) {
      const size_t n = std::min(x.v.size(), y.v.size());
      for (size_t i = 0; i < n; ++i)
        if (!py_eq(x.v[i], y.v[i])) return py_order(x.v[i], y.v[i], op, x.v[i], y.v[i]);
      return x.v.size() < y.v.size() ? -1 : x.v.size() > y.v.size() ? 1 : 0;
    }
  }
  order_error(op, lhs, rhs);
}


// ============================================================================ lexer
// jinja2.lexer under trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False.

struct ParseFail {
  std::string msg;
  int line;
};

enum class T : uint8_t { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, Str, Int, Float, Op, Eof };
struct Token {
  T t;
  int line;
  std::string s;  // Data text, Name, Op, or a Str's decoded value
  int64_t i = 0;
  double f = 0;
};

// Jinja's token descriptions, for error messages.
std::string describe(const Token& t) {
  switch (t.t) {
    case T::Data: return "template data / text";
    case T::VarBegin: return "begin of print statement";
    case T::VarEnd: return "end of print statement";
    case T::BlockBegin: return "begin of statement block";
    case T::BlockEnd: return "end of statement block";
    case T::Name: case T::Op: return t.s;
    case T::Str: return "string";
    case T::Int: return "integer";
    case T::Float: return "float";
    case T::Eof: return "end of template";
  }
  return "?";
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// A decimal float literal (digits, '.', exponent; already checked) as Python reads it: too large
// is inf, too small is 0.
double decimal_to_double(std::string_view t) {
  double x = 0;
  const auto r = std::from_chars(t.data(), t.data() + t.size(), x);
  if (r.ec == std::errc::result_out_of_range) {
    const size_t e = t.find_first_of("eE");
    const bool tiny = e != std::string_view::npos && e + 1 < t.size() && t[e + 1] == '-';
    return tiny ? 0.0 : INFINITY;
  }
  return x;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) {
    if (!valid_utf8(source)) throw ParseFail{"the template is not valid UTF-8", 1};
    // Newlines are normalized to \n and one trailing newline is dropped, as Jinja does.
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] != '\r') { src_ += source[i]; continue; }
      src_ += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    const size_t n = src_.size();
    while (pos_ < n) {
      size_t p = pos_;
      for (;; ++p) {  // the next "{{", "{%" or "{#"
        p = src_.find('{', p);
        if (p == std::string::npos || p + 1 >= n) { p = std::string::npos; break; }
        const char c = src_[p + 1];
        if (c == '{' || c == '%' || c == '#') break;
      }
      if (p == std::string::npos) {
        data(pos_, std::string_view(src_).substr(pos_));
        break;
      }
      const char kind = src_[p + 1];
      char sign = 0;
      size_t after = p + 2;
      const size_t raw_end = kind == '%' ? raw_begin_end(p, &sign) : 0;
      if (!raw_end && after < n && (src_[after] == '-' || src_[after] == '+')) sign = src_[after++];
      data(pos_, strip_before_tag(std::string_view(src_).substr(pos_, p - pos_), sign, kind != '{'));
      if (raw_end) {
        line_starting_ = src_[raw_end - 1] == '\n';
        lex_raw(raw_end);
      } else if (kind == '#') {
        lex_comment(after);
      } else {
        toks_.push_back({kind == '{' ? T::VarBegin : T::BlockBegin, line_at(p), {}});
        lex_tag(after, kind == '%');
      }
    }
    toks_.push_back({T::Eof, line_at(n), {}});
    return std::move(toks_);
  }

 private:
  std::string src_;
  std::vector<size_t> line_starts_;
  size_t pos_ = 0;
  bool line_starting_ = true;  // the last tag's match ended with a newline
  std::vector<Token> toks_;
  std::vector<char> balance_;  // closing brackets expected inside the current tag

  int line_at(size_t p) const {
    return static_cast<int>(std::upper_bound(line_starts_.begin(), line_starts_.end(), p) - line_starts_.begin());
  }
  [[noreturn]] void error(const std::string& msg, size_t p) const { throw ParseFail{msg, line_at(p)}; }
  bool at(size_t p, std::string_view lit) const { return p <= src_.size() && src_.compare(p, lit.size(), lit) == 0; }
  size_t space_at(size_t p) const {
    if (p >= src_.size()) return 0;
    size_t q = p;
    return py_space(next_cp(src_, q)) ? q - p : 0;
  }
  size_t skip_space(size_t p) const {
    while (const size_t w = space_at(p)) p += w;
    return p;
  }
  void data(size_t from, std::string_view text) {
    if (!text.empty()) toks_.push_back({T::Data, line_at(from), std::string(text)});
  }

  // The text before a tag: "-" strips all whitespace before it; lstrip_blocks removes the
  // spaces and tabs between a line start and a block or comment tag (not {{, not with "+").
  std::string_view strip_before_tag(std::string_view text, char sign, bool lstrip_ok) const {
    if (sign == '-') {
      size_t end = text.size();
      while (end > 0) {
        size_t s = end - 1;
        while (s > 0 && (static_cast<unsigned char>(text[s]) & 0xC0) == 0x80) --s;
        size_t q = s;
        if (!py_space(next_cp(text, q))) break;
        end = s;
      }
      return text.substr(0, end);
    }
    if (sign == '+' || !lstrip_ok) return text;
    const size_t nl = text.rfind('\n');
    const size_t l = nl == std::string_view::npos ? 0 : nl + 1;
    if ((l == 0 && !line_starting_) || l >= text.size()) return text;
    for (size_t i = l; i < text.size();)
      if (!py_space(next_cp(text, i))) return text;
    return text.substr(0, l);
  }

  // The end of "{% raw %}" (or "{%- raw -%}") at p, or 0 when p starts another block tag.
  size_t raw_begin_end(size_t p, char* sign) const {
    size_t q = p + 2;
    char sg = 0;
    if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) sg = src_[q++];
    q = skip_space(q);
    if (!at(q, "raw")) return 0;
    q = skip_space(q + 3);
    if (at(q, "-%}")) q = skip_space(q + 3);
    else if (at(q, "%}")) q += 2;
    else return 0;
    *sign = sg;
    return q;
  }

  void lex_raw(size_t q) {
    const size_t n = src_.size();
    if (q >= n) {  // Jinja fails only on a character it cannot place: nothing left is fine
      pos_ = n;
      return;
    }
    for (size_t i = src_.find("{%", q); i != std::string::npos; i = src_.find("{%", i + 1)) {
      size_t j = i + 2;
      char sg = 0;
      if (j < n && (src_[j] == '-' || src_[j] == '+')) sg = src_[j++];
      j = skip_space(j);
      if (!at(j, "endraw")) continue;
      j = skip_space(j + 6);
      size_t end;
      if (at(j, "+%}")) end = j + 3;
      else if (at(j, "-%}")) end = skip_space(j + 3);
      else if (at(j, "%}")) end = j + 2 + (j + 2 < n && src_[j + 2] == '\n');
      else continue;
      data(q, strip_before_tag(std::string_view(src_).substr(q, i - q), sg, true));
      line_starting_ = src_[end - 1] == '\n';
      pos_ = end;
      return;
    }
    error("Missing end of raw directive", q);
  }

  void lex_comment(size_t q) {
    const size_t n = src_.size();
    if (q >= n) {  // as in lex_raw
      pos_ = n;
      return;
    }
    for (size_t i = q; i < n; ++i) {
      size_t end = 0;
      if (src_[i] == '+' && at(i + 1, "#}")) end = i + 3;
      else if (src_[i] == '-' && at(i + 1, "#}")) end = skip_space(i + 3);
      else if (at(i, "#}")) end = i + 2 + (i + 2 < n && src_[i + 2] == '\n');
      if (!end) continue;
      line_starting_ = src_[end - 1] == '\n';
      pos_ = end;
      return;
    }
    error("Missing end of comment tag", q);
  }

  // The tokens of a {{ }} or {% %} tag, up to its end (with "-" stripping the whitespace after
  // it and trim_blocks one newline after a block tag).
  void lex_tag(size_t p, bool block) {
    const size_t n = src_.size();
    while (p < n) {
      if (balance_.empty()) {
        size_t end = 0;
        if (block) {
          if (at(p, "+%}")) end = p + 3;
          else if (at(p, "-%}")) end = skip_space(p + 3);
          else if (at(p, "%}")) end = p + 2 + (p + 2 < n && src_[p + 2] == '\n');
        } else {
          if (at(p, "-}}")) end = skip_space(p + 3);
          else if (at(p, "}}")) end = p + 2;
        }
        if (end) {
          toks_.push_back({block ? T::BlockEnd : T::VarEnd, line_at(p), {}});
          line_starting_ = src_[end - 1] == '\n';
          pos_ = end;
          return;
        }
      }
      if (const size_t w = space_at(p)) { p += w; continue; }
      p = token(p);
    }
    pos_ = n;  // the template ended inside the tag: the parser reports it
  }

  size_t token(size_t p) {
    const int line = line_at(p);
    if (const size_t e = match_float(p)) {
      std::string t = src_.substr(p, e - p);
      t.erase(std::remove(t.begin(), t.end(), '_'), t.end());
      Token tk{T::Float, line, {}};
      tk.f = decimal_to_double(t);
      toks_.push_back(std::move(tk));
      return e;
    }
    if (const size_t e = match_int(p)) {
      toks_.push_back({T::Int, line, {}, int_value(p, e)});
      return e;
    }
    if (const size_t e = match_name(p)) {
      toks_.push_back({T::Name, line, src_.substr(p, e - p)});
      return e;
    }
    if (src_[p] == '\'' || src_[p] == '"') {
      if (const size_t e = match_string(p)) {
        toks_.push_back({T::Str, line, decode_string(p + 1, e - 1)});
        return e;
      }
    }
    static const char* const kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : kTwo)
      if (at(p, op)) {
        toks_.push_back({T::Op, line, op});
        return p + 2;
      }
    const char c = src_[p];
    if (std::strchr("+-/*%~[](){}><=.:|,;", c) == nullptr || c == '\0') {
      size_t q = p;
      error("unexpected char " + str_repr(cp_str(next_cp(src_, q))) + " at " + std::to_string(cp_count(std::string_view(src_).substr(0, p))), p);
    }
    if (c == '(' || c == '[' || c == '{') {
      balance_.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance_.empty()) error(std::string("unexpected '") + c + "'", p);
      if (balance_.back() != c) error(std::string("unexpected '") + c + "', expected '" + balance_.back() + "'", p);
      balance_.pop_back();
    }
    toks_.push_back({T::Op, line, std::string(1, c)});
    return p + 1;
  }

  // Digits with single underscores between them ((\d+_)*\d+), from p; p when none.
  size_t digits(size_t p) const {
    size_t q = p;
    while (q < src_.size() && is_digit(src_[q])) {
      while (q < src_.size() && is_digit(src_[q])) ++q;
      if (q + 1 < src_.size() && src_[q] == '_' && is_digit(src_[q + 1])) ++q;
      else break;
    }
    return q;
  }

  size_t match_float(size_t p) const {
    if (p > 0 && src_[p - 1] == '.') return 0;
    const size_t a = digits(p);
    if (a == p) return 0;
    const auto exponent = [&](size_t q) -> size_t {
      if (q >= src_.size() || (src_[q] != 'e' && src_[q] != 'E')) return 0;
      ++q;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      const size_t e = digits(q);
      return e == q ? 0 : e;
    };
    const size_t frac = (a < src_.size() && src_[a] == '.') ? digits(a + 1) : a + 1;
    const bool has_frac = frac > a + 1;
    if (has_frac) {
      if (const size_t e = exponent(frac)) return e;
    }
    if (const size_t e = exponent(a)) return e;
    return has_frac ? frac : 0;
  }

  size_t match_int(size_t p) const {
    const size_t n = src_.size();
    const char c = src_[p];
    if (!is_digit(c)) return 0;
    const auto run = [&](size_t q, auto ok) {  // (_?[class])+
      size_t end = 0;
      for (;;) {
        size_t r = q;
        if (r < n && src_[r] == '_') ++r;
        if (r < n && ok(src_[r])) { q = r + 1; end = q; }
        else break;
      }
      return end;
    };
    if (c == '0' && p + 1 < n) {
      const char x = static_cast<char>(src_[p + 1] | 0x20);
      size_t e = 0;
      if (x == 'b') e = run(p + 2, [](char d) { return d == '0' || d == '1'; });
      else if (x == 'o') e = run(p + 2, [](char d) { return d >= '0' && d <= '7'; });
      else if (x == 'x') e = run(p + 2, is_hex);
      if (e) return e;
    }
    if (c != '0') {
      const size_t e = run(p + 1, is_digit);
      return e ? e : p + 1;
    }
    const size_t e = run(p + 1, [](char d) { return d == '0'; });
    return e ? e : p + 1;
  }

  int64_t int_value(size_t p, size_t e) const {
    std::string t = src_.substr(p, e - p);
    t.erase(std::remove(t.begin(), t.end(), '_'), t.end());
    int base = 10;
    if (t.size() > 1 && t[0] == '0') {
      const char x = static_cast<char>(t[1] | 0x20);
      base = x == 'b' ? 2 : x == 'o' ? 8 : x == 'x' ? 16 : 10;
      if (base != 10) t.erase(0, 2);
    }
    uint64_t v = 0;
    const auto r = std::from_chars(t.data(), t.data() + t.size(), v, base);
    if (r.ec != std::errc() || v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      error("integer literal too large (integers are 64-bit here)", p);
    return static_cast<int64_t>(v);
  }

  // A Python identifier: a letter or _ (Unicode XID_Start), then XID_Continue characters.
  size_t match_name(size_t p) const {
    size_t q = p;
    const char32_t c = next_cp(src_, q);
    const bool start = c == '_' || (c < 0x80 ? std::isalpha(static_cast<int>(c)) != 0
                                             : u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_XID_START));
    if (!start) return 0;
    while (q < src_.size()) {
      size_t r = q;
      const char32_t d = next_cp(src_, r);
      const bool cont = d == '_' || (d < 0x80 ? std::isalnum(static_cast<int>(d)) != 0
                                              : u_hasBinaryProperty(static_cast<UChar32>(d), UCHAR_XID_CONTINUE));
      if (!cont) break;
      q = r;
    }
    return q;
  }

  size_t match_string(size_t p) const {
    const char q = src_[p];
    for (size_t i = p + 1; i < src_.size(); ++i) {
      if (src_[i] == '\\') ++i;
      else if (src_[i] == q) return i + 1;
    }
    return 0;
  }

  // A string literal's value: Python's unicode-escape decoding, as Jinja applies it.
  std::string decode_string(size_t b, size_t e) const {
    const std::string_view raw = std::string_view(src_).substr(b, e - b);
    std::string out;
    const auto hex = [&](size_t& i, int n, const char* what) {
      uint32_t v = 0;
      for (int k = 0; k < n; ++k, ++i) {
        if (i >= raw.size() || !is_hex(raw[i])) error(std::string("truncated ") + what + " escape", b);
        v = v * 16 + static_cast<uint32_t>(is_digit(raw[i]) ? raw[i] - '0' : (raw[i] | 0x20) - 'a' + 10);
      }
      return v;
    };
    for (size_t i = 0; i < raw.size();) {
      if (raw[i] != '\\') {
        put_cp(out, next_cp(raw, i));
        continue;
      }
      if (i + 1 >= raw.size()) error("\\ at end of string", b);
      size_t j = i + 1;
      const char32_t c = next_cp(raw, j);
      uint32_t v = 0;
      switch (c) {
        case '\n': break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x': put_cp(out, hex(j, 2, "\\xXX")); break;
        case 'u': case 'U':
          v = hex(j, c == 'u' ? 4 : 8, c == 'u' ? "\\uXXXX" : "\\UXXXXXXXX");
          if (v > 0x10FFFF) error("illegal Unicode character", b);
          if (v >= 0xD800 && v <= 0xDFFF) error("surrogate escapes are not supported", b);
          put_cp(out, v);
          break;
        case 'N': {
          const size_t close = raw.find('}', j);
          if (j >= raw.size() || raw[j] != '{' || close == std::string_view::npos) error("malformed \\N character escape", b);
          const std::string name(raw.substr(j + 1, close - j - 1));
          UErrorCode err = U_ZERO_ERROR;
          const UChar32 u = u_charFromName(U_UNICODE_CHAR_NAME, name.c_str(), &err);
          if (U_FAILURE(err) || u < 0) error("unknown Unicode character name", b);
          put_cp(out, static_cast<char32_t>(u));
          j = close + 1;
          break;
        }
        default:
          if (c >= '0' && c <= '7') {
            v = c - '0';
            for (int k = 0; k < 2 && j < raw.size() && raw[j] >= '0' && raw[j] <= '7'; ++k, ++j) v = v * 8 + (raw[j] - '0');
            put_cp(out, v);
          } else if (c >= 0x80) {
            hex_escape(out, c);  // Jinja backslash-escapes non-ASCII text before decoding: "\é" -> "\xe9"
          } else {
            out += '\\';
            put_cp(out, c);
          }
      }
      i = j;
    }
    return out;
  }
};

// ============================================================================ syntax tree

struct Expr;
struct Stmt;
using ExprP = std::unique_ptr<Expr>;
using StmtP = std::unique_ptr<Stmt>;
using Body = std::vector<StmtP>;

enum class EK : uint8_t {
  Const, Name, Attr, Item, Slice, Call, Filter, Test, Neg, Pos, Not, Bin, And, Or, Concat, Compare, Cond, List, Tuple, Dict
};
enum class Op2 : uint8_t { Add, Sub, Mul, Div, FloorDiv, Mod, Pow };
enum class Cmp : uint8_t { Eq, Ne, Lt, Le, Gt, Ge, In, NotIn };

using FilterFn = Value (*)(Interp&, const Value&, Args&);
using TestFn = bool (*)(Interp&, const Value&, Args&);

struct CallArgs {
  std::vector<ExprP> pos;
  std::vector<std::pair<std::string, ExprP>> kw;
  ExprP star, starstar;  // *args, **kwargs
};

// kids by kind: Attr [obj]; Item [obj, key]; Slice [start, stop, step] (each may be null);
// Call [callee]; Filter [input] (null in a block's filter chain); Test [input]; Neg/Pos/Not [x];
// Bin/And/Or [l, r]; Concat, Compare, List, Tuple [items]; Cond [value, test, else or null];
// Dict [k0, v0, k1, v1, ...].
struct Expr {
  EK k;
  int line;
  Value value;  // Const
  std::string name;  // Name, Attr; the filter or test of Filter / Test
  std::vector<ExprP> kids;
  CallArgs args;  // Call, Filter, Test
  Op2 op = Op2::Add;
  std::vector<Cmp> cmps;
  FilterFn filter = nullptr;  // resolved after parsing
  TestFn test = nullptr;
  bool missing = false;  // an unknown filter or test inside an if: an error only when evaluated
};

struct Target {
  enum Kind : uint8_t { Name, Tuple, NsAttr } k = Name;
  std::string name, attr;
  std::vector<Target> items;
};

struct MacroDef {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprP> defaults;  // one per param, null where it has none
  Body body;
  bool varargs = false, kwargs = false, caller = false;  // the body reads these names
};

enum class SK : uint8_t { Text, Print, If, For, Set, SetBlock, Macro, CallBlock, FilterBlock, With, Break, Continue, Scope };

// exprs: Print [values]; If [one test per branch, null for else]; For [iter, filter or null];
// Set [value]; With [values]; CallBlock [call]. bodies: If one per branch; For [body, else];
// the others [body]. targets: For/Set/SetBlock [target]; With one per value. filter: the filter
// chain of SetBlock / FilterBlock (its innermost input is null). macro: Macro, CallBlock's caller.
struct Stmt {
  SK k;
  int line;
  std::string text;
  std::vector<ExprP> exprs;
  std::vector<Body> bodies;
  std::vector<Target> targets;
  ExprP filter;
  std::unique_ptr<MacroDef> macro;
  bool recursive = false;
};

const FilterFn* find_filter(const std::string& name);
const TestFn* find_test(const std::string& name);
bool unsupported_filter(const std::string& name);

// ============================================================================ parser
// jinja2.parser's grammar and precedence: or < and < not < comparisons (chained, in, not in) <
// + - < ~ < * / // % < ** (left-associative) < unary - + < postfix (. [] ()) and | filters and
// "is" tests (so `a + b | f` is `a + (b | f)` and `not x is y` is `not (x is y)`).

constexpr int kMaxNesting = 200;

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  Body parse() {
    Body body = subparse({});
    resolve(body, false);
    return body;
  }

 private:
  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
  int loops_ = 0;                              // for loops around the current statement
  std::vector<std::string> tags_;              // statements being parsed, innermost last
  std::vector<std::vector<std::string>> ends_;  // end tags searched for, innermost last

  struct Nest {
    Parser& p;
    explicit Nest(Parser& q) : p(q) {
      if (++p.depth_ > kMaxNesting) p.fail("the template nests too deeply", p.cur().line);
    }
    ~Nest() { --p.depth_; }
  };

  const Token& cur() const { return t_[i_]; }
  const Token& look() const { return t_[std::min(i_ + 1, t_.size() - 1)]; }
  const Token& next() {
    const Token& t = t_[i_];
    if (i_ + 1 < t_.size()) ++i_;
    return t;
  }
  static bool is_name(const Token& t, std::string_view n) { return t.t == T::Name && t.s == n; }
  static bool is_op(const Token& t, std::string_view o) { return t.t == T::Op && t.s == o; }
  bool skip_name(std::string_view n) {
    if (!is_name(cur(), n)) return false;
    next();
    return true;
  }
  bool skip_op(std::string_view o) {
    if (!is_op(cur(), o)) return false;
    next();
    return true;
  }
  [[noreturn]] void fail(const std::string& msg, int line) const { throw ParseFail{msg, line}; }
  [[noreturn]] void fail_expected(const std::string& what) const {
    if (cur().t == T::Eof) fail("unexpected end of template, expected '" + what + "'.", cur().line);
    fail("expected token '" + what + "', got '" + describe(cur()) + "'", cur().line);
  }
  const Token& expect(T type, const char* what) {
    if (cur().t != type) fail_expected(what);
    return next();
  }
  void expect_op(const char* op) {
    if (!is_op(cur(), op)) fail_expected(op);
    next();
  }
  void expect_name(const char* n) {
    if (!is_name(cur(), n)) fail_expected(n);
    next();
  }
  std::string expect_ident() { return expect(T::Name, "name").s; }

  static ExprP node(EK k, int line) {
    auto e = std::make_unique<Expr>();
    e->k = k;
    e->line = line;
    return e;
  }
  static StmtP stmt(SK k, int line) {
    auto s = std::make_unique<Stmt>();
    s->k = k;
    s->line = line;
    return s;
  }

  // jinja2.Parser._fail_ut_eof: an unknown tag, or the end of the template inside a block.
  [[noreturn]] void fail_tag(const std::string& name, int line) const {
    std::string msg = name.empty() ? "Unexpected end of template." : "Encountered unknown tag '" + name + "'.";
    if (!ends_.empty()) {
      std::string looking;
      for (const std::string& e : ends_.back()) looking += (looking.empty() ? "'" : " or '") + e + "'";
      bool expected = false;
      for (const auto& es : ends_)
        expected = expected || std::find(es.begin(), es.end(), name) != es.end();
      if (!name.empty() && expected)
        msg += " You probably made a nesting mistake. Jinja is expecting this tag, but currently looking for " + looking + ".";
      else
        msg += " Jinja was looking for the following tags: " + looking + ".";
    }
    if (!tags_.empty()) msg += " The innermost block that needs to be closed is '" + tags_.back() + "'.";
    fail(msg, line);
  }

  Body subparse(const std::vector<std::string>& ends) {
    Body body;
    struct Ends {
      Parser& p;
      bool on;
      ~Ends() { if (on) p.ends_.pop_back(); }
    } guard{*this, !ends.empty()};
    if (!ends.empty()) ends_.push_back(ends);
    while (cur().t != T::Eof) {
      const Token& tk = cur();
      if (tk.t == T::Data) {
        auto s = stmt(SK::Text, tk.line);
        s->text = tk.s;
        body.push_back(std::move(s));
        next();
      } else if (tk.t == T::VarBegin) {
        next();
        auto s = stmt(SK::Print, tk.line);
        s->exprs.push_back(parse_tuple(false, true, false));
        expect(T::VarEnd, "end of print statement");
        body.push_back(std::move(s));
      } else if (tk.t == T::BlockBegin) {
        next();
        if (cur().t == T::Name && std::find(ends.begin(), ends.end(), cur().s) != ends.end()) return body;
        body.push_back(parse_statement());
        expect(T::BlockEnd, "end of statement block");
      } else {
        fail("unexpected '" + describe(tk) + "'", tk.line);
      }
    }
    return body;
  }

  Body parse_statements(const std::vector<std::string>& ends, bool drop_needle) {
    skip_op(":");
    expect(T::BlockEnd, "end of statement block");
    Body body = subparse(ends);
    if (cur().t == T::Eof) {
      ends_.push_back(ends);
      fail_tag("", cur().line);
    }
    if (drop_needle) next();
    return body;
  }

  StmtP parse_statement() {
    Nest nest(*this);
    const Token& tk = cur();
    if (tk.t != T::Name) fail("tag name expected", tk.line);
    const std::string tag = tk.s;
    const int line = tk.line;
    static const char* const kTags[] = {"for",   "if",    "set",   "macro",      "call",  "filter",
                                        "with",  "print", "block", "generation", "break", "continue"};
    if (std::find(std::begin(kTags), std::end(kTags), tag) == std::end(kTags)) {
      if (tag == "extends" || tag == "include" || tag == "import" || tag == "from" || tag == "autoescape")
        fail("the '" + tag + "' tag is not supported: a chat template is rendered on its own", line);
      fail_tag(tag, line);
    }
    tags_.push_back(tag);
    struct Pop {
      Parser& p;
      ~Pop() { p.tags_.pop_back(); }
    } pop{*this};
    if (tag == "for") return parse_for();
    if (tag == "if") return parse_if();
    if (tag == "set") return parse_set();
    if (tag == "macro") return parse_macro();
    if (tag == "call") return parse_call_block();
    if (tag == "filter") return parse_filter_block();
    if (tag == "with") return parse_with();
    if (tag == "print") return parse_print();
    if (tag == "block") return parse_block();
    if (tag == "generation") return parse_generation();
    next();  // break / continue
    if (loops_ == 0) fail("'" + tag + "' outside of a loop", line);
    return stmt(tag == "break" ? SK::Break : SK::Continue, line);
  }

  // for TARGET in ITER [if COND] [recursive] %} ... [{% else %} ...] {% endfor
  StmtP parse_for() {
    auto s = stmt(SK::For, next().line);
    s->targets.push_back(parse_assign_target(false));
    expect_name("in");
    s->exprs.push_back(parse_tuple(false, false, false));
    s->exprs.push_back(skip_name("if") ? parse_expression(true) : nullptr);
    s->recursive = skip_name("recursive");
    ++loops_;
    s->bodies.push_back(parse_statements({"endfor", "else"}, false));
    --loops_;
    if (next().s == "endfor") {
      s->bodies.emplace_back();
    } else {
      s->bodies.push_back(parse_statements({"endfor"}, true));
    }
    return s;
  }

  StmtP parse_if() {
    auto s = stmt(SK::If, next().line);
    for (;;) {
      s->exprs.push_back(parse_tuple(false, false, false));
      s->bodies.push_back(parse_statements({"elif", "else", "endif"}, false));
      const Token& tk = next();
      if (tk.s == "elif") continue;
      if (tk.s == "else") {
        s->exprs.push_back(nullptr);
        s->bodies.push_back(parse_statements({"endif"}, true));
      }
      break;
    }
    return s;
  }

  StmtP parse_set() {
    const int line = next().line;
    Target target = parse_assign_target(true);
    if (skip_op("=")) {
      auto s = stmt(SK::Set, line);
      s->targets.push_back(std::move(target));
      s->exprs.push_back(parse_tuple(false, true, false));
      return s;
    }
    auto s = stmt(SK::SetBlock, line);
    s->targets.push_back(std::move(target));
    s->filter = parse_filter(nullptr, false);
    s->bodies.push_back(parse_statements({"endset"}, true));
    return s;
  }

  void parse_signature(MacroDef& m) {
    expect_op("(");
    while (!is_op(cur(), ")")) {
      if (!m.params.empty()) expect_op(",");
      m.params.push_back(expect_ident());
      if (skip_op("=")) m.defaults.push_back(parse_expression(true));
      else if (std::any_of(m.defaults.begin(), m.defaults.end(), [](const ExprP& d) { return d != nullptr; }))
        fail("non-default argument follows default argument", cur().line);
      else m.defaults.push_back(nullptr);
    }
    expect_op(")");
  }

  // A macro's (or call block's) body: loops outside it do not count for break / continue.
  Body parse_isolated_body(const std::vector<std::string>& ends) {
    const int saved = loops_;
    loops_ = 0;
    Body b = parse_statements(ends, true);
    loops_ = saved;
    return b;
  }

  StmtP parse_macro() {
    auto s = stmt(SK::Macro, next().line);
    s->macro = std::make_unique<MacroDef>();
    s->macro->name = expect_ident();
    parse_signature(*s->macro);
    s->macro->body = parse_isolated_body({"endmacro"});
    scan_special_names(*s->macro);
    return s;
  }

  StmtP parse_call_block() {
    auto s = stmt(SK::CallBlock, next().line);
    s->macro = std::make_unique<MacroDef>();
    s->macro->name = "caller";
    if (is_op(cur(), "(")) parse_signature(*s->macro);
    ExprP call = parse_expression(true);
    if (call->k != EK::Call) fail("expected call", s->line);
    s->exprs.push_back(std::move(call));
    s->macro->body = parse_isolated_body({"endcall"});
    scan_special_names(*s->macro);
    return s;
  }

  StmtP parse_filter_block() {
    auto s = stmt(SK::FilterBlock, next().line);
    s->filter = parse_filter(nullptr, true);
    s->bodies.push_back(parse_statements({"endfilter"}, true));
    return s;
  }

  StmtP parse_with() {
    auto s = stmt(SK::With, next().line);
    while (cur().t != T::BlockEnd) {
      if (!s->targets.empty()) expect_op(",");
      s->targets.push_back(parse_assign_target(false));
      expect_op("=");
      s->exprs.push_back(parse_expression(true));
    }
    s->bodies.push_back(parse_statements({"endwith"}, true));
    return s;
  }

  StmtP parse_print() {
    auto s = stmt(SK::Print, next().line);
    while (cur().t != T::BlockEnd) {
      if (!s->exprs.empty()) expect_op(",");
      s->exprs.push_back(parse_expression(true));
    }
    return s;
  }

  // {% block name %}: rendered in place (a chat template has no parent template).
  StmtP parse_block() {
    auto s = stmt(SK::Scope, next().line);
    const std::string name = expect_ident();
    skip_name("scoped");
    skip_name("required");
    s->bodies.push_back(parse_isolated_body({"endblock"}));
    if (cur().t == T::Name) {
      if (cur().s != name) fail("'" + name + "' block is closed by '" + cur().s + "'", cur().line);
      next();
    }
    return s;
  }

  // transformers' {% generation %} ... {% endgeneration %}: renders its body (as a call block).
  StmtP parse_generation() {
    auto s = stmt(SK::Scope, next().line);
    s->bodies.push_back(parse_isolated_body({"endgeneration"}));
    return s;
  }

  // An assignment target: a name, names in a tuple, or (with_namespace) NAME.ATTR.
  Target parse_assign_target(bool with_namespace) {
    Target t;
    if (with_namespace && cur().t == T::Name && is_op(look(), ".")) {
      t.k = Target::NsAttr;
      t.name = next().s;
      next();
      t.attr = expect_ident();
      return t;
    }
    const int line = cur().line;
    ExprP e = parse_tuple(true, true, false);
    return to_target(*e, line);
  }

  Target to_target(const Expr& e, int line) {
    Target t;
    if (e.k == EK::Name) {
      t.name = e.name;
      return t;
    }
    if (e.k == EK::Tuple) {
      t.k = Target::Tuple;
      for (const ExprP& k : e.kids) t.items.push_back(to_target(*k, line));
      return t;
    }
    fail(e.k == EK::Const ? "can't assign to 'const'" : "can't assign to expression", line);
  }

  // ---------------------------------------------------------------- expressions

  ExprP parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

  ExprP parse_condexpr() {
    const int line = cur().line;
    ExprP e = parse_or();
    while (skip_name("if")) {
      auto c = node(EK::Cond, line);
      ExprP test = parse_or();
      ExprP other = skip_name("else") ? parse_condexpr() : nullptr;
      c->kids.push_back(std::move(e));
      c->kids.push_back(std::move(test));
      c->kids.push_back(std::move(other));
      e = std::move(c);
    }
    return e;
  }

  ExprP binary(EK k, ExprP l, ExprP r, int line) {
    auto e = node(k, line);
    e->kids.push_back(std::move(l));
    e->kids.push_back(std::move(r));
    return e;
  }

  ExprP parse_or() {
    const int line = cur().line;
    ExprP l = parse_and();
    while (skip_name("or")) l = binary(EK::Or, std::move(l), parse_and(), line);
    return l;
  }

  ExprP parse_and() {
    const int line = cur().line;
    ExprP l = parse_not();
    while (skip_name("and")) l = binary(EK::And, std::move(l), parse_not(), line);
    return l;
  }

  ExprP parse_not() {
    if (is_name(cur(), "not")) {
      Nest nest(*this);
      auto e = node(EK::Not, next().line);
      e->kids.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprP parse_compare() {
    const int line = cur().line;
    ExprP first = parse_math1();
    ExprP cmp;
    for (;;) {
      Cmp op;
      const Token& tk = cur();
      if (is_op(tk, "==")) op = Cmp::Eq;
      else if (is_op(tk, "!=")) op = Cmp::Ne;
      else if (is_op(tk, "<")) op = Cmp::Lt;
      else if (is_op(tk, "<=")) op = Cmp::Le;
      else if (is_op(tk, ">")) op = Cmp::Gt;
      else if (is_op(tk, ">=")) op = Cmp::Ge;
      else if (is_name(tk, "in")) op = Cmp::In;
      else if (is_name(tk, "not") && is_name(look(), "in")) { next(); op = Cmp::NotIn; }
      else break;
      next();
      if (!cmp) {
        cmp = node(EK::Compare, line);
        cmp->kids.push_back(std::move(first));
      }
      cmp->cmps.push_back(op);
      cmp->kids.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprP arith(ExprP l, Op2 op, ExprP r, int line) {
    auto e = binary(EK::Bin, std::move(l), std::move(r), line);
    e->op = op;
    return e;
  }

  ExprP parse_math1() {
    const int line = cur().line;
    ExprP l = parse_concat();
    for (;;) {
      if (skip_op("+")) l = arith(std::move(l), Op2::Add, parse_concat(), line);
      else if (skip_op("-")) l = arith(std::move(l), Op2::Sub, parse_concat(), line);
      else return l;
    }
  }

  ExprP parse_concat() {
    const int line = cur().line;
    ExprP first = parse_math2();
    if (!is_op(cur(), "~")) return first;
    auto e = node(EK::Concat, line);
    e->kids.push_back(std::move(first));
    while (skip_op("~")) e->kids.push_back(parse_math2());
    return e;
  }

  ExprP parse_math2() {
    const int line = cur().line;
    ExprP l = parse_pow();
    for (;;) {
      if (skip_op("*")) l = arith(std::move(l), Op2::Mul, parse_pow(), line);
      else if (skip_op("/")) l = arith(std::move(l), Op2::Div, parse_pow(), line);
      else if (skip_op("//")) l = arith(std::move(l), Op2::FloorDiv, parse_pow(), line);
      else if (skip_op("%")) l = arith(std::move(l), Op2::Mod, parse_pow(), line);
      else return l;
    }
  }

  ExprP parse_pow() {
    const int line = cur().line;
    ExprP l = parse_unary(true);
    while (skip_op("**")) l = arith(std::move(l), Op2::Pow, parse_unary(true), line);
    return l;
  }

  ExprP parse_unary(bool with_filter) {
    Nest nest(*this);
    const int line = cur().line;
    ExprP e;
    if (skip_op("-")) {
      e = node(EK::Neg, line);
      e->kids.push_back(parse_unary(false));
    } else if (skip_op("+")) {
      e = node(EK::Pos, line);
      e->kids.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprP parse_primary() {
    Nest nest(*this);
    const Token& tk = cur();
    const int line = tk.line;
    if (tk.t == T::Name) {
      ExprP e;
      if (tk.s == "true" || tk.s == "True" || tk.s == "false" || tk.s == "False") {
        e = node(EK::Const, line);
        e->value = boolean(tk.s[0] == 't' || tk.s[0] == 'T');
      } else if (tk.s == "none" || tk.s == "None") {
        e = node(EK::Const, line);
        e->value = none();
      } else {
        e = node(EK::Name, line);
        e->name = tk.s;
      }
      next();
      return e;
    }
    if (tk.t == T::Str) {
      std::string s;
      while (cur().t == T::Str) s += next().s;  // adjacent literals concatenate
      auto e = node(EK::Const, line);
      e->value = string(std::move(s));
      return e;
    }
    if (tk.t == T::Int || tk.t == T::Float) {
      auto e = node(EK::Const, line);
      e->value = tk.t == T::Int ? integer(tk.i) : real(tk.f);
      next();
      return e;
    }
    if (is_op(tk, "(")) {
      next();
      ExprP e = parse_tuple(false, true, true);
      expect_op(")");
      return e;
    }
    if (is_op(tk, "[")) return parse_list();
    if (is_op(tk, "{")) return parse_dict();
    if (tk.t == T::Eof) fail("unexpected end of template", line);
    fail("unexpected '" + describe(tk) + "'", line);
  }

  // jinja2 3.1 passes the extra end rules to test_any() as one tuple, which never matches, so
  // only these tokens end a tuple (`for x, in y` is a syntax error there too).
  bool is_tuple_end() const {
    const Token& tk = cur();
    return tk.t == T::VarEnd || tk.t == T::BlockEnd || is_op(tk, ")");
  }

  // Comma-separated expressions: one, or a Tuple when there is a comma.
  ExprP parse_tuple(bool simplified, bool with_condexpr, bool explicit_parens) {
    const int line = cur().line;
    std::vector<ExprP> items;
    bool is_tuple = false;
    for (;;) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end()) break;
      items.push_back(simplified ? parse_primary() : parse_expression(with_condexpr));
      if (is_op(cur(), ",")) is_tuple = true;
      else break;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) fail("Expected an expression, got '" + describe(cur()) + "'", cur().line);
    }
    auto e = node(EK::Tuple, line);
    e->kids = std::move(items);
    return e;
  }

  ExprP parse_list() {
    auto e = node(EK::List, next().line);
    while (!is_op(cur(), "]")) {
      if (!e->kids.empty()) expect_op(",");
      if (is_op(cur(), "]")) break;
      e->kids.push_back(parse_expression(true));
    }
    expect_op("]");
    return e;
  }

  ExprP parse_dict() {
    auto e = node(EK::Dict, next().line);
    while (!is_op(cur(), "}")) {
      if (!e->kids.empty()) expect_op(",");
      if (is_op(cur(), "}")) break;
      e->kids.push_back(parse_expression(true));
      expect_op(":");
      e->kids.push_back(parse_expression(true));
    }
    expect_op("}");
    return e;
  }

  ExprP parse_postfix(ExprP e) {
    for (;;) {
      if (is_op(cur(), ".") || is_op(cur(), "[")) e = parse_subscript(std::move(e));
      else if (is_op(cur(), "(")) e = parse_call(std::move(e));
      else return e;
    }
  }

  ExprP parse_filter_expr(ExprP e) {
    for (;;) {
      if (is_op(cur(), "|")) e = parse_filter(std::move(e), false);
      else if (is_name(cur(), "is")) e = parse_test(std::move(e));
      else if (is_op(cur(), "(")) e = parse_call(std::move(e));
      else return e;
    }
  }

  ExprP parse_subscript(ExprP obj) {
    const Token& tk = next();
    const int line = tk.line;
    if (tk.s == ".") {
      const Token& a = next();
      if (a.t == T::Name) {
        auto e = node(EK::Attr, line);
        e->name = a.s;
        e->kids.push_back(std::move(obj));
        return e;
      }
      if (a.t != T::Int) fail("expected name or number", a.line);
      auto key = node(EK::Const, a.line);
      key->value = integer(a.i);
      auto e = node(EK::Item, line);
      e->kids.push_back(std::move(obj));
      e->kids.push_back(std::move(key));
      return e;
    }
    std::vector<ExprP> args;
    while (!is_op(cur(), "]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    auto e = node(EK::Item, line);
    e->kids.push_back(std::move(obj));
    if (args.size() == 1) {
      e->kids.push_back(std::move(args[0]));
    } else {
      auto t = node(EK::Tuple, line);
      t->kids = std::move(args);
      e->kids.push_back(std::move(t));
    }
    return e;
  }

  ExprP parse_subscribed() {
    const int line = cur().line;
    std::vector<ExprP> parts;
    if (skip_op(":")) {
      parts.push_back(nullptr);
    } else {
      ExprP e = parse_expression(true);
      if (!skip_op(":")) return e;
      parts.push_back(std::move(e));
    }
    if (is_op(cur(), ":")) parts.push_back(nullptr);
    else if (!is_op(cur(), "]") && !is_op(cur(), ",")) parts.push_back(parse_expression(true));
    else parts.push_back(nullptr);
    if (skip_op(":")) {
      if (!is_op(cur(), "]") && !is_op(cur(), ",")) parts.push_back(parse_expression(true));
      else parts.push_back(nullptr);
    } else {
      parts.push_back(nullptr);
    }
    auto s = node(EK::Slice, line);
    s->kids = std::move(parts);
    return s;
  }

  CallArgs parse_call_args() {
    const int line = cur().line;
    expect_op("(");
    CallArgs a;
    bool require_comma = false;
    const auto ensure = [&](bool ok) {
      if (!ok) fail("invalid syntax for function call expression", line);
    };
    while (!is_op(cur(), ")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(cur(), ")")) break;
      }
      if (skip_op("*")) {
        ensure(!a.star && !a.starstar);
        a.star = parse_expression(true);
      } else if (skip_op("**")) {
        ensure(!a.starstar);
        a.starstar = parse_expression(true);
      } else if (cur().t == T::Name && is_op(look(), "=")) {
        ensure(!a.starstar);
        std::string key = next().s;
        next();
        a.kw.emplace_back(std::move(key), parse_expression(true));
      } else {
        ensure(!a.star && !a.starstar && a.kw.empty());
        a.pos.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_op(")");
    return a;
  }

  ExprP parse_call(ExprP callee) {
    auto e = node(EK::Call, cur().line);
    e->args = parse_call_args();
    e->kids.push_back(std::move(callee));
    return e;
  }

  std::string dotted_name() {
    std::string name = expect_ident();
    while (skip_op(".")) {
      name += '.';
      name += expect_ident();
    }
    return name;
  }

  ExprP parse_filter(ExprP input, bool start_inline) {
    while (is_op(cur(), "|") || start_inline) {
      if (!start_inline) next();
      start_inline = false;
      auto e = node(EK::Filter, cur().line);
      e->name = dotted_name();
      if (is_op(cur(), "(")) e->args = parse_call_args();
      e->kids.push_back(std::move(input));
      input = std::move(e);
    }
    return input;
  }

  ExprP parse_test(ExprP input) {
    const int line = next().line;
    const bool negated = skip_name("not");
    auto e = node(EK::Test, line);
    e->name = dotted_name();
    const Token& tk = cur();
    if (is_op(tk, "(")) {
      e->args = parse_call_args();
    } else if ((tk.t == T::Name || tk.t == T::Str || tk.t == T::Int || tk.t == T::Float || is_op(tk, "[") ||
                is_op(tk, "{")) &&
               !is_name(tk, "else") && !is_name(tk, "or") && !is_name(tk, "and")) {
      if (is_name(tk, "is")) fail("You cannot chain multiple tests with is", tk.line);
      e->args.pos.push_back(parse_postfix(parse_primary()));
    }
    e->kids.push_back(std::move(input));
    if (!negated) return e;
    auto n = node(EK::Not, line);
    n->kids.push_back(std::move(e));
    return n;
  }

  // ---------------------------------------------------------------- after parsing

  static void scan_names(const Expr* e, MacroDef& m) {
    if (!e) return;
    if (e->k == EK::Name) {
      m.varargs = m.varargs || e->name == "varargs";
      m.kwargs = m.kwargs || e->name == "kwargs";
      m.caller = m.caller || e->name == "caller";
    }
    for (const ExprP& k : e->kids) scan_names(k.get(), m);
    for (const ExprP& k : e->args.pos) scan_names(k.get(), m);
    for (const auto& kv : e->args.kw) scan_names(kv.second.get(), m);
    scan_names(e->args.star.get(), m);
    scan_names(e->args.starstar.get(), m);
  }
  static void scan_body(const Body& body, MacroDef& m) {
    for (const StmtP& s : body) {
      for (const ExprP& e : s->exprs) scan_names(e.get(), m);
      scan_names(s->filter.get(), m);
      for (const Body& b : s->bodies) scan_body(b, m);
      if (s->macro) {
        for (const ExprP& d : s->macro->defaults) scan_names(d.get(), m);
        scan_body(s->macro->body, m);
      }
    }
  }
  // Jinja gives a macro varargs / kwargs / caller only when its body reads them.
  static void scan_special_names(MacroDef& m) {
    for (const ExprP& d : m.defaults) scan_names(d.get(), m);
    scan_body(m.body, m);
  }

  // Binds filters and tests. Jinja rejects an unknown one when compiling, except inside an if
  // (test and branches) or an inline if, where it fails only if evaluated.
  void resolve(Expr* e, bool soft) {
    if (!e) return;
    if (e->k == EK::Cond) soft = true;
    if (e->k == EK::Filter) {
      if (const FilterFn* f = find_filter(e->name)) e->filter = *f;
      else if (!unsupported_filter(e->name)) {
        if (!soft) fail("No filter named '" + e->name + "'.", e->line);
        e->missing = true;
      }
    } else if (e->k == EK::Test) {
      if (const TestFn* t = find_test(e->name)) e->test = *t;
      else if (!soft) fail("No test named '" + e->name + "'.", e->line);
      else e->missing = true;
    }
    for (ExprP& k : e->kids) resolve(k.get(), soft);
    for (ExprP& k : e->args.pos) resolve(k.get(), soft);
    for (auto& kv : e->args.kw) resolve(kv.second.get(), soft);
    resolve(e->args.star.get(), soft);
    resolve(e->args.starstar.get(), soft);
  }

  void resolve(Body& body, bool soft) {
    for (StmtP& s : body) {
      for (ExprP& e : s->exprs) resolve(e.get(), soft || s->k == SK::If);
      resolve(s->filter.get(), soft);
      for (Body& b : s->bodies) resolve(b, s->k == SK::If);  // loops, macros, blocks: new frames
      if (s->macro) {
        for (ExprP& d : s->macro->defaults) resolve(d.get(), false);
        resolve(s->macro->body, false);
      }
    }
  }
};

// ============================================================================ interpreter

struct Scope {
  std::shared_ptr<Scope> parent;
  std::unordered_map<std::string, Value> vars;
};
using ScopeP = std::shared_ptr<Scope>;

ScopeP child_of(const ScopeP& parent) {
  auto s = std::make_shared<Scope>();
  s->parent = parent;
  return s;
}

enum class Flow { Normal, Break, Continue };

// jinja2.runtime.LoopContext. With a `for ... if` filter the items are filtered lazily, as Jinja
// does: `loop.last` and `loop.nextitem` look one item ahead, `loop.length` filters the rest.
struct LoopObj {
  std::shared_ptr<const Vec> src;
  size_t src_pos = 0;
  Vec pending;  // items already past the filter (fetched by `length`), served first
  size_t pending_pos = 0;
  const Stmt* stmt = nullptr;
  ScopeP outer;  // the scope the loop runs in (recursive calls run there too)
  int depth0 = 0;
  int64_t index0 = -1;
  Value cur, prev;
  std::optional<Value> after;
  int64_t length = -1;
  bool changed_set = false;
  Value changed_last;
};

std::string loop_repr(const Value& v) {
  const LoopObj& l = v.obj<LoopObj>();
  const int64_t n = l.length >= 0 ? l.length : static_cast<int64_t>(l.src->size());
  return "<LoopContext " + std::to_string(l.index0 + 1) + "/" + std::to_string(n) + ">";
}

const Value* find_global(const std::string& name);

struct Interp {
  const RenderOptions& opt;
  const Limits& lim;
  ScopeP scope;
  std::vector<std::string> outs;  // output buffers; captures (macros, set blocks) push one
  uint64_t steps = 0;
  int calls = 0;
  int line = 0;
  // Closures keep their defining scope alive and a scope may hold the closure: these lists
  // let the destructor break such cycles (and namespaces that contain themselves).
  std::vector<ScopeP> captured;
  std::vector<std::shared_ptr<NsObj>> namespaces;

  explicit Interp(const RenderOptions& o) : opt(o), lim(o.limits) {}
  ~Interp() {
    for (const ScopeP& s : captured) s->vars.clear();
    for (const auto& n : namespaces) n->attrs = DictObj{};
  }

  struct ScopeGuard {
    Interp& in;
    ScopeP saved;
    ScopeGuard(Interp& i, ScopeP s) : in(i), saved(std::move(i.scope)) { in.scope = std::move(s); }
    ~ScopeGuard() { in.scope = std::move(saved); }
  };

  struct Capture {
    Interp& in;
    bool taken = false;
    explicit Capture(Interp& i) : in(i) { in.outs.emplace_back(); }
    std::string take() {
      taken = true;
      std::string s = std::move(in.outs.back());
      in.outs.pop_back();
      return s;
    }
    ~Capture() {
      if (!taken) in.outs.pop_back();
    }
  };

  // ---------------------------------------------------------------- budget

  void step(uint64_t n = 1) {
    steps += n;
    if (steps > lim.max_steps)
      fail("the template exceeded its work budget (" + std::to_string(lim.max_steps) + " steps)");
  }
  void check_size(size_t bytes) {
    if (bytes > lim.max_output_bytes)
      fail("the template built a string over the output limit (" + std::to_string(lim.max_output_bytes) + " bytes)");
  }
  Value str(std::string s, bool markup = false) {
    check_size(s.size());
    step(s.size() / 64);
    return string(std::move(s), markup);
  }
  [[noreturn]] void items_exceeded() const {
    fail("the template built a list over the item limit (" + std::to_string(lim.max_items) + " items)");
  }
  Value make_list(Vec v, Fl fl = Fl::List) {
    if (v.size() > lim.max_items) items_exceeded();
    step(v.size() / 16);
    return list(std::move(v), fl);
  }
  void emit(std::string_view s) {
    std::string& out = outs.back();
    check_size(out.size() + s.size());
    step(s.size() / 64);
    out.append(s);
  }

  // ---------------------------------------------------------------- names

  Value lookup(const std::string& name) const {
    for (const Scope* s = scope.get(); s; s = s->parent.get()) {
      const auto it = s->vars.find(name);
      if (it != s->vars.end()) return it->second;
    }
    if (const Value* g = find_global(name)) return *g;
    return undef(str_repr(name) + " is undefined");
  }

  void assign(const Target& t, const Value& v) {
    switch (t.k) {
      case Target::Name: scope->vars[t.name] = v; return;
      case Target::Tuple: {
        const auto items = iterate(v);
        if (items->size() > t.items.size())
          fail("too many values to unpack (expected " + std::to_string(t.items.size()) + ")");
        if (items->size() < t.items.size())
          fail("not enough values to unpack (expected " + std::to_string(t.items.size()) + ", got " +
               std::to_string(items->size()) + ")");
        for (size_t i = 0; i < t.items.size(); ++i) assign(t.items[i], (*items)[i]);
        return;
      }
      case Target::NsAttr: {
        const Value ns = lookup(t.name);
        if (ns.k != K::Ns) fail("cannot assign attribute on non-namespace object");
        ns.obj<NsObj>().attrs.set(string(t.attr), v);
        return;
      }
    }
  }

  // ---------------------------------------------------------------- iteration

  // The items `for` sees: a str's characters, a dict's keys, what is left of an iterator.
  std::shared_ptr<const Vec> iterate(const Value& v) {
    switch (v.k) {
      case K::Undef: return std::make_shared<const Vec>();
      case K::List: return std::shared_ptr<const Vec>(v.p, &v.obj<ListObj>().v);
      case K::Str: {
        auto out = std::make_shared<Vec>();
        const std::string& s = v.str();
        for (size_t i = 0; i < s.size();) {
          const size_t b = i;
          next_cp(s, i);
          out->push_back(string(s.substr(b, i - b)));
        }
        step(out->size() / 16);
        return out;
      }
      case K::Dict: {
        auto out = std::make_shared<Vec>();
        for (const auto& kv : v.obj<DictObj>().items) out->push_back(kv.first);
        return out;
      }
      case K::Iter: {
        IterObj& it = v.obj<IterObj>();
        auto out = std::make_shared<Vec>(it.v.begin() + static_cast<std::ptrdiff_t>(it.pos), it.v.end());
        it.pos = it.v.size();
        return out;
      }
      default: fail(std::string("'") + type_name(v) + "' object is not iterable");
    }
  }

  int64_t length(const Value& v) const {
    switch (v.k) {
      case K::Undef: return 0;
      case K::Str: return static_cast<int64_t>(cp_count(v.str()));
      case K::List: return static_cast<int64_t>(v.obj<ListObj>().v.size());
      case K::Dict: return static_cast<int64_t>(v.obj<DictObj>().items.size());
      default: fail(std::string("object of type '") + type_name(v) + "' has no len()");
    }
  }

  bool contains(const Value& container, const Value& item) {
    switch (container.k) {
      case K::Undef: return false;
      case K::Str:
        if (item.k != K::Str) fail(std::string("'in <string>' requires string as left operand, not ") + type_name(item));
        return container.str().find(item.str()) != std::string::npos;
      case K::List:
        for (const Value& e : container.obj<ListObj>().v)
          if (py_eq(e, item)) return true;
        return false;
      case K::Dict: return container.obj<DictObj>().find(item) != nullptr;
      case K::Iter: {
        IterObj& it = container.obj<IterObj>();
        while (it.pos < it.v.size())
          if (py_eq(it.v[it.pos++], item)) return true;
        return false;
      }
      default: fail(std::string("argument of type '") + type_name(container) + "' is not iterable");
    }
  }

  // ---------------------------------------------------------------- operators

  static int64_t checked(bool overflow, int64_t r) {
    if (overflow) fail("integer overflow (integers are 64-bit here)");
    return r;
  }

  static Value numeric(Op2 op, const Value& a, const Value& b) {
    const bool fl = a.k == K::Float || b.k == K::Float;
    if (fl) {
      const double x = a.as_float(), y = b.as_float();
      switch (op) {
        case Op2::Add: return real(x + y);
        case Op2::Sub: return real(x - y);
        case Op2::Mul: return real(x * y);
        case Op2::Div:
          if (y == 0) fail("float division by zero");
          return real(x / y);
        case Op2::FloorDiv: {
          if (y == 0) fail("float floor division by zero");
          double mod = std::fmod(x, y), div = (x - mod) / y;
          if (mod != 0 && ((y < 0) != (mod < 0))) div -= 1.0;
          if (div == 0) return real(std::copysign(0.0, x / y));
          double fd = std::floor(div);
          if (div - fd > 0.5) fd += 1.0;
          return real(fd);
        }
        case Op2::Mod: {
          if (y == 0) fail("float modulo");
          double mod = std::fmod(x, y);
          if (mod != 0) { if ((y < 0) != (mod < 0)) mod += y; }
          else mod = std::copysign(0.0, y);
          return real(mod);
        }
        case Op2::Pow:
          if (x == 0 && y < 0) fail("0.0 cannot be raised to a negative power");
          if (x < 0 && std::floor(y) != y) fail("a negative number to a fractional power is complex (unsupported)");
          return real(std::pow(x, y));
      }
    }
    const int64_t x = a.as_int(), y = b.as_int();
    int64_t r = 0;
    switch (op) {
      case Op2::Add: {
        const bool o = __builtin_add_overflow(x, y, &r);
        return integer(checked(o, r));
      }
      case Op2::Sub: {
        const bool o = __builtin_sub_overflow(x, y, &r);
        return integer(checked(o, r));
      }
      case Op2::Mul: {
        const bool o = __builtin_mul_overflow(x, y, &r);
        return integer(checked(o, r));
      }
      case Op2::Div:
        if (y == 0) fail("division by zero");
        return real(static_cast<double>(x) / static_cast<double>(y));
      case Op2::FloorDiv: {
        if (y == 0) fail("integer division or modulo by zero");
        if (x == std::numeric_limits<int64_t>::min() && y == -1) checked(true, 0);
        int64_t q = x / y;
        if (x % y != 0 && ((x < 0) != (y < 0))) --q;
        return integer(q);
      }
      case Op2::Mod: {
        if (y == 0) fail("integer modulo by zero");
        if (y == -1) return integer(0);
        int64_t m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return integer(m);
      }
      case Op2::Pow: {
        if (y < 0) {
          if (x == 0) fail("0.0 cannot be raised to a negative power");
          return real(std::pow(static_cast<double>(x), static_cast<double>(y)));
        }
        int64_t result = 1, base = x, e = y;
        while (e > 0) {
          if (e & 1) {
            const bool o = __builtin_mul_overflow(result, base, &r);
            result = checked(o, r);
          }
          e >>= 1;
          if (e > 0) {
            const bool o = __builtin_mul_overflow(base, base, &r);
            base = checked(o, r);
          }
        }
        return integer(result);
      }
    }
    return none();
  }

  Value repeat(const Value& seq, int64_t n) {
    if (n < 0) n = 0;
    if (seq.k == K::Str) {
      const std::string& s = seq.str();
      if (!s.empty() && static_cast<uint64_t>(n) > lim.max_output_bytes / s.size()) check_size(lim.max_output_bytes + 1);
      std::string out;
      out.reserve(s.size() * static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) out += s;
      return str(std::move(out), seq.markup);
    }
    const ListObj& l = seq.obj<ListObj>();
    if (!l.v.empty() && static_cast<uint64_t>(n) > lim.max_items / l.v.size()) items_exceeded();
    Vec out;
    for (int64_t i = 0; i < n; ++i) out.insert(out.end(), l.v.begin(), l.v.end());
    return make_list(std::move(out), l.fl == Fl::Tuple ? Fl::Tuple : Fl::List);
  }

  static bool is_seq(const Value& v) {
    return v.k == K::Str || (v.k == K::List && (v.obj<ListObj>().fl == Fl::List || v.obj<ListObj>().fl == Fl::Tuple));
  }

  Value binop(Op2 op, const Value& a, const Value& b) {
    if (a.k == K::Undef) undefined_error(a);
    if (op == Op2::Mod && a.k == K::Str) return str(percent_format(a.str(), b), a.markup);  // str % undefined works
    if (b.k == K::Undef) undefined_error(b);
    if (a.is_num() && b.is_num()) return numeric(op, a, b);
    static const char* const kSym[] = {"+", "-", "*", "/", "//", "%", "** or pow()"};
    switch (op) {
      case Op2::Add:
        if (a.k == K::Str && b.k == K::Str) {
          // markupsafe: adding a Markup and a str escapes the str (Markup.__radd__ runs first)
          if (a.markup == b.markup) return str(a.str() + b.str(), a.markup);
          return str(a.markup ? a.str() + html_escape(b.str()) : html_escape(a.str()) + b.str(), true);
        }
        if (a.k == K::List && b.k == K::List) {
          const ListObj &x = a.obj<ListObj>(), &y = b.obj<ListObj>();
          if ((x.fl == Fl::List || x.fl == Fl::Tuple) && x.fl == y.fl) {
            Vec v = x.v;
            v.insert(v.end(), y.v.begin(), y.v.end());
            return make_list(std::move(v), x.fl);
          }
        }
        if (a.k == K::Str || (a.k == K::List && (a.obj<ListObj>().fl == Fl::List || a.obj<ListObj>().fl == Fl::Tuple)))
          fail(std::string("can only concatenate ") + type_name(a) + " (not \"" + type_name(b) + "\") to " + type_name(a));
        break;
      case Op2::Mul:
        if (is_seq(a) && b.is_intlike()) return repeat(a, b.as_int());
        if (is_seq(b) && a.is_intlike()) return repeat(b, a.as_int());
        if (is_seq(a) || is_seq(b))
          fail(std::string("can't multiply sequence by non-int of type '") + type_name(is_seq(a) ? b : a) + "'");
        break;
      default:
        break;
    }
    fail(std::string("unsupported operand type(s) for ") + kSym[static_cast<int>(op)] + ": '" + type_name(a) + "' and '" +
         type_name(b) + "'");
  }

  static std::string html_escape(std::string_view s) {
    std::string out;
    for (char c : s) {
      switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&#34;"; break;
        case '\'': out += "&#39;"; break;
        default: out += c;
      }
    }
    return out;
  }

  Value negate(const Value& v, bool minus) {
    if (v.k == K::Undef) undefined_error(v);
    if (v.k == K::Float) return real(minus ? -v.f : v.f);
    if (v.is_intlike()) {
      const int64_t x = v.as_int();
      if (minus && x == std::numeric_limits<int64_t>::min()) checked(true, 0);
      return integer(minus ? -x : x);
    }
    fail(std::string("bad operand type for unary ") + (minus ? "-" : "+") + ": '" + type_name(v) + "'");
  }

  static int order(const Value& a, const Value& b, const char* op, const Value& lhs, const Value& rhs) {
    return py_order(a, b, op, lhs, rhs);
  }

  bool compare(Cmp op, const Value& a, const Value& b) {
    switch (op) {
      case Cmp::Eq: return py_eq(a, b);
      case Cmp::Ne: return !py_eq(a, b);
      case Cmp::Lt: return order(a, b, "<", a, b) == -1;
      case Cmp::Le: { const int r = order(a, b, "<=", a, b); return r == -1 || r == 0; }
      case Cmp::Gt: return order(a, b, ">", a, b) == 1;
      case Cmp::Ge: { const int r = order(a, b, ">=", a, b); return r == 1 || r == 0; }
      case Cmp::In: return contains(b, a);
      case Cmp::NotIn: return !contains(b, a);
    }
    return false;
  }

  // ---------------------------------------------------------------- expressions

  Value eval(const Expr& e) {
    switch (e.k) {
      case EK::Const: return e.value;
      case EK::Name: return lookup(e.name);
      case EK::Attr: {
        const Value o = eval(*e.kids[0]);
        line = e.line;
        return getattr(o, e.name);
      }
      case EK::Item: {
        const Value o = eval(*e.kids[0]);
        const Expr& key = *e.kids[1];
        if (key.k == EK::Slice) {
          std::optional<Value> part[3];
          for (int i = 0; i < 3; ++i)
            if (key.kids[i]) part[i] = eval(*key.kids[i]);
          line = e.line;
          return getslice(o, part[0], part[1], part[2]);
        }
        const Value k = eval(key);
        line = e.line;
        return getitem(o, k);
      }
      case EK::Slice: fail("a slice outside of a subscript");
      case EK::Call: {
        const Value f = eval(*e.kids[0]);
        Args a = eval_args(e.args);
        line = e.line;
        return invoke(f, a);
      }
      case EK::Filter: return apply_filter(e, nullptr);
      case EK::Test: return boolean(apply_test(e));
      case EK::Neg: return negate(eval(*e.kids[0]), true);
      case EK::Pos: return negate(eval(*e.kids[0]), false);
      case EK::Not: return boolean(!truthy(eval(*e.kids[0])));
      case EK::Bin: {
        const Value a = eval(*e.kids[0]);
        const Value b = eval(*e.kids[1]);
        line = e.line;
        return binop(e.op, a, b);
      }
      case EK::And: {
        Value a = eval(*e.kids[0]);
        return truthy(a) ? eval(*e.kids[1]) : a;
      }
      case EK::Or: {
        Value a = eval(*e.kids[0]);
        return truthy(a) ? a : eval(*e.kids[1]);
      }
      case EK::Concat: {
        std::string s;
        for (const ExprP& k : e.kids) s += to_str(eval(*k), lim.max_data_depth);
        return str(std::move(s));
      }
      case EK::Compare: {
        Value a = eval(*e.kids[0]);
        for (size_t i = 0; i < e.cmps.size(); ++i) {
          Value b = eval(*e.kids[i + 1]);
          line = e.line;
          if (!compare(e.cmps[i], a, b)) return boolean(false);
          a = std::move(b);
        }
        return boolean(true);
      }
      case EK::Cond:
        if (truthy(eval(*e.kids[1]))) return eval(*e.kids[0]);
        if (e.kids[2]) return eval(*e.kids[2]);
        return undef("the inline if-expression on line " + std::to_string(e.line) +
                     " evaluated to false and no else section was defined.");
      case EK::List: case EK::Tuple: {
        Vec v;
        for (const ExprP& k : e.kids) v.push_back(eval(*k));
        return make_list(std::move(v), e.k == EK::Tuple ? Fl::Tuple : Fl::List);
      }
      case EK::Dict: {
        DictObj d;
        for (size_t i = 0; i + 1 < e.kids.size(); i += 2) {
          Value k = eval(*e.kids[i]);
          d.set(k, eval(*e.kids[i + 1]));
        }
        return dict(std::move(d));
      }
    }
    return none();
  }

  Args eval_args(const CallArgs& c) {
    Args a;
    for (const ExprP& p : c.pos) a.pos.push_back(eval(*p));
    for (const auto& [k, v] : c.kw) a.kw.emplace_back(k, eval(*v));
    if (c.star) {
      const auto items = iterate(eval(*c.star));
      a.pos.insert(a.pos.end(), items->begin(), items->end());
    }
    if (c.starstar) {
      const Value d = eval(*c.starstar);
      if (d.k != K::Dict) fail(std::string("argument after ** must be a mapping, not ") + type_name(d));
      for (const auto& [k, v] : d.obj<DictObj>().items) {
        if (k.k != K::Str) fail("keywords must be strings");
        a.kw.emplace_back(k.str(), v);
      }
    }
    return a;
  }

  Value invoke(const Value& f, Args& a) {
    step();
    switch (f.k) {
      case K::Func: return f.obj<FuncObj>().fn(*this, a);
      case K::Undef: undefined_error(f);
      case K::Loop: return call_loop(f, a);
      default: fail(std::string("'") + type_name(f) + "' object is not callable");
    }
  }

  // ---------------------------------------------------------------- attributes and items
  // jinja2.sandbox: `a.b` prefers the attribute (a dict's methods win over its keys), `a['b']`
  // the item; either falls back to the other. Methods that mutate a list or dict are unsafe:
  // looking them up gives an undefined that raises SecurityError's message when called.

  static Value unsafe(const Value& o, const std::string& name) {
    return undef("access to attribute " + str_repr(name) + " of " + str_repr(type_name(o)) + " object is unsafe.");
  }
  static Value no_attr(const Value& o, const std::string& name) {
    return undef(str_repr(object_type_repr(o)) + " has no attribute " + str_repr(name));
  }

  Value getattr(const Value& o, const std::string& name) {
    if (o.k == K::Undef) undefined_error(o);
    if (std::optional<Value> m = method(o, name)) return *m;
    switch (o.k) {
      case K::Dict:
        if (const Value* v = o.obj<DictObj>().find_str(name)) return *v;
        break;
      case K::Ns:
        if (const Value* v = o.obj<NsObj>().attrs.find_str(name)) return *v;
        break;
      case K::Loop: return loop_attr(o, name);
      default: break;
    }
    return no_attr(o, name);
  }

  Value getitem(const Value& o, const Value& key) {
    if (o.k == K::Undef) undefined_error(o);
    switch (o.k) {
      case K::Dict: {
        const Value* v = nullptr;
        try {
          v = o.obj<DictObj>().find(key);
        } catch (const RenderError&) {  // unhashable: Python's TypeError, which getitem swallows
        }
        if (v) return *v;
        break;
      }
      case K::List: {
        const ListObj& l = o.obj<ListObj>();
        if (key.is_intlike() && l.fl != Fl::Items && l.fl != Fl::Keys && l.fl != Fl::Values) {
          int64_t i = key.as_int();
          const auto n = static_cast<int64_t>(l.v.size());
          if (i < 0) i += n;
          if (i >= 0 && i < n) return l.v[static_cast<size_t>(i)];
          return undef(object_type_repr(o) + " has no element " + std::to_string(key.as_int()));
        }
        break;
      }
      case K::Str:
        if (key.is_intlike()) {
          const std::string& s = o.str();
          int64_t i = key.as_int();
          const auto n = static_cast<int64_t>(cp_count(s));
          if (i < 0) i += n;
          if (i >= 0 && i < n) return string(cp_substr(s, static_cast<size_t>(i), static_cast<size_t>(i) + 1));
          return undef(object_type_repr(o) + " has no element " + std::to_string(key.as_int()));
        }
        break;
      case K::Ns: case K::Loop:
        if (key.k == K::Str) return getattr(o, key.str());
        break;
      default:
        break;
    }
    if (key.k == K::Str) {
      if (std::optional<Value> m = method(o, key.str())) return *m;
      return no_attr(o, key.str());
    }
    std::string key_repr;
    repr_into(key_repr, key, 0, lim.max_data_depth);
    return undef(object_type_repr(o) + " has no element " + key_repr);
  }

  static std::string cp_substr(const std::string& s, size_t from, size_t to) {
    size_t i = 0, idx = 0, b = s.size(), e = s.size();
    while (i < s.size()) {
      if (idx == from) b = i;
      if (idx == to) { e = i; break; }
      next_cp(s, i);
      ++idx;
    }
    if (from >= idx && b == s.size()) return "";
    return s.substr(b, e - b);
  }

  // Python's slice.indices: the positions a[start:stop:step] visits.
  static std::vector<int64_t> slice_positions(int64_t n, const std::optional<Value>& start, const std::optional<Value>& stop,
                                              const std::optional<Value>& stepv) {
    const auto get = [](const std::optional<Value>& v) -> std::optional<int64_t> {
      if (!v || v->k == K::None) return std::nullopt;
      return v->as_int();
    };
    const int64_t st = get(stepv).value_or(1);
    if (st == 0) fail("slice step cannot be zero");
    const int64_t lower = st > 0 ? 0 : -1, upper = st > 0 ? n : n - 1;
    const auto norm = [&](std::optional<int64_t> v, int64_t dflt) {
      if (!v) return dflt;
      int64_t x = *v;
      if (x < 0) {
        x += n;
        if (x < lower) x = lower;
      } else if (x > upper) {
        x = upper;
      }
      return x;
    };
    const int64_t b = norm(get(start), st > 0 ? lower : upper), e = norm(get(stop), st > 0 ? upper : lower);
    std::vector<int64_t> out;
    if (st > 0)
      for (int64_t i = b; i < e; i += st) out.push_back(i);
    else
      for (int64_t i = b; i > e; i += st) out.push_back(i);
    return out;
  }

  // Slices bypass the sandbox's getitem in Jinja: Python's own errors come through.
  Value getslice(const Value& o, const std::optional<Value>& start, const std::optional<Value>& stop,
                 const std::optional<Value>& stepv) {
    if (o.k == K::Undef) undefined_error(o);
    if (o.k == K::Dict) fail("unhashable type: 'slice'");
    const bool sliceable = o.k == K::Str || (o.k == K::List && (o.obj<ListObj>().fl == Fl::List ||
                                                                 o.obj<ListObj>().fl == Fl::Tuple ||
                                                                 o.obj<ListObj>().fl == Fl::Range));
    if (!sliceable) fail(std::string("'") + type_name(o) + "' object is not subscriptable");
    for (const auto* p : {&start, &stop, &stepv})
      if (*p && (*p)->k != K::None && !(*p)->is_intlike())
        fail("slice indices must be integers or None or have an __index__ method");
    if (o.k == K::Str) {
      const std::u32string s = to_u32(o.str());
      std::u32string out;
      for (int64_t i : slice_positions(static_cast<int64_t>(s.size()), start, stop, stepv)) out += s[static_cast<size_t>(i)];
      return str(from_u32(out), o.markup);
    }
    const ListObj& l = o.obj<ListObj>();
    Vec out;
    for (int64_t i : slice_positions(static_cast<int64_t>(l.v.size()), start, stop, stepv))
      out.push_back(l.v[static_cast<size_t>(i)]);
    return make_list(std::move(out), l.fl == Fl::Tuple ? Fl::Tuple : Fl::List);
  }

  // ---------------------------------------------------------------- loops

  bool loop_accepts(LoopObj& l, const Value& v) {
    const Expr* cond = l.stmt->exprs[1].get();
    if (!cond) return true;
    ScopeGuard g(*this, child_of(l.outer));
    assign(l.stmt->targets[0], v);
    return truthy(eval(*cond));
  }

  std::optional<Value> loop_fetch(LoopObj& l) {
    if (l.pending_pos < l.pending.size()) return l.pending[l.pending_pos++];
    while (l.src_pos < l.src->size()) {
      const Value& v = (*l.src)[l.src_pos++];
      if (loop_accepts(l, v)) return v;
    }
    return std::nullopt;
  }

  bool loop_has_next(LoopObj& l) {
    if (!l.after) l.after = loop_fetch(l);
    return l.after.has_value();
  }

  int64_t loop_length(LoopObj& l) {
    if (l.length >= 0) return l.length;
    if (!l.stmt->exprs[1]) return l.length = static_cast<int64_t>(l.src->size());
    Vec rest(l.pending.begin() + static_cast<std::ptrdiff_t>(l.pending_pos), l.pending.end());
    l.pending_pos = l.pending.size();
    while (std::optional<Value> v = loop_fetch(l)) rest.push_back(*v);
    l.length = l.index0 + 1 + (l.after ? 1 : 0) + static_cast<int64_t>(rest.size());
    l.pending = std::move(rest);
    l.pending_pos = 0;
    return l.length;
  }

  Value loop_attr(const Value& lv, const std::string& name) {
    LoopObj& l = lv.obj<LoopObj>();
    if (name == "index") return integer(l.index0 + 1);
    if (name == "index0") return integer(l.index0);
    if (name == "first") return boolean(l.index0 == 0);
    if (name == "last") return boolean(!loop_has_next(l));
    if (name == "length") return integer(loop_length(l));
    if (name == "revindex") return integer(loop_length(l) - l.index0);
    if (name == "revindex0") return integer(loop_length(l) - l.index0 - 1);
    if (name == "depth") return integer(l.depth0 + 1);
    if (name == "depth0") return integer(l.depth0);
    if (name == "previtem") return l.index0 > 0 ? l.prev : undef("there is no previous item");
    if (name == "nextitem") return loop_has_next(l) ? *l.after : undef("there is no next item");
    const std::shared_ptr<LoopObj> lp(lv.p, &l);
    if (name == "cycle")
      return func("cycle", [lp](Interp&, Args& a) -> Value {
        if (a.pos.empty()) fail("no items for cycling given");
        return a.pos[static_cast<size_t>(lp->index0) % a.pos.size()];
      });
    if (name == "changed")
      return func("changed", [lp](Interp& in, Args& a) -> Value {
        Value now = in.make_list(a.pos, Fl::Tuple);
        if (lp->changed_set && py_eq(now, lp->changed_last)) return boolean(false);
        lp->changed_set = true;
        lp->changed_last = std::move(now);
        return boolean(true);
      });
    return no_attr(lv, name);
  }

  // Runs a for statement over `iterable` in the current scope; each iteration gets a fresh
  // scope (a set in the body does not outlive its iteration, as in Jinja).
  void run_loop(const Stmt& s, const Value& iterable, int depth0) {
    auto l = std::make_shared<LoopObj>();
    l->src = iterate(iterable);
    l->stmt = &s;
    l->outer = scope;
    l->depth0 = depth0;
    Value lv;
    lv.k = K::Loop;
    lv.p = l;
    // Jinja's else runs unless an iteration reached the end of the body: a break or continue in
    // every iteration leaves it armed.
    bool completed = false;
    for (;;) {
      std::optional<Value> item;
      if (l->after) {
        item = std::move(l->after);
        l->after.reset();
      } else {
        item = loop_fetch(*l);
      }
      if (!item) break;
      step();
      if (l->index0 >= 0) l->prev = l->cur;
      l->cur = *item;
      ++l->index0;
      ScopeGuard g(*this, child_of(l->outer));
      assign(s.targets[0], *item);
      scope->vars["loop"] = lv;
      const Flow f = exec(s.bodies[0]);
      if (f == Flow::Break) break;
      completed = completed || f == Flow::Normal;
    }
    if (!completed && !s.bodies[1].empty()) {
      ScopeGuard g(*this, child_of(l->outer));
      exec(s.bodies[1]);
    }
  }

  // loop(items) inside a `for ... recursive`: the loop's body again, one level deeper.
  Value call_loop(const Value& lv, Args& a) {
    const LoopObj& l = lv.obj<LoopObj>();
    if (!l.stmt->recursive) fail("The loop must be marked as 'recursive' to call it.");
    if (a.pos.size() != 1 || !a.kw.empty()) fail("loop() takes exactly one argument");
    if (++calls > lim.max_call_depth) fail("maximum recursion depth exceeded");
    struct Depth {
      int& c;
      ~Depth() { --c; }
    } d{calls};
    Capture cap(*this);
    ScopeGuard g(*this, l.outer);
    run_loop(*l.stmt, a.pos[0], l.depth0 + 1);
    return str(cap.take());
  }

  // ---------------------------------------------------------------- macros

  Value call_macro(const MacroDef& m, const ScopeP& def, Args& a) {
    if (++calls > lim.max_call_depth)
      fail("maximum recursion depth exceeded (" + std::to_string(lim.max_call_depth) + " nested macro calls)");
    struct Depth {
      int& c;
      ~Depth() { --c; }
    } d{calls};
    ScopeP local = child_of(def);
    const size_t n = m.params.size(), npos = std::min(n, a.pos.size());
    std::vector<bool> given(n, false);
    for (size_t i = 0; i < npos; ++i) {
      local->vars[m.params[i]] = a.pos[i];
      given[i] = true;
    }
    std::vector<std::pair<std::string, Value>> extra;
    for (auto& [k, v] : a.kw) {
      const auto it = std::find(m.params.begin() + static_cast<std::ptrdiff_t>(npos), m.params.end(), k);
      if (it == m.params.end()) {
        extra.emplace_back(k, v);
        continue;
      }
      local->vars[k] = v;
      given[static_cast<size_t>(it - m.params.begin())] = true;
    }
    if (m.caller) {
      const auto it = std::find_if(extra.begin(), extra.end(), [](const auto& kv) { return kv.first == "caller"; });
      if (it != extra.end()) {
        local->vars["caller"] = it->second;
        extra.erase(it);
      } else {
        local->vars["caller"] = undef("No caller defined");
      }
    }
    if (m.kwargs) {
      DictObj kw;
      for (auto& [k, v] : extra) kw.set(string(k), v);
      local->vars["kwargs"] = dict(std::move(kw));
    } else if (!extra.empty()) {
      for (const auto& kv : extra)
        if (kv.first == "caller")
          fail("macro '" + m.name + "' was invoked with two values for the special caller argument. This is most likely a bug.");
      fail("macro '" + m.name + "' takes no keyword argument '" + extra[0].first + "'");
    }
    if (m.varargs) {
      local->vars["varargs"] = make_list(Vec(a.pos.begin() + static_cast<std::ptrdiff_t>(npos), a.pos.end()), Fl::Tuple);
    } else if (a.pos.size() > n) {
      fail("macro '" + m.name + "' takes not more than " + std::to_string(n) + " argument(s)");
    }
    ScopeGuard g(*this, local);
    for (size_t i = 0; i < n; ++i)
      if (!given[i])
        local->vars[m.params[i]] = m.defaults[i] ? eval(*m.defaults[i]) : undef("parameter " + str_repr(m.params[i]) + " was not provided");
    Capture cap(*this);
    exec(m.body);
    return str(cap.take());
  }

  Value make_macro(const MacroDef& m, bool anonymous = false) {
    captured.push_back(scope);
    const MacroDef* md = &m;
    ScopeP def = scope;
    return func(
        anonymous ? "" : m.name, [md, def](Interp& in, Args& a) { return in.call_macro(*md, def, a); }, true);
  }

  // ---------------------------------------------------------------- statements

  Flow exec(const Body& body) {
    for (const StmtP& s : body) {
      const Flow f = exec_one(*s);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  Flow exec_one(const Stmt& s) {
    line = s.line;
    step();
    switch (s.k) {
      case SK::Text: emit(s.text); break;
      case SK::Print:
        for (const ExprP& e : s.exprs) {
          const Value v = eval(*e);
          emit(to_str(v, lim.max_data_depth));
        }
        break;
      case SK::If:
        for (size_t i = 0; i < s.exprs.size(); ++i)
          if (!s.exprs[i] || truthy(eval(*s.exprs[i]))) return exec(s.bodies[i]);
        break;
      case SK::For: {
        const Value it = eval(*s.exprs[0]);
        run_loop(s, it, 0);
        break;
      }
      case SK::Set: assign(s.targets[0], eval(*s.exprs[0])); break;
      case SK::SetBlock: {
        std::string text;
        {
          Capture cap(*this);
          ScopeGuard g(*this, child_of(scope));
          exec(s.bodies[0]);
          text = cap.take();
        }
        Value v = str(std::move(text));
        if (s.filter) v = apply_filter(*s.filter, &v);
        assign(s.targets[0], v);
        break;
      }
      case SK::FilterBlock: {
        std::string text;
        {
          Capture cap(*this);
          ScopeGuard g(*this, child_of(scope));
          exec(s.bodies[0]);
          text = cap.take();
        }
        const Value in = str(std::move(text));
        emit(to_str(apply_filter(*s.filter, &in), lim.max_data_depth));
        break;
      }
      case SK::Macro: scope->vars[s.macro->name] = make_macro(*s.macro); break;
      case SK::CallBlock: {
        const Expr& call = *s.exprs[0];
        const Value f = eval(*call.kids[0]);
        Args a = eval_args(call.args);
        a.kw.emplace_back("caller", make_macro(*s.macro, true));
        line = s.line;
        emit(to_str(invoke(f, a), lim.max_data_depth));
        break;
      }
      case SK::With: {
        std::vector<Value> vals;
        for (const ExprP& e : s.exprs) vals.push_back(eval(*e));
        ScopeGuard g(*this, child_of(scope));
        for (size_t i = 0; i < vals.size(); ++i) assign(s.targets[i], vals[i]);
        return exec(s.bodies[0]);
      }
      case SK::Scope: {
        ScopeGuard g(*this, child_of(scope));
        exec(s.bodies[0]);
        break;
      }
      case SK::Break: return Flow::Break;
      case SK::Continue: return Flow::Continue;
    }
    return Flow::Normal;
  }

  // ---------------------------------------------------------------- filters and tests

  Value apply_filter(const Expr& e, const Value* block_input) {
    Value in;
    if (!e.kids[0]) in = *block_input;
    else if (e.kids[0]->k == EK::Filter) in = apply_filter(*e.kids[0], block_input);
    else in = eval(*e.kids[0]);
    Args a = eval_args(e.args);
    line = e.line;
    if (!e.filter) {
      if (e.missing) fail("No filter named '" + e.name + "' found.");
      fail("the '" + e.name + "' filter is not supported by looplm's Jinja");
    }
    step();
    return e.filter(*this, in, a);
  }

  bool apply_test(const Expr& e) {
    const Value in = eval(*e.kids[0]);
    Args a = eval_args(e.args);
    line = e.line;
    if (!e.test) fail("No test named '" + e.name + "' found.");
    step();
    return e.test(*this, in, a);
  }

  Value call_filter(const std::string& name, const Value& in, Args& a) {
    const FilterFn* f = find_filter(name);
    if (!f) {
      if (unsupported_filter(name)) fail("the '" + name + "' filter is not supported by looplm's Jinja");
      fail("No filter named '" + name + "'.");
    }
    step();
    return (*f)(*this, in, a);
  }

  bool call_test(const std::string& name, const Value& in, Args& a) {
    const TestFn* t = find_test(name);
    if (!t) fail("No test named '" + name + "'.");
    step();
    return (*t)(*this, in, a);
  }

  // Defined with the string methods and formatting below.
  std::optional<Value> method(const Value& o, const std::string& name);
  std::string percent_format(const std::string& fmt, const Value& args);
  std::string format_method(const std::string& fmt, Args& a);
};

// ============================================================================ arguments

// Binds a call's arguments to named parameters as Python would, for built-in filters, tests,
// globals and methods (`fname` names the function in errors).
struct Params {
  std::vector<std::optional<Value>> v;
  Params(const std::string& fname, Args& a, std::initializer_list<const char*> names, size_t required = 0) {
    const std::vector<const char*> ns(names);
    v.resize(ns.size());
    if (a.pos.size() > ns.size())
      fail(fname + "() takes at most " + std::to_string(ns.size()) + " argument(s) (" + std::to_string(a.pos.size()) + " given)");
    for (size_t i = 0; i < a.pos.size(); ++i) v[i] = a.pos[i];
    for (auto& kv : a.kw) {
      const std::string& k = kv.first;
      const auto it = std::find_if(ns.begin(), ns.end(), [&k](const char* n) { return k == n; });
      if (it == ns.end()) fail(fname + "() got an unexpected keyword argument " + str_repr(k));
      auto& slot = v[static_cast<size_t>(it - ns.begin())];
      if (slot) fail(fname + "() got multiple values for argument " + str_repr(k));
      slot = kv.second;
    }
    for (size_t i = 0; i < required; ++i)
      if (!v[i]) fail(fname + "() missing required argument: " + str_repr(ns[i]));
  }
  bool has(size_t i) const { return v[i].has_value(); }
  // Given and not None.
  bool set(size_t i) const { return v[i].has_value() && v[i]->k != K::None; }
  const Value& operator[](size_t i) const { return *v[i]; }
  Value get(size_t i, Value dflt) const { return v[i] ? *v[i] : std::move(dflt); }
};

int64_t as_index(const Value& v) {
  if (!v.is_intlike()) fail(std::string("'") + type_name(v) + "' object cannot be interpreted as an integer");
  return v.as_int();
}

const std::string& as_text(const Value& v, const char* what) {
  if (v.k != K::Str) fail(std::string(what) + " must be str, not " + type_name(v));
  return v.str();
}

// ============================================================================ string methods

enum Side { kLeft = 1, kRight = 2, kBoth = 3 };

std::string py_strip(const std::string& s, const std::optional<std::string>& chars, int side) {
  const std::u32string u = to_u32(s);
  const std::u32string set = chars ? to_u32(*chars) : U"";
  const auto strip = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : py_space(c); };
  size_t b = 0, e = u.size();
  if (side & kLeft)
    while (b < e && strip(u[b])) ++b;
  if (side & kRight)
    while (e > b && strip(u[e - 1])) --e;
  return from_u32(u.substr(b, e - b));
}

std::vector<std::string> py_split(const std::string& s, const std::optional<std::string>& sep, int64_t maxsplit, bool right) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) fail("empty separator");
    if (!right) {
      size_t b = 0;
      for (size_t p; (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) && (p = s.find(*sep, b)) != std::string::npos;) {
        out.push_back(s.substr(b, p - b));
        b = p + sep->size();
      }
      out.push_back(s.substr(b));
    } else {
      size_t e = s.size();
      for (int64_t n = 0; maxsplit < 0 || n < maxsplit; ++n) {
        if (e < sep->size()) break;
        const size_t p = s.rfind(*sep, e - sep->size());
        if (p == std::string::npos) break;
        out.push_back(s.substr(p + sep->size(), e - p - sep->size()));
        e = p;
      }
      out.push_back(s.substr(0, e));
      std::reverse(out.begin(), out.end());
    }
    return out;
  }
  const std::u32string u = to_u32(s);
  if (!right) {
    size_t i = 0;
    while (i < u.size()) {
      while (i < u.size() && py_space(u[i])) ++i;
      if (i >= u.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        out.push_back(from_u32(u.substr(i)));
        break;
      }
      size_t j = i;
      while (j < u.size() && !py_space(u[j])) ++j;
      out.push_back(from_u32(u.substr(i, j - i)));
      i = j;
    }
    return out;
  }
  size_t e = u.size();
  while (e > 0) {
    while (e > 0 && py_space(u[e - 1])) --e;
    if (e == 0) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      out.push_back(from_u32(u.substr(0, e)));
      break;
    }
    size_t b = e;
    while (b > 0 && !py_space(u[b - 1])) --b;
    out.push_back(from_u32(u.substr(b, e - b)));
    e = b;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> py_splitlines(const std::string& s, bool keepends) {
  std::vector<std::string> out;
  const std::u32string u = to_u32(s);
  size_t b = 0;
  for (size_t i = 0; i < u.size();) {
    if (!py_linebreak(u[i])) { ++i; continue; }
    size_t e = i + 1;
    if (u[i] == '\r' && e < u.size() && u[e] == '\n') ++e;
    out.push_back(from_u32(u.substr(b, (keepends ? e : i) - b)));
    b = i = e;
  }
  if (b < u.size()) out.push_back(from_u32(u.substr(b)));
  return out;
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& rep, int64_t count) {
  std::string out;
  if (old.empty()) {
    int64_t n = 0;
    for (size_t i = 0; i < s.size();) {
      if (count < 0 || n < count) { out += rep; ++n; }
      const size_t b = i;
      next_cp(s, i);
      out.append(s, b, i - b);
    }
    if (count < 0 || n < count) out += rep;
    return out;
  }
  size_t b = 0;
  int64_t n = 0;
  for (size_t p; (count < 0 || n < count) && (p = s.find(old, b)) != std::string::npos; ++n) {
    out.append(s, b, p - b);
    out += rep;
    b = p + old.size();
  }
  out.append(s, b, std::string::npos);
  return out;
}

// Python's ADJUST_INDICES for str.find / count / startswith with start and end.
std::pair<int64_t, int64_t> adjust(int64_t len, const Params& p, size_t i_start) {
  int64_t b = p.set(i_start) ? as_index(p[i_start]) : 0, e = p.set(i_start + 1) ? as_index(p[i_start + 1]) : len;
  if (e > len) e = len;
  else if (e < 0) { e += len; if (e < 0) e = 0; }
  if (b < 0) { b += len; if (b < 0) b = 0; }
  return {b, e};
}

std::u32string title_case(const std::u32string& u) {
  std::u32string out;
  bool prev_cased = false;
  for (char32_t c : u) {
    out += to_u32(map_case(cp_str(c), prev_cased ? Case::Lower : Case::Title));
    prev_cased = is_cased(c);
  }
  return out;
}

std::string py_capitalize(const std::string& s) {
  if (s.empty()) return s;
  size_t i = 0;
  const char32_t c = next_cp(s, i);
  return map_case(cp_str(c), Case::Title) + map_case(std::string_view(s).substr(i), Case::Lower);
}

// Pads s to `width` characters: align '<', '>', '^' (format: extra space right) or 'c'
// (str.center: Python's own rounding).
std::string pad(const std::string& s, int64_t width, char32_t fill, char align) {
  const auto n = static_cast<int64_t>(cp_count(s));
  if (width <= n) return s;
  const int64_t marg = width - n;
  const int64_t left = align == '<' ? 0 : align == '>' ? marg : align == '^' ? marg / 2 : marg / 2 + (marg & width & 1);
  const std::string f = cp_str(fill);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += f;
  out += s;
  for (int64_t i = 0; i < marg - left; ++i) out += f;
  return out;
}

bool all_of_cps(const std::string& s, bool (*pred)(char32_t), bool empty_value) {
  if (s.empty()) return empty_value;
  for (size_t i = 0; i < s.size();)
    if (!pred(next_cp(s, i))) return false;
  return true;
}

bool py_islower(const std::string& s) {
  bool cased = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = next_cp(s, i);
    if (is_upper_cp(c) || is_title_cp(c)) return false;
    if (is_lower_cp(c)) cased = true;
  }
  return cased;
}

bool py_isupper(const std::string& s) {
  bool cased = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = next_cp(s, i);
    if (is_lower_cp(c) || is_title_cp(c)) return false;
    if (is_upper_cp(c)) cased = true;
  }
  return cased;
}

bool py_istitle(const std::string& s) {
  bool cased = false, prev = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = next_cp(s, i);
    if (is_upper_cp(c) || is_title_cp(c)) {
      if (prev) return false;
      prev = cased = true;
    } else if (is_lower_cp(c)) {
      if (!prev) return false;
      prev = cased = true;
    } else {
      prev = false;
    }
  }
  return cased;
}

Value text_list(Interp& in, const std::vector<std::string>& parts, Fl fl = Fl::List) {
  Vec v;
  for (const std::string& p : parts) v.push_back(string(p));
  return in.make_list(std::move(v), fl);
}

std::optional<std::string> opt_text(const Params& p, size_t i, const char* what) {
  if (!p.set(i)) return std::nullopt;
  return as_text(p[i], what);
}

Value str_method(Interp& in, const Value& self, const std::string& m, Args& a) {
  const std::string& s = self.str();
  if (m == "upper" || m == "lower" || m == "casefold" || m == "title" || m == "capitalize" || m == "swapcase") {
    Params p(m, a, {});
    if (m == "upper") return in.str(map_case(s, Case::Upper));
    if (m == "lower") return in.str(map_case(s, Case::Lower));
    if (m == "casefold") return in.str(map_case(s, Case::Fold));
    if (m == "title") return in.str(from_u32(title_case(to_u32(s))));
    if (m == "capitalize") return in.str(py_capitalize(s));
    std::string out;
    for (size_t i = 0; i < s.size();) {
      const char32_t c = next_cp(s, i);
      out += is_upper_cp(c) ? map_case(cp_str(c), Case::Lower) : is_lower_cp(c) ? map_case(cp_str(c), Case::Upper) : cp_str(c);
    }
    return in.str(std::move(out));
  }
  if (m == "strip" || m == "lstrip" || m == "rstrip") {
    Params p(m, a, {"chars"});
    return in.str(py_strip(s, opt_text(p, 0, "strip arg"), m == "strip" ? kBoth : m == "lstrip" ? kLeft : kRight));
  }
  if (m == "split" || m == "rsplit") {
    Params p(m, a, {"sep", "maxsplit"});
    return text_list(in, py_split(s, opt_text(p, 0, "sep"), p.has(1) ? as_index(p[1]) : -1, m == "rsplit"));
  }
  if (m == "splitlines") {
    Params p(m, a, {"keepends"});
    return text_list(in, py_splitlines(s, p.has(0) && as_index(p[0]) != 0));
  }
  if (m == "startswith" || m == "endswith") {
    Params p(m, a, {"prefix", "start", "end"}, 1);
    const std::u32string u = to_u32(s);
    const auto [b, e] = adjust(static_cast<int64_t>(u.size()), p, 1);
    const auto test = [&, b = b, e = e](const std::string& x) {
      const std::u32string ux = to_u32(x);
      if (b > static_cast<int64_t>(u.size())) return false;
      if (e - b < static_cast<int64_t>(ux.size())) return false;
      const size_t at = m == "startswith" ? static_cast<size_t>(b) : static_cast<size_t>(e) - ux.size();
      return u.compare(at, ux.size(), ux) == 0;
    };
    if (p[0].k == K::Str) return boolean(test(p[0].str()));
    if (p[0].k == K::List && p[0].obj<ListObj>().fl == Fl::Tuple) {
      for (const Value& x : p[0].obj<ListObj>().v)
        if (test(as_text(x, "tuple for startswith"))) return boolean(true);
      return boolean(false);
    }
    fail(m + " first arg must be str or a tuple of str, not " + type_name(p[0]));
  }
  if (m == "replace") {
    Params p(m, a, {"old", "new", "count"}, 2);
    return in.str(py_replace(s, as_text(p[0], "replace() argument 1"), as_text(p[1], "replace() argument 2"),
                             p.has(2) ? as_index(p[2]) : -1),
                  self.markup);
  }
  if (m == "find" || m == "rfind" || m == "index" || m == "rindex" || m == "count") {
    Params p(m, a, {"sub", "start", "end"}, 1);
    const std::u32string u = to_u32(s), sub = to_u32(as_text(p[0], "must be str"));
    const auto [b, e] = adjust(static_cast<int64_t>(u.size()), p, 1);
    if (m == "count") {
      if (b > e) return integer(0);
      if (sub.empty()) return integer(e - b + 1);
      int64_t n = 0;
      for (size_t i = static_cast<size_t>(b); i + sub.size() <= static_cast<size_t>(e);) {
        if (u.compare(i, sub.size(), sub) == 0) { ++n; i += sub.size(); }
        else ++i;
      }
      return integer(n);
    }
    int64_t found = -1;
    if (b <= e && e - b >= static_cast<int64_t>(sub.size())) {
      if (m[0] == 'r') {
        for (int64_t i = e - static_cast<int64_t>(sub.size()); i >= b; --i)
          if (u.compare(static_cast<size_t>(i), sub.size(), sub) == 0) { found = i; break; }
      } else {
        for (int64_t i = b; i + static_cast<int64_t>(sub.size()) <= e; ++i)
          if (u.compare(static_cast<size_t>(i), sub.size(), sub) == 0) { found = i; break; }
      }
    }
    if (found < 0 && (m == "index" || m == "rindex")) fail("substring not found");
    return integer(found);
  }
  if (m == "join") {
    Params p(m, a, {"iterable"}, 1);
    const auto items = in.iterate(p[0]);
    std::string out;
    for (size_t i = 0; i < items->size(); ++i) {
      const Value& x = (*items)[i];
      if (x.k != K::Str) fail("sequence item " + std::to_string(i) + ": expected str instance, " + type_name(x) + " found");
      if (i) out += s;
      out += x.str();
    }
    return in.str(std::move(out));
  }
  if (m == "format") return in.str(in.format_method(s, a));
  if (m == "center" || m == "ljust" || m == "rjust") {
    Params p(m, a, {"width", "fillchar"}, 1);
    char32_t fill = ' ';
    if (p.has(1)) {
      const std::u32string f = to_u32(as_text(p[1], "fill character"));
      if (f.size() != 1) fail("The fill character must be exactly one character long");
      fill = f[0];
    }
    return in.str(pad(s, as_index(p[0]), fill, m == "center" ? 'c' : m == "ljust" ? '<' : '>'));
  }
  if (m == "zfill") {
    Params p(m, a, {"width"}, 1);
    const int64_t w = as_index(p[0]), n = static_cast<int64_t>(cp_count(s));
    if (w <= n) return self;
    const bool sign = !s.empty() && (s[0] == '+' || s[0] == '-');
    return in.str((sign ? s.substr(0, 1) : "") + std::string(static_cast<size_t>(w - n), '0') + (sign ? s.substr(1) : s));
  }
  if (m == "removeprefix" || m == "removesuffix") {
    Params p(m, a, {"affix"}, 1);
    const std::string& x = as_text(p[0], m.c_str());
    if (m == "removeprefix") return in.str(s.compare(0, x.size(), x) == 0 ? s.substr(x.size()) : s);
    return in.str(s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0 ? s.substr(0, s.size() - x.size()) : s);
  }
  if (m == "partition" || m == "rpartition") {
    Params p(m, a, {"sep"}, 1);
    const std::string& sep = as_text(p[0], "sep");
    if (sep.empty()) fail("empty separator");
    const size_t at = m == "partition" ? s.find(sep) : s.rfind(sep);
    if (at == std::string::npos)
      return text_list(in, m == "partition" ? std::vector<std::string>{s, "", ""} : std::vector<std::string>{"", "", s}, Fl::Tuple);
    return text_list(in, {s.substr(0, at), sep, s.substr(at + sep.size())}, Fl::Tuple);
  }
  Params p(m, a, {});
  if (m == "isalnum") return boolean(all_of_cps(s, [](char32_t c) { return is_alpha_cp(c) || is_numeric_cp(c); }, false));
  if (m == "isalpha") return boolean(all_of_cps(s, is_alpha_cp, false));
  if (m == "isascii") return boolean(all_of_cps(s, [](char32_t c) { return c < 0x80; }, true));
  if (m == "isdecimal") return boolean(all_of_cps(s, is_decimal_cp, false));
  if (m == "isdigit") return boolean(all_of_cps(s, is_digit_cp, false));
  if (m == "isnumeric") return boolean(all_of_cps(s, is_numeric_cp, false));
  if (m == "isspace") return boolean(all_of_cps(s, py_space, false));
  if (m == "isprintable") return boolean(all_of_cps(s, py_printable, true));
  if (m == "islower") return boolean(py_islower(s));
  if (m == "isupper") return boolean(py_isupper(s));
  if (m == "istitle") return boolean(py_istitle(s));
  if (m == "isidentifier") {
    if (s.empty()) return boolean(false);
    size_t i = 0;
    const char32_t c = next_cp(s, i);
    if (c != '_' && !u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_XID_START)) return boolean(false);
    return boolean(all_of_cps(s.substr(i), [](char32_t d) { return d == '_' || u_hasBinaryProperty(static_cast<UChar32>(d), UCHAR_XID_CONTINUE) != 0; }, true));
  }
  fail("str." + m + "() is not supported by looplm's Jinja");
}

const char* const kStrMethods[] = {
    "capitalize", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find", "format", "format_map",
    "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier", "islower", "isnumeric",
    "isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower", "lstrip", "maketrans", "partition",
    "removeprefix", "removesuffix", "replace", "rfind", "rindex", "rjust", "rpartition", "rsplit", "rstrip", "split",
    "splitlines", "startswith", "strip", "swapcase", "title", "translate", "upper", "zfill"};

bool in_list(const std::string& name, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (name == n) return true;
  return false;
}

Value dict_method(Interp& in, const Value& self, const std::string& m, Args& a) {
  const DictObj& d = self.obj<DictObj>();
  if (m == "items" || m == "keys" || m == "values") {
    Params p(m, a, {});
    Vec v;
    for (const auto& [k, val] : d.items)
      v.push_back(m == "keys" ? k : m == "values" ? val : list({k, val}, Fl::Tuple));
    return in.make_list(std::move(v), m == "items" ? Fl::Items : m == "keys" ? Fl::Keys : Fl::Values);
  }
  if (m == "get") {
    Params p(m, a, {"key", "default"}, 1);
    const Value* v = d.find(p[0]);
    return v ? *v : p.get(1, none());
  }
  if (m == "copy") {
    Params p(m, a, {});
    return dict(d);
  }
  fail("dict." + m + "() is not supported by looplm's Jinja");
}

Value list_method(Interp& in, const Value& self, const std::string& m, Args& a) {
  const ListObj& l = self.obj<ListObj>();
  if (m == "count") {
    Params p(m, a, {"value"}, 1);
    int64_t n = 0;
    for (const Value& x : l.v) n += py_eq(x, p[0]);
    return integer(n);
  }
  if (m == "index") {
    Params p(m, a, {"value", "start", "stop"}, 1);
    for (size_t i = 0; i < l.v.size(); ++i)
      if (py_eq(l.v[i], p[0])) return integer(static_cast<int64_t>(i));
    fail(to_str(p[0]) + " is not in list");
  }
  if (m == "copy") {
    Params p(m, a, {});
    return in.make_list(l.v, l.fl);
  }
  fail("list." + m + "() is not supported by looplm's Jinja");
}

std::optional<Value> Interp::method(const Value& o, const std::string& name) {
  using Fn = Value (*)(Interp&, const Value&, const std::string&, Args&);
  Fn fn = nullptr;
  if (o.k == K::Str) {
    if (std::find_if(std::begin(kStrMethods), std::end(kStrMethods), [&](const char* n) { return name == n; }) !=
        std::end(kStrMethods))
      fn = str_method;
  } else if (o.k == K::Dict) {
    if (in_list(name, {"clear", "pop", "popitem", "setdefault", "update"})) return unsafe(o, name);
    if (in_list(name, {"copy", "fromkeys", "get", "items", "keys", "values"})) fn = dict_method;
  } else if (o.k == K::List) {
    const Fl fl = o.obj<ListObj>().fl;
    if (fl == Fl::List && in_list(name, {"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"}))
      return unsafe(o, name);
    if ((fl == Fl::List && in_list(name, {"copy", "count", "index"})) ||
        ((fl == Fl::Tuple || fl == Fl::Range) && in_list(name, {"count", "index"})))
      fn = list_method;
  }
  if (!fn) return std::nullopt;
  return func(name, [fn, o, name](Interp& in, Args& a) { return fn(in, o, name, a); });
}

// ============================================================================ formatting

std::string group_digits(const std::string& digits, char sep, size_t every) {
  std::string out;
  const size_t n = digits.size();
  for (size_t i = 0; i < n; ++i) {
    if (i && (n - i) % every == 0) out += sep;
    out += digits[i];
  }
  return out;
}

std::string int_digits(uint64_t v, int base, bool upper) {
  if (v == 0) return "0";
  std::string d;
  const char* digs = upper ? "0123456789ABCDEF" : "0123456789abcdef";
  while (v) {
    d += digs[v % static_cast<uint64_t>(base)];
    v /= static_cast<uint64_t>(base);
  }
  std::reverse(d.begin(), d.end());
  return d;
}

std::string c_float(double x, char type, int prec, bool alt) {
  char fmt[16];
  std::snprintf(fmt, sizeof fmt, "%%%s.%d%c", alt ? "#" : "", prec, type);
  char buf[512];
  const int n = std::snprintf(buf, sizeof buf, fmt, x);
  if (n < 0 || n >= static_cast<int>(sizeof buf)) {
    std::string big(static_cast<size_t>(std::max(n, 0)) + 1, '\0');
    std::snprintf(big.data(), big.size(), fmt, x);
    big.pop_back();
    return big;
  }
  return std::string(buf, static_cast<size_t>(n));
}

// printf-style `fmt % args` (str.__mod__): %[(key)][flags][width][.precision]type.
std::string Interp::percent_format(const std::string& fmt, const Value& args) {
  Vec items;
  const bool is_tuple = args.k == K::List && args.obj<ListObj>().fl == Fl::Tuple;
  if (is_tuple) items = args.obj<ListObj>().v;
  else items.push_back(args);
  // Python takes any non-tuple argument with __getitem__ as a mapping: it may go unused.
  const bool mapping = args.k == K::Dict || args.k == K::Undef ||
                       (args.k == K::List && !is_tuple && args.obj<ListObj>().fl != Fl::Items &&
                        args.obj<ListObj>().fl != Fl::Keys && args.obj<ListObj>().fl != Fl::Values);
  size_t next = 0;
  bool keyed = false;
  std::string out;
  const auto take = [&]() -> Value {
    if (next >= items.size() || keyed) fail("not enough arguments for format string");
    return items[next++];
  };
  for (size_t i = 0; i < fmt.size();) {
    if (fmt[i] != '%') {
      out += fmt[i++];
      continue;
    }
    ++i;
    if (i >= fmt.size()) fail("incomplete format");
    if (fmt[i] == '%') {  // "%%"; a '%' after flags or a width is a conversion (and unsupported)
      out += '%';
      ++i;
      continue;
    }
    std::optional<Value> arg;
    if (fmt[i] == '(') {
      if (!mapping) fail("format requires a mapping");
      if (args.k == K::Undef) undefined_error(args);
      if (args.k != K::Dict) fail(std::string(type_name(args)) + " indices must be integers or slices, not str");
      int depth = 1;
      size_t j = i + 1;
      while (j < fmt.size() && depth) {
        if (fmt[j] == '(') ++depth;
        else if (fmt[j] == ')') --depth;
        ++j;
      }
      if (depth) fail("incomplete format key");
      const std::string key = fmt.substr(i + 1, j - i - 2);
      const Value* v = args.obj<DictObj>().find_str(key);
      if (!v) fail(str_repr(key));
      arg = *v;
      keyed = true;
      i = j;
    }
    std::string flags;
    while (i < fmt.size() && std::strchr("-+ #0", fmt[i]) && fmt[i]) flags += fmt[i++];
    const auto number = [&]() -> std::optional<int64_t> {
      if (i < fmt.size() && fmt[i] == '*') {
        ++i;
        return as_index(take());
      }
      if (i >= fmt.size() || !is_digit(fmt[i])) return std::nullopt;
      int64_t v = 0;
      while (i < fmt.size() && is_digit(fmt[i])) v = std::min<int64_t>(v * 10 + (fmt[i++] - '0'), 1 << 20);
      return v;
    };
    int64_t width = -1, prec = -1;
    if (const auto w = number()) {
      width = *w;
      if (width < 0) {  // a negative * width left-justifies
        flags += '-';
        width = -width;
      }
    }
    if (i < fmt.size() && fmt[i] == '.') {
      ++i;
      prec = std::max<int64_t>(number().value_or(0), 0);
    }
    while (i < fmt.size() && (fmt[i] == 'h' || fmt[i] == 'l' || fmt[i] == 'L')) ++i;
    if (i >= fmt.size()) fail("incomplete format");
    const char type = fmt[i++];
    if (!arg) arg = take();
    const Value& v = *arg;
    const bool left = flags.find('-') != std::string::npos, zero = flags.find('0') != std::string::npos && !left;
    std::string body, sign;
    bool numeric = true;
    switch (type) {
      case 's': case 'r': case 'a': {
        numeric = false;
        if (type == 's') {
          body = to_str(v, lim.max_data_depth);
        } else {
          repr_into(body, v, 0, lim.max_data_depth);
          if (type == 'a') body = ascii_escape(body);
        }
        if (prec >= 0) body = cp_substr(body, 0, static_cast<size_t>(prec));
        break;
      }
      case 'd': case 'i': case 'u': case 'x': case 'X': case 'o': {
        int64_t n;
        if (v.is_intlike()) n = v.as_int();
        else if (v.k == K::Float && (type == 'd' || type == 'i' || type == 'u')) {
          if (!std::isfinite(v.f)) fail("cannot convert float " + float_repr(v.f) + " to integer");
          n = static_cast<int64_t>(v.f);
        } else if (type == 'd' || type == 'i' || type == 'u') {
          fail(std::string("%") + type + " format: a real number is required, not " + type_name(v));
        } else {
          fail(std::string("%") + type + " format: an integer is required, not " + type_name(v));
        }
        const uint64_t mag = n < 0 ? 0 - static_cast<uint64_t>(n) : static_cast<uint64_t>(n);
        body = int_digits(mag, type == 'x' || type == 'X' ? 16 : type == 'o' ? 8 : 10, type == 'X');
        if (prec > static_cast<int64_t>(body.size())) body = std::string(static_cast<size_t>(prec) - body.size(), '0') + body;
        if (flags.find('#') != std::string::npos && (type == 'x' || type == 'X' || type == 'o'))
          body = std::string("0") + (type == 'o' ? 'o' : type) + body;
        sign = n < 0 ? "-" : flags.find('+') != std::string::npos ? "+" : flags.find(' ') != std::string::npos ? " " : "";
        break;
      }
      case 'e': case 'E': case 'f': case 'F': case 'g': case 'G': {
        if (!v.is_num()) fail(std::string("must be real number, not ") + type_name(v));
        const double x = v.as_float();
        body = c_float(std::fabs(x), type, prec < 0 ? 6 : static_cast<int>(prec), flags.find('#') != std::string::npos);
        sign = std::signbit(x) && !std::isnan(x) ? "-" : flags.find('+') != std::string::npos ? "+" : flags.find(' ') != std::string::npos ? " " : "";
        break;
      }
      case 'c':
        numeric = false;
        if (v.is_intlike()) {
          if (v.as_int() < 0 || v.as_int() > 0x10FFFF) fail("%c arg not in range(0x110000)");
          body = cp_str(static_cast<char32_t>(v.as_int()));
        } else if (v.k == K::Str && cp_count(v.str()) == 1) {
          body = v.str();
        } else {
          fail("%c requires int or char");
        }
        break;
      default: {
        char b[96];
        std::snprintf(b, sizeof b, "unsupported format character '%c' (0x%x) at index %zu", type, static_cast<unsigned>(static_cast<unsigned char>(type)), i - 1);
        fail(b);
      }
    }
    const int64_t len = static_cast<int64_t>(cp_count(body) + sign.size());
    if (width > len) {
      const auto fillw = static_cast<size_t>(width - len);
      if (left) body = sign + body + std::string(fillw, ' ');
      else if (zero && numeric) body = sign + std::string(fillw, '0') + body;
      else body = std::string(fillw, ' ') + sign + body;
    } else {
      body = sign + body;
    }
    out += body;
  }
  if (!mapping && !keyed && next < items.size()) fail("not all arguments converted during string formatting");
  return out;
}

// format(value, spec): Python's format-spec mini-language for str, int, bool and float.
std::string format_spec(const Value& v, const std::string& spec) {
  if (spec.empty()) return to_str(v);
  const std::u32string u = to_u32(spec);
  size_t i = 0;
  char32_t fill = ' ';
  char align = 0;
  if (u.size() >= 2 && std::strchr("<>=^", static_cast<int>(u[1])) && u[1] < 0x80) {
    fill = u[0];
    align = static_cast<char>(u[1]);
    i = 2;
  } else if (!u.empty() && u[0] < 0x80 && std::strchr("<>=^", static_cast<int>(u[0]))) {
    align = static_cast<char>(u[0]);
    i = 1;
  }
  char sign = 0;
  if (i < u.size() && (u[i] == '+' || u[i] == '-' || u[i] == ' ')) sign = static_cast<char>(u[i++]);
  if (i < u.size() && u[i] == 'z') ++i;
  const bool alt = i < u.size() && u[i] == '#';
  if (alt) ++i;
  if (i < u.size() && u[i] == '0') {
    if (!align) { fill = '0'; align = '='; }
    ++i;
  }
  int64_t width = -1, prec = -1;
  while (i < u.size() && u[i] >= '0' && u[i] <= '9') width = std::max<int64_t>(width, 0) * 10 + (u[i++] - '0');
  char group = 0;
  if (i < u.size() && (u[i] == ',' || u[i] == '_')) group = static_cast<char>(u[i++]);
  if (i < u.size() && u[i] == '.') {
    ++i;
    prec = 0;
    if (i >= u.size() || u[i] < '0' || u[i] > '9') fail("Format specifier missing precision");
    while (i < u.size() && u[i] >= '0' && u[i] <= '9') prec = prec * 10 + (u[i++] - '0');
  }
  char type = 0;
  if (i < u.size()) type = static_cast<char>(u[i++]);
  if (i < u.size()) fail("Invalid format specifier");
  std::string body, sgn;
  if (v.k == K::Str) {
    if (type && type != 's') fail(std::string("Unknown format code '") + type + "' for object of type 'str'");
    if (align == '=') fail("'=' alignment not allowed in string format specifier");
    body = prec >= 0 ? Interp::cp_substr(v.str(), 0, static_cast<size_t>(prec)) : v.str();
    if (!align) align = '<';
  } else if (v.is_intlike() && (!type || std::strchr("bcdoxXn", type))) {
    const int64_t n = v.as_int();
    const uint64_t mag = n < 0 ? 0 - static_cast<uint64_t>(n) : static_cast<uint64_t>(n);
    if (type == 'c') body = cp_str(static_cast<char32_t>(n));
    else {
      const int base = type == 'b' ? 2 : type == 'o' ? 8 : (type == 'x' || type == 'X') ? 16 : 10;
      body = int_digits(mag, base, type == 'X');
      if (group) body = group_digits(body, group, base == 10 ? 3 : 4);
      if (alt && base != 10) body = std::string("0") + (type == 'b' ? 'b' : type == 'o' ? 'o' : type) + body;
      sgn = n < 0 ? "-" : sign == '+' ? "+" : sign == ' ' ? " " : "";
    }
    if (!align) align = '>';
  } else if (v.is_num()) {
    double x = v.as_float();
    const bool neg = std::signbit(x) && !std::isnan(x);
    x = std::fabs(x);
    if (!type && prec < 0) body = float_repr(x);
    else if (!type) {
      body = c_float(x, 'g', static_cast<int>(prec == 0 ? 1 : prec), alt);
      if (body.find_first_of(".en") == std::string::npos) body += ".0";
    } else if (type == '%') body = c_float(x * 100, 'f', static_cast<int>(prec < 0 ? 6 : prec), alt) + "%";
    else if (std::strchr("eEfFgGn", type)) body = c_float(x, type == 'n' ? 'g' : type, static_cast<int>(prec < 0 ? 6 : prec), alt);
    else fail(std::string("Unknown format code '") + type + "' for object of type '" + type_name(v) + "'");
    if (group) {
      const size_t dot = body.find_first_not_of("0123456789");
      body = group_digits(body.substr(0, dot), group, 3) + (dot == std::string::npos ? "" : body.substr(dot));
    }
    sgn = neg ? "-" : sign == '+' ? "+" : sign == ' ' ? " " : "";
    if (!align) align = '>';
  } else {
    fail(std::string("unsupported format string passed to ") + type_name(v) + ".__format__");
  }
  const int64_t len = static_cast<int64_t>(cp_count(body) + sgn.size());
  if (width <= len) return sgn + body;
  if (align == '=') {
    std::string f;
    for (int64_t k = 0; k < width - len; ++k) f += cp_str(fill);
    return sgn + f + body;
  }
  return pad(sgn + body, width, fill, align);
}

// str.format(*args, **kwargs): {} {0} {name} fields with .attr / [key] lookups, !r !s !a and a
// format spec.
std::string Interp::format_method(const std::string& fmt, Args& a) {
  std::string out;
  size_t auto_index = 0;
  bool manual = false, automatic = false;
  for (size_t i = 0; i < fmt.size();) {
    const char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') { out += '}'; i += 2; continue; }
      fail("Single '}' encountered in format string");
    }
    if (c != '{') { out += c; ++i; continue; }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') { out += '{'; i += 2; continue; }
    const size_t close = fmt.find('}', i);
    if (close == std::string::npos) fail("Single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    if (field.find('{') != std::string::npos) fail("nested format fields are not supported by looplm's Jinja");
    i = close + 1;
    std::string spec, conv;
    if (const size_t colon = field.find(':'); colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field.resize(colon);
    }
    if (const size_t bang = field.find('!'); bang != std::string::npos) {
      conv = field.substr(bang + 1);
      field.resize(bang);
    }
    size_t j = 0;
    while (j < field.size() && field[j] != '.' && field[j] != '[') ++j;
    const std::string head = field.substr(0, j);
    Value v;
    if (head.empty() || std::all_of(head.begin(), head.end(), is_digit)) {
      size_t idx;
      if (head.empty()) {
        if (manual) fail("cannot switch from manual field specification to automatic field numbering");
        automatic = true;
        idx = auto_index++;
      } else {
        if (automatic) fail("cannot switch from automatic field numbering to manual field specification");
        manual = true;
        idx = std::stoul(head);
      }
      if (idx >= a.pos.size()) fail("Replacement index " + std::to_string(idx) + " out of range for positional args tuple");
      v = a.pos[idx];
    } else {
      const auto it = std::find_if(a.kw.begin(), a.kw.end(), [&](const auto& kv) { return kv.first == head; });
      if (it == a.kw.end()) fail(str_repr(head));
      v = it->second;
    }
    while (j < field.size()) {
      if (field[j] == '.') {
        size_t e = j + 1;
        while (e < field.size() && field[e] != '.' && field[e] != '[') ++e;
        v = getattr(v, field.substr(j + 1, e - j - 1));
        j = e;
      } else {
        const size_t e = field.find(']', j);
        if (e == std::string::npos) fail("Missing ']' in format string");
        const std::string key = field.substr(j + 1, e - j - 1);
        v = !key.empty() && std::all_of(key.begin(), key.end(), is_digit) ? getitem(v, integer(std::stoll(key))) : getitem(v, string(key));
        j = e + 1;
      }
    }
    if (!conv.empty()) {
      std::string r;
      if (conv == "s") r = to_str(v, lim.max_data_depth);
      else if (conv == "r" || conv == "a") repr_into(r, v, 0, lim.max_data_depth);
      else fail("Unknown conversion specifier " + conv);
      if (conv == "a") r = ascii_escape(r);
      v = string(std::move(r));
    }
    out += format_spec(v, spec);
    check_size(out.size());
  }
  return out;
}

// ============================================================================ filters
// jinja2.filters, as the sandbox runs them with autoescape off (and transformers' tojson).

// jinja2.filters.make_attrgetter: "a.b.0" looks item by item (digit parts as ints); a default
// replaces an undefined result.
struct AttrPath {
  Vec parts;
  std::optional<Value> dflt;
  bool lower = false;  // ignore_case postprocessing
};

AttrPath attr_path(const std::optional<Value>& attribute, std::optional<Value> dflt = std::nullopt, bool lower = false) {
  AttrPath p;
  p.dflt = std::move(dflt);
  p.lower = lower;
  if (!attribute || attribute->k == K::None) return p;
  if (attribute->k != K::Str) {
    p.parts.push_back(*attribute);
    return p;
  }
  for (const std::string& part : py_split(attribute->str(), std::string("."), -1, false)) {
    if (!part.empty() && std::all_of(part.begin(), part.end(), is_digit)) p.parts.push_back(integer(std::stoll(part)));
    else p.parts.push_back(string(part));
  }
  return p;
}

Value ignore_case(Interp& in, const Value& v) {
  return v.k == K::Str ? in.str(map_case(v.str(), Case::Lower)) : v;
}

Value follow(Interp& in, Value item, const AttrPath& p) {
  for (const Value& part : p.parts) {
    item = in.getitem(item, part);
    if (p.dflt && item.k == K::Undef) item = *p.dflt;
  }
  return p.lower ? ignore_case(in, item) : item;
}

Value f_abs(Interp&, const Value& v, Args& a) {
  Params p("abs", a, {});
  if (v.k == K::Float) return real(std::fabs(v.f));
  if (v.is_intlike()) {
    const int64_t x = v.as_int();
    if (x == std::numeric_limits<int64_t>::min()) Interp::checked(true, 0);
    return integer(x < 0 ? -x : x);
  }
  fail(std::string("bad operand type for abs(): '") + type_name(v) + "'");
}

Value f_attr(Interp& in, const Value& v, Args& a) {
  Params p("do_attr", a, {"name"}, 1);
  const std::string name = to_str(p[0]);
  if (v.k == K::Undef) undefined_error(v);
  if (std::optional<Value> m = in.method(v, name)) return *m;
  if (v.k == K::Ns)
    if (const Value* x = v.obj<NsObj>().attrs.find_str(name)) return *x;
  if (v.k == K::Loop) return in.loop_attr(v, name);
  return Interp::no_attr(v, name);
}

Value f_batch(Interp& in, const Value& v, Args& a) {
  Params p("do_batch", a, {"linecount", "fill_with"}, 1);
  const int64_t n = as_index(p[0]);
  const auto items = in.iterate(v);
  Vec out, cur;
  for (const Value& x : *items) {
    if (static_cast<int64_t>(cur.size()) == n) {
      out.push_back(in.make_list(std::move(cur)));
      cur.clear();
    }
    cur.push_back(x);
  }
  if (!cur.empty()) {
    if (p.set(1))
      while (static_cast<int64_t>(cur.size()) < n) cur.push_back(p[1]);
    out.push_back(in.make_list(std::move(cur)));
  }
  return iterator(std::move(out));
}

Value f_capitalize(Interp& in, const Value& v, Args& a) {
  Params p("do_capitalize", a, {});
  return in.str(py_capitalize(to_str(v)), v.markup);
}

Value f_center(Interp& in, const Value& v, Args& a) {
  Params p("do_center", a, {"width"});
  return in.str(pad(to_str(v), p.has(0) ? as_index(p[0]) : 80, ' ', 'c'));
}

Value f_length(Interp& in, const Value& v, Args& a) {
  Params p("len", a, {});
  return integer(in.length(v));
}

Value f_default(Interp&, const Value& v, Args& a) {
  Params p("do_default", a, {"default_value", "boolean"});
  if (v.k == K::Undef || (p.has(1) && truthy(p[1]) && !truthy(v))) return p.get(0, string(""));
  return v;
}

// Sorts values by keys with Python's sort (stable; reverse keeps equal items in order).
void sort_by(Interp& in, Vec& items, const std::vector<Vec>& keys, bool reverse) {
  std::vector<size_t> idx(items.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  const auto less = [&](size_t x, size_t y) {
    const Vec &a = keys[x], &b = keys[y];
    for (size_t i = 0; i < a.size() && i < b.size(); ++i)
      if (!py_eq(a[i], b[i])) return in.order(a[i], b[i], "<", a[i], b[i]) == -1;
    return a.size() < b.size();
  };
  std::stable_sort(idx.begin(), idx.end(), [&](size_t x, size_t y) { return reverse ? less(y, x) : less(x, y); });
  in.step(items.size());
  Vec out;
  for (size_t i : idx) out.push_back(items[i]);
  items = std::move(out);
}

Value f_dictsort(Interp& in, const Value& v, Args& a) {
  Params p("do_dictsort", a, {"case_sensitive", "by", "reverse"});
  if (v.k == K::Undef) undefined_error(v);
  if (v.k != K::Dict) fail(std::string("'") + type_name(v) + "' object has no attribute 'items'");
  const std::string by = p.has(1) ? to_str(p[1]) : "key";
  if (by != "key" && by != "value") fail("You can only sort by either \"key\" or \"value\"");
  const bool cs = p.has(0) && truthy(p[0]);
  Vec items;
  std::vector<Vec> keys;
  for (const auto& [k, val] : v.obj<DictObj>().items) {
    items.push_back(list({k, val}, Fl::Tuple));
    const Value& key = by == "key" ? k : val;
    keys.push_back({cs ? key : ignore_case(in, key)});
  }
  sort_by(in, items, keys, p.has(2) && as_index(p[2]) != 0);
  return in.make_list(std::move(items));
}

Value f_escape(Interp& in, const Value& v, Args& a) {
  Params p("escape", a, {});
  if (v.k == K::Str && v.markup) return v;
  return in.str(Interp::html_escape(to_str(v)), true);
}

Value f_forceescape(Interp& in, const Value& v, Args& a) {
  Params p("do_forceescape", a, {});
  return in.str(Interp::html_escape(to_str(v)), true);
}

Value f_first(Interp& in, const Value& v, Args& a) {
  Params p("do_first", a, {});
  if (v.k == K::Iter) {
    IterObj& it = v.obj<IterObj>();
    if (it.pos < it.v.size()) return it.v[it.pos++];
  } else {
    const auto items = in.iterate(v);
    if (!items->empty()) return items->front();
  }
  return undef("No first item, sequence was empty.");
}

Value f_last(Interp& in, const Value& v, Args& a) {
  Params p("do_last", a, {});
  if (v.k == K::Iter) fail(std::string("'") + type_name(v) + "' object is not reversible");
  const auto items = in.iterate(v);
  if (!items->empty()) return items->back();
  return undef("No last item, sequence was empty.");
}

// float(str): Python's float() literal rules (whitespace, sign, inf / nan, _ between digits).
std::optional<double> parse_float(const std::string& text) {
  std::string s = py_strip(text, std::nullopt, kBoth);
  std::string t;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (i == 0 || i + 1 >= s.size() || !is_digit(s[i - 1]) || !is_digit(s[i + 1])) return std::nullopt;
      continue;
    }
    t += s[i];
  }
  std::string low = map_case(t, Case::Lower);
  bool neg = false;
  std::string body = low;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
    neg = body[0] == '-';
    body.erase(0, 1);
  }
  if (body == "inf" || body == "infinity") return neg ? -INFINITY : INFINITY;
  if (body == "nan") return neg ? -NAN : NAN;
  if (body.empty() || !(is_digit(body[0]) || body[0] == '.')) return std::nullopt;
  for (char c : body)
    if (!is_digit(c) && c != '.' && c != 'e' && c != '+' && c != '-') return std::nullopt;
  double x = 0;
  const auto r = std::from_chars(body.data(), body.data() + body.size(), x);
  if (r.ec == std::errc::result_out_of_range) {
    if (r.ptr != body.data() + body.size()) return std::nullopt;
    x = decimal_to_double(body);
  } else if (r.ec != std::errc() || r.ptr != body.data() + body.size()) {
    return std::nullopt;
  }
  return neg ? -x : x;
}

// int(str, base): sign, digits with single underscores, an optional matching base prefix.
std::optional<int64_t> parse_int(const std::string& text, int base) {
  std::string s = py_strip(text, std::nullopt, kBoth);
  bool neg = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    neg = s[0] == '-';
    s.erase(0, 1);
  }
  if (s.size() > 1 && s[0] == '0') {
    const char x = static_cast<char>(s[1] | 0x20);
    const int pb = x == 'x' ? 16 : x == 'o' ? 8 : x == 'b' ? 2 : 0;
    if (pb && (base == pb || base == 0)) {
      s.erase(0, 2);
      if (!s.empty() && s[0] == '_') s.erase(0, 1);
      base = pb;
    }
  }
  if (base == 0) base = 10;
  if (s.empty() || s[0] == '_' || s.back() == '_' || s.find("__") != std::string::npos) return std::nullopt;
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  uint64_t v = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v, base);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size()) return std::nullopt;
  if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) + (neg ? 1 : 0)) fail("integer overflow (integers are 64-bit here)");
  return neg ? static_cast<int64_t>(0 - v) : static_cast<int64_t>(v);
}

Value f_float(Interp&, const Value& v, Args& a) {
  Params p("do_float", a, {"default"});
  if (v.k == K::Undef) undefined_error(v);
  if (v.is_num()) return real(v.as_float());
  if (v.k == K::Str)
    if (const auto x = parse_float(v.str())) return real(*x);
  return p.get(0, real(0.0));
}

int64_t float_to_int(double x) {
  if (std::isinf(x)) fail("cannot convert float infinity to integer");
  if (std::isnan(x)) fail("cannot convert float NaN to integer");
  if (std::fabs(x) >= 9.2233720368547758e18) fail("integer overflow (integers are 64-bit here)");
  return static_cast<int64_t>(x);
}

Value f_int(Interp&, const Value& v, Args& a) {
  Params p("do_int", a, {"default", "base"});
  if (v.k == K::Undef) undefined_error(v);
  if (v.is_intlike()) return integer(v.as_int());
  if (v.k == K::Float) return integer(float_to_int(v.f));
  if (v.k == K::Str) {
    if (const auto x = parse_int(v.str(), p.has(1) ? static_cast<int>(as_index(p[1])) : 10)) return integer(*x);
    if (const auto f = parse_float(v.str()); f && std::isfinite(*f)) return integer(float_to_int(*f));
  }
  return p.get(0, integer(0));
}

Value f_format(Interp& in, const Value& v, Args& a) {
  if (!a.pos.empty() && !a.kw.empty()) fail("can't handle positional and keyword arguments at the same time");
  if (!a.kw.empty()) {
    DictObj d;
    for (auto& [k, x] : a.kw) d.set(string(k), x);
    return in.str(in.percent_format(to_str(v), dict(std::move(d))));
  }
  return in.str(in.percent_format(to_str(v), list(a.pos, Fl::Tuple)));
}

Value f_indent(Interp& in, const Value& v, Args& a) {
  Params p("do_indent", a, {"width", "first", "blank"});
  if (v.k == K::Undef) undefined_error(v);
  if (v.k != K::Str) fail(std::string("unsupported operand type(s) for +=: '") + type_name(v) + "' and 'str'");
  std::string ind;
  if (p.has(0) && p[0].k == K::Str) ind = p[0].str();
  else ind = std::string(static_cast<size_t>(std::max<int64_t>(p.has(0) ? as_index(p[0]) : 4, 0)), ' ');
  const std::vector<std::string> lines = py_splitlines(v.str() + "\n", false);
  std::string out;
  const bool blank = p.has(2) && truthy(p[2]);  // indent empty lines too
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      out += '\n';
      if (blank || !lines[i].empty()) out += ind;
    }
    out += lines[i];
  }
  if (p.has(1) && truthy(p[1])) out = ind + out;
  return in.str(std::move(out), v.markup);
}

Value f_items(Interp& in, const Value& v, Args& a) {
  Params p("do_items", a, {});
  if (v.k == K::Undef) return iterator({});
  if (v.k != K::Dict) fail("Can only get item pairs from a mapping.");
  Vec out;
  for (const auto& [k, x] : v.obj<DictObj>().items) out.push_back(list({k, x}, Fl::Tuple));
  in.step(out.size() / 16);
  return iterator(std::move(out));
}

Value f_join(Interp& in, const Value& v, Args& a) {
  Params p("do_join", a, {"d", "attribute"});
  const std::string sep = p.has(0) ? to_str(p[0]) : "";
  const AttrPath path = attr_path(p.has(1) ? std::optional<Value>(p[1]) : std::nullopt);
  const auto items = in.iterate(v);
  std::string out;
  for (size_t i = 0; i < items->size(); ++i) {
    if (i) out += sep;
    out += to_str(path.parts.empty() ? (*items)[i] : follow(in, (*items)[i], path), in.lim.max_data_depth);
    in.check_size(out.size());
  }
  return in.str(std::move(out));
}

Value f_list(Interp& in, const Value& v, Args& a) {
  Params p("list", a, {});
  return in.make_list(*in.iterate(v));
}

Value f_lower(Interp& in, const Value& v, Args& a) {
  Params p("do_lower", a, {});
  return in.str(map_case(to_str(v), Case::Lower), v.markup);
}

Value f_upper(Interp& in, const Value& v, Args& a) {
  Params p("do_upper", a, {});
  return in.str(map_case(to_str(v), Case::Upper), v.markup);
}

Value f_map(Interp& in, const Value& v, Args& a) {
  if (!truthy(v)) return iterator({});
  const auto items = in.iterate(v);
  Vec out;
  if (a.pos.empty() && std::any_of(a.kw.begin(), a.kw.end(), [](const auto& kv) { return kv.first == "attribute"; })) {
    std::optional<Value> attribute, dflt;
    for (auto& [k, x] : a.kw) {
      if (k == "attribute") attribute = x;
      else if (k == "default") dflt = x;
      else fail("Unexpected keyword argument " + str_repr(k));
    }
    const AttrPath path = attr_path(attribute, dflt && dflt->k != K::None ? dflt : std::nullopt);
    for (const Value& x : *items) out.push_back(follow(in, x, path));
  } else {
    if (a.pos.empty()) fail("map requires a filter argument");
    const std::string name = to_str(a.pos[0]);
    for (const Value& x : *items) {
      Args sub{Vec(a.pos.begin() + 1, a.pos.end()), a.kw};
      out.push_back(in.call_filter(name, x, sub));
    }
  }
  return iterator(std::move(out));
}

Value min_or_max(Interp& in, const Value& v, Args& a, bool max) {
  Params p(max ? "do_max" : "do_min", a, {"case_sensitive", "attribute"});
  const auto items = in.iterate(v);
  if (items->empty()) return undef("No aggregated item, sequence was empty.");
  const AttrPath path = attr_path(p.has(1) ? std::optional<Value>(p[1]) : std::nullopt, std::nullopt, !(p.has(0) && truthy(p[0])));
  size_t best = 0;
  Value best_key = follow(in, (*items)[0], path);
  for (size_t i = 1; i < items->size(); ++i) {
    Value k = follow(in, (*items)[i], path);
    if (max ? in.compare(Cmp::Gt, k, best_key) : in.compare(Cmp::Lt, k, best_key)) {
      best = i;
      best_key = std::move(k);
    }
  }
  return (*items)[best];
}
Value f_min(Interp& in, const Value& v, Args& a) { return min_or_max(in, v, a, false); }
Value f_max(Interp& in, const Value& v, Args& a) { return min_or_max(in, v, a, true); }

// select / reject / selectattr / rejectattr: a test (by name, with arguments) or truthiness.
Value select_or_reject(Interp& in, const Value& v, Args& a, bool keep, bool by_attr) {
  if (!truthy(v)) return iterator({});
  size_t off = 0;
  AttrPath path;
  if (by_attr) {
    if (a.pos.empty()) fail("Missing parameter for attribute name");
    path = attr_path(a.pos[0]);
    off = 1;
  }
  std::optional<std::string> test;
  if (a.pos.size() > off) test = to_str(a.pos[off]);
  const Vec extra(a.pos.begin() + static_cast<std::ptrdiff_t>(std::min(a.pos.size(), off + 1)), a.pos.end());
  const auto items = in.iterate(v);
  Vec out;
  for (const Value& x : *items) {
    const Value y = by_attr ? follow(in, x, path) : x;
    bool r;
    if (test) {
      Args sub{extra, a.kw};
      r = in.call_test(*test, y, sub);
    } else {
      r = truthy(y);
    }
    if (r == keep) out.push_back(x);
  }
  return iterator(std::move(out));
}
Value f_select(Interp& in, const Value& v, Args& a) { return select_or_reject(in, v, a, true, false); }
Value f_reject(Interp& in, const Value& v, Args& a) { return select_or_reject(in, v, a, false, false); }
Value f_selectattr(Interp& in, const Value& v, Args& a) { return select_or_reject(in, v, a, true, true); }
Value f_rejectattr(Interp& in, const Value& v, Args& a) { return select_or_reject(in, v, a, false, true); }

Value f_replace(Interp& in, const Value& v, Args& a) {
  Params p("do_replace", a, {"old", "new", "count"}, 2);
  return in.str(py_replace(to_str(v), to_str(p[0]), to_str(p[1]), p.set(2) ? as_index(p[2]) : -1));
}

Value f_reverse(Interp& in, const Value& v, Args& a) {
  Params p("do_reverse", a, {});
  if (v.k == K::Str) {
    std::u32string u = to_u32(v.str());
    std::reverse(u.begin(), u.end());
    return in.str(from_u32(u));
  }
  const bool reversible = v.k == K::List || v.k == K::Dict || v.k == K::Undef;
  Vec items = *in.iterate(v);
  std::reverse(items.begin(), items.end());
  if (!reversible) return in.make_list(std::move(items));
  return iterator(std::move(items), v.k == K::Dict ? "dict_reversekeyiterator" : "list_reverseiterator");
}

// round(x, n) as Python computes it: correctly rounded, ties to even.
double round_half_even(double x, int64_t n) {
  if (!std::isfinite(x) || n > 330) return x;
  if (n >= 0) {
    const std::string s = c_float(x, 'f', static_cast<int>(n), false);
    return std::strtod(s.c_str(), nullptr);
  }
  const double scale = std::pow(10.0, static_cast<double>(-n));
  return std::nearbyint(x / scale) * scale;
}

Value f_round(Interp&, const Value& v, Args& a) {
  Params p("do_round", a, {"precision", "method"});
  const int64_t prec = p.has(0) ? as_index(p[0]) : 0;
  const std::string method = p.has(1) ? to_str(p[1]) : "common";
  if (method != "common" && method != "ceil" && method != "floor") fail("method must be common, ceil or floor");
  if (!v.is_num()) fail(std::string("type ") + type_name(v) + " doesn't define __round__ method");
  if (method == "common") {
    if (v.is_intlike()) {
      if (prec >= 0) return integer(v.as_int());
      const double r = round_half_even(static_cast<double>(v.as_int()), prec);
      return integer(static_cast<int64_t>(r));
    }
    return real(round_half_even(v.f, prec));
  }
  const double scale = std::pow(10.0, static_cast<double>(prec));
  const double x = v.as_float() * scale;
  return real((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Value f_safe(Interp& in, const Value& v, Args& a) {
  Params p("do_mark_safe", a, {});
  return in.str(to_str(v), true);
}

Value f_sort(Interp& in, const Value& v, Args& a) {
  Params p("do_sort", a, {"reverse", "case_sensitive", "attribute"});
  Vec items = *in.iterate(v);
  const bool lower = !(p.has(1) && truthy(p[1]));
  std::vector<AttrPath> paths;
  if (p.has(2) && p[2].k == K::Str) {
    for (const std::string& part : py_split(p[2].str(), std::string(","), -1, false))
      paths.push_back(attr_path(string(part), std::nullopt, lower));
  } else {
    paths.push_back(attr_path(p.has(2) ? std::optional<Value>(p[2]) : std::nullopt, std::nullopt, lower));
  }
  std::vector<Vec> keys;
  for (const Value& x : items) {
    Vec k;
    for (const AttrPath& path : paths) k.push_back(follow(in, x, path));
    keys.push_back(std::move(k));
  }
  sort_by(in, items, keys, p.has(0) && as_index(p[0]) != 0);  // sorted(reverse=) takes an int
  return in.make_list(std::move(items));
}

Value f_string(Interp& in, const Value& v, Args& a) {
  Params p("soft_str", a, {});
  if (v.k == K::Str) return v;
  return in.str(to_str(v, in.lim.max_data_depth));
}

Value f_sum(Interp& in, const Value& v, Args& a) {
  Params p("do_sum", a, {"attribute", "start"});
  Value total = p.get(1, integer(0));
  if (total.k == K::Str) fail("sum() can't sum strings [use ''.join(seq) instead]");
  const AttrPath path = attr_path(p.has(0) ? std::optional<Value>(p[0]) : std::nullopt);
  const auto items = in.iterate(v);
  for (const Value& x : *items) total = in.binop(Op2::Add, total, follow(in, x, path));
  return total;
}

Value f_title(Interp& in, const Value& v, Args& a) {
  Params p("do_title", a, {});
  // Jinja splits before runs of -, whitespace and ({[< and upper-cases each piece's first letter.
  const std::u32string u = to_u32(to_str(v));
  const auto delim = [](char32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_space(c); };
  std::string out;
  for (size_t i = 0; i < u.size();) {
    size_t j = i;
    const bool d = delim(u[i]);
    while (j < u.size() && delim(u[j]) == d) ++j;
    const std::u32string piece = u.substr(i, j - i);
    out += map_case(from_u32(piece.substr(0, 1)), Case::Upper) + map_case(from_u32(piece.substr(1)), Case::Lower);
    i = j;
  }
  return in.str(std::move(out), v.markup);
}

Value f_tojson(Interp& in, const Value& v, Args& a) {
  Params p("tojson", a, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOpts o;
  o.max_depth = in.lim.max_data_depth;
  o.ensure_ascii = p.has(0) && truthy(p[0]);
  if (p.set(1)) {
    o.indent = true;
    o.indent_str = p[1].k == K::Str ? p[1].str() : std::string(static_cast<size_t>(std::max<int64_t>(as_index(p[1]), 0)), ' ');
    o.item_sep = ",";
  }
  if (p.set(2)) {
    const auto seps = in.iterate(p[2]);
    if (seps->size() != 2) fail("separators must be a pair of strings");
    o.item_sep = as_text((*seps)[0], "item separator");
    o.key_sep = as_text((*seps)[1], "key separator");
  }
  o.sort_keys = p.has(3) && truthy(p[3]);
  std::string out;
  json_dump(out, v, o, 0);
  return in.str(std::move(out));
}

Value f_trim(Interp& in, const Value& v, Args& a) {
  Params p("do_trim", a, {"chars"});
  return in.str(py_strip(to_str(v), opt_text(p, 0, "strip arg"), kBoth), v.markup);
}

Value f_truncate(Interp& in, const Value& v, Args& a) {
  Params p("do_truncate", a, {"length", "killwords", "end", "leeway"});
  const int64_t length = p.has(0) ? as_index(p[0]) : 255, leeway = p.set(3) ? as_index(p[3]) : 5;
  const std::string end = p.has(2) ? to_str(p[2]) : "...";
  const auto end_len = static_cast<int64_t>(cp_count(end));
  if (length < end_len) fail("expected length >= " + std::to_string(end_len) + ", got " + std::to_string(length));
  if (leeway < 0) fail("expected leeway >= 0, got " + std::to_string(leeway));
  if (in.length(v) <= length + leeway) return v;
  const std::string s = to_str(v);
  const std::string head = Interp::cp_substr(s, 0, static_cast<size_t>(length - end_len));
  if (p.has(1) && truthy(p[1])) return in.str(head + end);
  return in.str(py_split(head, std::string(" "), 1, true)[0] + end);
}

Value f_unique(Interp& in, const Value& v, Args& a) {
  Params p("do_unique", a, {"case_sensitive", "attribute"});
  const AttrPath path = attr_path(p.has(1) ? std::optional<Value>(p[1]) : std::nullopt, std::nullopt, !(p.has(0) && truthy(p[0])));
  std::unordered_map<std::string, bool> seen;
  Vec out;
  const auto items = in.iterate(v);
  for (const Value& x : *items)
    if (seen.emplace(hash_key(follow(in, x, path)), true).second) out.push_back(x);
  return iterator(std::move(out));
}

Value f_wordcount(Interp&, const Value& v, Args& a) {
  Params p("do_wordcount", a, {});
  const std::string s = to_str(v);
  int64_t n = 0;
  bool in_word = false;
  for (size_t i = 0; i < s.size();) {
    const bool w = is_word_cp(next_cp(s, i));
    n += w && !in_word;
    in_word = w;
  }
  return integer(n);
}

const std::unordered_map<std::string, FilterFn>& filter_table() {
  static const std::unordered_map<std::string, FilterFn> table = {
      {"abs", f_abs},           {"attr", f_attr},         {"batch", f_batch},     {"capitalize", f_capitalize},
      {"center", f_center},     {"count", f_length},      {"d", f_default},       {"default", f_default},
      {"dictsort", f_dictsort}, {"e", f_escape},          {"escape", f_escape},   {"first", f_first},
      {"float", f_float},       {"forceescape", f_forceescape}, {"format", f_format}, {"indent", f_indent},
      {"int", f_int},           {"items", f_items},       {"join", f_join},       {"last", f_last},
      {"length", f_length},     {"list", f_list},         {"lower", f_lower},     {"map", f_map},
      {"max", f_max},           {"min", f_min},           {"reject", f_reject},   {"rejectattr", f_rejectattr},
      {"replace", f_replace},   {"reverse", f_reverse},   {"round", f_round},     {"safe", f_safe},
      {"select", f_select},     {"selectattr", f_selectattr}, {"sort", f_sort},   {"string", f_string},
      {"sum", f_sum},           {"title", f_title},       {"tojson", f_tojson},   {"trim", f_trim},
      {"truncate", f_truncate}, {"unique", f_unique},     {"upper", f_upper},     {"wordcount", f_wordcount},
  };
  return table;
}

const FilterFn* find_filter(const std::string& name) {
  const auto& t = filter_table();
  const auto it = t.find(name);
  return it == t.end() ? nullptr : &it->second;
}

// Jinja's other built-in filters: a template may name them, but rendering one is an error here.
bool unsupported_filter(const std::string& name) {
  return in_list(name, {"filesizeformat", "groupby", "pprint", "random", "slice", "striptags", "urlencode", "urlize",
                        "wordwrap", "xmlattr"});
}

// ============================================================================ tests

bool t_defined(Interp&, const Value& v, Args& a) { Params p("test_defined", a, {}); return v.k != K::Undef; }
bool t_undefined(Interp&, const Value& v, Args& a) { Params p("test_undefined", a, {}); return v.k == K::Undef; }
bool t_none(Interp&, const Value& v, Args& a) { Params p("test_none", a, {}); return v.k == K::None; }
bool t_boolean(Interp&, const Value& v, Args& a) { Params p("test_boolean", a, {}); return v.k == K::Bool; }
bool t_false(Interp&, const Value& v, Args& a) { Params p("test_false", a, {}); return v.k == K::Bool && !v.b; }
bool t_true(Interp&, const Value& v, Args& a) { Params p("test_true", a, {}); return v.k == K::Bool && v.b; }
bool t_integer(Interp&, const Value& v, Args& a) { Params p("test_integer", a, {}); return v.k == K::Int; }
bool t_float(Interp&, const Value& v, Args& a) { Params p("test_float", a, {}); return v.k == K::Float; }
bool t_number(Interp&, const Value& v, Args& a) { Params p("test_number", a, {}); return v.is_num(); }
bool t_string(Interp&, const Value& v, Args& a) { Params p("test_string", a, {}); return v.k == K::Str; }
bool t_mapping(Interp&, const Value& v, Args& a) { Params p("test_mapping", a, {}); return v.k == K::Dict; }
bool t_escaped(Interp&, const Value& v, Args& a) { Params p("test_escaped", a, {}); return v.k == K::Str && v.markup; }
bool t_lower(Interp&, const Value& v, Args& a) { Params p("test_lower", a, {}); return py_islower(to_str(v)); }
bool t_upper(Interp&, const Value& v, Args& a) { Params p("test_upper", a, {}); return py_isupper(to_str(v)); }

// len() and __getitem__ both work (so a dict and an undefined are sequences, an iterator is not).
bool t_sequence(Interp&, const Value& v, Args& a) {
  Params p("test_sequence", a, {});
  if (v.k == K::List) {
    const Fl fl = v.obj<ListObj>().fl;
    return fl == Fl::List || fl == Fl::Tuple || fl == Fl::Range;
  }
  return v.k == K::Str || v.k == K::Dict || v.k == K::Undef;
}

bool t_iterable(Interp&, const Value& v, Args& a) {
  Params p("test_iterable", a, {});
  return v.k == K::Str || v.k == K::List || v.k == K::Dict || v.k == K::Undef || v.k == K::Iter || v.k == K::Loop;
}

bool t_callable(Interp&, const Value& v, Args& a) {
  Params p("test_callable", a, {});
  return v.k == K::Func || v.k == K::Undef || v.k == K::Loop;
}

bool t_odd(Interp& in, const Value& v, Args& a) {
  Params p("test_odd", a, {});
  return py_eq(in.binop(Op2::Mod, v, integer(2)), integer(1));
}
bool t_even(Interp& in, const Value& v, Args& a) {
  Params p("test_even", a, {});
  return py_eq(in.binop(Op2::Mod, v, integer(2)), integer(0));
}
bool t_divisibleby(Interp& in, const Value& v, Args& a) {
  Params p("test_divisibleby", a, {"num"}, 1);
  return py_eq(in.binop(Op2::Mod, v, p[0]), integer(0));
}

// `is sameas`: identity. Values here are not Python objects; None, booleans, small ints (which
// CPython caches) and shared lists / dicts / namespaces compare as Python's `is` would.
bool t_sameas(Interp&, const Value& v, Args& a) {
  Params p("test_sameas", a, {"other"}, 1);
  const Value& o = p[0];
  if (v.k != o.k) return false;
  switch (v.k) {
    case K::None: return true;
    case K::Bool: return v.b == o.b;
    case K::Int: return v.i == o.i && v.i >= -5 && v.i <= 256;
    case K::Undef: return false;
    default: return v.p == o.p;
  }
}

bool t_in(Interp& in, const Value& v, Args& a) {
  Params p("test_in", a, {"seq"}, 1);
  return in.contains(p[0], v);
}

bool compare_test(Interp& in, const Value& v, Args& a, Cmp op, const char* name) {
  Params p(name, a, {"other"}, 1);
  return in.compare(op, v, p[0]);
}
bool t_eq(Interp& in, const Value& v, Args& a) { return compare_test(in, v, a, Cmp::Eq, "eq"); }
bool t_ne(Interp& in, const Value& v, Args& a) { return compare_test(in, v, a, Cmp::Ne, "ne"); }
bool t_lt(Interp& in, const Value& v, Args& a) { return compare_test(in, v, a, Cmp::Lt, "lt"); }
bool t_le(Interp& in, const Value& v, Args& a) { return compare_test(in, v, a, Cmp::Le, "le"); }
bool t_gt(Interp& in, const Value& v, Args& a) { return compare_test(in, v, a, Cmp::Gt, "gt"); }
bool t_ge(Interp& in, const Value& v, Args& a) { return compare_test(in, v, a, Cmp::Ge, "ge"); }

bool t_filter(Interp&, const Value& v, Args& a) {
  Params p("test_filter", a, {});
  return v.k == K::Str && (find_filter(v.str()) || unsupported_filter(v.str()));
}
bool t_test(Interp&, const Value& v, Args& a) {
  Params p("test_test", a, {});
  return v.k == K::Str && find_test(v.str());
}

const TestFn* find_test(const std::string& name) {
  static const std::unordered_map<std::string, TestFn> table = {
      {"odd", t_odd},         {"even", t_even},       {"divisibleby", t_divisibleby}, {"defined", t_defined},
      {"undefined", t_undefined}, {"filter", t_filter}, {"test", t_test},           {"none", t_none},
      {"boolean", t_boolean}, {"false", t_false},     {"true", t_true},             {"integer", t_integer},
      {"float", t_float},     {"lower", t_lower},     {"upper", t_upper},           {"string", t_string},
      {"mapping", t_mapping}, {"number", t_number},   {"sequence", t_sequence},     {"iterable", t_iterable},
      {"callable", t_callable}, {"sameas", t_sameas}, {"escaped", t_escaped},       {"in", t_in},
      {"==", t_eq},           {"eq", t_eq},           {"equalto", t_eq},            {"!=", t_ne},
      {"ne", t_ne},           {">", t_gt},            {"gt", t_gt},                 {"greaterthan", t_gt},
      {">=", t_ge},           {"ge", t_ge},           {"<", t_lt},                  {"lt", t_lt},
      {"lessthan", t_lt},     {"<=", t_le},           {"le", t_le},
  };
  const auto it = table.find(name);
  return it == table.end() ? nullptr : &it->second;
}

// ============================================================================ globals
// Jinja's default namespace (range, dict, namespace, joiner) and transformers' raise_exception
// and strftime_now.

Value g_range(Interp& in, Args& a) {
  if (!a.kw.empty()) fail("range() takes no keyword arguments");
  if (a.pos.empty()) fail("range expected at least 1 argument, got 0");
  if (a.pos.size() > 3) fail("range expected at most 3 arguments, got " + std::to_string(a.pos.size()));
  int64_t start = 0, stop, step = 1;
  if (a.pos.size() == 1) {
    stop = as_index(a.pos[0]);
  } else {
    start = as_index(a.pos[0]);
    stop = as_index(a.pos[1]);
    if (a.pos.size() == 3) step = as_index(a.pos[2]);
  }
  if (step == 0) fail("range() arg 3 must not be zero");
  const __int128 span = step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
  const __int128 st = step > 0 ? step : -static_cast<__int128>(step);
  const __int128 n = span > 0 ? (span + st - 1) / st : 0;
  if (n > static_cast<__int128>(in.lim.max_range))
    fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (" + std::to_string(in.lim.max_range) + ").");
  Vec v;
  v.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < static_cast<int64_t>(n); ++i) v.push_back(integer(start + i * step));
  Value r = in.make_list(std::move(v), Fl::Range);
  ListObj& l = r.obj<ListObj>();
  l.r0 = start;
  l.r1 = stop;
  l.r2 = step;
  return r;
}

// dict(mapping or pairs, **kwargs) — also the attributes of namespace(...).
DictObj dict_args(Interp& in, Args& a, const char* fname) {
  if (a.pos.size() > 1) fail(std::string(fname) + " expected at most 1 argument, got " + std::to_string(a.pos.size()));
  DictObj d;
  if (!a.pos.empty()) {
    const Value& src = a.pos[0];
    if (src.k == K::Undef) undefined_error(src);  // dict() looks for .keys() first
    if (src.k == K::Dict) {
      d = src.obj<DictObj>();
    } else {
      const auto items = in.iterate(src);
      for (size_t i = 0; i < items->size(); ++i) {
        const auto kv = in.iterate((*items)[i]);
        if (kv->size() != 2)
          fail("dictionary update sequence element #" + std::to_string(i) + " has length " + std::to_string(kv->size()) +
               "; 2 is required");
        d.set((*kv)[0], (*kv)[1]);
      }
    }
  }
  for (auto& [k, v] : a.kw) d.set(string(k), v);
  return d;
}

Value g_dict(Interp& in, Args& a) { return dict(dict_args(in, a, "dict")); }

Value g_namespace(Interp& in, Args& a) {
  auto ns = std::make_shared<NsObj>();
  ns->attrs = dict_args(in, a, "namespace");
  in.namespaces.push_back(ns);
  Value v;
  v.k = K::Ns;
  v.p = std::move(ns);
  return v;
}

Value g_raise_exception(Interp& in, Args& a) {
  Params p("raise_exception", a, {"message"}, 1);
  throw RenderError(to_str(p[0], in.lim.max_data_depth), true, in.line);
}

// datetime.now().strftime(format): Python formats a naive datetime through the C library,
// except %f (microseconds) and %z / %Z (empty without a time zone).
Value g_strftime_now(Interp& in, Args& a) {
  Params p("strftime_now", a, {"format"}, 1);
  if (p[0].k != K::Str) fail(std::string("strftime() argument 1 must be str, not ") + type_name(p[0]));
  std::tm tm{};
  long micros = 0;
  if (in.opt.now) {
    tm = in.opt.now();
    std::tm t = tm;
    const time_t tt = timegm(&t);  // fills in the weekday and day of the year
    gmtime_r(&tt, &tm);
  } else {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    localtime_r(&ts.tv_sec, &tm);
    micros = ts.tv_nsec / 1000;
  }
  const std::string& f = p[0].str();
  std::string fmt;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%' || i + 1 >= f.size()) { fmt += f[i]; continue; }
    const char c = f[++i];
    if (c == 'f') { char b[24]; std::snprintf(b, sizeof b, "%06ld", micros); fmt += b; }
    else if (c == 'z' || c == 'Z') {}
    else { fmt += '%'; fmt += c; }
  }
  if (fmt.empty()) return in.str("");
  std::string out(fmt.size() * 4 + 64, '\0');
  for (;;) {
    const size_t n = std::strftime(out.data(), out.size(), fmt.c_str(), &tm);
    if (n > 0 || out.size() > (size_t{1} << 20)) {
      out.resize(n);
      break;
    }
    out.resize(out.size() * 4);
  }
  return in.str(std::move(out));
}

Value g_joiner(Interp&, Args& a) {
  Params p("joiner", a, {"sep"});
  const std::string sep = p.has(0) ? to_str(p[0]) : ", ";
  auto used = std::make_shared<bool>(false);
  return func("joiner", [sep, used](Interp&, Args& b) -> Value {
    Params q("joiner", b, {});
    if (!*used) {
      *used = true;
      return string("");
    }
    return string(sep);
  });
}

Value g_unsupported(Interp&, Args&) { fail("cycler() and lipsum() are not supported by looplm's Jinja"); }

const Value* find_global(const std::string& name) {
  static const std::unordered_map<std::string, Value> table = {
      {"range", func("range", g_range)},
      {"dict", func("dict", g_dict)},
      {"namespace", func("namespace", g_namespace)},
      {"raise_exception", func("raise_exception", g_raise_exception)},
      {"strftime_now", func("strftime_now", g_strftime_now)},
      {"joiner", func("joiner", g_joiner)},
      {"cycler", func("cycler", g_unsupported)},
      {"lipsum", func("lipsum", g_unsupported)},
  };
  const auto it = table.find(name);
  return it == table.end() ? nullptr : &it->second;
}

// ============================================================================ input

Value from_json(const ojson& j, int depth, int max_depth) {
  check_depth(depth, max_depth);
  switch (j.type()) {
    case ojson::value_t::null: return none();
    case ojson::value_t::boolean: return boolean(j.get<bool>());
    case ojson::value_t::number_integer: return integer(j.get<int64_t>());
    case ojson::value_t::number_unsigned: {
      const auto u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) fail("an integer in the input is over 64 bits");
      return integer(static_cast<int64_t>(u));
    }
    case ojson::value_t::number_float: return real(j.get<double>());
    case ojson::value_t::string: {
      const auto& s = j.get_ref<const std::string&>();
      if (!valid_utf8(s)) fail("a string in the input is not valid UTF-8");
      return string(s);
    }
    case ojson::value_t::array: {
      Vec v;
      v.reserve(j.size());
      for (const ojson& e : j) v.push_back(from_json(e, depth + 1, max_depth));
      return list(std::move(v));
    }
    case ojson::value_t::object: {
      DictObj d;
      for (const auto& [k, e] : j.items()) {
        if (!valid_utf8(k)) fail("a key in the input is not valid UTF-8");
        d.set(string(k), from_json(e, depth + 1, max_depth));
      }
      return dict(std::move(d));
    }
    default: fail("binary JSON values are not supported");
  }
}

}  // namespace

namespace detail {
struct Program {
  Body body;
};
}  // namespace detail

Template::Template(std::string_view source, std::string name) : name_(std::move(name)) {
  try {
    Lexer lexer(source);
    auto program = std::make_shared<detail::Program>();
    program->body = Parser(lexer.run()).parse();
    program_ = std::move(program);
  } catch (const ParseFail& f) {
    throw SyntaxError(name_ + ", line " + std::to_string(f.line) + ": " + f.msg, f.line);
  }
}

Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::render(const nlohmann::ordered_json& variables, const RenderOptions& options) const {
  if (!variables.is_object()) throw RenderError("the template's variables must be a JSON object", false, 0);
  Interp in(options);
  try {
    auto context = std::make_shared<Scope>();
    for (const auto& [k, v] : variables.items()) context->vars[k] = from_json(v, 0, options.limits.max_data_depth);
    in.scope = child_of(context);
    in.outs.emplace_back();
    in.exec(program_->body);
  } catch (const RenderError& e) {
    if (e.line() == 0 && !e.raised()) throw RenderError(e.what(), false, in.line);
    throw;
  }
  return std::move(in.outs.front());
}

}  // namespace looplm::jinja
