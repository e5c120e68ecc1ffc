// ListOps (Long Range Arena semantics): random nested lists of the operators MIN, MAX, MED
// (median, truncated) and SM (sum mod 10) over digits 0-9, labelled with the value of the root.
// docs/data.md ("ListOps") describes the generator, the presets and the file format.
//
// Expressions are held in a compact form with ONE CHARACTER PER LRA TOKEN, so that a char-level
// model sees exactly one id per token and the length of the string is the LRA length:
//
//   LRA token  [MIN  [MAX  [MED  [SM  ]   0..9
//   compact    N     X     D     S    ]   0..9
//
// e.g. LRA "[MAX 2 9 [MIN 4 7 ] 0 ]" (value 9) is "X29N47]0]". A data file holds one example per
// line, "<compact>=\t<label>\n" ("X29N47]0]=\t9"): the prompt ends in '=' and the answer is the
// label digit.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace looplm {

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

struct ListOpsExample {
  std::string expr;  // compact form, without the '='
  int label = 0;     // value of the root, 0..9
  int depth = 0;     // deepest list nesting reached (root = 1)
};

// The two sets written by `looplm data listops`, with what listops.json reports about them.
struct ListOpsDataset {
  std::vector<ListOpsExample> train, test;
  int64_t train_distinct = 0, test_distinct = 0;  // distinct expression strings in each set
  int64_t test_dropped = 0;       // test candidates discarded because train has the expression
  int64_t train_rejected = 0;     // attempts rejected for their length (min_len / max_len)
  int64_t test_rejected = 0;
};

// n examples drawn independently (duplicates possible) from the generator; rejection sampling on
// the length. Deterministic: draw k of `split` (0 train, 1 test) is counter_rng_u64(seed, 2k + split)
// (data/dataset.h), so the train and test streams are separate. Error (exit 1) when the length
// limits are out of reach of the tree shapes the options allow, or when 100,000 attempts in a row
// (or 10^9 characters of them) are rejected. `rejected`, if given, receives the number of rejected attempts.
std::vector<ListOpsExample> generate_listops(const ListOpsOptions& opts, uint64_t seed, int64_t n,
                                             int split = 0, int64_t* rejected = nullptr);

// Train = generate_listops(opts, seed, n_train, 0), duplicates kept (it is a sample of the
// distribution). Test = candidates from split 1, dropping every expression that is in train (so no
// test answer can be memorised from train); duplicates inside test are kept. Error when 100,000
// candidates in a row are dropped (train covers the space: ask for fewer train examples or widen the
// generator).
ListOpsDataset make_listops_dataset(const ListOpsOptions& opts, uint64_t seed, int64_t n_train,
                                    int64_t n_test);

// Value of a compact expression (one optional trailing '=' is allowed, as in a prompt). The root must
// be a single list; every list needs at least one argument. Error naming the offset on anything
// else (unknown character, unbalanced ']', empty list, trailing characters).
int evaluate_listops(std::string_view compact);

// The spaced LRA token form of a compact expression, e.g. "X29N47]0]" -> "[MAX 2 9 [MIN 4 7 ] 0 ]"
// (for people; a trailing '=' is dropped). Error on a character outside the compact alphabet; the
// structure is not checked (evaluate_listops does that).
std::string to_lra(std::string_view compact);

// "<expr>=\t<label>\n", the line of one example in train.txt / test.txt.
std::string listops_line(const ListOpsExample& ex);
// All of `examples` as lines, written atomically (temp file, fsync, rename).
void write_listops_file(const std::string& path, const std::vector<ListOpsExample>& examples);
// listops.json: the settings (preset name, seed, options), the token mapping, the line format and,
// per set, the file, counts, distinct expressions, label histogram, lengths and depth. `overridden`
// names the options set explicitly on top of the preset (recorded as given).
std::string listops_json(const ListOpsDataset& d, const ListOpsOptions& opts, std::string_view preset,
                         uint64_t seed, const std::vector<std::string>& overridden = {});

}  // namespace looplm
