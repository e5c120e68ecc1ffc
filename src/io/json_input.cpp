#include "io/json_input.h"
#include "looplm/util.h"

namespace looplm::io {

namespace {
// SAX events that only follow each object's keys (nlohmann::json::sax_parse).
struct KeyWatch {
  std::vector<std::unordered_set<std::string>> open;
  std::string dup;
  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(int64_t) { return true; }
  bool number_unsigned(uint64_t) { return true; }
  bool number_float(double, const std::string&) { return true; }
  bool string(std::string&) { return true; }
  bool binary(nlohmann::json::binary_t&) { return true; }
  bool start_object(std::size_t) {
    open.emplace_back();
    return true;
  }
  bool end_object() {
    open.pop_back();
    return true;
  }
  bool start_array(std::size_t) { return true; }
  bool end_array() { return true; }
  bool key(std::string& k) {
    if (!open.back().insert(k).second) dup = k;
    return dup.empty();  // the first one is enough
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception&) { return false; }
};
}  // namespace

std::string repeated_key(std::string_view text) {
  KeyWatch w;
  nlohmann::json::sax_parse(text.begin(), text.end(), &w);
  return w.dup;
}

int json_depth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;  // the escaped byte cannot end the string
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest && (deepest = depth) > limit) return deepest;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

std::string brief_path(std::string_view p) {
  if (p.size() <= 240) return std::string(p);
  size_t from = p.size() - 237;
  while (from < p.size() && ((unsigned char)p[from] & 0xC0) == 0x80) ++from;  // not inside a UTF-8 character
  return "..." + std::string(p.substr(from));
}

std::string brief_json(const nlohmann::json& v, size_t max) {
  return brief(std::string_view(v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)), max);
}

std::string brief_json(const nlohmann::ordered_json& v, size_t max) {
  return brief(std::string_view(v.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace)), max);
}

}  // namespace looplm::io

namespace looplm {
// The public name (include/looplm/util.h) of the path helper (brief's is core/text.cpp).
std::string brief_path(std::string_view path) { return io::brief_path(path); }
}  // namespace looplm
