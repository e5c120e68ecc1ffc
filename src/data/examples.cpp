#include "data/examples.h"

#include <algorithm>

#include "looplm/error.h"

namespace looplm {

Examples load_examples(const std::string& path, const Tokenizer& tok, int context) {
  const std::string text = load_text(path);
  Examples ex;
  ex.offset.push_back(0);
  size_t pos = 0;
  int64_t line_no = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    const size_t tab = line.rfind('\t');
    if (tab == std::string::npos) throw Error(where + ": an example line is prompt<TAB>answer (data_mode = examples); no tab here");
    const std::vector<int32_t> p = tok.encode(line.substr(0, tab)), a = tok.encode(line.substr(tab + 1));
    if (p.empty() || a.empty()) throw Error(where + ": the prompt and the answer must not be empty");
    if ((int64_t)p.size() + (int64_t)a.size() > (int64_t)context + 1)
      throw Error(where + ": the example has " + std::to_string(p.size() + a.size()) + " tokens; context " +
                  std::to_string(context) + " holds at most " + std::to_string(context + 1) + " (prompt + answer)");
    ex.tokens.insert(ex.tokens.end(), p.begin(), p.end());
    ex.tokens.insert(ex.tokens.end(), a.begin(), a.end());
    ex.offset.push_back((int64_t)ex.tokens.size());
    ex.prompt_len.push_back((int32_t)p.size());
  }
  if (ex.size() == 0) throw Error(path + ": no examples (data_mode = examples reads prompt<TAB>answer lines)");
  return ex;
}

Examples hold_out_examples(Examples& all, double val_split) {
  const int64_t n = all.size(), from = (int64_t)held_out_from((size_t)n, val_split);
  Examples val;
  val.offset.push_back(0);
  for (int64_t i = from; i < n; ++i) {
    val.tokens.insert(val.tokens.end(), all.tokens.begin() + all.offset[i], all.tokens.begin() + all.offset[i + 1]);
    val.offset.push_back((int64_t)val.tokens.size());
    val.prompt_len.push_back(all.prompt_len[i]);
  }
  all.tokens.resize((size_t)all.offset[from]);
  all.offset.resize((size_t)from + 1);
  all.prompt_len.resize((size_t)from);
  return val;
}

int fill_example(const Examples& ex, int64_t i, int T, int32_t* x, int32_t* y) {
  const int32_t* s = ex.tokens.data() + ex.offset[i];
  const int L = ex.length(i), P = ex.prompt_len[i];
  std::fill(x, x + T, 0);
  std::fill(y, y + T, -1);
  std::copy(s, s + L - 1, x);
  for (int p = P - 1; p < L - 1; ++p) y[p] = s[p + 1];
  return L - P;
}

ExampleStream::ExampleStream(Examples ex, int T, int B, uint64_t seed) : ex_(std::move(ex)), T_(T), B_(B), seed_(seed) {
  if (T < 1 || B < 1) throw UsageError("example batches need context and batch_size >= 1");
}

void ExampleStream::next_batch(int32_t* x, int32_t* y) {
  for (int b = 0; b < B_; ++b) {
    const int64_t i = (int64_t)uniform_below(counter_rng_u64(seed_, cursor_ * B_ + b), (uint64_t)ex_.size());
    fill_example(ex_, i, T_, x + (int64_t)b * T_, y + (int64_t)b * T_);
  }
  ++cursor_;
}

}  // namespace looplm
