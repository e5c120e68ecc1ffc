// `looplm bench`: training tokens/s, prompt processing and generation tokens/s (batch 1 and batched, KV cache;
// fp32 and bf16 weights), repeated (mean ± standard deviation, as llama-bench), and the achieved
// training GFLOP/s as a fraction of the machine's fp32 GEMM rate measured in the same run
// (bench/compare.py puts these next to the PyTorch peer). --contended measures the slowdown beside
// a process that keeps one core busy.
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <omp.h>

#include <nlohmann/json.hpp>

#include "backend/cpu/gemm.h"
#include "io/json_input.h"
#include "backend/cpu/weight_format.h"
#include "cli.h"
#include "cli_common.h"
#include "core/rng.h"
#include "core/threads.h"
#include "looplm/looplm.h"
#include "model/model.h"
#include "model/model_io.h"
#include "ops/ops.h"
#include "quant/gptq.h"
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

// The metrics of one repetition, in table order, with their JSON keys.
struct Metric {
  std::string key;
  std::string label;
};

struct Stat {
  double mean = 0, sd = 0;
};
Stat stat(const std::vector<double>& v) {
  Stat s;
  if (v.empty()) return s;
  for (double x : v) s.mean += x / v.size();
  for (double x : v) s.sd += (x - s.mean) * (x - s.mean);
  s.sd = v.size() > 1 ? std::sqrt(s.sd / (v.size() - 1)) : 0.0;
  return s;
}

// "q8_0,q4_0,q4_k" -> its formats ("none": none), each checked against the format table.
std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> out;
  if (list == "none") return out;
  size_t at = 0;
  while (at <= list.size()) {
    const size_t comma = std::min(list.find(',', at), list.size());
    const std::string f = list.substr(at, comma - at);
    if (!find_weight_format(f)) throw UsageError("bench: --weights: unknown weight format '" + io::brief(f) + "' (" + weight_format_names() + ")");
    out.push_back(f);
    at = comma + 1;
  }
  return out;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  CLI::App app{"Benchmark training, prompt processing and generation speed.", "looplm bench"};
  ConfigArgs cfg;
  cfg.add(app, "bench-dense");
  int threads = 0, steps = 6, gen_tokens = 256, reps = 3, pp_tokens = 256, gen_batch = 8;
  std::string kv_cache = "fp32";
  std::string weight_list = "q8_0,q4_0,q4_k", ckpt;
  bool as_json = false, as_csv = false, contended = false, decode_only = false;
  app.add_option("-t,--threads", threads, "threads (default 0: adapt, at most the cores this process may use)")
      ->check(at_least(0));
  app.add_option("-r,--repetitions", reps, "repetitions of every measurement: mean ± standard deviation (default 3)")
      ->check(at_least(1));
  app.add_option("--steps", steps, "timed training steps per repetition (median; default 6, after 2 warm-up steps)")
      ->check(at_least(1));
  app.add_option("-p,--prompt-tokens", pp_tokens, "prompt processing: tokens of the prompt (default 256, at most the context)")
      ->check(at_least(1));
  app.add_option("-n,--gen-tokens", gen_tokens, "new tokens of the generation test (default 256; 0: no generation)")
      ->check(at_least(0));
  app.add_option("--checkpoint", ckpt,
                 "time generation from this checkpoint (its own format too, e.g. a quantized one) instead of random "
                 "weights; training is timed on its config")
      ->type_name("FILE");
  app.add_option("--weights", weight_list,
                 "quantized weight formats to time besides fp32 and bf16, comma-separated (default q8_0,q4_0,q4_k; 'none'); "
                 "with --decode-only, the formats to time (fp32 and bf16 among them only when named)")
      ->type_name("LIST");
  app.add_flag("--decode-only", decode_only,
               "time prompt processing and generation only, in the --weights formats and the checkpoint's own: no "
               "training, quantization or evaluation (which hold fp32 weights, gradients and AdamW state: a model too "
               "large to train here, such as a converted Ouro-1.4B)");
  app.add_option("--gen-batch", gen_batch, "sequences of the batched generation test (default 8; 1: none)")
      ->check(at_least(1));
  app.add_option("--kv-cache", kv_cache, "the generation tests' KV cache: fp32, bf16 or int8 (default fp32)")
      ->check(CLI::IsMember(available_kv_caches()))
      ->type_name("TYPE");
  app.add_flag("--contended", contended,
               "run the benchmark idle and again beside a process that keeps one core busy, and report the slowdown");
  auto* json_flag = app.add_flag("--json", as_json, "print one JSON object instead of a markdown table");
  app.add_flag("--csv", as_csv, "print CSV (metric, mean, stddev) instead of a markdown table")->excludes(json_flag);
  if (!parse(app, argc, argv, "bench")) return 0;
  set_threads(threads);
  // --checkpoint: its config for every measurement, and generation from its weights in its own
  // format (a quantized checkpoint's packed matrices) besides the --weights formats.
  std::string own;
  Config c;
  if (!ckpt.empty()) {
    if (cfg.explicit_base()) throw UsageError("bench: --checkpoint names the config; do not give --preset or --config too");
    struct stat st;
    if (::stat(ckpt.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) ckpt += "/model.safetensors";
    std::unique_ptr<Model> probe = load_model(ckpt);
    if (const WeightFormat* f = probe->params().prepacked_format()) own = f->name;
    c = probe->config();
    cfg.apply_sets(c);
    c.validate();
  } else {
    c = cfg.resolve();
  }
  const int B = c.batch_size, T = c.context, V = c.vocab_size;
  pp_tokens = std::min(pp_tokens, T);

  // The training model: fp32 values, gradients and AdamW state (none with --decode-only).
  std::unique_ptr<Model> train_model;
  std::unique_ptr<AdamW> opt;
  if (!decode_only) {
    train_model = std::make_unique<Model>(c);
    train_model->init_weights(c.seed);
    opt = std::make_unique<AdamW>(train_model->params());
  }
  Rng rng(c.seed, kStreamData);
  std::vector<int32_t> x((size_t)B * T), y((size_t)B * T);
  for (auto& t : x) t = (int32_t)rng.below(V);
  for (auto& t : y) t = (int32_t)rng.below(V);
  double train_rss = 0;  // peak RSS after training, before the generation models exist
  size_t act_peak = 0, grad_peak = 0;
  // The generation models, one per weight format (made after the first training measurement).
  std::vector<std::string> formats;
  if (!decode_only) formats = {"fp32", "bf16"};
  for (const std::string& f : split_list(weight_list))
    if (std::find(formats.begin(), formats.end(), f) == formats.end()) formats.push_back(f);
  if (!own.empty() && std::find(formats.begin(), formats.end(), own) == formats.end()) formats.push_back(own);
  if (formats.empty()) throw UsageError("bench: --decode-only with no format to time: name them with --weights (e.g. fp32,q4_0)");
  std::vector<std::unique_ptr<LanguageModel>> lms;
  auto sfx_of = [](const std::string& f) { return f == "fp32" ? std::string() : f + "_"; };

  std::vector<Metric> metrics;
  if (!decode_only)
    metrics = {{"train_tokens_per_s", "train (fwd + bwd + AdamW, " + std::to_string(B) + " x " + std::to_string(T) + " tokens)"},
               {"eval_tokens_per_s", "evaluation (loss at depth R, " + std::to_string(B) + " x " + std::to_string(T) + " tokens) fp32"},
               {"quantize_tokens_per_s", "quantization: GPTQ q4_0 (calibration on " + std::to_string(B * T) + " tokens + solve), tokens/s"}};
  for (const std::string& f : formats) {  // per weight format: prompt, decoding, batched decoding (and end to end for fp32 / bf16)
    metrics.push_back({"prompt_" + sfx_of(f) + "tokens_per_s", "prompt processing pp" + std::to_string(pp_tokens) + " " + f});
    metrics.push_back({"decode_" + sfx_of(f) + "tokens_per_s", "generation tg" + std::to_string(gen_tokens) + " " + f});
    metrics.push_back({"decode_batch_" + sfx_of(f) + "tokens_per_s",
                       "generation tg" + std::to_string(gen_tokens) + " x " + std::to_string(gen_batch) + " sequences " + f});
    if (f == "fp32" || f == "bf16")
      metrics.push_back({"generate_" + sfx_of(f) + "tokens_per_s",
                         "end to end: 16-token prompt + " + std::to_string(gen_tokens) + " new, " + f});
  }

  // One repetition: every metric once.
  auto measure = [&] {
    std::map<std::string, double> v;
    // Training: fwd + bwd + clip + AdamW on random tokens, median step time after warm-up.
    Graph g;
    std::vector<double> step_s;
    for (int s = 0; s < (decode_only ? 0 : steps + 2); ++s) {
      Model& m = *train_model;
      adapt_threads();
      auto t0 = clk::now();
      m.params().zero_grad();
      RunOptions ro;
      ro.training = true;
      Node* l = op::cross_entropy(g, m.logits(g, x.data(), B, T, ro), y.data());
      g.backward(l);
      act_peak = std::max(act_peak, g.activation_bytes_peak());
      grad_peak = std::max(grad_peak, g.grad_bytes_peak());
      g.reset();
      clip_grad_norm(m.params(), c.grad_clip);
      opt->step(m.params(), c.lr, c);
      if (s >= 2) step_s.push_back(secs(t0, clk::now()));
    }
    if (!decode_only) v["train_tokens_per_s"] = B * T / median(step_s);
    if (train_rss == 0) train_rss = peak_rss_mib();
    // Quantization: GPTQ to q4_0 of a fresh fp32 copy of the model, calibrated on the B x T
    // training tokens (as `looplm quantize --method gptq` runs it).
    if (!decode_only) {
      Model q(c);
      q.init_weights(c.seed);
      GptqOptions qo;
      qo.tokens = x;
      qo.max_tokens = (int64_t)B * T;
      auto t0 = clk::now();
      quantize_gptq(q, *find_weight_format("q4_0"), qo);
      v["quantize_tokens_per_s"] = (double)B * T / secs(t0, clk::now());
    }
    if (gen_tokens <= 0) return v;
    // Generation through the library (LanguageModel::generate, as `looplm generate` runs it), with
    // the weights in fp32 and in bf16 (the format is chosen when a model is loaded):
    //  * prompt processing: the prefill of pp_tokens tokens;
    //  * generation: gen_tokens new tokens, greedy, after a 16-token prompt: decoding alone, and end
    //    to end from the prefill on (as the PyTorch peer times it; like the peer, a full window
    //    restarts the cache on its last half).
    if (lms.empty())
      for (const std::string& f : formats) {
        LoadOptions lo;
        lo.weights = f == own ? "" : f;  // the checkpoint's own packed matrices in place
        lms.push_back(std::make_unique<LanguageModel>(ckpt.empty() ? LanguageModel::from_config(c, c.seed, lo)
                                                                   : LanguageModel::load(ckpt, lo)));
        // One untimed pass: the first one grows the model's working memory and faults its pages in.
        GenerateOptions warm;
        warm.temperature = 0;
        warm.max_new = 2;
        warm.kv_cache = kv_cache;
        lms.back()->generate(std::vector<int32_t>(x.begin(), x.begin() + pp_tokens), warm);
      }
    if (!decode_only) {  // Evaluation: the loss of B windows of T tokens at depth R through the fp32 model, as `looplm eval`.
      auto t0 = clk::now();
      const EvalResult er = lms[0]->evaluate(x, EvalOptions{});
      v["eval_tokens_per_s"] = (double)er.tokens / secs(t0, clk::now());
    }
    for (size_t fi = 0; fi < formats.size(); ++fi) {
      LanguageModel* lm = lms[fi].get();
      const std::string sfx = sfx_of(formats[fi]);
      GenerateStats st;
      GenerateOptions go;
      go.temperature = 0;
      go.stats = &st;
      go.max_new = 1;
      go.kv_cache = kv_cache;
      lm->generate(std::vector<int32_t>(x.begin(), x.begin() + pp_tokens), go);
      v[std::string("prompt_") + sfx + "tokens_per_s"] = st.prompt_tokens / st.prompt_seconds;
      go.max_new = gen_tokens;
      const std::vector<int32_t> prompt(x.begin(), x.begin() + std::max(1, std::min(16, T - 1)));
      auto t0 = clk::now();
      lm->generate(prompt, go);
      v[std::string("generate_") + sfx + "tokens_per_s"] = gen_tokens / secs(t0, clk::now());
      v[std::string("decode_") + sfx + "tokens_per_s"] = std::max(0, st.new_tokens - 1) / st.gen_seconds;
      if (gen_batch > 1) {  // gen_batch sequences decoded together: distinct prompts, one batched pass per token
        std::vector<std::vector<int32_t>> prompts;
        for (int i = 0; i < gen_batch; ++i) {
          std::vector<int32_t> p = prompt;
          p[0] = (p[0] + i) % V;
          prompts.push_back(p);
        }
        lm->generate_batch(prompts, go);
        v[std::string("decode_batch_") + sfx + "tokens_per_s"] = std::max(0, st.new_tokens - gen_batch) / st.gen_seconds;
      }
    }
    return v;
  };
  auto repeat = [&] {
    std::map<std::string, std::vector<double>> all;
    for (int r = 0; r < reps; ++r)
      for (auto& [k, val] : measure()) all[k].push_back(val);
    std::map<std::string, Stat> out;
    for (auto& [k, vals] : all) out[k] = stat(vals);
    return out;
  };
  const auto idle = repeat();
  const double peak = decode_only ? 0 : measure_gemm_gflops(c.batch_size * c.context, c.d_model, c.ff_dim(), 7);
  const std::string name = !ckpt.empty() ? ckpt : cfg.file.empty() ? cfg.preset : cfg.file;
  // How idle OpenMP threads wait (tools/wait_policy.cpp sets the spin for a fixed count).
  std::string waiting;
  if (const char* e = std::getenv("GOMP_SPINCOUNT")) waiting = std::string(", GOMP_SPINCOUNT=") + e;
  if (const char* e = std::getenv("OMP_WAIT_POLICY")) waiting += std::string(", OMP_WAIT_POLICY=") + e;
  const std::string thread_mode =
      (threads > 0 ? std::to_string(threads) : "adaptive, at most " + std::to_string(cores_available())) + waiting;
  auto get = [](const std::map<std::string, Stat>& s, const std::string& k) {
    auto it = s.find(k);
    return it == s.end() ? Stat{} : it->second;
  };

  if (contended) {
    std::map<std::string, Stat> busy;
    double other = 0;
    {
      BusyNeighbour neighbour;
      busy = repeat();
      other = measured_other_load();
    }
    if (as_json) {
      nlohmann::json j = {{"preset", name}, {"threads", thread_mode}, {"repetitions", reps},
                          {"other_load_cores", other}, {"threads_contended", current_threads()}};
      for (const Metric& mt : metrics) {
        if (!idle.count(mt.key)) continue;
        j["idle"][mt.key] = get(idle, mt.key).mean;
        j["contended"][mt.key] = get(busy, mt.key).mean;
        j["slowdown"][mt.key] = get(idle, mt.key).mean / get(busy, mt.key).mean;
      }
      std::printf("%s\n", j.dump().c_str());
      return 0;
    }
    std::printf("%s, threads %s, %d repetitions; contended = beside one process that keeps a core busy", name.c_str(),
                thread_mode.c_str(), reps);
    if (threads == 0)
      std::printf(" (measured other load %.2f cores; pool at %d thread%s)", other, current_threads(),
                  current_threads() == 1 ? "" : "s");
    std::printf("\n\n| tokens/s | idle | contended | slowdown |\n|---|---|---|---|\n");
    for (const Metric& mt : metrics) {
      if (!idle.count(mt.key)) continue;
      const Stat a = get(idle, mt.key), b = get(busy, mt.key);
      std::printf("| %s | %.0f ± %.0f | %.0f ± %.0f | %.2fx |\n", mt.label.c_str(), a.mean, a.sd, b.mean, b.sd, a.mean / b.mean);
    }
    return 0;
  }

  // Decoding one token reads every weight matrix it multiplies (a core or loop matrix once per loop
  // step): its bytes in a format over the machine's read rate bound the tokens/s memory allows.
  // The weight matrices as (name, rows, cols): the training model's, or (--decode-only) every 2-D
  // parameter of the layout but the position table and an untied embedding (a lookup, not a product).
  std::vector<std::tuple<std::string, int64_t, int64_t>> mats;
  int64_t n_params = 0;
  if (train_model) {
    n_params = train_model->n_params();
    for (const WeightMatrix& w : train_model->params().matrices())
      mats.emplace_back(train_model->params().infos()[w.first].name, w.node->rows, w.node->cols);
  } else {
    const std::vector<ParamInfo> layout = Model::layout(c);
    bool untied_head = false;
    for (const ParamInfo& p : layout) untied_head |= p.name == "lm_head.weight";
    for (const ParamInfo& p : layout) {
      n_params += p.numel;
      if (p.shape.size() == 2 && p.name != "pos_emb.weight" && !(untied_head && p.name == "tok_emb.weight"))
        mats.emplace_back(p.name, p.shape[0], p.shape[1]);
    }
  }
  auto weight_bytes_per_token = [&](const std::string& fmt) {
    const WeightFormat* f = find_weight_format(fmt);
    double bytes = 0;
    for (const auto& [pn, rows, cols] : mats) {
      const bool per_step = pn.rfind("core.", 0) == 0 || pn.rfind("loop.", 0) == 0;
      bytes += (double)f->packed_bytes(rows, cols) * (per_step ? c.R : 1);
    }
    return bytes;
  };
  const double read_gbps = gen_tokens > 0 ? measure_read_gbps() : 0;
  auto bound_fraction = [&](const std::string& fmt) {
    return read_gbps > 0 ? get(idle, "decode_" + sfx_of(fmt) + "tokens_per_s").mean * weight_bytes_per_token(fmt) / (read_gbps * 1e9) : 0.0;
  };
  const double train_tps = get(idle, "train_tokens_per_s").mean;
  const double train_gflops = train_model ? 3.0 * train_model->flops_per_token(c.R) * train_tps / 1e9 : 0;  // fwd + bwd ≈ 3 × fwd
  if (as_json) {
    nlohmann::json j = {{"preset", name},
                        {"threads", omp_get_max_threads()},
                        {"threads_mode", thread_mode},
                        {"repetitions", reps},
                        {"params", n_params},
                        {"train_gflops", train_gflops},
                        {"gemm_peak_gflops", peak},
                        {"peak_fraction", peak > 0 ? train_gflops / peak : 0.0},
                        {"peak_rss_mib", train_rss},
                        {"activation_mib", act_peak / 1048576.0},
                        {"activation_grad_mib", grad_peak / 1048576.0}};
    for (const Metric& mt : metrics) {
      j[mt.key] = get(idle, mt.key).mean;  // 0 when not measured (--gen-tokens 0)
      j[std::string(mt.key) + "_stddev"] = get(idle, mt.key).sd;
    }
    if (read_gbps > 0) {
      j["read_gbps"] = read_gbps;
      for (const std::string& f : formats) {
        j["weight_bytes_per_token_" + f] = weight_bytes_per_token(f);
        j["decode_" + sfx_of(f) + "bandwidth_fraction"] = bound_fraction(f);
      }
    }
    std::printf("%s\n", j.dump().c_str());
  } else if (as_csv) {
    std::printf("metric,mean,stddev\n");
    for (const Metric& mt : metrics)
      if (idle.count(mt.key)) std::printf("%s,%.3f,%.3f\n", mt.key.c_str(), get(idle, mt.key).mean, get(idle, mt.key).sd);
    std::printf("train_gflops,%.3f,\ngemm_peak_gflops,%.3f,\npeak_rss_mib,%.1f,\n", train_gflops, peak, train_rss);
  } else {
    if (decode_only)
      std::printf("%s: %.2fM parameters, threads %s, %d repetitions, %s KV cache; generation only\n\n", name.c_str(), n_params / 1e6,
                  thread_mode.c_str(), reps, kv_cache.c_str());
    else
      std::printf("%s: %.2fM parameters, threads %s, %d repetitions, %s KV cache; training %.1f GFLOP/s = %.0f%% of the fp32 "
                  "GEMM rate measured here (%.0f GFLOP/s); peak RSS %.0f MiB\n\n",
                  name.c_str(), n_params / 1e6, thread_mode.c_str(), reps, kv_cache.c_str(), train_gflops,
                  100 * train_gflops / peak, peak, train_rss);
    std::printf("| test | tokens/s |\n|---|---|\n");
    for (const Metric& mt : metrics)
      if (idle.count(mt.key))
        std::printf("| %s | %.0f ± %.0f |\n", mt.label.c_str(), get(idle, mt.key).mean, get(idle, mt.key).sd);
    if (read_gbps > 0) {
      std::printf("\nmemory reads at %.1f GB/s here (%d thread%s); batch-1 generation reads per token, and the fraction of "
                  "that rate its tokens/s use:",
                  read_gbps, omp_get_max_threads(), omp_get_max_threads() == 1 ? "" : "s");
      for (const std::string& f : formats)
        std::printf("%s %s %.1f MB %.0f%%", f == formats.front() ? "" : ",", f.c_str(), weight_bytes_per_token(f) / 1e6,
                    100 * bound_fraction(f));
      std::printf("\n(a model whose weights fit in the caches reads faster than memory: above 100%%)\n");
    }
  }
  return 0;
}

}  // namespace looplm::cli
