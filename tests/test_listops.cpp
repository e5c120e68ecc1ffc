// ListOps (docs/data.md): the generator's labels against an evaluator written here
// independently (over the spaced LRA token form, recursive, median through doubles as LRA's
// int(np.median(...)) does), hand-written MED / SM cases, the tree-shape and length limits,
// determinism, the train / test split, and `looplm data listops` end to end.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <unordered_set>
#include <vector>

#include "data/listops.h"
#include "looplm/error.h"
#include "test_util.h"

using namespace looplm;
namespace fs = std::filesystem;

namespace {

// ---- An independent reading of the LRA token form ("[MAX 2 9 [MIN 4 7 ] 0 ]"). ----

std::vector<std::string> split_spaces(const std::string& s) {
  std::vector<std::string> toks;
  std::istringstream in(s);
  for (std::string t; in >> t;) toks.push_back(t);
  return toks;
}

struct LraTree {
  int value = -1;
  int depth = 0;           // list nesting, root list = 1
  int min_args = 1 << 30;  // over every list in the tree
  int max_args = 0;
  std::set<std::string> ops;
};

// Recursive descent from toks[i]; returns the value of the item there and advances i.
int lra_item(const std::vector<std::string>& toks, size_t& i, int depth, LraTree& t) {
  if (i >= toks.size()) throw std::runtime_error("ran off the end");
  const std::string tok = toks[i++];
  if (tok.size() == 1 && tok[0] >= '0' && tok[0] <= '9') return tok[0] - '0';
  if (tok.empty() || tok[0] != '[') throw std::runtime_error("unexpected token " + tok);
  t.depth = std::max(t.depth, depth);
  t.ops.insert(tok);
  std::vector<int> v;
  while (i < toks.size() && toks[i] != "]") v.push_back(lra_item(toks, i, depth + 1, t));
  if (i >= toks.size()) throw std::runtime_error("unclosed " + tok);
  ++i;  // the "]"
  t.min_args = std::min<int>(t.min_args, static_cast<int>(v.size()));
  t.max_args = std::max<int>(t.max_args, static_cast<int>(v.size()));
  if (tok == "[MIN") return *std::min_element(v.begin(), v.end());
  if (tok == "[MAX") return *std::max_element(v.begin(), v.end());
  if (tok == "[SM") {
    int s = 0;
    for (int x : v) s += x;
    return s % 10;
  }
  if (tok == "[MED") {  // np.median then int(): a double mean of the middle pair, truncated
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    const double med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
    return static_cast<int>(med);
  }
  throw std::runtime_error("unknown operator " + tok);
}

LraTree read_lra(const std::string& lra) {
  const auto toks = split_spaces(lra);
  LraTree t;
  size_t i = 0;
  if (toks.empty() || toks[0][0] != '[') throw std::runtime_error("root is not a list: " + lra);
  t.value = lra_item(toks, i, 1, t);
  if (i != toks.size()) throw std::runtime_error("trailing tokens in " + lra);
  return t;
}

ListOpsOptions deep_options() {  // LRA's shape with a shorter length window, to keep the test fast
  ListOpsOptions o = ListOpsOptions::lra();
  o.min_len = 40;
  o.max_len = 400;
  return o;
}

// Every example: label and depth as the independent reader finds them, and the options' limits.
void check_examples(const std::vector<ListOpsExample>& xs, const ListOpsOptions& o) {
  std::set<std::string> allowed;
  for (ListOp op : o.ops) allowed.insert(std::string("[") + listop_name(op));
  for (const auto& ex : xs) {
    const std::string lra = to_lra(ex.expr);
    LraTree t;
    try {
      t = read_lra(lra);
    } catch (const std::exception& e) {
      FAIL() << ex.expr << ": " << e.what();
    }
    ASSERT_EQ(t.value, ex.label) << ex.expr << " = " << lra;
    ASSERT_EQ(evaluate_listops(ex.expr), ex.label) << ex.expr;
    ASSERT_EQ(t.depth, ex.depth) << ex.expr;
    ASSERT_LE(t.depth, o.max_depth) << ex.expr;
    ASSERT_GE(t.min_args, 2) << ex.expr;
    ASSERT_LE(t.max_args, o.max_args) << ex.expr;
    ASSERT_EQ(split_spaces(lra).size(), ex.expr.size()) << "one compact character per LRA token";
    ASSERT_GE(static_cast<int64_t>(ex.expr.size()), o.min_len) << ex.expr;
    ASSERT_LE(static_cast<int64_t>(ex.expr.size()), o.max_len) << ex.expr;
    for (const auto& op : t.ops) ASSERT_TRUE(allowed.count(op)) << op << " in " << lra;
  }
}

struct CmdResult {
  int code;
  std::string out;  // stdout + stderr
};

CmdResult run(const std::string& args) {
  const std::string cmd = std::string(LOOPLM_BINARY) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

}  // namespace

TEST(ListOps, HandWrittenValues) {
  struct Case {
    const char* expr;
    int value;
  };
  const Case cases[] = {
      {"X29N47]0]", 9},        // LRA's example [MAX 2 9 [MIN 4 7 ] 0 ]
      {"X29N47]0]=", 9},       // a prompt's '=' is allowed
      {"N83]", 3},
      {"D25]", 3},             // even count: mean of 2 and 5 is 3.5, truncated
      {"D12]", 1},
      {"D52]", 3},             // order does not matter
      {"D312]", 2},            // odd count: the middle one
      {"D9105]", 3},           // 0 1 5 9 -> (1 + 5) / 2
      {"D0919]", 5},           // 0 1 9 9 -> (1 + 9) / 2
      {"D8899]", 8},           // 8 8 9 9 -> 8.5 -> 8
      {"S99]", 8},             // sum mod 10
      {"S55]", 0},
      {"S1234]", 0},
      {"S987]", 4},
      {"SD25]X19]]", 2},       // MED(2,5)=3, MAX(1,9)=9, 12 mod 10
      {"DS55]S99]S11]]", 2},   // MED(0, 8, 2)
      {"N5X3D1234]]]", 3},     // MED(1,2,3,4)=2, MAX(3,2)=3, MIN(5,3)=3
      {"SSSS99]9]9]9]", 5},    // four deep: 18 -> 8, 17 -> 7, 16 -> 6, 15 -> 5
      {"DX19]N08]]", 4},       // MED(9, 0) = 4.5 -> 4
  };
  for (const auto& c : cases) {
    EXPECT_EQ(evaluate_listops(c.expr), c.value) << c.expr;
    EXPECT_EQ(read_lra(to_lra(c.expr)).value, c.value) << c.expr << " (independent reader)";
  }
}

TEST(ListOps, CompactFormAndMalformedInput) {
  EXPECT_EQ(to_lra("X29N47]0]"), "[MAX 2 9 [MIN 4 7 ] 0 ]");
  EXPECT_EQ(to_lra("NXDS]0123456789="), "[MIN [MAX [MED [SM ] 0 1 2 3 4 5 6 7 8 9");
  EXPECT_THROW(to_lra("X2+3]"), Error);
  for (const char* bad : {"", "=", "X", "X1", "]", "X]", "7", "X1]2", "X1]X2]", "X1a]", "X1]==", "x12]",
                          "X1 2]", "XX1]"}) {
    EXPECT_THROW(evaluate_listops(bad), Error) << "'" << bad << "'";
  }
  try {
    evaluate_listops("X12]]");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("offset 4"), std::string::npos) << e.what();
  }
  // Deep input from a file must not overflow the parser's stack.
  EXPECT_THROW(evaluate_listops(std::string(200000, 'X')), Error);
}

TEST(ListOps, LabelsMatchIndependentEvaluator) {
  const ListOpsOptions small = ListOpsOptions::nrgpt_small();
  check_examples(generate_listops(small, 11, 5000), small);
  const ListOpsOptions deep = deep_options();
  check_examples(generate_listops(deep, 12, 2000), deep);
  // LRA's own settings (lengths 500..2000), fewer examples since each is long.
  const ListOpsOptions lra = ListOpsOptions::lra();
  check_examples(generate_listops(lra, 13, 100), lra);
}

TEST(ListOps, ShapesAndLimitsAreRespected) {
  // The small preset reaches its whole shape: depth 1 and 2, 2 and 3 arguments, its three operators.
  const ListOpsOptions small = ListOpsOptions::nrgpt_small();
  const auto xs = generate_listops(small, 21, 3000);
  std::set<int> depths, arg_counts;
  std::set<std::string> ops;
  size_t longest = 0;
  for (const auto& ex : xs) {
    const LraTree t = read_lra(to_lra(ex.expr));
    depths.insert(t.depth);
    arg_counts.insert(t.min_args);
    arg_counts.insert(t.max_args);
    ops.insert(t.ops.begin(), t.ops.end());
    longest = std::max(longest, ex.expr.size());
  }
  EXPECT_EQ(depths, (std::set<int>{1, 2}));
  EXPECT_EQ(arg_counts, (std::set<int>{2, 3}));
  EXPECT_EQ(ops, (std::set<std::string>{"[MAX", "[MED", "[SM"}));
  EXPECT_LE(longest, 17u);  // 2 + 3 * (2 + 3)

  // Other shapes, operator subsets and tight length windows.
  ListOpsOptions o = ListOpsOptions::lra();
  o.max_depth = 4;
  o.max_args = 5;
  o.fn_prob = 0.5;
  o.min_len = 20;
  o.max_len = 30;
  o.ops = parse_listops_ops("sm, min");
  check_examples(generate_listops(o, 22, 1000), o);
  o.max_depth = 1;
  o.min_len = 0;
  o.max_len = 1000;
  const auto flat = generate_listops(o, 23, 500);
  check_examples(flat, o);
  for (const auto& ex : flat) ASSERT_EQ(ex.depth, 1);
  o = ListOpsOptions::nrgpt_small();
  o.fn_prob = 0.0;  // no nesting at all
  for (const auto& ex : generate_listops(o, 24, 500)) ASSERT_EQ(ex.depth, 1);
  o.fn_prob = 1.0;  // every argument of the root is a list
  for (const auto& ex : generate_listops(o, 25, 500)) {
    ASSERT_EQ(ex.depth, 2);
    ASSERT_TRUE(ex.expr[1] == 'X' || ex.expr[1] == 'D' || ex.expr[1] == 'S') << ex.expr;
  }
}

TEST(ListOps, UnreachableLengthsFailClearly) {
  ListOpsOptions o = ListOpsOptions::nrgpt_small();
  o.min_len = 18;  // longer than any depth-2, 3-argument tree
  try {
    generate_listops(o, 1, 10);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 1);
    EXPECT_NE(std::string(e.what()).find("no expression has 18.."), std::string::npos) << e.what();
  }
  o = ListOpsOptions::nrgpt_small();
  o.fn_prob = 0.0;
  o.min_len = 6;  // flat lists have 4..5 tokens
  EXPECT_THROW(generate_listops(o, 1, 10), Error);
  // Reachable but vanishingly rare (all nine digits nested, fn_prob 0.01): the attempt bound.
  o = ListOpsOptions::nrgpt_small();
  o.fn_prob = 0.01;
  o.min_len = 17;
  try {
    generate_listops(o, 1, 10);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gave up after"), std::string::npos) << e.what();
  }
}

TEST(ListOps, OptionsAndOperatorLists) {
  EXPECT_EQ(parse_listops_ops("SM,MAX"), (std::vector<ListOp>{ListOp::Max, ListOp::Sm}));
  EXPECT_EQ(parse_listops_ops(" med ,Min,MIN"), (std::vector<ListOp>{ListOp::Min, ListOp::Med}));
  EXPECT_EQ(parse_listops_ops("MIN,MAX,MED,SM").size(), 4u);
  for (const char* bad : {"", "MIN,", "FIRST", "MIN,,MAX"}) {
    try {
      parse_listops_ops(bad);
      ADD_FAILURE() << "no error for '" << bad << "'";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--ops"), std::string::npos) << e.what();
    }
  }
  const ListOpsOptions small = ListOpsOptions::preset("nrgpt_small");
  EXPECT_EQ(small.max_depth, 2);
  EXPECT_EQ(small.max_args, 3);
  EXPECT_EQ(small.min_len, 0);
  EXPECT_DOUBLE_EQ(small.fn_prob, 0.25);
  EXPECT_EQ(small.ops, (std::vector<ListOp>{ListOp::Max, ListOp::Med, ListOp::Sm}));
  const ListOpsOptions lra = ListOpsOptions::preset("lra");
  EXPECT_EQ(lra.max_depth, 10);
  EXPECT_EQ(lra.max_args, 10);
  EXPECT_EQ(lra.min_len, 500);
  EXPECT_EQ(lra.max_len, 2000);
  EXPECT_EQ(lra.ops.size(), 4u);
  EXPECT_THROW(ListOpsOptions::preset("listops"), UsageError);

  auto bad = [](auto edit, const char* field) {
    ListOpsOptions o;
    edit(o);
    try {
      o.validate();
      ADD_FAILURE() << "no error for " << field;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  bad([](ListOpsOptions& o) { o.max_depth = 0; }, "max_depth");
  bad([](ListOpsOptions& o) { o.max_args = 1; }, "max_args");
  bad([](ListOpsOptions& o) { o.min_len = -1; }, "min_len");
  bad([](ListOpsOptions& o) { o.min_len = 3000; }, "min_len");
  bad([](ListOpsOptions& o) { o.max_len = kListOpsLenLimit + 1; }, "max_len");
  bad([](ListOpsOptions& o) { o.fn_prob = 1.5; }, "fn_prob");
  bad([](ListOpsOptions& o) { o.ops.clear(); }, "operator");
}

TEST(ListOps, DeterministicPerSeed) {
  const ListOpsOptions small = ListOpsOptions::nrgpt_small();
  auto exprs = [](const std::vector<ListOpsExample>& xs) {
    std::vector<std::string> v;
    for (const auto& x : xs) v.push_back(x.expr);
    return v;
  };
  const auto a = exprs(generate_listops(small, 5, 1000));
  EXPECT_EQ(a, exprs(generate_listops(small, 5, 1000)));
  EXPECT_NE(a, exprs(generate_listops(small, 6, 1000)));
  EXPECT_NE(a, exprs(generate_listops(small, 5, 1000, 1)));  // the test stream is another one
  // A prefix does not depend on how many are asked for.
  const auto b = exprs(generate_listops(small, 5, 300));
  EXPECT_TRUE(std::equal(b.begin(), b.end(), a.begin()));
  // The same with rejection sampling in play.
  const ListOpsOptions deep = deep_options();
  EXPECT_EQ(exprs(generate_listops(deep, 5, 100)), exprs(generate_listops(deep, 5, 100)));
  // Whole data sets.
  const ListOpsDataset d1 = make_listops_dataset(small, 9, 2000, 200);
  const ListOpsDataset d2 = make_listops_dataset(small, 9, 2000, 200);
  EXPECT_EQ(exprs(d1.train), exprs(d2.train));
  EXPECT_EQ(exprs(d1.test), exprs(d2.test));
  EXPECT_EQ(listops_json(d1, small, "nrgpt_small", 9), listops_json(d2, small, "nrgpt_small", 9));
}

TEST(ListOps, TestSetHasNoTrainExpression) {
  // The small preset at its full size: many short expressions recur, so test drops a good share.
  const ListOpsOptions small = ListOpsOptions::nrgpt_small();
  const ListOpsDataset d = make_listops_dataset(small, 1, 50000, 2000);
  ASSERT_EQ(d.train.size(), 50000u);
  ASSERT_EQ(d.test.size(), 2000u);
  std::unordered_set<std::string> train, test;
  for (const auto& e : d.train) train.insert(e.expr);
  for (const auto& e : d.test) {
    ASSERT_FALSE(train.count(e.expr)) << e.expr << " is in both sets";
    test.insert(e.expr);
  }
  EXPECT_EQ(d.train_distinct, static_cast<int64_t>(train.size()));
  EXPECT_EQ(d.test_distinct, static_cast<int64_t>(test.size()));
  EXPECT_LT(d.train_distinct, 50000);  // duplicates are kept inside train
  EXPECT_GT(d.test_dropped, 0);
  EXPECT_EQ(d.train_rejected, 0);      // no length limits in this preset
  check_examples(d.test, small);

  // A space that train covers: 100 flat SM lists of two digits. Test cannot be filled.
  ListOpsOptions tiny = small;
  tiny.max_depth = 1;
  tiny.max_args = 2;
  tiny.ops = {ListOp::Sm};
  try {
    make_listops_dataset(tiny, 1, 5000, 10);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already in the train set"), std::string::npos) << e.what();
  }
}

TEST(ListOps, LineFormatAndJson) {
  EXPECT_EQ(listops_line({"X29N47]0]", 9, 2}), "X29N47]0]=\t9\n");
  const ListOpsOptions small = ListOpsOptions::nrgpt_small();
  const ListOpsDataset d = make_listops_dataset(small, 3, 500, 50);
  const auto j = nlohmann::json::parse(listops_json(d, small, "nrgpt_small", 3, {"max_len"}));
  EXPECT_EQ(j["preset"], "nrgpt_small");
  EXPECT_EQ(j["seed"], 3);
  EXPECT_EQ(j["overridden"], nlohmann::json::array({"max_len"}));
  EXPECT_EQ(j["generator"]["max_depth"], 2);
  EXPECT_EQ(j["generator"]["ops"], nlohmann::json::array({"MAX", "MED", "SM"}));
  EXPECT_EQ(j["compact_tokens"]["[MAX"], "X");
  EXPECT_EQ(j["compact_tokens"]["[SM"], "S");
  EXPECT_EQ(j["train"]["examples"], 500);
  EXPECT_EQ(j["train"]["distinct"], d.train_distinct);
  EXPECT_EQ(j["test"]["examples"], 50);
  EXPECT_EQ(j["test"]["dropped_in_train"], d.test_dropped);
  int64_t sum = 0;
  for (const auto& c : j["train"]["label_counts"]) sum += c.get<int64_t>();
  EXPECT_EQ(sum, 500);
  EXPECT_LE(j["train"]["length"]["max"].get<int>(), 17);
}

#ifdef LOOPLM_BINARY
TEST(ListOpsCli, WritesTheThreeFiles) {
  test::TempDir dir("listops_cli");
  const std::string out = dir / "small";
  const std::string args = "data listops --preset nrgpt_small --train 3000 --test 300 --seed 7 --out " + out;
  const CmdResult r = run(args);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("distinct"), std::string::npos) << r.out;

  const nlohmann::json j = nlohmann::json::parse(slurp(out + "/listops.json"));
  EXPECT_EQ(j["preset"], "nrgpt_small");
  EXPECT_EQ(j["seed"], 7);
  EXPECT_EQ(j["train"]["examples"], 3000);
  EXPECT_EQ(j["test"]["examples"], 300);
  std::unordered_set<std::string> train;
  for (const char* name : {"train.txt", "test.txt"}) {
    std::ifstream f(out + "/" + name);
    std::string line;
    int n = 0;
    while (std::getline(f, line)) {
      ++n;
      // "<expr>=\t<digit>"
      const size_t tab = line.find('\t');
      ASSERT_NE(tab, std::string::npos) << line;
      ASSERT_EQ(line.size(), tab + 2) << line;
      ASSERT_EQ(line[tab - 1], '=') << line;
      const std::string expr = line.substr(0, tab - 1);
      const int label = line[tab + 1] - '0';
      ASSERT_EQ(read_lra(to_lra(expr)).value, label) << line;
      if (std::string(name) == "train.txt") train.insert(expr);
      else ASSERT_FALSE(train.count(expr)) << expr << " is in train.txt too";
    }
    EXPECT_EQ(n, std::string(name) == "train.txt" ? 3000 : 300);
  }

  // A second run into the same directory needs --overwrite, and then writes the same bytes.
  const std::string before = slurp(out + "/train.txt") + slurp(out + "/test.txt");
  const CmdResult again = run(args);
  EXPECT_EQ(again.code, 2) << again.out;
  EXPECT_NE(again.out.find("--overwrite"), std::string::npos) << again.out;
  ASSERT_EQ(run(args + " --overwrite").code, 0);
  EXPECT_EQ(slurp(out + "/train.txt") + slurp(out + "/test.txt"), before);

  // A flag on top of the preset wins and is recorded.
  const CmdResult deeper = run("data listops --preset nrgpt_small --max-depth 3 --train 200 --test 20 --out " +
                               (dir / "deeper"));
  ASSERT_EQ(deeper.code, 0) << deeper.out;
  const nlohmann::json jd = nlohmann::json::parse(slurp(dir / "deeper/listops.json"));
  EXPECT_EQ(jd["generator"]["max_depth"], 3);
  EXPECT_EQ(jd["generator"]["max_args"], 3);
  EXPECT_EQ(jd["overridden"], nlohmann::json::array({"max_depth"}));
}

TEST(ListOpsCli, BadFlagsExitTwoNamingTheFlag) {
  test::TempDir dir("listops_cli_bad");
  const std::string out = " --out " + (dir / "o");
  struct Case {
    std::string args, needle;
  };
  const Case cases[] = {
      {"--max-args 1" + out, "--max-args"},
      {"--min-len 10 --max-len 5" + out, "--min-len 10 is greater than --max-len 5"},
      {"--max-len 100" + out, "--min-len 500 (from --preset lra)"},
      {"--fn-prob 1.5" + out, "--fn-prob"},
      {"--ops MIN,FIRST" + out, "--ops"},
      {"--max-depth 0" + out, "--max-depth"},
      {"--preset nope" + out, "--preset"},
      {"--train -3" + out, "--train"},
      {"--preset nrgpt_small", "--out"},
  };
  for (const auto& c : cases) {
    const CmdResult r = run("data listops " + c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.needle), std::string::npos) << c.args << "\n" << r.out;
  }
  // --out naming a file.
  { std::ofstream(dir / "file") << "x"; }
  CmdResult r = run("data listops --preset nrgpt_small --out " + (dir / "file"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--out"), std::string::npos) << r.out;
  // Unreachable lengths are a runtime failure (exit 1) with the reason.
  r = run("data listops --preset nrgpt_small --min-len 100" + out);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("no expression has 100.."), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir / "o/listops.json"));
}

TEST(ListOpsCli, TokeniserCommandIsUnchanged) {
  // `looplm data` without the subcommand is still the tokeniser (tests/test_data.cpp runs it); its
  // help lists both.
  CmdResult r = run("data --help");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("--input"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("data listops"), std::string::npos) << r.out;
  r = run("data listops --help");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("--max-depth"), std::string::npos) << r.out;
  r = run("data --out x.bin");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--input"), std::string::npos) << r.out;
}
#endif
