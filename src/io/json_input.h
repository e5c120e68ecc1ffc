// JSON from users and files, parsed so that no input can crash the process or flood a message.
//
// nlohmann::json parses iteratively, but copying, printing (dump) and comparing a value recurse,
// so JSON nested tens of thousands of levels deep overflows the stack wherever it is later touched.
// Every JSON that comes from outside (checkpoint headers and metadata, config files and --set
// values, JSONL data and prompts) goes through parse_json: nesting is bounded *before* parsing,
// a key given twice in any object is refused (nlohmann would silently keep one of them), and
// errors carry no "[json.exception...]" prefix. brief() renders a value for a message, cut short.
#pragma once
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/text.h"
#include "looplm/error.h"

namespace looplm::io {

// Deeper than any JSON looplm writes or reads (a config is 2 levels, a safetensors header 3).
constexpr int kMaxJsonDepth = 64;

// The deepest nesting of arrays and objects in `text` (strings skipped), stopping early once it
// passes `limit`. Cheap: one pass over the bytes, no allocation.
int json_depth(std::string_view text, int limit);

// `s` for a message: the public brief (include/looplm/util.h, defined in core/text.cpp). A JSON
// value, printed, likewise:
using ::looplm::brief;
std::string brief_json(const nlohmann::json& v, size_t max = 60);
// A file path for a message: whole up to 240 bytes, else "..." and its last 237 (the file's name).
std::string brief_path(std::string_view path);
std::string brief_json(const nlohmann::ordered_json& v, size_t max = 60);

// The first key given twice in one object of `text` (valid JSON), or "".
std::string repeated_key(std::string_view text);

// Parses `text` as JSON. Errors start with `origin` ("FILE: header", "FILE:3"): invalid JSON, nesting deeper than
// kMaxJsonDepth, a key given twice in one object. They are UsageError (exit 2) when `usage` is set
// (a config file or flag a person wrote), Error (exit 1: a damaged file) otherwise.
template <class Json = nlohmann::json>
Json parse_json(std::string_view text, const std::string& origin, bool usage = false) {
  auto fail = [&](const std::string& msg) {
    if (usage) throw UsageError(msg);
    throw Error(msg);
  };
  if (json_depth(text, kMaxJsonDepth) > kMaxJsonDepth)
    fail(origin + " nests JSON deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  Json j;
  try {
    j = Json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    fail(origin + " is not valid JSON (" + brief(plain_message(e), 200) + ")");
  }
  // Keys given twice, found in a second pass of events that builds nothing (nlohmann's parser
  // with a callback rescans an object's members each time a member object ends: quadratic, 39 s
  // for a safetensors header of 50,000 tensors).
  const std::string dup = repeated_key(text);
  if (!dup.empty()) fail(origin + " names the key '" + brief(dup) + "' twice in one JSON object");
  return j;
}

}  // namespace looplm::io
