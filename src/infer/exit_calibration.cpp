#include "infer/exit_calibration.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/parallel.h"

namespace looplm {

CalibrationRecorder::CalibrationRecorder(int depth, int64_t V, int d, bool gate) : depth_(depth), d_(d), V_(V), gate_(gate) {}

void CalibrationRecorder::begin_batch(int64_t rows) {
  rows_ = rows;
  for (auto* v : {&loss_, &entropy_, &kl_, &latent_, &lambda_}) v->assign((size_t)rows * depth_, 0.0);
  prev_logp_.assign((size_t)rows * V_, 0.0);
  prev_h_.assign((size_t)rows * d_, 0.0f);
}

void CalibrationRecorder::at_exit(int r, const float* logits, const float* h, const float* lambda, const int32_t* y) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  parallel_for<int64_t>(rows_, rows_ * V_ > (1 << 16), [&](int64_t n) {
    const float* z = logits + n * V_;
    double m = z[0], s = 0;
    for (int64_t v = 1; v < V_; ++v) m = std::max(m, (double)z[v]);
    for (int64_t v = 0; v < V_; ++v) s += std::exp((double)z[v] - m);
    const double lse = m + std::log(s);
    double H = 0, kl = 0;
    double* prev = prev_logp_.data() + n * V_;
    for (int64_t v = 0; v < V_; ++v) {
      const double lp = (double)z[v] - lse, p = std::exp(lp);
      H -= p * lp;
      kl += p * (lp - prev[v]);
      prev[v] = lp;
    }
    double dd = 0, hh = 0;
    const float* hn = h + n * d_;
    float* ph = prev_h_.data() + n * d_;
    for (int i = 0; i < d_; ++i) {
      const double e = (double)hn[i] - ph[i];
      dd += e * e;
      hh += (double)hn[i] * hn[i];
      ph[i] = hn[i];
    }
    const size_t at = (size_t)n * depth_ + (r - 1);
    loss_[at] = y[n] >= 0 ? -((double)z[y[n]] - lse) : 0.0;
    entropy_[at] = H;
    kl_[at] = r == 1 ? inf : std::max(kl, 0.0);  // from step 2, as the kl rule
    latent_[at] = r == 1 ? inf : std::sqrt(dd / std::max(hh, 1e-30));
    lambda_[at] = lambda ? (double)lambda[n] : 0.0;
  });
}

void CalibrationRecorder::end_batch(const int32_t* y) {
  for (int64_t n = 0; n < rows_; ++n) {
    if (y[n] < 0) continue;
    const size_t a = (size_t)n * depth_, b = a + depth_;
    all_loss_.insert(all_loss_.end(), loss_.begin() + a, loss_.begin() + b);
    all_entropy_.insert(all_entropy_.end(), entropy_.begin() + a, entropy_.begin() + b);
    all_kl_.insert(all_kl_.end(), kl_.begin() + a, kl_.begin() + b);
    all_latent_.insert(all_latent_.end(), latent_.begin() + a, latent_.begin() + b);
    if (gate_) all_lambda_.insert(all_lambda_.end(), lambda_.begin() + a, lambda_.begin() + b);
  }
}

namespace {

using Point = EvalResult::ExitCalibration::Point;

// The points with no other point at fewer or equal steps and a lower loss, by steps.
std::vector<Point> pareto(std::vector<Point> pts) {
  std::sort(pts.begin(), pts.end(), [](const Point& a, const Point& b) {
    return a.mean_steps != b.mean_steps ? a.mean_steps < b.mean_steps : a.loss < b.loss;
  });
  std::vector<Point> out;
  for (const Point& p : pts)
    if (out.empty() || p.loss < out.back().loss) out.push_back(p);
  return out;
}

// Up to `k` thresholds spread over the signal's values (its quantiles), smallest first.
std::vector<double> quantiles(std::vector<double> v, int k) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); }), v.end());
  std::sort(v.begin(), v.end());
  std::vector<double> q;
  for (int i = 0; i < k && !v.empty(); ++i) {
    const double x = v[(size_t)((double)i / (k - 1) * (double)(v.size() - 1))];
    if (q.empty() || x > q.back()) q.push_back(x);
  }
  return q;
}

}  // namespace

EvalResult::ExitCalibration CalibrationRecorder::finish() const {
  EvalResult::ExitCalibration c;
  const int D = depth_;
  const int64_t N = (int64_t)(all_loss_.size() / std::max(D, 1));
  c.depth = D;
  c.tokens = N;
  if (N == 0 || D == 0) return c;
  auto mean_at = [&](const std::vector<int>& exit_of) {  // (mean steps, mean loss) with token n exiting at exit_of[n]
    double steps = 0, loss = 0;
    for (int64_t n = 0; n < N; ++n) steps += exit_of[n], loss += all_loss_[(size_t)n * D + exit_of[n] - 1];
    return std::make_pair(steps / (double)N, loss / (double)N);
  };
  std::vector<int> exit_of(N);
  {  // every token at depth r: running fewer steps for all
    EvalResult::ExitCalibration::Rule rule{"depth", {}};
    for (int r = 1; r <= D; ++r) {
      std::fill(exit_of.begin(), exit_of.end(), r);
      auto [s, l] = mean_at(exit_of);
      rule.frontier.push_back({(double)r, s, l});
      if (r == D) c.full_loss = l;
    }
    c.rules.push_back(rule);
  }
  constexpr int kThresholds = 64;
  // A signal rule: exit at the first step whose signal is below the threshold (at the latest D).
  auto signal_rule = [&](const char* name, const std::vector<double>& sig) {
    EvalResult::ExitCalibration::Rule rule{name, {}};
    for (double q : quantiles(sig, kThresholds)) {
      const double X = std::nextafter(q, std::numeric_limits<double>::infinity());  // q itself exits
      for (int64_t n = 0; n < N; ++n) {
        int r = 1;
        while (r < D && !(sig[(size_t)n * D + r - 1] < X)) ++r;
        exit_of[n] = r;
      }
      auto [s, l] = mean_at(exit_of);
      rule.frontier.push_back({X, s, l});
    }
    rule.frontier = pareto(rule.frontier);
    c.rules.push_back(rule);
  };
  if (gate_) {  // the gate: exit once the cumulative exit probability reaches q
    std::vector<double> cdf(all_lambda_.size());
    for (int64_t n = 0; n < N; ++n) {
      double left = 1, sum = 0;
      for (int r = 1; r <= D; ++r) {
        const double lam = all_lambda_[(size_t)n * D + r - 1];
        sum += lam * left;
        left *= 1 - lam;
        cdf[(size_t)n * D + r - 1] = sum;
      }
    }
    EvalResult::ExitCalibration::Rule rule{"gate", {}};
    std::vector<double> early(cdf);
    for (int64_t n = 0; n < N; ++n) early[(size_t)n * D + D - 1] = std::numeric_limits<double>::infinity();
    std::vector<double> qs = quantiles(early, kThresholds);
    qs.push_back(1.0);
    for (double q : qs) {
      if (!(q > 0 && q <= 1)) continue;
      for (int64_t n = 0; n < N; ++n) {
        int r = 1;
        while (r < D && !(cdf[(size_t)n * D + r - 1] >= q)) ++r;
        exit_of[n] = r;
      }
      auto [s, l] = mean_at(exit_of);
      rule.frontier.push_back({q, s, l});
    }
    rule.frontier = pareto(rule.frontier);
    c.rules.push_back(rule);
  }
  signal_rule("kl", all_kl_);
  signal_rule("entropy", all_entropy_);
  signal_rule("latent", all_latent_);
  return c;
}

}  // namespace looplm
