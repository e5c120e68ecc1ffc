// Preparing data (include/looplm/data.h): token shards, BPE training and ListOps files, as
// `looplm data` writes them.
#include <algorithm>
#include <filesystem>

#include "data/bpe_trainer.h"
#include "data/dataset.h"
#include "data/listops.h"
#include "tokenizer/text_tokenizer_impl.h"
#include "tokenizer/tokenizer.h"
#include "io/json_input.h"
#include "looplm/data.h"

namespace looplm {

std::string read_text(const std::string& path) { return load_text(path); }

ShardWritten write_token_shard(const std::string& input, const std::string& out, const TextTokenizer& text_tok) {
  namespace fs = std::filesystem;
  const Tokenizer& tok = text_tok.impl().tok;
  const std::vector<int32_t> ids = load_tokens(input, tok);
  if (ids.empty()) throw Error("data: " + io::brief_path(input) + " holds no text: nothing to tokenize (no shard written)");
  write_llmc_shard(out, ids);
  ShardWritten w;
  w.tokens = ids.size();
  w.text_bytes = (uint64_t)fs::file_size(input);
  w.uint32_ids = *std::max_element(ids.begin(), ids.end()) > 0xFFFF;
  const std::string chars_path = out + ".chars", hf_path = out + ".tokenizer";
  if (tok.kind() == Tokenizer::Kind::Char) {
    write_file_atomic(chars_path, tok.alphabet());
    w.sidecars.push_back(chars_path);
  }
  if (tok.kind() == Tokenizer::Kind::Hf) {
    write_tokenizer_sidecar(out, tok);
    w.sidecars.push_back(hf_path);
  }
  // A sidecar of another kind would describe the wrong tokenizer to the loader.
  for (const std::string& stale : {chars_path, hf_path}) {
    if (std::find(w.sidecars.begin(), w.sidecars.end(), stale) != w.sidecars.end()) continue;
    if (fs::exists(stale)) {
      fs::remove(stale);
      w.removed.push_back(stale);
    }
  }
  return w;
}

BpeTraining train_bpe_tokenizer(std::string_view corpus, int vocab_size) {
  BpeTrainOptions o;
  o.vocab_size = vocab_size;
  const BpeTrainResult r = train_byte_level_bpe(corpus, o);
  return BpeTraining{r.tokenizer_json, r.vocab_size, r.merges, r.words};
}

ListOpsWritten write_listops(const std::string& dir, const ListOpsOptions& options, uint64_t seed, int64_t n_train,
                             int64_t n_test, const std::string& preset, const std::vector<std::string>& overridden) {
  namespace fs = std::filesystem;
  options.validate();
  const ListOpsDataset d = make_listops_dataset(options, seed, n_train, n_test);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error("cannot create directory '" + io::brief_path(dir) + "': " + ec.message());
  write_listops_file(dir + "/train.txt", d.train);
  write_listops_file(dir + "/test.txt", d.test);
  write_file_atomic(dir + "/listops.json", listops_json(d, options, preset, seed, overridden));  // last: the set is complete
  return ListOpsWritten{(int64_t)d.train.size(), (int64_t)d.test.size(), d.train_distinct, d.test_distinct, d.test_dropped};
}

}  // namespace looplm
