#include "interchange/gguf_vocab.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "tokenizer/hf_tokenizer.h"
#include "interchange/gguf_layout.h"
#include "io/gguf.h"
#include "io/json_input.h"
#include "looplm/error.h"

namespace looplm {

using json = nlohmann::json;

namespace {

// llama.cpp's token types.
constexpr int32_t kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6;

const std::string kMeta = "\xE2\x96\x81";  // U+2581 "▁", SentencePiece's space

const char* const kNoEosNote = "the tokenizer has no end-of-text token; llama.cpp will use its default end-of-generation id";

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

// BOS: the special token a TemplateProcessing post-processor puts before the text (then added:
// add_bos), else one named as a BOS; EOS by name (the names the library guesses by everywhere:
// hf_end_of_text_names, most specific first). `special`: the added special tokens' ids.
void begin_and_end(const json& j, const std::map<std::string, int32_t>& special, GgufVocab& v) {
  const json& post = j.value("post_processor", json());
  if (post.is_object() && post.value("type", "") == "TemplateProcessing" && post.contains("single") && post["single"].is_array() &&
      !post["single"].empty() && post["single"][0].contains("SpecialToken")) {
    const std::string name = post["single"][0]["SpecialToken"].value("id", "");
    if (special.count(name)) v.bos = special.at(name), v.add_bos = true;
  }
  for (const std::string& n : hf_end_of_text_names())
    if (v.eos < 0 && special.count(n)) v.eos = special.at(n);
  for (const std::string& n : hf_begin_of_text_names())
    if (v.bos < 0 && special.count(n)) v.bos = special.at(n);
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
GgufVocab vocab_of_spm_json(const json& j, int64_t V);
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
                     "(GGUF export writes byte-level BPE tokenizers: GPT-2, Llama 3, Qwen2 / 3 and looplm's own; and "
                     "SentencePiece-style BPE with byte fallback: Llama 2, Mistral, Gemma)");
  };
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) refuse("has no model");
  const json& m = j["model"];
  if (m.value("type", "") != "BPE") refuse("is a " + m.value("type", std::string("?")) + " model, not BPE");
  if (m.value("byte_fallback", false)) return vocab_of_spm_json(j, V);
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

  begin_and_end(j, special, v);
  if (v.bos < 0) v.bos = v.eos;  // llama.cpp wants one; nothing adds it (add_bos false)
  if (v.eos < 0)
    v.notes.push_back(kNoEosNote);
  return v;
}

// One UTF-8 character's length from its first byte (1 for a stray continuation byte): how llama.cpp
// cuts a text into its first symbols before merging.
size_t utf8_len(unsigned char c) { return c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1; }

// The byte token of byte b, spelled as Hugging Face's byte fallback and llama.cpp both spell it.
std::string byte_token(int b) {
  static const char* hex = "0123456789ABCDEF";
  return std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">";
}

// A Replace normalizer of " " by "▁".
bool replaces_spaces(const json& n) {
  return n.is_object() && n.value("type", "") == "Replace" && n.contains("pattern") && n["pattern"].is_object() &&
         n["pattern"].value("String", std::string("\x01")) == " " && n.value("content", "") == kMeta;
}

// A SentencePiece-style BPE (byte fallback; Llama 2, Mistral, Gemma) as llama.cpp's `llama` tokenizer
// model. llama.cpp's SentencePiece tokenizer cuts the text into characters and repeatedly joins the
// neighbouring pair whose joined text is a token of the highest score (the leftmost on a tie);
// characters left outside every token become their <0xNN> byte tokens. A BPE joins the listed pair
// of lowest merge rank instead. The two agree when (a) every token is scored by the rank of the first
// merge that makes it (negated: lower rank, higher score), (b) every two pieces llama.cpp could join
// into a token are a listed merge, and (c) nothing splits the text into words first. (b) and (c) are
// checked here and refused when they fail. llama.cpp's own converter (convert_hf_to_gguf.py,
// LlamaHfVocab, for a tokenizer.json without tokenizer.model) writes the placeholder score -1000 for
// every token, which leaves llama.cpp joining leftmost-first, not in the BPE's order: the scores here
// are what makes the file tokenize as the original.
GgufVocab vocab_of_spm_json(const json& j, int64_t V) {
  auto refuse = [](const std::string& why) -> void {
    throw UsageError("the SentencePiece-style (byte fallback) tokenizer " + why +
                     ": llama.cpp's SentencePiece tokenizer would not give its ids (GGUF export writes Llama 2, Mistral and "
                     "Gemma style tokenizers: a BPE over text whose spaces are \"\xE2\x96\x81\", with all 256 <0xNN> byte tokens)");
  };
  const json& m = j["model"];
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (m.contains(k) && m[k].is_string() && !m[k].get<std::string>().empty()) refuse(std::string("uses a ") + k);
  if (m.value("ignore_merges", false)) refuse("looks whole words up before merging (ignore_merges)");
  if (m.contains("dropout") && m["dropout"].is_number() && m["dropout"].get<double>() != 0) refuse("drops merges at random (dropout)");
  GgufVocab v;
  v.model = "llama";

  // Spaces become "▁", optionally with one "▁" before the text: llama.cpp's add_space_prefix, which
  // it also puts after every special token, as Hugging Face's Prepend does on each piece of text
  // between added tokens.
  const json& norm = j.value("normalizer", json());
  std::vector<json> steps;
  if (norm.is_object() && norm.value("type", "") == "Sequence" && norm.contains("normalizers") && norm["normalizers"].is_array())
    steps.assign(norm["normalizers"].begin(), norm["normalizers"].end());
  else if (!norm.is_null())
    steps.push_back(norm);
  if (steps.size() == 2 && steps[0].is_object() && steps[0].value("type", "") == "Prepend" && steps[0].value("prepend", "") == kMeta &&
      replaces_spaces(steps[1]))
    v.add_space_prefix = true;
  else if (!(steps.size() == 1 && replaces_spaces(steps[0])))
    refuse("normalizes its input otherwise than llama.cpp (it must replace \" \" by \"\xE2\x96\x81\", after a Prepend of \"\xE2\x96\x81\" or alone)");
  // No words: llama.cpp merges across the whole text. Gemma's Split on " " finds no space left
  // after the normalizer, so it splits nothing. (Metaspace is refused: it prepends "▁" only to
  // text that does not already begin with one, where llama.cpp always does.)
  const json& pre = j.value("pre_tokenizer", json());
  if (!pre.is_null() && !(pre.is_object() && pre.value("type", "") == "Split" && !pre.value("invert", false) && pre.contains("pattern") &&
                          pre["pattern"].is_object() && pre["pattern"].value("String", std::string("\x01")) == " "))
    refuse("splits its text into words first (pre_tokenizer " + (pre.is_object() ? pre.value("type", std::string("?")) : std::string("?")) +
           "); llama.cpp merges across the whole text");
  // Decoding: "▁" back to spaces, byte tokens to bytes, and the first space dropped when one was
  // prepended (llama.cpp's detokenizer does the same from add_space_prefix).
  {
    const json& dec = j.value("decoder", json());
    std::vector<std::string> got;
    if (dec.is_object() && dec.value("type", "") == "Sequence" && dec.contains("decoders") && dec["decoders"].is_array())
      for (const json& d : dec["decoders"]) {
        const std::string t = d.is_object() ? d.value("type", "") : "";
        if (t == "Replace" && d.contains("pattern") && d["pattern"].is_object() && d["pattern"].value("String", "") == kMeta &&
            d.value("content", "") == " ")
          got.push_back("meta");
        else if (t == "Strip" && d.value("content", "") == " " && d.value("start", 0) == 1 && d.value("stop", 0) == 0)
          got.push_back("strip");
        else
          got.push_back(t);
      }
    std::vector<std::string> want = {"meta", "ByteFallback", "Fuse"};
    if (v.add_space_prefix) want.push_back("strip");
    if (got != want)
      refuse(std::string("decodes otherwise than llama.cpp (expected a Sequence of Replace \"\xE2\x96\x81\" by \" \", ByteFallback, Fuse") +
             (v.add_space_prefix ? ", Strip of the first space)" : ")"));
  }

  // Ids: the model's vocabulary (<0xNN> byte tokens typed as bytes), then the added tokens
  // (special ones are control tokens, the unk token unknown), placeholders past the tokenizer.
  if (!m.contains("vocab") || !m["vocab"].is_object()) refuse("has no vocabulary");
  v.tokens.assign(V, "");
  v.types.assign(V, kUnused);
  v.scores.assign(V, 0.0f);
  auto place = [&](int64_t id, const std::string& tok, int32_t type) {
    if (id < 0 || id >= V) throw UsageError("the tokenizer's id " + std::to_string(id) + " is outside the model's vocab_size " + std::to_string(V));
    v.tokens[id] = tok;
    v.types[id] = type;
  };
  std::unordered_set<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.insert(byte_token(b));
  for (const auto& [tok, id] : m["vocab"].items()) place(id.get<int64_t>(), tok, bytes.count(tok) ? kByte : kNormal);
  const std::string unk_name = m.contains("unk_token") && m["unk_token"].is_string() ? m["unk_token"].get<std::string>() : "";
  std::map<std::string, int32_t> special;
  for (const json& a : j.value("added_tokens", json::array())) {
    const int64_t id = a.at("id").get<int64_t>();
    const std::string content = a.at("content").get<std::string>();
    const bool is_special = a.value("special", false);
    place(id, content, content == unk_name ? kUnknown : is_special ? kControl : kUserDefined);
    if (is_special) special[content] = (int32_t)id;
  }
  for (int64_t id = 0; id < V; ++id)
    if (v.types[id] == kUnused) v.tokens[id] = placeholder(id);
  std::unordered_map<std::string, int64_t> id_of;
  for (int64_t id = 0; id < V; ++id)
    if (!id_of.emplace(v.tokens[id], id).second) refuse("has the token '" + v.tokens[id] + "' twice (ids " + std::to_string(id_of[v.tokens[id]]) + " and " + std::to_string(id) + ")");
  for (int b = 0; b < 256; ++b)
    if (!id_of.count(byte_token(b)) || v.types[id_of[byte_token(b)]] != kByte)
      refuse("lacks the byte token " + byte_token(b) + " (llama.cpp spells every byte outside the vocabulary by one)");

  // Scores: minus the rank of the first merge that makes each token (a, above).
  auto pair_key = [](const std::string& a, const std::string& b) { return std::to_string(a.size()) + ":" + a + b; };
  std::unordered_set<std::string> merges;
  std::vector<int64_t> first_rank(V, -1);
  int64_t rank = 0;
  for (const json& mg : m.value("merges", json::array())) {
    std::string a, b;
    if (mg.is_string()) {
      const std::string s = mg.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos) refuse("has the merge '" + s + "' without a space between its two pieces");
      a = s.substr(0, sp), b = s.substr(sp + 1);
    } else {
      a = mg.at(0).get<std::string>(), b = mg.at(1).get<std::string>();
    }
    const auto it = id_of.find(a + b);
    if (it == id_of.end()) refuse("merges '" + a + "' and '" + b + "' into a token outside its vocabulary");
    if (first_rank[it->second] < 0) {
      first_rank[it->second] = rank;
      v.scores[it->second] = -(float)rank;  // exact: float holds every integer below 2^24 (Gemma 3: 514,906 merges)
    }
    merges.insert(pair_key(a, b));
    ++rank;
  }
  if (rank >= (int64_t(1) << 24)) refuse("has more merges than a float32 score ranks exactly (2^24)");
  // (b): any two pieces llama.cpp could hold side by side (a token, or one character) that make a
  // token must be a merge. Every token counts, added ones too: they are cut out of the raw text
  // before merging (llama.cpp and Hugging Face alike), but one spelled with "▁" (Gemma's runs of
  // spaces) is still made from the text's spaces, and both tokenizers then merge into it.
  auto can_hold = [&](const std::string& s) { return id_of.count(s) || utf8_len((unsigned char)s[0]) == s.size(); };
  for (int64_t id = 0; id < V; ++id) {
    const std::string& s = v.tokens[id];
    for (size_t k = utf8_len((unsigned char)s[0]); k < s.size(); k += utf8_len((unsigned char)s[k])) {
      const std::string a = s.substr(0, k), b = s.substr(k);
      if (can_hold(a) && can_hold(b) && !merges.count(pair_key(a, b)))
        refuse("never merges '" + a + "' and '" + b + "' into its token '" + s + "', which llama.cpp would (it joins any two neighbours that make a token)");
    }
  }

  begin_and_end(j, special, v);  // unknown and padding by name
  if (!unk_name.empty() && id_of.count(unk_name)) v.unk = (int32_t)id_of[unk_name];
  if (special.count("<pad>")) v.pad = special["<pad>"];
  if (v.eos < 0)
    v.notes.push_back(kNoEosNote);
  return v;
}

}  // namespace

// llama.cpp's ids for the ends of a text: tokenizer.ggml.eos_token_id is the end of text (what
// add_eos_token appends), eot_token_id the end of a turn (where its chat and infill code stops) and
// eom_token_id the end of a message (Llama 3.1's tool calls). Its generation ends at any of the
// three (llama_vocab_is_eog), and also at tokens it recognizes by their text (<|eot_id|>,
// <|im_end|>, <end_of_turn>, ...). A checkpoint's end tokens go out in their order: the first as
// eos, a second as eot, a third as eom; llama.cpp has no key for more (a note says so).
void apply_text_conventions(GgufVocab& v, const TextConventions& t) {
  const std::vector<int32_t>& ends = t.eos_token_ids;
  if (!ends.empty()) {
    v.eos = ends[0];
    v.notes.erase(std::remove(v.notes.begin(), v.notes.end(), std::string(kNoEosNote)), v.notes.end());
  }
  if (ends.size() > 1) v.eot = ends[1];
  if (ends.size() > 2) v.eom = ends[2];
  for (size_t i = 3; i < ends.size(); ++i)
    v.notes.push_back("end token " + std::to_string(ends[i]) + " has no GGUF key (llama.cpp keeps three: eos, eot, eom); llama.cpp "
                      "stops there only if it recognizes the token's text");
  if (t.bos_token_id >= 0) v.bos = t.bos_token_id;
  if (t.add_bos_token >= 0) v.add_bos = t.add_bos_token == 1;
  v.chat_template = t.chat_template;
}

void write_gguf_vocab(io::GgufWriter& w, const GgufVocab& v) {
  w.add_string("tokenizer.ggml.model", v.model);
  w.add_string("tokenizer.ggml.pre", v.pre);
  w.add_strings("tokenizer.ggml.tokens", v.tokens);
  if (v.model == "llama") w.add_f32s("tokenizer.ggml.scores", v.scores);
  w.add_i32s("tokenizer.ggml.token_type", v.types);
  if (v.model == "gpt2") w.add_strings("tokenizer.ggml.merges", v.merges);
  if (v.bos >= 0) w.add_u32("tokenizer.ggml.bos_token_id", (uint32_t)v.bos);
  if (v.eos >= 0) w.add_u32("tokenizer.ggml.eos_token_id", (uint32_t)v.eos);
  if (v.eot >= 0) w.add_u32("tokenizer.ggml.eot_token_id", (uint32_t)v.eot);
  if (v.eom >= 0) w.add_u32("tokenizer.ggml.eom_token_id", (uint32_t)v.eom);
  if (v.unk >= 0) w.add_u32("tokenizer.ggml.unknown_token_id", (uint32_t)v.unk);
  if (v.pad >= 0) w.add_u32("tokenizer.ggml.padding_token_id", (uint32_t)v.pad);
  w.add_bool("tokenizer.ggml.add_bos_token", v.add_bos);
  w.add_bool("tokenizer.ggml.add_eos_token", false);
  // llama.cpp's SentencePiece tokenizer adds the space prefix unless told not to
  if (v.model == "llama") w.add_bool("tokenizer.ggml.add_space_prefix", v.add_space_prefix);
  if (!v.chat_template.empty()) w.add_string("tokenizer.chat_template", v.chat_template);
}

namespace {

// Whether llama.cpp puts the BOS before a prompt: tokenizer.ggml.add_bos_token, whose default is
// true for its SentencePiece tokenizer (`llama`) and false for byte-level BPE (`gpt2`).
bool adds_bos(const io::GgufFile& f) {
  return f.get_bool("tokenizer.ggml.add_bos_token", f.get_string("tokenizer.ggml.model") == "llama") && f.has("tokenizer.ggml.bos_token_id");
}

// A `llama` (SentencePiece) vocabulary as the tokenizer.json of a byte-fallback BPE that tokenizes as
// llama.cpp does: the merges are every split of a normal token into two normal tokens, ordered by the
// token's score (highest first; ties by token id, then by the pieces' ids). That is how Hugging Face
// derives a tokenizer.json from a SentencePiece model, and for a file looplm wrote it gives back the
// original merges (vocab_of_spm_json above). Spaces become "▁", with one before each text when
// tokenizer.ggml.add_space_prefix (llama.cpp's default for this model) says so.
ImportedVocab read_spm_vocab(const io::GgufFile& f, const std::string& path) {
  const std::vector<std::string>& tokens = f.get("tokenizer.ggml.tokens").strings;
  const size_t n = tokens.size();
  if (!f.has("tokenizer.ggml.scores"))
    throw Error(path + ": a SentencePiece vocabulary (tokenizer.ggml.model 'llama') without tokenizer.ggml.scores: the merge order is unknown");
  const std::vector<double>& scores = f.get("tokenizer.ggml.scores").floats;
  std::vector<int64_t> types(n, kNormal);
  if (f.has("tokenizer.ggml.token_type")) types = f.get("tokenizer.ggml.token_type").ints;
  if (scores.size() != n || types.size() != n)
    throw Error(path + ": tokenizer.ggml.scores / token_type have " + std::to_string(scores.size()) + " / " + std::to_string(types.size()) +
                " entries for " + std::to_string(n) + " tokens");
  std::unordered_map<std::string, int64_t> id_of;
  for (size_t id = 0; id < n; ++id)
    if (types[id] != kUnused && !id_of.emplace(tokens[id], (int64_t)id).second)
      throw Error(path + ": token '" + tokens[id] + "' appears twice in tokenizer.ggml.tokens");
  for (int b = 0; b < 256; ++b)
    if (!id_of.count(byte_token(b)))
      throw Error(path + ": the SentencePiece vocabulary lacks the byte token " + byte_token(b) + " (looplm reads byte-fallback vocabularies only)");

  json vocab = json::object(), added = json::array();
  for (size_t id = 0; id < n; ++id) {
    if (types[id] == kUnused) continue;  // padding ids: holes, never produced
    vocab[tokens[id]] = id;
    if (types[id] == kControl || types[id] == kUserDefined || types[id] == kUnknown)
      added.push_back({{"id", id}, {"content", tokens[id]}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                       {"normalized", false}, {"special", types[id] != kUserDefined}});
  }
  struct Merge {
    double score;
    int64_t tok, a, b;
  };
  std::vector<Merge> ms;
  // Normal and user-defined tokens are made and merged (Gemma's runs of spaces are user-defined
  // tokens that its merges make); byte, control and unknown tokens are not.
  auto mergeable = [&](int64_t id) { return types[id] == kNormal || types[id] == kUserDefined; };
  for (size_t id = 0; id < n; ++id) {
    if (!mergeable((int64_t)id)) continue;
    const std::string& s = tokens[id];
    for (size_t k = s.empty() ? 0 : utf8_len((unsigned char)s[0]); k && k < s.size(); k += utf8_len((unsigned char)s[k])) {
      const auto a = id_of.find(s.substr(0, k)), b = id_of.find(s.substr(k));
      if (a != id_of.end() && b != id_of.end() && mergeable(a->second) && mergeable(b->second))
        ms.push_back({scores[id], (int64_t)id, a->second, b->second});
    }
  }
  std::sort(ms.begin(), ms.end(), [](const Merge& x, const Merge& y) {
    if (x.score != y.score) return x.score > y.score;
    return std::tie(x.tok, x.a, x.b) < std::tie(y.tok, y.a, y.b);
  });
  json merges = json::array();
  for (const Merge& mg : ms) merges.push_back({tokens[mg.a], tokens[mg.b]});

  const bool space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix", true);
  const json replace = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMeta}};
  const json normalizer = space_prefix ? json{{"type", "Sequence"}, {"normalizers", {{{"type", "Prepend"}, {"prepend", kMeta}}, replace}}} : replace;
  json decoders = {{{"type", "Replace"}, {"pattern", {{"String", kMeta}}}, {"content", " "}}, {{"type", "ByteFallback"}}, {{"type", "Fuse"}}};
  if (space_prefix) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  json post = nullptr;
  if (adds_bos(f)) {
    const uint64_t bos = f.get_uint("tokenizer.ggml.bos_token_id");
    if (bos >= n) throw Error(path + ": tokenizer.ggml.bos_token_id is outside the vocabulary");
    const std::string& name = tokens[bos];
    json sp = {{"SpecialToken", {{"id", name}, {"type_id", 0}}}};
    post = {{"type", "TemplateProcessing"},
            {"single", {sp, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
            {"pair", {sp, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, sp, {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
            {"special_tokens", {{name, {{"id", name}, {"ids", {bos}}, {"tokens", {name}}}}}}};
  }
  json unk = nullptr;
  if (f.has("tokenizer.ggml.unknown_token_id")) {
    const uint64_t u = f.get_uint("tokenizer.ggml.unknown_token_id");
    if (u >= n) throw Error(path + ": tokenizer.ggml.unknown_token_id is outside the vocabulary");
    unk = tokens[u];
  }
  const json tj = {{"version", "1.0"},
                   {"truncation", nullptr},
                   {"padding", nullptr},
                   {"added_tokens", added},
                   {"normalizer", normalizer},
                   {"pre_tokenizer", nullptr},
                   {"post_processor", post},
                   {"decoder", {{"type", "Sequence"}, {"decoders", decoders}}},
                   {"model",
                    {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", unk}, {"continuing_subword_prefix", nullptr},
                     {"end_of_word_suffix", nullptr}, {"fuse_unk", true}, {"byte_fallback", true}, {"ignore_merges", false},
                     {"vocab", vocab}, {"merges", merges}}}};
  ImportedVocab out;
  out.size = (int64_t)n;
  out.kind = "hf";
  try {
    out.tokenizer_json = tj.dump();
  } catch (const nlohmann::json::exception&) {  // a token that is not UTF-8
    throw Error(path + ": tokenizer.ggml.tokens holds a token that is not valid UTF-8");
  }
  return out;
}

}  // namespace

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
  if (model == "llama") return read_spm_vocab(f, path);
  const std::string pre = f.has("tokenizer.ggml.pre") ? f.get_string("tokenizer.ggml.pre") : "default";
  const PreTokenizer* known = nullptr;
  for (const auto& p : known_pre_tokenizers())
    if (pre == p.gguf_name) known = &p;
  if (model != "gpt2" || !known)
    throw Error(path + ": the vocabulary (tokenizer.ggml.model '" + model + "', pre '" + pre + "', " + std::to_string(tokens.size()) +
                " tokens) is neither looplm's byte vocabulary, a byte-level BPE looplm reads (gpt2 with pre gpt-2, llama-bpe or qwen2) nor a SentencePiece "
                "vocabulary (llama)");
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
  if (adds_bos(f)) {
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

TextConventions read_gguf_text_conventions(const io::GgufFile& f, const std::string& path, const ImportedVocab& v,
                                           std::vector<std::string>& notes) {
  TextConventions t;
  auto id_at = [&](const std::string& key) {
    const uint64_t id = f.get_uint(key);
    if (id >= (uint64_t)v.size)
      throw Error(path + ": '" + key + "' = " + std::to_string(id) + " is outside the vocabulary (" + std::to_string(v.size) + " tokens)");
    return (int32_t)id;
  };
  if (v.kind != "byte") {  // looplm's byte vocabulary has none: its file's BOS / EOS are placeholders llama.cpp needs
    std::string keys;
    for (const char* k : {"eos", "eot", "eom"}) {
      const std::string key = std::string("tokenizer.ggml.") + k + "_token_id";
      if (!f.has(key)) continue;
      const int32_t id = id_at(key);
      if (std::find(t.eos_token_ids.begin(), t.eos_token_ids.end(), id) == t.eos_token_ids.end()) t.eos_token_ids.push_back(id);
      keys += (keys.empty() ? "" : ", ") + std::string(k) + "_token_id";
    }
    if (!t.eos_token_ids.empty()) {
      std::string ids;
      for (int32_t id : t.eos_token_ids) ids += (ids.empty() ? "" : ", ") + std::to_string(id);
      notes.push_back("end tokens " + ids + " (tokenizer.ggml." + keys + ")");
    }
    if (f.has("tokenizer.ggml.bos_token_id")) {
      t.bos_token_id = id_at("tokenizer.ggml.bos_token_id");
      t.add_bos_token = adds_bos(f) ? 1 : 0;
    }
  }
  if (f.has("tokenizer.chat_template")) {
    t.chat_template = f.get_string("tokenizer.chat_template");
    if (!t.chat_template.empty())
      notes.push_back("chat template from tokenizer.chat_template (" + std::to_string(t.chat_template.size()) + " characters)");
  }
  return t;
}

}  // namespace looplm
