#include "interchange/gguf_vocab.h"

#include <map>

#include <nlohmann/json.hpp>

#include "interchange/gguf_layout.h"
#include "io/gguf.h"
#include "io/json_input.h"
#include "looplm/error.h"

namespace looplm {

using json = nlohmann::json;

namespace {

// llama.cpp's token types.
constexpr int32_t kNormal = 1, kControl = 3, kUserDefined = 4, kUnused = 5;

// The split patterns of byte-level BPE tokenizers and the pre-tokenizer name llama.cpp gives each
// (its `tokenizer.ggml.pre`; llama.cpp runs its own copy of the pattern under that name).
struct PreTokenizer {
  const char* gguf_name;
  const char* pattern;
};
const std::vector<PreTokenizer>& known_pre_tokenizers() {
  static const std::vector<PreTokenizer> t = {
      // GPT-2's ByteLevel pre-tokenizer (use_regex: true), looplm's own BPE
      {"gpt-2", "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"},
      // Llama 3 (and SmolLM3, Nanbeige): digits in runs of up to three
      {"llama-bpe",
       "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
      // Qwen2 / Qwen3 (and Ouro): one digit at a time
      {"qwen2",
       "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
  };
  return t;
}

// Tokens llama.cpp should stop at, most specific first (a base model's end of text before a chat
// turn's end), and the ones that begin a text.
const std::vector<std::string>& eos_names() {
  static const std::vector<std::string> n = {"<|end_of_text|>", "<|endoftext|>", "</s>", "<eos>", "<|im_end|>", "<|eot_id|>"};
  return n;
}
const std::vector<std::string>& bos_names() {
  static const std::vector<std::string> n = {"<|begin_of_text|>", "<s>", "<bos>"};
  return n;
}

std::string placeholder(int64_t id) { return "[PAD" + std::to_string(id) + "]"; }  // as llama.cpp's converter pads

// The pattern a pre_tokenizer object splits by: GPT-2's for ByteLevel with its regex, the Split's
// for Split + ByteLevel without one. "" for anything else.
std::string split_pattern(const json& pre) {
  auto byte_level = [](const json& b, bool use_regex) {
    return b.is_object() && b.value("type", "") == "ByteLevel" && !b.value("add_prefix_space", false) &&
           b.value("use_regex", true) == use_regex;
  };
  if (byte_level(pre, true)) return known_pre_tokenizers()[0].pattern;
  if (!pre.is_object() || pre.value("type", "") != "Sequence" || !pre.contains("pretokenizers")) return "";
  const json& seq = pre["pretokenizers"];
  if (!seq.is_array() || seq.size() != 2 || !byte_level(seq[1], false)) return "";
  const json& split = seq[0];
  if (!split.is_object() || split.value("type", "") != "Split" || split.value("behavior", "") != "Isolated" ||
      split.value("invert", false) || !split.contains("pattern") || !split["pattern"].is_object() ||
      !split["pattern"].contains("Regex") || !split["pattern"]["Regex"].is_string())
    return "";
  return split["pattern"]["Regex"].get<std::string>();
}

}  // namespace

GgufVocab gguf_byte_vocab(int64_t V) {
  GgufVocab v;
  // looplm's byte vocabulary as a byte-level BPE without merges (gguf_layout.h): any text is its
  // bytes, whatever the pre-tokenizer splits. Ids 256.. of a larger vocab_size are never produced.
  v.tokens = gguf_layout::byte_level_tokens();
  for (int64_t i = 256; i < V; ++i) v.tokens.push_back("<looplm_unused_" + std::to_string(i) + ">");
  v.tokens.resize(V);
  v.types.assign(V, kNormal);
  // A byte model has no BOS / EOS; llama.cpp needs ids for them: STX / ETX, bytes text never
  // holds, and nothing is added to a prompt.
  v.bos = 2;
  v.eos = 3;
  return v;
}

namespace {
GgufVocab vocab_of_hf_json(const json& j, int64_t V);
}  // namespace

GgufVocab gguf_vocab_of_hf(const std::string& text, int64_t V) {
  try {
    return vocab_of_hf_json(io::parse_json(text, "the checkpoint's tokenizer.json"), V);
  } catch (const nlohmann::json::exception& e) {  // a field of another type than the format's
    throw Error(std::string("the checkpoint's tokenizer.json is malformed: ") + e.what());
  }
}

namespace {

GgufVocab vocab_of_hf_json(const json& j, int64_t V) {
  auto refuse = [](const std::string& why) -> void {
    throw UsageError("the Hugging Face tokenizer " + why + ": llama.cpp has no tokenizer that computes it "
                     "(GGUF export writes byte-level BPE tokenizers: GPT-2, Llama 3, Qwen2 / 3 and looplm's own)");
  };
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) refuse("has no model");
  const json& m = j["model"];
  if (m.value("type", "") != "BPE") refuse("is a " + m.value("type", std::string("?")) + " model, not BPE");
  if (m.value("byte_fallback", false)) refuse("is SentencePiece-style BPE (byte fallback, Llama 2 / Gemma style)");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (m.contains(k) && m[k].is_string() && !m[k].get<std::string>().empty()) refuse(std::string("uses a ") + k);
  const std::string pattern = split_pattern(j.value("pre_tokenizer", json()));
  GgufVocab v;
  for (const auto& p : known_pre_tokenizers())
    if (pattern == p.pattern) v.pre = p.gguf_name;
  if (pattern.empty() || v.pre == "default") refuse("splits words by a pre-tokenizer llama.cpp does not name");
  // llama.cpp looks a whole word up before merging (ignore_merges) for llama-bpe only.
  if (m.value("ignore_merges", false) != (v.pre == "llama-bpe"))
    refuse(std::string(m.value("ignore_merges", false) ? "looks words up before merging (ignore_merges)" : "merges every word (no ignore_merges)") +
           " with the " + v.pre + " split pattern");
  const json& norm = j.value("normalizer", json());
  if (norm.is_object() && norm.value("type", "") == "NFC")
    v.notes.push_back("the tokenizer NFC-normalizes its input and llama.cpp does not: text already in NFC (most text) tokenizes the same");
  else if (!norm.is_null())
    refuse("normalizes its input (" + norm.value("type", std::string("?")) + ")");
  const json& dec = j.value("decoder", json());
  if (!dec.is_object() || dec.value("type", "") != "ByteLevel") refuse("does not decode as ByteLevel");

  // Ids: the model's vocabulary, then the added tokens (special ones are control tokens).
  if (!m.contains("vocab") || !m["vocab"].is_object()) refuse("has no vocabulary");
  v.tokens.assign(V, "");
  v.types.assign(V, kUnused);
  auto place = [&](int64_t id, const std::string& tok, int32_t type) {
    if (id < 0 || id >= V) throw UsageError("the tokenizer's id " + std::to_string(id) + " is outside the model's vocab_size " + std::to_string(V));
    v.tokens[id] = tok;
    v.types[id] = type;
  };
  for (const auto& [tok, id] : m["vocab"].items()) place(id.get<int64_t>(), tok, kNormal);
  std::map<std::string, int32_t> special;
  for (const json& a : j.value("added_tokens", json::array())) {
    const int64_t id = a.at("id").get<int64_t>();
    const std::string content = a.at("content").get<std::string>();
    const bool is_special = a.value("special", false);
    place(id, content, is_special ? kControl : kUserDefined);
    if (is_special) special[content] = (int32_t)id;
  }
  for (int64_t id = 0; id < V; ++id)
    if (v.types[id] == kUnused) v.tokens[id] = placeholder(id);
  for (const json& mg : m.value("merges", json::array())) {
    if (mg.is_string()) v.merges.push_back(mg.get<std::string>());
    else v.merges.push_back(mg.at(0).get<std::string>() + " " + mg.at(1).get<std::string>());
  }

  // BOS: the special token a TemplateProcessing post-processor puts before the text.
  const json& post = j.value("post_processor", json());
  if (post.is_object() && post.value("type", "") == "TemplateProcessing" && post.contains("single") && post["single"].is_array() &&
      !post["single"].empty() && post["single"][0].contains("SpecialToken")) {
    const std::string name = post["single"][0]["SpecialToken"].value("id", "");
    if (special.count(name)) v.bos = special[name], v.add_bos = true;
  }
  for (const std::string& n : eos_names())
    if (v.eos < 0 && special.count(n)) v.eos = special[n];
  for (const std::string& n : bos_names())
    if (v.bos < 0 && special.count(n)) v.bos = special[n];
  if (v.bos < 0) v.bos = v.eos;  // llama.cpp wants one; nothing adds it (add_bos false)
  if (v.eos < 0)
    v.notes.push_back("the tokenizer has no end-of-text token; llama.cpp will use its default end-of-generation id");
  return v;
}

}  // namespace

void write_gguf_vocab(io::GgufWriter& w, const GgufVocab& v) {
  w.add_string("tokenizer.ggml.model", v.model);
  w.add_string("tokenizer.ggml.pre", v.pre);
  w.add_strings("tokenizer.ggml.tokens", v.tokens);
  w.add_i32s("tokenizer.ggml.token_type", v.types);
  w.add_strings("tokenizer.ggml.merges", v.merges);
  if (v.bos >= 0) w.add_u32("tokenizer.ggml.bos_token_id", (uint32_t)v.bos);
  if (v.eos >= 0) w.add_u32("tokenizer.ggml.eos_token_id", (uint32_t)v.eos);
  w.add_bool("tokenizer.ggml.add_bos_token", v.add_bos);
  w.add_bool("tokenizer.ggml.add_eos_token", false);
}

ImportedVocab read_gguf_vocab(const io::GgufFile& f, const std::string& path) {
  const std::string model = f.get_string("tokenizer.ggml.model");
  const io::GgufValue& toks = f.get("tokenizer.ggml.tokens");
  const std::vector<std::string>& tokens = toks.strings;
  const std::vector<std::string> merges = f.has("tokenizer.ggml.merges") ? f.get("tokenizer.ggml.merges").strings : std::vector<std::string>{};
  ImportedVocab out;
  out.size = (int64_t)tokens.size();
  const std::vector<std::string> bytes = gguf_layout::byte_level_tokens();
  if (model == "gpt2" && tokens.size() >= 256 && std::equal(bytes.begin(), bytes.end(), tokens.begin()) && merges.empty()) {
    out.kind = "byte";
    return out;
  }
  const std::string pre = f.has("tokenizer.ggml.pre") ? f.get_string("tokenizer.ggml.pre") : "default";
  const PreTokenizer* known = nullptr;
  for (const auto& p : known_pre_tokenizers())
    if (pre == p.gguf_name) known = &p;
  if (model != "gpt2" || !known)
    throw Error(path + ": the vocabulary (tokenizer.ggml.model '" + model + "', pre '" + pre + "', " + std::to_string(tokens.size()) +
                " tokens) is neither looplm's byte vocabulary nor a byte-level BPE looplm reads (gpt2 with pre gpt-2, llama-bpe or qwen2)");
  std::vector<int64_t> types(tokens.size(), kNormal);
  if (f.has("tokenizer.ggml.token_type")) {
    types = f.get("tokenizer.ggml.token_type").ints;
    if (types.size() != tokens.size())
      throw Error(path + ": tokenizer.ggml.token_type has " + std::to_string(types.size()) + " entries for " + std::to_string(tokens.size()) + " tokens");
  }

  // The tokenizer.json Hugging Face's library would read for this vocabulary.
  json vocab = json::object(), added = json::array();
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (types[id] == kUnused) continue;  // padding ids: holes, never produced
    if (vocab.contains(tokens[id])) throw Error(path + ": token '" + tokens[id] + "' appears twice in tokenizer.ggml.tokens");
    vocab[tokens[id]] = id;
    if (types[id] == kControl || types[id] == kUserDefined)
      added.push_back({{"id", id}, {"content", tokens[id]}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                       {"normalized", false}, {"special", types[id] == kControl}});
  }
  json pre_tok;
  if (std::string(known->gguf_name) == "gpt-2")
    pre_tok = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  else
    pre_tok = {{"type", "Sequence"},
               {"pretokenizers",
                {{{"type", "Split"}, {"pattern", {{"Regex", known->pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
                 {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
  json post = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  if (f.get_bool("tokenizer.ggml.add_bos_token", false) && f.has("tokenizer.ggml.bos_token_id")) {
    const uint64_t bos = f.get_uint("tokenizer.ggml.bos_token_id");
    if (bos >= tokens.size()) throw Error(path + ": tokenizer.ggml.bos_token_id is outside the vocabulary");
    const std::string& name = tokens[bos];
    json sp = {{"SpecialToken", {{"id", name}, {"type_id", 0}}}};
    post = {{"type", "TemplateProcessing"},
            {"single", {sp, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
            {"pair", {sp, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, sp, {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
            {"special_tokens", {{name, {{"id", name}, {"ids", {bos}}, {"tokens", {name}}}}}}};
  }
  // Qwen's tokenizers NFC-normalize (llama.cpp does not; the file cannot say): the qwen2 split
  // pattern brings the normalizer back, so a converted Qwen model tokenizes as its original.
  const json normalizer = std::string(known->gguf_name) == "qwen2" ? json{{"type", "NFC"}} : json();
  const json tj = {{"version", "1.0"},
                   {"truncation", nullptr},
                   {"padding", nullptr},
                   {"added_tokens", added},
                   {"normalizer", normalizer},
                   {"pre_tokenizer", pre_tok},
                   {"post_processor", post},
                   {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
                   {"model",
                    {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                     {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
                     {"ignore_merges", std::string(known->gguf_name) == "llama-bpe"},
                     {"vocab", vocab}, {"merges", merges}}}};
  out.kind = "hf";
  try {
    out.tokenizer_json = tj.dump();
  } catch (const nlohmann::json::exception&) {  // a token that is not UTF-8
    throw Error(path + ": tokenizer.ggml.tokens holds a token that is not valid UTF-8");
  }
  return out;
}

}  // namespace looplm
