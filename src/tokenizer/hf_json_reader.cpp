#include "tokenizer/hf_json_reader.h"

#include "tokenizer/hf_json.h"
#include "io/json_input.h"

namespace looplm::hf {

namespace {

using json = nlohmann::json;

// SAX events go to nlohmann's DOM builder, except inside model.vocab and model.merges, which this
// handler reads itself (the DOM gets a null in their place).
class Reader {
 public:
  explicit Reader(TokenizerJson& out) : out_(out), dom_(out.doc, true) {}

  bool null() { return mode_ == Dom ? dom_.null() : refuse("null"); }
  bool boolean(bool v) { return mode_ == Dom ? dom_.boolean(v) : refuse(v ? "true" : "false"); }
  bool number_integer(json::number_integer_t v) { return mode_ == Dom ? dom_.number_integer(v) : id(v); }
  bool number_unsigned(json::number_unsigned_t v) {
    return mode_ == Dom ? dom_.number_unsigned(v) : id(v > (1ull << 62) ? -1 : static_cast<int64_t>(v));
  }
  bool number_float(json::number_float_t v, const std::string& s) { return mode_ == Dom ? dom_.number_float(v, s) : refuse(s); }
  bool binary(json::binary_t& v) { return mode_ == Dom ? dom_.binary(v) : refuse("binary"); }
  bool string(std::string& v) {
    if (mode_ == Dom) return dom_.string(v);
    if (mode_ == Vocab) return refuse("\"" + v + "\"");
    if (pair_open_) {
      if (pair_size_ >= 2) return bad_merge("more than two tokens");
      out_.merges.push_back(v);
      ++pair_size_;
      return true;
    }
    const size_t sp = v.find(' ');  // "a b": the format before tokens could hold spaces
    if (sp == std::string::npos || v.find(' ', sp + 1) != std::string::npos)
      return bad_merge("'" + io::brief(v) + "' is not two tokens separated by one space");
    out_.merges.push_back(v.substr(0, sp));
    out_.merges.push_back(v.substr(sp + 1));
    ++merge_index_;
    return true;
  }
  bool key(std::string& k) {
    if (mode_ == Vocab) {
      key_ = k;
      return true;
    }
    if (!keys_.empty()) keys_.back() = k;
    return dom_.key(k);
  }
  bool start_object(std::size_t n) {
    if (mode_ != Dom) return mode_ == Vocab ? refuse("an object") : bad_merge("an object");
    if (at("vocab")) {
      mode_ = Vocab;
      out_.has_vocab = true;
      return dom_.null();
    }
    keys_.push_back("");
    return dom_.start_object(n);
  }
  bool end_object() {
    if (mode_ == Vocab) {
      mode_ = Dom;
      return true;
    }
    keys_.pop_back();
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    if (mode_ == Vocab) return refuse("a list");
    if (mode_ == Merges) {
      if (pair_open_) return bad_merge("a nested list");
      pair_open_ = true;
      pair_size_ = 0;
      return true;
    }
    if (at("merges")) {
      mode_ = Merges;
      out_.has_merges = true;
      return dom_.null();
    }
    keys_.push_back("");  // a list's elements have no key
    return dom_.start_array(n);
  }
  bool end_array() {
    if (mode_ == Merges) {
      if (!pair_open_) {
        mode_ = Dom;
        return true;
      }
      if (pair_size_ != 2) return bad_merge("expected [\"a\", \"b\"]");
      pair_open_ = false;
      ++merge_index_;
      return true;
    }
    keys_.pop_back();
    return dom_.end_array();
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    error_ = "not valid JSON (" + io::brief(plain_message(e), 200) + ")";
    return false;
  }
  const std::string& error() const { return error_; }

 private:
  enum Mode { Dom, Vocab, Merges };
  // The container about to start is model.<name> of the root object.
  bool at(const char* name) const {
    return keys_.size() == 2 && keys_[0] == "model" && keys_[1] == name;
  }
  bool id(int64_t v) {
    if (mode_ == Merges) return bad_merge("a number");
    // Ids index tables of the vocabulary's size: bounded as a model's vocab_size is (2^24).
    if (v < 0 || v >= (int64_t{1} << 24))
      return fail("model.vocab: token '" + io::brief(key_) + "' has id " + std::to_string(v) + ", expected an integer in [0, 16777216)");
    out_.vocab.put(key_, static_cast<int32_t>(v));
    return true;
  }
  bool refuse(const std::string& what) {
    if (mode_ == Merges) return bad_merge(what);
    return fail("model.vocab: token '" + io::brief(key_) + "' has id " + io::brief(what) + ", expected an integer in [0, 16777216)");
  }
  bool bad_merge(const std::string& what) {
    return fail("model.merges[" + std::to_string(merge_index_) + "]: " + what + " (expected \"a b\" or [\"a\", \"b\"])");
  }
  bool fail(const std::string& msg) {
    error_ = msg;
    return false;
  }

  TokenizerJson& out_;
  nlohmann::detail::json_sax_dom_parser<json> dom_;
  std::vector<std::string> keys_;  // the current key of each open object ("" for lists)
  Mode mode_ = Dom;
  std::string key_;
  bool pair_open_ = false;
  int pair_size_ = 0;
  size_t merge_index_ = 0;
  std::string error_;
};

}  // namespace

TokenizerJson read_tokenizer_json(std::string_view text, const std::string& origin) {
  if (io::json_depth(text, io::kMaxJsonDepth) > io::kMaxJsonDepth)
    bad(origin, "nests JSON deeper than " + std::to_string(io::kMaxJsonDepth) + " levels");
  TokenizerJson out;
  Reader r(out);
  bool ok = false;
  try {
    ok = json::sax_parse(text.begin(), text.end(), &r, json::input_format_t::json, true);
  } catch (const json::exception& e) {
    bad(origin, "not valid JSON (" + io::brief(plain_message(e), 200) + ")");
  }
  if (!ok) bad(origin, r.error().empty() ? std::string("not valid JSON") : r.error());
  return out;
}

}  // namespace looplm::hf
