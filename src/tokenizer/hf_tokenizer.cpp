#include "tokenizer/hf_tokenizer.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tokenizer/hf_added_tokens.h"
#include "tokenizer/hf_bpe.h"
#include "tokenizer/hf_decoder.h"
#include "tokenizer/hf_json.h"
#include "tokenizer/hf_json_reader.h"
#include "tokenizer/hf_normalizer.h"
#include "tokenizer/hf_pretokenizer.h"
#include "tokenizer/hf_regex.h"
#include "tokenizer/hf_unicode.h"
#include "io/atomic_file.h"

namespace looplm {

using namespace hf;

struct HfTokenizer::Impl {
  std::string json_text;
  std::string origin;
  BpeModel model;
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<Decoder> decoder;
  std::vector<AddedToken> added;
  std::vector<AddedToken> added_normalized;  // the normalized=true ones, spelled as the normalizer writes them
  std::unique_ptr<AddedTokenSplitter> raw_splitter, normalized_splitter;
  std::vector<int32_t> before, after;  // the post-processor's special tokens for one sequence
  std::vector<std::string> id_to_token;
  std::vector<uint8_t> present, special;
  bool raw_bytes = false;
  std::string summary;
  StreamPlan stream;

  const std::string& checked_token(int32_t id) const;

  void encode_piece(std::string_view text, bool at_start, std::vector<int32_t>& out, WordCache& cache) const;
};

HfTokenizer::HfTokenizer() : impl_(std::make_unique<Impl>()) {}
HfTokenizer::~HfTokenizer() = default;

namespace {

// The post-processor's tokens before and after a single sequence.
void post_processor(const nlohmann::json& j, const std::string& where, std::vector<int32_t>& before,
                    std::vector<int32_t>& after) {
  if (j.is_null()) return;
  const std::string type = str_member(j, "type", where);
  auto token_pair = [&](const char* key) {
    const nlohmann::json* v = member(j, key, where);
    if (!v || !v->is_array() || v->size() != 2 || !(*v)[1].is_number_integer() || (*v)[1].get<int64_t>() < 0)
      bad(where + "." + key, "expected [\"token\", id]");
    return static_cast<int32_t>((*v)[1].get<int64_t>());
  };
  if (type == "ByteLevel") return;  // it only adjusts offsets
  if (type == "Sequence") {
    const auto& list = array_member(j, "processors", where);
    for (size_t i = 0; i < list.size(); ++i)
      post_processor(list[i], where + ".processors[" + std::to_string(i) + "]", before, after);
    return;
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    before.insert(before.begin(), token_pair("cls"));
    after.push_back(token_pair("sep"));
    return;
  }
  if (type == "TemplateProcessing") {
    const auto& single = array_member(j, "single", where);
    const nlohmann::json* specials = member(j, "special_tokens", where);
    std::vector<int32_t> b, a;
    bool seen_a = false;
    for (size_t i = 0; i < single.size(); ++i) {
      const std::string at = where + ".single[" + std::to_string(i) + "]";
      const nlohmann::json& item = single[i];
      if (const nlohmann::json* s = member(item, "Sequence", at)) {
        if (str_member(*s, "id", at + ".Sequence") != "A" || seen_a)
          bad(at, "a single-sequence template holds sequence A once");
        seen_a = true;
      } else if (const nlohmann::json* s = member(item, "SpecialToken", at)) {
        const std::string name = str_member(*s, "id", at + ".SpecialToken");
        const nlohmann::json* entry = specials ? member(*specials, name.c_str(), where + ".special_tokens") : nullptr;
        if (!entry) bad(at, "special token '" + io::brief(name) + "' is not in special_tokens");
        const auto& ids = array_member(*entry, "ids", where + ".special_tokens." + name);
        for (const auto& id : ids) {
          if (!id.is_number_integer() || id.get<int64_t>() < 0) bad(where + ".special_tokens." + name, "ids must be ids");
          (seen_a ? a : b).push_back(static_cast<int32_t>(id.get<int64_t>()));
        }
      } else {
        bad(at, "expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
      }
    }
    if (!seen_a) bad(where + ".single", "the template has no sequence A");
    before.insert(before.begin(), b.begin(), b.end());
    after.insert(after.end(), a.begin(), a.end());
    return;
  }
  bad(where, "post-processor type '" + io::brief(type) +
                 "' is not supported (supported: TemplateProcessing, ByteLevel, BertProcessing, RobertaProcessing, Sequence)");
}

std::string type_of(const nlohmann::json& j) {
  if (!j.is_object()) return "none";
  const auto t = j.find("type");
  return t != j.end() && t->is_string() ? t->get<std::string>() : "?";
}

}  // namespace

std::string HfTokenizer::read_file_text(const std::string& path) {
  // The largest real tokenizer.json is ~35 MB (Gemma 3's); a stream that gives far more (/dev/zero)
  // is not one.
  constexpr uint64_t kMaxBytes = uint64_t{512} << 20;
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)))
    throw Error("tokenizer file '" + io::brief_path(path) + "' is a device, not a tokenizer.json");
  try {
    return io::read_file(path, kMaxBytes);
  } catch (const io::FileTooLarge&) {
    throw Error("tokenizer file '" + io::brief_path(path) + "' holds more than 512 MB: not a tokenizer.json");
  }
}

std::shared_ptr<const HfTokenizer> HfTokenizer::from_file(const std::string& path) { return from_json(read_file_text(path), path); }

std::shared_ptr<const HfTokenizer> HfTokenizer::from_json(const std::string& text, const std::string& origin) {
  std::shared_ptr<HfTokenizer> t(new HfTokenizer());
  Impl& m = *t->impl_;
  m.json_text = text;
  m.origin = origin;
  // Nesting is bounded (io::parse_json's guard); its duplicate-key check is left out: it doubles
  // the time of a 30 MB file, and the Rust library keeps the last of a repeated key too.
  TokenizerJson parsed = read_tokenizer_json(text, origin);
  const nlohmann::json& j = parsed.doc;
  if (!j.is_object()) bad(origin, "not a tokenizer.json (expected a JSON object)");
  const nlohmann::json* model = member(j, "model", origin);
  if (!model) bad(origin, "not a tokenizer.json (no \"model\")");
  m.model = BpeModel::from_json(*model, origin + ": model", &parsed);

  const nlohmann::json null;
  const nlohmann::json* pre = member(j, "pre_tokenizer", origin);
  PreTokenizerOptions po;
  if (pre && count_byte_level(*pre) == 1 && ends_with_byte_level(*pre)) po.raw_bytes = m.model.enable_raw_bytes();
  m.raw_bytes = po.raw_bytes;
  const nlohmann::json* norm = member(j, "normalizer", origin);
  m.normalizer = make_normalizer(norm ? *norm : null, origin + ": normalizer");
  m.pre_tokenizer = make_pre_tokenizer(pre ? *pre : null, origin + ": pre_tokenizer", po);
  const nlohmann::json* dec = member(j, "decoder", origin);
  m.decoder = make_decoder(dec ? *dec : null, origin + ": decoder");
  const nlohmann::json* post = member(j, "post_processor", origin);
  post_processor(post ? *post : null, origin + ": post_processor", m.before, m.after);
  if (m.decoder) {  // the chain's shape decides the plan; any token string shows it
    std::string probe = "a";
    PieceState st;
    m.stream.piecewise = m.decoder->piece(probe, st);
    m.stream.byte_fallback = st.byte_fallback;
    m.stream.strip = st.strip;
    m.stream.strip_start = st.strip_start;
    m.stream.strip_stop = st.strip_stop;
  }

  // The id space: the model's vocabulary, then the added tokens (which win where they overlap).
  int32_t max_id = -1;
  for (const auto& e : m.model.vocab().entries()) max_id = std::max(max_id, e.value);
  if (const nlohmann::json* list = member(j, "added_tokens", origin)) {
    if (!list->is_array()) bad(origin + ": added_tokens", "expected a list");
    for (size_t i = 0; i < list->size(); ++i) {
      const std::string at = origin + ": added_tokens[" + std::to_string(i) + "]";
      const nlohmann::json& e = (*list)[i];
      AddedToken a;
      a.id = static_cast<int32_t>(int_member(e, "id", at, -1, 0, (int64_t{1} << 24) - 1));
      if (a.id < 0) bad(at, "no \"id\"");
      a.content = str_member(e, "content", at);
      if (a.content.empty()) bad(at + ".content", "an added token cannot be empty");
      if (invalid_utf8_at(a.content) != std::string::npos) bad(at + ".content", "not valid UTF-8");
      a.special = bool_member(e, "special", at, false);
      a.normalized = bool_member(e, "normalized", at, !a.special);
      a.lstrip = bool_member(e, "lstrip", at, false);
      a.rstrip = bool_member(e, "rstrip", at, false);
      a.single_word = bool_member(e, "single_word", at, false);
      max_id = std::max(max_id, a.id);
      m.added.push_back(std::move(a));
    }
  }
  if (max_id < 0) bad(origin, "the vocabulary is empty");
  m.id_to_token.assign(static_cast<size_t>(max_id) + 1, std::string());
  m.present.assign(m.id_to_token.size(), 0);
  m.special.assign(m.id_to_token.size(), 0);
  for (const auto& e : m.model.vocab().entries()) {
    const int32_t id = e.value;
    const std::string_view tok = m.model.vocab().key(e);
    if (m.present[id])
      bad(origin + ": model.vocab", "id " + std::to_string(id) + " is given to both '" + io::brief(m.id_to_token[id]) +
                                        "' and '" + io::brief(tok) + "'");
    m.id_to_token[id] = tok;
    m.present[id] = 1;
  }
  std::vector<int> raw, normalized;
  for (size_t i = 0; i < m.added.size(); ++i) {
    AddedToken& a = m.added[i];
    m.id_to_token[a.id] = a.content;
    m.present[a.id] = 1;
    if (a.special) m.special[a.id] = 1;
    if (a.normalized && m.normalizer) {
      // Matched in normalized text, so spelled as the normalizer writes it.
      AddedToken n = a;
      m.normalizer->apply(n.content);
      if (n.content.empty()) continue;
      normalized.push_back(static_cast<int>(m.added_normalized.size()));
      m.added_normalized.push_back(std::move(n));
    } else {
      raw.push_back(static_cast<int>(i));
    }
  }
  for (int32_t id : m.before)
    if (id >= (int32_t)m.present.size() || !m.present[id]) bad(origin + ": post_processor", "id " + std::to_string(id) + " is not in the vocabulary");
  for (int32_t id : m.after)
    if (id >= (int32_t)m.present.size() || !m.present[id]) bad(origin + ": post_processor", "id " + std::to_string(id) + " is not in the vocabulary");
  m.raw_splitter = std::make_unique<AddedTokenSplitter>(m.added, raw);
  m.normalized_splitter = std::make_unique<AddedTokenSplitter>(m.added_normalized, normalized);
  m.summary = "BPE, " + std::to_string(m.id_to_token.size()) + " ids (" + std::to_string(m.model.merge_count()) +
              " merges, " + std::to_string(m.added.size()) + " added tokens), normalizer " +
              type_of(norm ? *norm : null) + ", pre-tokenizer " + type_of(pre ? *pre : null) + ", decoder " +
              type_of(dec ? *dec : null);
  return t;
}

void HfTokenizer::Impl::encode_piece(std::string_view text, bool at_start, std::vector<int32_t>& out,
                                     WordCache& cache) const {
  std::string normalized;
  std::string_view s = text;
  if (normalizer) {
    normalized.assign(text);
    normalizer->apply(normalized);
    s = normalized;
  }
  if (s.empty()) return;
  std::vector<Piece> pieces;
  if (normalized_splitter->empty()) pieces.push_back({0, s.size(), -1});
  else normalized_splitter->split(s, pieces);
  WordArena arena;
  std::vector<std::string_view> words;
  for (const Piece& p : pieces) {
    if (p.id >= 0) {
      out.push_back(p.id);
      continue;
    }
    words.assign(1, s.substr(p.begin, p.end - p.begin));
    if (pre_tokenizer) pre_tokenizer->run(words, arena, at_start && p.begin == 0);
    for (std::string_view w : words) model.encode_word(w, out, &cache);
    arena.owned.clear();
  }
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text, bool add_special) const {
  const Impl& m = *impl_;
  if (const size_t bad_at = invalid_utf8_at(text); bad_at != std::string_view::npos) {
    throw Error("invalid UTF-8 at byte offset " + std::to_string(bad_at) + " (byte 0x" +
                [&] { char b[4]; std::snprintf(b, sizeof b, "%02X", (unsigned)(unsigned char)text[bad_at]); return std::string(b); }() +
                "); a Hugging Face tokenizer reads UTF-8 text");
  }
  const hf::MatchBudget budget(text.size());  // the regexes' work over this text (hf_regex.h)
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 16);
  if (add_special) out.insert(out.end(), m.before.begin(), m.before.end());
  WordCache cache;
  std::vector<Piece> pieces;
  if (m.raw_splitter->empty()) pieces.push_back({0, text.size(), -1});
  else m.raw_splitter->split(text, pieces);
  for (const Piece& p : pieces) {
    if (p.id >= 0) out.push_back(p.id);
    else m.encode_piece(text.substr(p.begin, p.end - p.begin), p.begin == 0, out, cache);
  }
  if (add_special) out.insert(out.end(), m.after.begin(), m.after.end());
  return out;
}

const std::string& HfTokenizer::Impl::checked_token(int32_t id) const {
  if (id < 0 || id >= (int32_t)present.size() || !present[id])
    throw Error("token id " + std::to_string(id) + " is not in the tokenizer's vocabulary (" + origin + ": " +
                std::to_string(present.size()) + " ids)");
  return id_to_token[id];
}

const HfTokenizer::StreamPlan& HfTokenizer::stream_plan() const { return impl_->stream; }

void HfTokenizer::append_piece(int32_t id, bool first, std::string& out, bool* byte_token) const {
  const Impl& m = *impl_;
  std::string s = m.checked_token(id);
  PieceState st;
  st.first = first;
  if (!m.decoder) {  // no decoder: the tokens joined by spaces
    if (!first) out += ' ';
  } else {
    LOOPLM_ASSERT(m.stream.piecewise, "append_piece: this tokenizer's decoder is not piecewise");
    m.decoder->piece(s, st);
  }
  out += s;
  if (byte_token) *byte_token = st.byte_token;
}

std::string HfTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  const Impl& m = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    const std::string& tok = m.checked_token(id);
    if (skip_special && m.special[id]) continue;
    tokens.push_back(tok);
  }
  if (!m.decoder) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  size_t bytes = 0;
  for (const std::string& t : tokens) bytes += t.size();
  const hf::MatchBudget budget(bytes);  // a Replace decoder's regex work over these tokens
  m.decoder->run(tokens);
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

int HfTokenizer::vocab_size() const { return static_cast<int>(impl_->id_to_token.size()); }

const std::string& HfTokenizer::token(int32_t id) const {
  static const std::string none;
  return id >= 0 && id < vocab_size() ? impl_->id_to_token[id] : none;
}

std::optional<int32_t> HfTokenizer::id_of(std::string_view tok) const {
  for (const AddedToken& a : impl_->added)
    if (a.content == tok) return a.id;
  const int32_t* id = impl_->model.vocab().find(tok);
  if (!id) return std::nullopt;
  return *id;
}

bool HfTokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && impl_->special[id];
}

const std::vector<std::string>& hf_end_of_text_names() {
  static const std::vector<std::string> n = {"<|end_of_text|>", "<|endoftext|>", "</s>", "<eos>", "<|im_end|>", "<|eot_id|>"};
  return n;
}
const std::vector<std::string>& hf_begin_of_text_names() {
  static const std::vector<std::string> n = {"<|begin_of_text|>", "<s>", "<bos>"};
  return n;
}

std::optional<int32_t> HfTokenizer::find_special(const std::vector<std::string>& names) const {
  for (const std::string& n : names)
    for (const AddedToken& a : impl_->added)
      if (a.special && a.content == n) return a.id;
  return std::nullopt;
}

const std::string& HfTokenizer::json() const { return impl_->json_text; }
std::string HfTokenizer::summary() const { return impl_->summary; }

}  // namespace looplm
