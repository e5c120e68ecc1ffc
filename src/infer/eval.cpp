#include "infer/eval.h"

#include <cmath>

#include "data/dataset.h"
#include "ops/ops.h"

namespace looplm {

EvalResult evaluate_tokens(const Model& m, const std::vector<int32_t>& tokens, int depth, int batch,
                           int64_t max_windows) {
  const Config& c = m.config();
  const int T = c.context, d = c.d_model;
  if (depth < 0) depth = c.R;
  int64_t n_win = eval_windows(tokens, T, "evaluation data");
  if (max_windows >= 0) n_win = std::min(n_win, max_windows);
  EvalResult r;
  r.windows = n_win;
  r.loss_by_depth.assign(depth, 0.0);
  r.state_cosine.assign(depth, 0.0);
  std::vector<int32_t> x((size_t)batch * T), y((size_t)batch * T);
  std::vector<float> prev;
  Graph g;
  Graph::NoGrad ng(g);
  RunOptions o;
  o.depth = depth;
  for (int64_t w0 = 0; w0 < n_win; w0 += batch) {
    const int B = (int)std::min<int64_t>(batch, n_win - w0);
    for (int b = 0; b < B; ++b) eval_window(tokens, T, w0 + b, x.data() + (size_t)b * T, y.data() + (size_t)b * T);
    const double n_tok = (double)B * T;
    Node* last = nullptr;
    m.trunk(g, x.data(), B, T, o, [&](int step, Node* h) {
      if (step > 0) {
        Node* loss = op::cross_entropy(g, m.head(g, h, B, T, o), y.data());
        r.loss_by_depth[step - 1] += loss->v[0] * n_tok;
        double cs = 0;
        for (int64_t row = 0; row < (int64_t)B * T; ++row) {
          const float* a = h->v + row * d;
          const float* p = last->v + row * d;
          double ab = 0, aa = 0, pp = 0;
          for (int i = 0; i < d; ++i) { ab += (double)a[i] * p[i]; aa += (double)a[i] * a[i]; pp += (double)p[i] * p[i]; }
          cs += ab / std::sqrt(aa * pp + 1e-30);
        }
        r.state_cosine[step - 1] += cs;
      }
      last = h;
    });
    r.tokens += (int64_t)B * T;
    g.reset();
  }
  for (int i = 0; i < depth; ++i) {
    r.loss_by_depth[i] /= (double)r.tokens;
    r.state_cosine[i] /= (double)r.tokens;
  }
  r.loss = r.loss_by_depth[std::min(depth, c.R) - 1];  // the trained depth (or less when asked)
  return r;
}

}  // namespace looplm
