// `looplm bench`: training tokens/s, generation tokens/s (batch 1, KV cache; fp32 and bf16 weights) and the achieved
// GFLOP/s as a fraction of the machine's fp32 GEMM rate measured in the same run
// (bench/compare.py puts these next to the PyTorch peer).
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <omp.h>

#include <nlohmann/json.hpp>

#include "backend/cpu/gemm.h"
#include "cli.h"
#include "cli_common.h"
#include "core/rng.h"
#include "core/threads.h"
#include "looplm/looplm.h"
#include "model/model.h"
#include "ops/ops.h"
#include "train/optimizer.h"

namespace looplm::cli {

namespace {

using clk = std::chrono::steady_clock;
double secs(clk::time_point a, clk::time_point b) { return std::chrono::duration<double>(b - a).count(); }
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double peak_rss_mib() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024.0;
}

// A process that keeps one core busy (the --contended neighbour), stopped on destruction.
class BusyNeighbour {
 public:
  BusyNeighbour() {
    char sh[] = "/bin/sh", c[] = "-c", loop[] = "while :; do :; done";
    char* args[] = {sh, c, loop, nullptr};
    if (posix_spawn(&pid_, "/bin/sh", nullptr, nullptr, args, environ) != 0) throw Error("bench: cannot start a busy process");
  }
  ~BusyNeighbour() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }

 private:
  pid_t pid_ = -1;
};

struct Speeds {
  double train = 0, gen = 0, gen_bf16 = 0;
  size_t act_peak = 0, grad_peak = 0;
};

}  // namespace

int cmd_bench(int argc, char** argv) {
  CLI::App app{"Benchmark training and generation speed.", "looplm bench"};
  ConfigArgs cfg;
  cfg.add(app, "bench-dense");
  int threads = 0, steps = 6, gen_tokens = 256;
  bool as_json = false, contended = false;
  app.add_option("--threads", threads, "threads (default 0: adapt, at most the cores this process may use)")
      ->check(at_least(0));
  app.add_option("--steps", steps, "timed training steps (default 6, after 2 warm-up steps)")->check(at_least(1));
  app.add_option("--gen-tokens", gen_tokens, "new tokens in the generation test (default 256)")->check(at_least(0));
  app.add_flag("--contended", contended,
               "run the benchmark idle and again beside a process that keeps one core busy, and report the slowdown");
  app.add_flag("--json", as_json, "print one JSON object");
  if (!parse(app, argc, argv, "bench")) return 0;
  set_threads(threads);
  Config c = cfg.resolve();
  const int B = c.batch_size, T = c.context, V = c.vocab_size;

  Model m(c);
  m.init_weights(c.seed);
  AdamW opt(m.params());
  Rng rng(c.seed, kStreamData);
  std::vector<int32_t> x((size_t)B * T), y((size_t)B * T);
  for (auto& t : x) t = (int32_t)rng.below(V);
  for (auto& t : y) t = (int32_t)rng.below(V);
  double train_rss = 0;  // peak RSS after training, before the generation models exist

  auto measure = [&] {
    Speeds sp;
    // Training: fwd + bwd + clip + AdamW on random tokens, median step time after warm-up.
    Graph g;
    std::vector<double> step_s;
    for (int s = 0; s < steps + 2; ++s) {
      adapt_threads();
      auto t0 = clk::now();
      m.params().zero_grad();
      RunOptions ro;
      ro.training = true;
      Node* l = op::cross_entropy(g, m.logits(g, x.data(), B, T, ro), y.data());
      g.backward(l);
      sp.act_peak = std::max(sp.act_peak, g.activation_bytes_peak());
      sp.grad_peak = std::max(sp.grad_peak, g.grad_bytes_peak());
      g.reset();
      clip_grad_norm(m.params(), c.grad_clip);
      opt.step(m.params(), c.lr, c);
      if (s >= 2) step_s.push_back(secs(t0, clk::now()));
    }
    sp.train = B * T / median(step_s);
    if (train_rss == 0) train_rss = peak_rss_mib();
    // Generation through the library (LanguageModel::generate, as `looplm generate` runs it): batch
    // 1, 16-token prompt, gen_tokens new tokens, greedy, KV cache; timed from the prefill on (as
    // the PyTorch peer), and like the peer a full window restarts the cache on its last half. With
    // the weights in fp32 and in bf16 (the weight format is chosen when a model is loaded).
    auto generate = [&](const char* weights) {
      if (gen_tokens <= 0) return 0.0;
      LoadOptions lo;
      lo.weights = weights;
      const LanguageModel lm = LanguageModel::from_config(c, c.seed, lo);
      GenerateOptions go;
      go.temperature = 0;
      go.max_new = gen_tokens;
      const std::vector<int32_t> prompt(x.begin(), x.begin() + std::max(1, std::min(16, T - 1)));
      std::vector<double> runs;
      for (int rep = 0; rep < 3; ++rep) {
        auto t0 = clk::now();
        lm.generate(prompt, go);
        runs.push_back(gen_tokens / secs(t0, clk::now()));
      }
      return median(runs);
    };
    sp.gen = generate("fp32");
    sp.gen_bf16 = generate("bf16");
    return sp;
  };
  const Speeds idle = measure();
  const double peak = measure_gemm_gflops(c.batch_size * c.context, c.d_model, c.ff_dim(), 7);
  const std::string name = cfg.file.empty() ? cfg.preset : cfg.file;
  const std::string thread_mode = threads > 0 ? std::to_string(threads) : "adaptive, at most " + std::to_string(cores_available());

  if (contended) {
    Speeds busy;
    double other = 0;
    {
      BusyNeighbour neighbour;
      busy = measure();
      other = measured_other_load();
    }
    auto row = [](const Speeds& s) {
      return nlohmann::json{{"train_tokens_per_s", s.train}, {"generate_tokens_per_s", s.gen},
                            {"generate_bf16_tokens_per_s", s.gen_bf16}};
    };
    if (as_json) {
      nlohmann::json j = {{"preset", name},
                          {"threads", thread_mode},
                          {"idle", row(idle)},
                          {"contended", row(busy)},
                          {"slowdown", {{"train", idle.train / busy.train},
                                        {"generate", idle.gen / busy.gen},
                                        {"generate_bf16", idle.gen_bf16 / busy.gen_bf16}}},
                          {"other_load_cores", other},
                          {"threads_contended", current_threads()}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("%s, threads %s; contended = beside one process that keeps a core busy", name.c_str(), thread_mode.c_str());
      if (threads == 0)
        std::printf(" (measured other load %.2f cores; pool at %d thread%s)", other, current_threads(),
                    current_threads() == 1 ? "" : "s");
      std::printf("\n\n");
      std::printf("| tokens/s | idle | contended | slowdown |\n|---|---|---|---|\n");
      std::printf("| train | %.0f | %.0f | %.2fx |\n", idle.train, busy.train, idle.train / busy.train);
      std::printf("| generate fp32 | %.0f | %.0f | %.2fx |\n", idle.gen, busy.gen, idle.gen / busy.gen);
      std::printf("| generate bf16 | %.0f | %.0f | %.2fx |\n", idle.gen_bf16, busy.gen_bf16, idle.gen_bf16 / busy.gen_bf16);
    }
    return 0;
  }

  const double train_gflops = 3.0 * m.flops_per_token(c.R) * idle.train / 1e9;  // fwd + bwd ≈ 3 × fwd
  if (as_json) {
    nlohmann::json j = {{"preset", name},
                        {"threads", omp_get_max_threads()},
                        {"threads_mode", thread_mode},
                        {"params", m.n_params()},
                        {"train_tokens_per_s", idle.train},
                        {"generate_tokens_per_s", idle.gen},
                        {"generate_bf16_tokens_per_s", idle.gen_bf16},
                        {"train_gflops", train_gflops},
                        {"gemm_peak_gflops", peak},
                        {"peak_fraction", train_gflops / peak},
                        {"peak_rss_mib", train_rss},
                        {"activation_mib", idle.act_peak / 1048576.0},
                        {"activation_grad_mib", idle.grad_peak / 1048576.0}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf(
        "| config | threads | params | train tok/s | GFLOP/s | of GEMM peak (%.0f) | gen tok/s fp32 | gen tok/s bf16 "
        "| peak RSS MiB |\n",
        peak);
    std::printf("|---|---|---|---|---|---|---|---|---|\n");
    std::printf("| %s | %s | %.2fM | %.0f | %.1f | %.0f%% | %.0f | %.0f | %.0f |\n", name.c_str(), thread_mode.c_str(),
                m.n_params() / 1e6, idle.train, train_gflops, 100 * train_gflops / peak, idle.gen, idle.gen_bf16, train_rss);
  }
  return 0;
}

}  // namespace looplm::cli
