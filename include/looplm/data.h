// Preparing data (docs/data.md): text to token shards, a BPE tokenizer trained on a corpus, and
// the ListOps generator. What `looplm data` runs; a program of yours can call the same functions.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "looplm/looplm.h"

namespace looplm {

// ---------------------------------------------------------------- text and token shards
// The text of a text or JSONL file (JSONL documents, {"text": ...} per line, joined with a blank
// line). Error naming the file for a token file (.bin), a malformed line, unreadable bytes.
std::string read_text(const std::string& path);

struct ShardWritten {
  size_t tokens = 0;
  uint64_t text_bytes = 0;             // the input file's size
  bool uint32_ids = false;             // llm.c's uint32 layout (an id beyond 65,535)
  std::vector<std::string> sidecars;   // written beside it: OUT.chars (char), OUT.tokenizer (hf)
  std::vector<std::string> removed;    // a sidecar of another tokenizer kind left there, removed
};
// `input` (text or JSONL) encoded with `tok` into the llm.c shard `out` (uint16 ids; uint32
// beyond 65,535), written atomically, with the sidecar that names a char or Hugging Face tokenizer
// (the loader checks it). Error for an input holding no text (nothing is written).
ShardWritten write_token_shard(const std::string& input, const std::string& out, const TextTokenizer& tok);

struct BpeTraining {
  std::string tokenizer_json;  // Hugging Face's format: tokenizers.js and the Rust library load it
  int vocab_size = 0;          // may be below the asked size when the corpus runs out of pairs
  int merges = 0;
  int64_t words = 0;           // distinct words of the corpus
};
// A byte-level BPE (GPT-2's scheme) of `vocab_size` ids (256 bytes + merges + <|endoftext|>)
// trained on `corpus`: a pure function of both. UsageError for a vocab_size below 258; Error for
// a corpus that is empty or not UTF-8.
BpeTraining train_bpe_tokenizer(std::string_view corpus, int vocab_size);

// ---------------------------------------------------------------- ListOps (docs/data.md, "ListOps")
enum class ListOp : uint8_t { Min, Max, Med, Sm };

inline constexpr ListOp kAllListOps[] = {ListOp::Min, ListOp::Max, ListOp::Med, ListOp::Sm};

const char* listop_name(ListOp op);   // "MIN", "MAX", "MED", "SM"
char listop_char(ListOp op);          // 'N', 'X', 'D', 'S'
// Parses a comma list such as "MIN,MAX" or "sm,med" (case-insensitive; spaces around names are
// ignored). The result is in the canonical order MIN, MAX, MED, SM without repeats, so the same set
// given in any order generates the same data. UsageError naming `what` on an empty list or an
// unknown name.
std::vector<ListOp> parse_listops_ops(std::string_view list, std::string_view what = "--ops");

// The longest expression any setting may ask for (--max-len), and the deepest nesting
// (--max-depth): they bound the generator's memory and the parser's stack. A model's context is far
// shorter.
inline constexpr int64_t kListOpsLenLimit = 1'000'000;
inline constexpr int kListOpsDepthLimit = 1000;

struct ListOpsOptions {
  // A list's depth: the root is 1, a list inside it 2, ... An argument of a list at depth d is a
  // nested list with probability fn_prob while d < max_depth, otherwise a uniform digit; so lists
  // nest at most max_depth deep. (LRA's listops.py calls generate_tree(1, max_depth) and lets a node
  // at depth d be a list only while d < max_depth, which counts the digits' level: its max_depth 10
  // nests lists at most 9 deep, i.e. our max_depth 9.)
  int max_depth = 10;
  int max_args = 10;        // each list has uniform 2..max_args arguments
  int64_t min_len = 500;    // accepted lengths in LRA tokens (= compact characters), inclusive
  int64_t max_len = 2000;
  double fn_prob = 0.25;    // LRA's VALUE_P: P(an argument below max_depth is a nested list)
  std::vector<ListOp> ops{std::begin(kAllListOps), std::end(kAllListOps)};  // uniform choice

  // LRA's settings (the default): depth 10, 2..10 arguments, lengths 500..2000, all four operators.
  static ListOpsOptions lra();
  // NRGPT's small preset: SM, MAX, MED (add-mod-10 / max / median), depth 2, 2..3 arguments,
  // fn_prob 0.25, no length limit in practice (min_len 0, max_len kListOpsLenLimit; its expressions
  // have at most 17 tokens).
  static ListOpsOptions nrgpt_small();
  // "lra" or "nrgpt_small"; UsageError naming the known presets otherwise.
  static ListOpsOptions preset(std::string_view name);

  // UsageError naming the field (max_depth 1..kListOpsDepthLimit, max_args >= 2, 0 <= min_len <=
  // max_len <= kListOpsLenLimit, fn_prob in [0, 1], ops non-empty).
  void validate() const;
};

// The sets `looplm data listops` writes, as written.
struct ListOpsWritten {
  int64_t train = 0, test = 0;
  int64_t train_distinct = 0, test_distinct = 0;
  int64_t test_dropped = 0;  // test candidates dropped because train has the expression
};
// DIR/train.txt and DIR/test.txt ("<compact>=\t<label>" per line) and, last, DIR/listops.json
// (settings and counts: its presence says the two beside it are complete); DIR is created.
// `preset` and `overridden` (the option names set on top of it) are recorded in listops.json.
// The same options and seed give the same files. UsageError for options that do not validate.
ListOpsWritten write_listops(const std::string& dir, const ListOpsOptions& options, uint64_t seed, int64_t n_train,
                             int64_t n_test, const std::string& preset, const std::vector<std::string>& overridden = {});

}  // namespace looplm
