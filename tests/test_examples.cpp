// Example data (data_mode = examples: prompt<TAB>answer lines, e.g. ListOps): parsing and its
// errors, the rows a batch gets (targets on the answer only), evaluation's loss and exact-match
// accuracy against a per-example forward written out here, and training and evaluating from the
// library on such data.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "data/examples.h"
#include "infer/eval.h"
#include "io/atomic_file.h"
#include "looplm/error.h"
#include "looplm/looplm.h"
#include "model/model.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace looplm;
using namespace looplm::test;

namespace {
void write(const std::string& path, const std::string& text) { io::write_file_atomic(path, text.data(), text.size()); }

// "digits=<TAB>first digit": the answer is the prompt's first character.
std::string first_digit_task(int n, int seed) {
  std::string s;
  uint32_t r = (uint32_t)seed * 2654435761u + 1;
  for (int i = 0; i < n; ++i) {
    std::string p;
    const int len = 2 + i % 4;
    for (int j = 0; j < len; ++j) {
      r = r * 1664525u + 1013904223u;
      p += (char)('0' + (r >> 24) % 10);
    }
    s += p + "=\t" + p.substr(0, 1) + "\n";
  }
  return s;
}
}  // namespace

TEST(Examples, ParseFillAndErrors) {
  TempDir d("examples");
  write(d / "a.txt", "X29]=\t9\n\nN47]=\t4\r\n");
  const Tokenizer tok = Tokenizer::byte_level();
  Examples ex = load_examples(d / "a.txt", tok, 8);
  ASSERT_EQ(ex.size(), 2);
  EXPECT_EQ(ex.length(0), 6);  // "X29]=" + "9"
  EXPECT_EQ(ex.prompt_len[0], 5);
  std::vector<int32_t> x(8), y(8);
  EXPECT_EQ(fill_example(ex, 0, 8, x.data(), y.data()), 1);
  // x = the sequence without its last token, then padding; the one target sits at the '=' (position 4)
  EXPECT_EQ(std::string(x.begin(), x.begin() + 5), "X29]=");
  for (int t = 5; t < 8; ++t) EXPECT_EQ(x[t], 0);
  for (int t = 0; t < 8; ++t) EXPECT_EQ(y[t], t == 4 ? (int32_t)'9' : -1) << t;
  // errors name the file and line
  write(d / "b.txt", "X29]=\t9\nno tab here\n");
  try {
    load_examples(d / "b.txt", tok, 8);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("b.txt:2"), std::string::npos) << e.what();
  }
  write(d / "c.txt", "X29999999]=\t9\n");  // 12 tokens > context 8 + 1
  EXPECT_THROW(load_examples(d / "c.txt", tok, 8), Error);
  write(d / "e.txt", "\n\n");
  EXPECT_THROW(load_examples(d / "e.txt", tok, 8), Error);
  // the stream is a pure function of (seed, cursor)
  ExampleStream s1(ex, 8, 3, 5), s2(ex, 8, 3, 5);
  std::vector<int32_t> x1(24), y1(24), x2(24), y2(24);
  s1.next_batch(x1.data(), y1.data());
  s1.next_batch(x1.data(), y1.data());
  s2.set_cursor(1);
  s2.next_batch(x2.data(), y2.data());
  EXPECT_EQ(x1, x2);
  EXPECT_EQ(y1, y2);
}

// Loss = mean cross-entropy of the answer tokens; accuracy = examples whose every answer token is
// the argmax. Checked against one forward per example, at every exit.
TEST(Examples, EvaluationScoresTheAnswersOnly) {
  TempDir d("examples_eval");
  std::string text;
  for (int i = 0; i < 7; ++i) text += std::string(1 + i % 3, (char)('a' + i)) + "=\t" + std::string(1 + i % 2, (char)('k' + i)) + "\n";
  write(d / "ex.txt", text);
  Config c;
  c.d_model = 16;
  c.n_heads = 2;
  c.context = 8;
  c.n_core = 1;
  c.R = 2;
  Model m(c);
  m.init_weights(3);
  for (auto& w : m.params().values()) w *= 6.0f;  // decided predictions
  const Examples ex = load_examples(d / "ex.txt", Tokenizer::byte_level(), c.context);
  const EvalResult e = evaluate_examples(m, ex, 2, 3);
  EXPECT_EQ(e.examples, 7);
  EXPECT_EQ(e.tokens, 7 + 3);  // answer tokens: 1, 2, 1, 2, 1, 2, 1
  for (int r = 1; r <= 2; ++r) {
    double loss = 0;
    int exact = 0;
    for (int64_t i = 0; i < ex.size(); ++i) {
      std::vector<int32_t> x(c.context), y(c.context);
      fill_example(ex, i, c.context, x.data(), y.data());
      Graph g;
      Graph::NoGrad ng(g);
      RunOptions o;
      o.depth = r;
      Node* z = m.logits(g, x.data(), 1, c.context, o);
      bool all = true;
      for (int t = 0; t < c.context; ++t) {
        if (y[t] < 0) continue;
        const float* row = z->v + (size_t)t * c.vocab_size;
        double mx = row[0], s = 0;
        for (int v = 1; v < c.vocab_size; ++v) mx = std::max(mx, (double)row[v]);
        for (int v = 0; v < c.vocab_size; ++v) s += std::exp(row[v] - mx);
        loss += mx + std::log(s) - row[y[t]];
        all = all && (int)(std::max_element(row, row + c.vocab_size) - row) == y[t];
      }
      exact += all;
    }
    EXPECT_NEAR(e.loss_by_depth[r - 1], loss / 10, 1e-5) << r;
    EXPECT_DOUBLE_EQ(e.accuracy_by_depth[r - 1], exact / 7.0) << r;
  }
  EXPECT_DOUBLE_EQ(e.accuracy, e.accuracy_by_depth[1]);
}

// Train on "digits=<TAB>first digit" with the char tokenizer: the model must learn it (a copy of
// position 0), validation reports accuracy, and evaluate_file picks the example mode from the
// checkpoint's config.
TEST(Examples, TrainingLearnsACopyTask) {
  TempDir d("examples_train");
  write(d / "train.txt", first_digit_task(400, 1));
  write(d / "val.txt", first_digit_task(60, 2));
  Config c;
  c.d_model = 32;
  c.n_heads = 2;
  c.context = 8;
  c.n_core = 2;
  c.R = 1;
  c.pos = "learned";
  c.tokenizer = "char";
  c.data_mode = "examples";
  c.data_train = d / "train.txt";
  c.data_val = d / "val.txt";
  c.batch_size = 16;
  c.steps = 150;
  c.warmup = 10;
  c.lr = 3e-3;
  c.eval_every = 150;
  c.eval_batches = 4;
  TrainOptions o;
  o.out_dir = d / "run";
  o.quiet = true;
  TrainResult r = train(c, o);
  ASSERT_EQ(r.steps_done, 150);
  LanguageModel lm = LanguageModel::load(d / "run");
  EvalResult e = lm.evaluate_file(d / "val.txt", EvalOptions{});
  EXPECT_EQ(e.examples, 60);
  EXPECT_EQ(e.tokens, 60);
  EXPECT_GT(e.accuracy, 0.9) << "loss " << e.loss;  // chance is 0.1
}
