// TextTokenizer (include/looplm/looplm.h): the public face of a Tokenizer opened from a
// tokenizer.json or a checkpoint.
#include <sys/stat.h>

#include "tokenizer/text_stream.h"
#include "tokenizer/text_tokenizer_impl.h"
#include "tokenizer/tokenizer.h"
#include "io/json_input.h"
#include "io/safetensors.h"
#include "looplm/looplm.h"
#include "looplm/util.h"

namespace looplm {

TextTokenizer::TextTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TextTokenizer::TextTokenizer(TextTokenizer&&) noexcept = default;
TextTokenizer& TextTokenizer::operator=(TextTokenizer&&) noexcept = default;
TextTokenizer::~TextTokenizer() = default;

struct TextStream::Impl {
  TextStreamer s;
};
TextStream::TextStream(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TextStream::TextStream(TextStream&&) noexcept = default;
TextStream& TextStream::operator=(TextStream&&) noexcept = default;
TextStream::~TextStream() = default;
std::string TextStream::push(int32_t id) { return impl_->s.push(id); }
std::string TextStream::finish() { return impl_->s.finish(); }
bool TextStream::stopped() const { return impl_->s.stopped(); }
size_t TextStream::text_bytes() const { return impl_->s.text_bytes(); }

TextStream make_text_stream(const Tokenizer& tok, const TextStreamOptions& o) {
  return TextStream(std::make_unique<TextStream::Impl>(TextStream::Impl{TextStreamer(tok, {o.stop, o.at_start})}));
}
TextStream TextTokenizer::text_stream(const TextStreamOptions& o) const { return make_text_stream(impl_->tok, o); }

namespace {
// A tokenizer.json's clean_up_tokenization_spaces: its tokenizer_config.json's (the file beside
// it), false when there is none (transformers' default since 4.45).
bool clean_up_beside(const std::string& tokenizer_json) {
  const size_t slash = tokenizer_json.rfind('/');
  const std::string cfg = (slash == std::string::npos ? std::string() : tokenizer_json.substr(0, slash + 1)) + "tokenizer_config.json";
  struct stat st;
  if (::stat(cfg.c_str(), &st) != 0) return false;
  const nlohmann::json j = io::parse_json(read_file_bytes(cfg), cfg);
  if (!j.is_object() || !j.contains("clean_up_tokenization_spaces") || j["clean_up_tokenization_spaces"].is_null()) return false;
  if (!j["clean_up_tokenization_spaces"].is_boolean()) throw Error(cfg + ": clean_up_tokenization_spaces must be true or false");
  return j["clean_up_tokenization_spaces"].get<bool>();
}
}  // namespace

TextTokenizer TextTokenizer::open(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) throw Error(io::brief_path(path) + ": no such file or directory");
  std::string file = path;
  if (S_ISDIR(st.st_mode)) file += "/model.safetensors";
  if (S_ISDIR(st.st_mode) || (file.size() >= 12 && file.compare(file.size() - 12, 12, ".safetensors") == 0)) {
    auto f = io::SafetensorsFile::open(file);
    const auto it = f.metadata().find("config");
    if (it == f.metadata().end()) throw Error(file + ": no 'config' in the metadata (not a looplm checkpoint?)");
    Config c;
    try {
      c = Config::from_json_text(it->second, file + " (metadata 'config')");
    } catch (const UsageError& e) {
      throw Error(e.what());  // a damaged file, not a bad flag
    }
    Impl impl{Tokenizer::from_checkpoint(c, f.metadata(), file)};
    if (auto t = f.metadata().find(kTextMetadataKey); t != f.metadata().end())
      impl.clean_up = TextConventions::from_json_text(t->second, file).clean_up_tokenization_spaces;
    return TextTokenizer(std::make_unique<Impl>(std::move(impl)));
  }
  Impl impl{Tokenizer::hf_from_file(path)};
  impl.clean_up = clean_up_beside(path);
  return TextTokenizer(std::make_unique<Impl>(std::move(impl)));
}

bool TextTokenizer::clean_up_tokenization_spaces() const { return impl_->clean_up; }
std::string TextTokenizer::decode_as_transformers(const std::vector<int32_t>& ids) const {
  const std::string text = decode(ids);
  return impl_->clean_up ? clean_up_tokenization(text) : text;
}

TextTokenizer TextTokenizer::byte_level() { return TextTokenizer(std::make_unique<Impl>(Impl{Tokenizer::byte_level()})); }
TextTokenizer TextTokenizer::char_level(const std::string& alphabet) {
  return TextTokenizer(std::make_unique<Impl>(Impl{Tokenizer::char_level(alphabet)}));
}
TextTokenizer TextTokenizer::char_level_from_text(const std::string& text) {
  return TextTokenizer(std::make_unique<Impl>(Impl{Tokenizer::char_level_from_text(text)}));
}
TextTokenizer TextTokenizer::from_json(const std::string& json_text, const std::string& origin) {
  return TextTokenizer(std::make_unique<Impl>(Impl{Tokenizer::hf_from_json(json_text, origin)}));
}

std::string TextTokenizer::kind() const { return impl_->tok.kind_name(); }
int TextTokenizer::vocab_size() const { return impl_->tok.vocab_size(); }
std::vector<int32_t> TextTokenizer::encode(const std::string& text, bool add_special) const {
  if (!add_special) return impl_->tok.encode(text);
  if (impl_->tok.kind() != Tokenizer::Kind::Hf)
    throw UsageError("special tokens need a Hugging Face tokenizer; the " + std::string(impl_->tok.kind_name()) +
                     " tokenizer has none");
  return impl_->tok.encode_with_special(text);
}
std::string TextTokenizer::decode(const std::vector<int32_t>& ids) const { return impl_->tok.decode(ids); }

}  // namespace looplm
