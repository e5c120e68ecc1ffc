#include "infer/eval.h"

#include <cmath>

#include "core/threads.h"
#include "data/dataset.h"
#include "ops/ops.h"

namespace looplm {

EvalResult evaluate_tokens(const Model& m, const std::vector<int32_t>& tokens, int depth, int batch,
                           int64_t max_windows, const std::function<void(int64_t, int64_t)>& progress) {
  const Config& c = m.config();
  const int T = c.context, d = c.d_model;
  if (depth < 0) depth = c.R;
  int64_t n_win = eval_windows(tokens, T, "evaluation data");
  if (max_windows >= 0) n_win = std::min(n_win, max_windows);
  EvalResult r;
  r.windows = n_win;
  std::vector<double> loss(depth + 1, 0.0), cosine(depth + 1, 0.0);
  // Diagnostics: per name and step, the sum of the tensor's elements and their count.
  std::map<std::string, std::vector<std::pair<double, double>>> diag;
  std::vector<int32_t> x((size_t)batch * T), y((size_t)batch * T);
  std::vector<float> prev;  // h^(r-1) of the current batch (its memory is reused by step r)
  Graph g;
  Graph::NoGrad ng(g);
  g.set_observer(
      [&](Graph&, const TapSite& s, Node* t) {
        if (!s.diagnostic || s.step < 1 || s.step > depth) return;
        auto& v = diag[s.name];
        if (v.empty()) v.assign(depth + 1, {0.0, 0.0});
        double sum = 0;
        for (int64_t i = 0; i < t->numel(); ++i) sum += t->v[i];
        v[s.step].first += sum;
        v[s.step].second += (double)t->numel();
      },
      /*diagnostics_only=*/true);
  RunOptions o;
  o.depth = depth;
  for (int64_t w0 = 0; w0 < n_win; w0 += batch) {
    adapt_threads();
    const int B = (int)std::min<int64_t>(batch, n_win - w0);
    const int64_t rows = (int64_t)B * T;
    for (int b = 0; b < B; ++b) eval_window(tokens, T, w0 + b, x.data() + (size_t)b * T, y.data() + (size_t)b * T);
    m.trunk(g, x.data(), B, T, o, [&](int step, Node* h) {
      if (step > 0 || depth == 0) {
        Node* l = op::cross_entropy(g, m.head(g, h, B, T, o), y.data());
        loss[step] += l->v[0] * (double)rows;
      }
      if (step > 0) {
        double cs = 0;
        for (int64_t row = 0; row < rows; ++row) {
          const float* a = h->v + row * d;
          const float* p = prev.data() + row * d;
          double ab = 0, aa = 0, pp = 0;
          for (int i = 0; i < d; ++i) { ab += (double)a[i] * p[i]; aa += (double)a[i] * a[i]; pp += (double)p[i] * p[i]; }
          cs += ab / std::sqrt(aa * pp + 1e-30);
        }
        cosine[step] += cs;
      }
      prev.assign(h->v, h->v + rows * d);
    });
    r.tokens += rows;
    g.reset();
    if (progress) progress(w0 + B, n_win);
  }
  for (int s = 1; s <= depth; ++s) r.loss_by_depth.push_back(loss[s] / (double)r.tokens);
  if (depth > 0) {
    auto& cs = r.diagnostics["state_cosine"];
    for (int s = 1; s <= depth; ++s) cs.push_back(cosine[s] / (double)r.tokens);
  }
  for (auto& [name, v] : diag) {
    auto& out = r.diagnostics[name];
    for (int s = 1; s <= depth; ++s) out.push_back(v[s].second > 0 ? v[s].first / v[s].second : std::nan(""));
  }
  r.loss = depth == 0 ? loss[0] / (double)r.tokens : r.loss_by_depth[std::min(depth, c.R) - 1];
  return r;
}

}  // namespace looplm
