#include "data/prompts.h"

#include <nlohmann/json.hpp>

#include "data/dataset.h"
#include "io/json_input.h"
#include "looplm/error.h"

namespace looplm {

bool prompts_are_jsonl(const std::string& path) {
  return path.size() > 6 && path.compare(path.size() - 6, 6, ".jsonl") == 0;
}

std::vector<std::string> parse_prompts(const std::string& body, const std::string& origin, bool jsonl) {
  std::vector<std::string> out;
  size_t at = 0, line = 0;
  while (at < body.size()) {
    size_t end = body.find('\n', at);
    if (end == std::string::npos) end = body.size();
    std::string l = body.substr(at, end - at);
    at = end + 1;
    ++line;
    if (!l.empty() && l.back() == '\r') l.pop_back();
    if (l.find_first_not_of(" \t") == std::string::npos) continue;
    if (!jsonl) {
      out.push_back(l);
      continue;
    }
    const nlohmann::json j = io::parse_json(l, origin + " line " + std::to_string(line), true);
    const char* key = j.is_object() && j.contains("prompt") ? "prompt" : "text";
    if (!j.is_object() || !j.contains(key) || !j[key].is_string())
      throw UsageError(origin + " line " + std::to_string(line) + ": expected an object with a string \"prompt\" (or \"text\")");
    out.push_back(j[key].get<std::string>());
  }
  return out;
}

std::vector<std::string> read_prompts(const std::string& path, bool& jsonl) {
  // Bounded by the memory budget as a data file is (read_file_bytes): prompts become token ids too.
  const std::string body = read_file_bytes(path == "-" ? "/dev/stdin" : path);
  jsonl = prompts_are_jsonl(path);
  std::vector<std::string> out = parse_prompts(body, path, jsonl);
  if (out.empty()) throw UsageError("generate: " + path + " holds no prompts");
  return out;
}

}  // namespace looplm
