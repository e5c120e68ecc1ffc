// TextConventions (include/looplm/config.h): a converted model's end tokens, BOS convention and
// chat template, as the checkpoint metadata "looplm.text" holds them (docs/format.md).
#include <nlohmann/json.hpp>

#include "io/json_input.h"
#include "looplm/config.h"
#include "looplm/error.h"

namespace looplm {

bool TextConventions::empty() const {
  return eos_token_ids.empty() && bos_token_id < 0 && add_bos_token < 0 && chat_template.empty() &&
         !clean_up_tokenization_spaces;
}

std::string TextConventions::to_json_text() const {
  nlohmann::json j = nlohmann::json::object();
  if (!eos_token_ids.empty()) j["eos_token_ids"] = eos_token_ids;
  if (bos_token_id >= 0) j["bos_token_id"] = bos_token_id;
  if (add_bos_token >= 0) j["add_bos_token"] = add_bos_token == 1;
  if (!chat_template.empty()) j["chat_template"] = chat_template;
  if (clean_up_tokenization_spaces) j["clean_up_tokenization_spaces"] = true;
  return j.dump();
}

TextConventions TextConventions::from_json_text(const std::string& text, const std::string& origin) {
  const nlohmann::json j = io::parse_json(text, origin + ": metadata '" + kTextMetadataKey + "'");
  auto bad = [&](const std::string& field, const std::string& what) -> Error {
    return Error(origin + ": metadata '" + kTextMetadataKey + "'" + (field.empty() ? "" : " field '" + field + "'") + " " + what);
  };
  if (!j.is_object()) throw bad("", "is not a JSON object");
  auto token_id = [&](const nlohmann::json& v, const std::string& field) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
      throw bad(field, "must hold token ids (integers >= 0), not " + io::brief_json(v));
    return (int32_t)v.get<int64_t>();
  };
  TextConventions t;
  for (const auto& [key, v] : j.items()) {
    if (key == "eos_token_ids") {
      if (!v.is_array() || v.empty()) throw bad(key, "must be a non-empty list of token ids");
      for (const auto& x : v) t.eos_token_ids.push_back(token_id(x, key));
    } else if (key == "bos_token_id") {
      t.bos_token_id = token_id(v, key);
    } else if (key == "add_bos_token" || key == "clean_up_tokenization_spaces") {
      if (!v.is_boolean()) throw bad(key, "must be true or false");
      if (key == "add_bos_token") t.add_bos_token = v.get<bool>() ? 1 : 0;
      else t.clean_up_tokenization_spaces = v.get<bool>();
    } else if (key == "chat_template") {
      if (!v.is_string() || v.get<std::string>().empty()) throw bad(key, "must be the template's text");
      t.chat_template = v.get<std::string>();
    } else {
      throw bad(key, "is not a field this looplm knows (eos_token_ids, bos_token_id, add_bos_token, chat_template, "
                     "clean_up_tokenization_spaces)");
    }
  }
  if (t.add_bos_token == 1 && t.bos_token_id < 0) throw bad("add_bos_token", "is true but no bos_token_id is given");
  return t;
}

}  // namespace looplm
