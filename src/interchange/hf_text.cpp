// A Hugging Face model's text conventions (docs/interchange.md, "What is read from a model"): the
// ids that end a generation, its BOS convention, its chat template and clean_up_tokenization_spaces,
// from generation_config.json and tokenizer_config.json (and chat_template.jinja, where newer
// transformers versions save the template), into Config::text.
//
// transformers' generate() stops at generation_config's eos_token_id (an int or a list: Llama 3.1
// Instruct lists <|end_of_text|>, <|eom_id|> and <|eot_id|>); chat models often name their turn's
// end only as the tokenizer's eos_token. Both are kept, each once: the tokenizer's eos_token first
// (transformers' `eos_token`, what a chat template writes after a turn and /tokenizer_info names),
// then generation_config's.
#include <sys/stat.h>

#include <algorithm>
#include <optional>

#include <nlohmann/json.hpp>

#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "interchange/hf_model.h"
#include "io/atomic_file.h"
#include "io/json_input.h"
#include "looplm/error.h"

namespace looplm {

namespace {

using json = nlohmann::json;

bool is_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// One of the directory's JSON files: its object, or null when the directory has no such file.
json read_object(const std::string& path) {
  if (!is_file(path)) return nullptr;
  json j = io::parse_json(io::read_file(path, 64 << 20), path);  // 64 MB: far above any real one (~10 KB)
  if (!j.is_object()) throw Error(path + ": not a JSON object");
  return j;
}

// A field of one of those files, checked; null when the file or the field is absent (or null).
struct JsonFile {
  json j;
  std::string path;
  const json& get(const char* field) const {
    static const json none;
    return j.is_object() && j.contains(field) ? j[field] : none;
  }
  Error bad(const std::string& field, const std::string& what) const { return Error(path + ": \"" + field + "\" " + what); }
};

std::string ids_text(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : ", ") + std::to_string(id);
  return s;
}

// A token id of the model: an integer inside its vocabulary.
int32_t token_id(const JsonFile& f, const std::string& field, const json& v, int vocab_size) {
  if (!v.is_number_integer()) throw f.bad(field, "holds " + io::brief_json(v) + ", not a token id (an integer)");
  const int64_t id = v.get<int64_t>();
  if (id < 0 || id >= vocab_size)
    throw f.bad(field, "holds id " + std::to_string(id) + ", outside the model's vocabulary (" + std::to_string(vocab_size) + " ids)");
  return (int32_t)id;
}

// generation_config.json's eos_token_id: an int or a list of ints (none when absent or empty).
std::vector<int32_t> generation_eos(const JsonFile& f, int vocab_size) {
  const json& v = f.get("eos_token_id");
  std::vector<int32_t> ids;
  if (v.is_array())
    for (const json& x : v) ids.push_back(token_id(f, "eos_token_id", x, vocab_size));
  else if (!v.is_null())
    ids.push_back(token_id(f, "eos_token_id", v, vocab_size));
  return ids;
}

// tokenizer_config.json's special token: a string, or an AddedToken object {"__type":
// "AddedToken", "content": ...} (DeepSeek V3's, for one), as its token's id. None when absent or null.
std::optional<int32_t> special_token(const JsonFile& f, const char* field, const Tokenizer& tok, int vocab_size) {
  const json& v = f.get(field);
  if (v.is_null()) return std::nullopt;
  std::string text;
  if (v.is_string()) {
    text = v.get<std::string>();
  } else if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    text = v["content"].get<std::string>();
  } else {
    throw f.bad(field, "holds " + io::brief_json(v) + ", neither a token's text nor an AddedToken object with its \"content\"");
  }
  const std::optional<int32_t> id = tok.hf()->id_of(text);
  if (!id) throw f.bad(field, "is '" + io::brief(text) + "', which tokenizer.json does not have");
  if (*id >= vocab_size)
    throw f.bad(field, "is '" + io::brief(text) + "', id " + std::to_string(*id) + ", outside the model's vocabulary (" + std::to_string(vocab_size) + " ids)");
  return id;
}

std::optional<bool> flag(const JsonFile& f, const char* field) {
  const json& v = f.get(field);
  if (v.is_null()) return std::nullopt;
  if (!v.is_boolean()) throw f.bad(field, "holds " + io::brief_json(v) + ", not true or false");
  return v.get<bool>();
}

// tokenizer_config.json's chat_template: a string, or a list of {"name", "template"} of which
// transformers uses the one named "default" (none: a note, nothing stored).
std::string chat_template(const JsonFile& f, std::vector<std::string>& notes) {
  const json& v = f.get("chat_template");
  if (v.is_null()) return "";
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) throw f.bad("chat_template", "holds " + io::brief_json(v) + ", neither a template (a string) nor a list of named templates");
  std::string names;
  for (const json& e : v) {
    if (!e.is_object() || !e.contains("name") || !e["name"].is_string() || !e.contains("template") || !e["template"].is_string())
      throw f.bad("chat_template", "lists " + io::brief_json(e) + ", not a {\"name\": ..., \"template\": ...} object of two strings");
    if (e["name"] == "default") return e["template"].get<std::string>();
    names += (names.empty() ? "" : ", ") + e["name"].get<std::string>();
  }
  notes.push_back("no chat template is kept: " + f.path + " names templates (" + io::brief(names, 200) +
                  ") but none \"default\", the one transformers uses unless told another");
  return "";
}

// The id the tokenizer.json's post-processor puts before a text (transformers' fast tokenizer with
// add_special_tokens), if any.
std::optional<int32_t> post_processor_first(const Tokenizer& tok) {
  const std::vector<int32_t> with = tok.hf()->encode("a", true), without = tok.hf()->encode("a", false);
  if (with.size() > without.size() && !with.empty() && (without.empty() || with[0] != without[0])) return with[0];
  return std::nullopt;
}

std::string token_note(const Tokenizer& tok, int32_t id) { return std::to_string(id) + " '" + io::brief(tok.hf()->token(id)) + "'"; }

void read_end_tokens(const JsonFile& gen, const JsonFile& tc, const Tokenizer& tok, int vocab_size, TextConventions& t,
                     std::vector<std::string>& notes) {
  if (const auto eos = special_token(tc, "eos_token", tok, vocab_size)) {
    t.eos_token_ids.push_back(*eos);
    notes.push_back("end token " + token_note(tok, *eos) + " (tokenizer_config.json's eos_token)");
  }
  const std::vector<int32_t> gen_ids = generation_eos(gen, vocab_size);
  for (int32_t id : gen_ids)
    if (std::find(t.eos_token_ids.begin(), t.eos_token_ids.end(), id) == t.eos_token_ids.end()) t.eos_token_ids.push_back(id);
  if (!gen_ids.empty()) notes.push_back("end tokens " + ids_text(gen_ids) + " (generation_config.json)");
}

// The BOS: the tokenizer's (tokenizer_config.json's bos_token, the token it puts before a prompt),
// else generation_config.json's bos_token_id. Whether a prompt starts with it: add_bos_token, else
// whether the tokenizer.json's post-processor puts it first.
void read_bos(const JsonFile& gen, const JsonFile& tc, const Tokenizer& tok, int vocab_size, TextConventions& t,
              std::vector<std::string>& notes) {
  const std::optional<int32_t> from_tok = special_token(tc, "bos_token", tok, vocab_size);
  std::optional<int32_t> from_gen;
  if (!gen.get("bos_token_id").is_null()) from_gen = token_id(gen, "bos_token_id", gen.get("bos_token_id"), vocab_size);
  if (from_tok && from_gen && *from_tok != *from_gen)
    notes.push_back("generation_config.json's bos_token_id " + std::to_string(*from_gen) + " differs from tokenizer_config.json's bos_token " +
                    token_note(tok, *from_tok) + "; the tokenizer's is kept (it is the one put before a prompt)");
  const std::optional<int32_t> bos = from_tok ? from_tok : from_gen;
  const std::optional<bool> add = flag(tc, "add_bos_token");
  const std::optional<int32_t> first = post_processor_first(tok);
  if (!bos) {
    if (add.value_or(false))
      throw tc.bad("add_bos_token", "is true, but no BOS token is named (bos_token here, bos_token_id in generation_config.json)");
    return;
  }
  t.bos_token_id = *bos;
  const bool adds = add ? *add : first == bos;
  t.add_bos_token = adds ? 1 : 0;
  std::string note = "BOS " + token_note(tok, *bos) + (adds ? ", put before every prompt" : ", not put before prompts");
  note += add ? " (tokenizer_config.json's add_bos_token)" : " (as the tokenizer.json post-processor does)";
  if (add && *add != (first == bos))
    note += std::string("; the tokenizer.json post-processor ") + (first == bos ? "adds it" : "does not add it") +
            ", and transformers follows add_bos_token";
  notes.push_back(note);
}

// Newer transformers versions save the template as chat_template.jinja beside tokenizer_config.json,
// and that file wins when both are there (as transformers loads them).
void read_chat_template(const std::string& dir, const JsonFile& tc, TextConventions& t, std::vector<std::string>& notes) {
  const std::string jinja = dir + "/chat_template.jinja";
  std::string from;
  if (is_file(jinja)) {
    t.chat_template = io::read_file(jinja, 16 << 20);
    from = "chat_template.jinja";
  } else {
    t.chat_template = chat_template(tc, notes);
    from = "tokenizer_config.json";
  }
  if (!t.chat_template.empty())
    notes.push_back("chat template from " + from + " (" + std::to_string(t.chat_template.size()) + " characters)");
}

}  // namespace

TextConventions read_hf_text_conventions(const std::string& dir, const Tokenizer& tok, int vocab_size, std::vector<std::string>& notes) {
  const JsonFile gen{read_object(dir + "/generation_config.json"), dir + "/generation_config.json"};
  const JsonFile tc{read_object(dir + "/tokenizer_config.json"), dir + "/tokenizer_config.json"};
  TextConventions t;
  read_end_tokens(gen, tc, tok, vocab_size, t, notes);
  read_bos(gen, tc, tok, vocab_size, t, notes);
  read_chat_template(dir, tc, t, notes);
  if (flag(tc, "clean_up_tokenization_spaces").value_or(false)) {
    t.clean_up_tokenization_spaces = true;
    notes.push_back("clean_up_tokenization_spaces true (tokenizer_config.json)");
  }
  return t;
}

}  // namespace looplm
