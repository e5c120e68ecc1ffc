// Reading the fields of a tokenizer.json with messages that name the file and the place
// ("tok.json: pre_tokenizer.pretokenizers[0].behavior: expected a string, got 3").
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "io/json_input.h"
#include "looplm/error.h"

namespace looplm::hf {

[[noreturn]] inline void bad(const std::string& where, const std::string& what) { throw Error(where + ": " + what); }

// The member `key` of object j, nullptr when absent or null. Error when j is not an object.
inline const nlohmann::json* member(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.is_object()) bad(where, "expected a JSON object, got " + io::brief_json(j));
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}
inline std::string str_member(const nlohmann::json& j, const char* key, const std::string& where,
                              const char* fallback = nullptr) {
  const nlohmann::json* v = member(j, key, where);
  if (!v) {
    if (fallback) return fallback;
    bad(where, std::string("no \"") + key + "\"");
  }
  if (!v->is_string()) bad(where + "." + key, "expected a string, got " + io::brief_json(*v));
  return v->get<std::string>();
}
inline bool bool_member(const nlohmann::json& j, const char* key, const std::string& where, bool fallback) {
  const nlohmann::json* v = member(j, key, where);
  if (!v) return fallback;
  if (!v->is_boolean()) bad(where + "." + key, "expected true or false, got " + io::brief_json(*v));
  return v->get<bool>();
}
inline int64_t int_member(const nlohmann::json& j, const char* key, const std::string& where, int64_t fallback,
                          int64_t lo = 0, int64_t hi = INT32_MAX) {
  const nlohmann::json* v = member(j, key, where);
  if (!v) return fallback;
  if (!v->is_number_integer()) bad(where + "." + key, "expected an integer, got " + io::brief_json(*v));
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) bad(where + "." + key, std::to_string(x) + " is out of range");
  return x;
}
inline const nlohmann::json& array_member(const nlohmann::json& j, const char* key, const std::string& where) {
  const nlohmann::json* v = member(j, key, where);
  if (!v) bad(where, std::string("no \"") + key + "\"");
  if (!v->is_array()) bad(where + "." + key, "expected a list, got " + io::brief_json(*v));
  return *v;
}

}  // namespace looplm::hf
