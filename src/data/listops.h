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

#include "looplm/data.h"

namespace looplm {

// ListOp, ListOpsOptions, parse_listops_ops and the limits: include/looplm/data.h (public).

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
