#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <omp.h>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "cli_common.h"
#include "looplm/bench.h"
#include "looplm/looplm.h"
#include "looplm/util.h"

namespace looplm::cli {

namespace {

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

// "q8_0,q4_0,q4_k" -> its formats ("none": none), each checked against the library's table.
std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> out;
  if (list == "none") return out;
  const std::vector<std::string> known = available_weight_formats();
  size_t at = 0;
  while (at <= list.size()) {
    const size_t comma = std::min(list.find(',', at), list.size());
    const std::string f = list.substr(at, comma - at);
    if (std::find(known.begin(), known.end(), f) == known.end())
      throw UsageError("bench: --weights: unknown weight format '" + brief(f) + "' (" + joined(known) + ")");
    out.push_back(f);
    at = comma + 1;
  }
  return out;
}

std::string sfx_of(const std::string& f) { return f == "fp32" ? std::string() : f + "_"; }

// One benchmark run as the reports see it.
struct Run {
  const Bench& bench;
  const std::vector<BenchMetric>& metrics;
  std::map<std::string, Stat> idle;  // by metric key
  std::string name, thread_mode, kv_cache;
  int reps = 0;
  bool decode_only = false, adaptive = false;
  double model_rss_mib = 0;  // the process's peak RSS before the first read-rate probe (its 1 GiB buffer)
};

Stat get(const std::map<std::string, Stat>& s, const std::string& k) {
  auto it = s.find(k);
  return it == s.end() ? Stat{} : it->second;
}

// `--contended`: each metric idle and beside a busy process, and the slowdown.
void print_contended(const Run& run, const std::map<std::string, Stat>& busy, double other, bool as_json) {
  const auto& [bench, metrics, idle, name, thread_mode, kv_cache, reps, decode_only, adaptive, model_rss] = run;
  if (as_json) {
    nlohmann::json j = {{"preset", name}, {"threads", thread_mode}, {"repetitions", reps},
                        {"other_load_cores", other}, {"threads_contended", current_threads()}};
    for (const BenchMetric& mt : metrics) {
      if (!idle.count(mt.key)) continue;
      j["idle"][mt.key] = get(idle, mt.key).mean;
      j["contended"][mt.key] = get(busy, mt.key).mean;
      j["slowdown"][mt.key] = get(idle, mt.key).mean / get(busy, mt.key).mean;
    }
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("%s, threads %s, %d repetitions; contended = beside one process that keeps a core busy", name.c_str(),
              thread_mode.c_str(), reps);
  if (adaptive)
    std::printf(" (measured other load %.2f cores; pool at %d thread%s)", other, current_threads(),
                current_threads() == 1 ? "" : "s");
  std::printf("\n\n| tokens/s | idle | contended | slowdown |\n|---|---|---|---|\n");
  for (const BenchMetric& mt : metrics) {
    if (!idle.count(mt.key)) continue;
    const Stat a = get(idle, mt.key), b = get(busy, mt.key);
    std::printf("| %s | %.0f ± %.0f | %.0f ± %.0f | %.2fx |\n", mt.label.c_str(), a.mean, a.sd, b.mean, b.sd, a.mean / b.mean);
  }
}

// The results: a markdown table (or --json, --csv) with training's fraction of the GEMM rate and
// each format's fraction of the read rate.
void print_results(const Run& run, double peak, const std::string& precision, bool as_json, bool as_csv) {
  const auto& [bench, metrics, idle, name, thread_mode, kv_cache, reps, decode_only, adaptive, model_rss] = run;
  const std::vector<std::string>& formats = bench.formats();
  // Decoding one token reads every weight matrix it multiplies: its bytes in a format over the
  // machine's read rate bound the tokens/s memory allows.
  const int64_t n_params = bench.n_params();
  auto weight_bytes_per_token = [&](const std::string& fmt) { return bench.weight_bytes_per_token(fmt); };
  // Each repetition's tokens/s against the read rate measured beside it (cmd_bench's repeat).
  const double read_gbps = idle.count("read_gbps") ? get(idle, "read_gbps").mean : 0.0;
  auto bound_fraction = [&](const std::string& fmt) { return get(idle, "decode_" + sfx_of(fmt) + "bandwidth_fraction"); };
  const double train_tps = get(idle, "train_tokens_per_s").mean;
  const double train_gflops = bench.train_flops_per_token() * train_tps / 1e9;
  // Resident memory: the benchmark's peak (training, the quantized copies and generation: before
  // the read-rate probe's 1 GiB buffer), its peak when training had run, and the whole process's
  // (the probe included: what `time -v` reports).
  const double train_rss = bench.peak_rss_after_training_mib();
  const double process_rss = peak_rss_mib();
  const double run_rss = run.model_rss_mib > 0 ? run.model_rss_mib : process_rss;
  // Training above the probed GEMM peak means the probes met more load than training did.
  const bool above_peak = peak > 0 && train_gflops > peak;
  if (as_json) {
    nlohmann::json j = {{"preset", name},
                        {"threads", omp_get_max_threads()},
                        {"threads_mode", thread_mode},
                        {"repetitions", reps},
                        {"precision", precision},
                        {"params", n_params},
                        {"train_gflops", train_gflops},
                        {"gemm_peak_gflops", peak},
                        {"peak_fraction", peak > 0 ? train_gflops / peak : 0.0},
                        {"peak_rss_mib", run_rss},
                        {"train_peak_rss_mib", train_rss},
                        {"process_peak_rss_mib", process_rss},
                        {"activation_mib", bench.activation_bytes_peak() / 1048576.0},
                        {"activation_grad_mib", bench.grad_bytes_peak() / 1048576.0}};
    for (const BenchMetric& mt : metrics) {
      j[mt.key] = get(idle, mt.key).mean;  // 0 when not measured (--gen-tokens 0)
      j[std::string(mt.key) + "_stddev"] = get(idle, mt.key).sd;
    }
    if (read_gbps > 0) {
      j["read_gbps"] = read_gbps;
      j["read_gbps_stddev"] = get(idle, "read_gbps").sd;
      for (const std::string& f : formats) {
        j["weight_bytes_per_token_" + f] = weight_bytes_per_token(f);
        j["decode_" + sfx_of(f) + "bandwidth_fraction"] = bound_fraction(f).mean;
        j["decode_" + sfx_of(f) + "bandwidth_fraction_stddev"] = bound_fraction(f).sd;
      }
    }
    std::printf("%s\n", j.dump().c_str());
  } else if (as_csv) {
    std::printf("metric,mean,stddev\n");
    for (const BenchMetric& mt : metrics)
      if (idle.count(mt.key)) std::printf("%s,%.3f,%.3f\n", mt.key.c_str(), get(idle, mt.key).mean, get(idle, mt.key).sd);
    std::printf("train_gflops,%.3f,\ngemm_peak_gflops,%.3f,\npeak_rss_mib,%.1f,\ntrain_peak_rss_mib,%.1f,\n", train_gflops, peak,
                run_rss, train_rss);
  } else {
    if (decode_only)
      std::printf("%s: %.2fM parameters, threads %s, %d repetitions, %s KV cache; generation only\n\n", name.c_str(), n_params / 1e6,
                  thread_mode.c_str(), reps, kv_cache.c_str());
    else
      std::printf("%s: %.2fM parameters, threads %s, %d repetitions, %s KV cache; training %.1f GFLOP/s = %.0f%% of the %s "
                  "GEMM rate measured here (%.0f GFLOP/s%s); peak RSS %.0f MiB (%.0f MiB when training had run; the "
                  "process %.0f MiB with the read-rate probe's buffer)\n\n",
                  name.c_str(), n_params / 1e6, thread_mode.c_str(), reps, kv_cache.c_str(), train_gflops,
                  100 * train_gflops / peak, precision.c_str(), peak,
                  above_peak ? ": training ran faster than both probes of it, so the machine was busier while they ran; rerun it idle" : "",
                  run_rss, train_rss, process_rss);
    std::printf("| test | tokens/s |\n|---|---|\n");
    for (const BenchMetric& mt : metrics)
      if (idle.count(mt.key))
        std::printf("| %s | %.0f ± %.0f |\n", mt.label.c_str(), get(idle, mt.key).mean, get(idle, mt.key).sd);
    if (read_gbps > 0) {
      std::printf("\nmemory reads at %.1f ± %.1f GB/s here (%d thread%s, measured beside each repetition); batch-1 generation "
                  "reads per token, and the fraction of the rate beside it that its tokens/s use:",
                  read_gbps, get(idle, "read_gbps").sd, omp_get_max_threads(), omp_get_max_threads() == 1 ? "" : "s");
      for (const std::string& f : formats)
        std::printf("%s %s %.1f MB %.0f ± %.0f%%", f == formats.front() ? "" : ",", f.c_str(), weight_bytes_per_token(f) / 1e6,
                    100 * bound_fraction(f).mean, 100 * bound_fraction(f).sd);
      std::printf("\n(a model whose weights fit in the caches reads faster than memory: above 100%%)\n");
    }
  }
}

// A line per metric as it is measured, on stderr: the table comes at the end, and a run under load
// takes many minutes.
struct Progress {
  std::map<std::string, std::string> label_of;  // metric key -> its table row's words
  int repetition = 1, reps = 1;
  void operator()(const std::string& key, double value) const {
    std::string label = label_of.count(key) ? label_of.at(key) : key;
    if (label.size() > 10 && label.compare(label.size() - 10, 10, ", tokens/s") == 0) label.resize(label.size() - 10);
    std::fprintf(stderr, "bench: %s: %.1f tokens/s (repetition %d of %d)\n", label.c_str(), value, repetition, reps);
    std::fflush(stderr);
  }
};

}  // namespace

namespace {

// --checkpoint: its config for every measurement (and `ck`: generation from its weights in its own
// format, a quantized checkpoint's packed matrices, besides the --weights formats); else the
// preset or config file with --set.
Config bench_config(const ConfigArgs& cfg, const std::string& ckpt, CheckpointSummary& ck) {
  if (ckpt.empty()) return cfg.resolve();
  if (cfg.explicit_base()) throw UsageError("bench: --checkpoint names the config; do not give --preset or --config too");
  ck = inspect_checkpoint(ckpt);
  Config c = ck.config;
  cfg.apply_sets(c);
  return c;
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
  CheckpointSummary ck;
  const Config c = bench_config(cfg, ckpt, ck);
  BenchOptions bo;
  bo.train = !decode_only;
  bo.steps = steps;
  bo.prompt_tokens = pp_tokens;
  bo.gen_tokens = gen_tokens;
  bo.gen_batch = gen_batch;
  bo.kv_cache = kv_cache;
  bo.checkpoint = ckpt;
  const auto progress = std::make_shared<Progress>(Progress{{}, 1, reps});  // (not in --json / --csv: for scripts)
  if (!as_json && !as_csv) bo.on_measured = [progress](const std::string& k, double v) { (*progress)(k, v); };
  bo.formats.clear();
  if (!decode_only) bo.formats = {"fp32", "bf16"};
  for (const std::string& f : split_list(weight_list)) bo.formats.push_back(f);
  if (bo.formats.empty() && ck.weights == "fp32")  // (a quantized checkpoint's own format is timed)
    throw UsageError("bench: --decode-only with no format to time: name them with --weights (e.g. fp32,q4_0)");
  Bench bench(c, bo);
  const std::vector<BenchMetric>& metrics = bench.metrics();
  for (const BenchMetric& m : metrics) progress->label_of[m.key] = m.label;
  // The memory read rate is measured beside every repetition, and each repetition's batch-1
  // decoding is set against its own: a shared machine's memory rate drifts by tens of percent
  // within minutes, so a rate taken once (or the best of many) measures the drift, not how close
  // decoding comes to what the memory allows at that moment.
  double model_rss = 0;
  auto repeat = [&] {
    std::map<std::string, std::vector<double>> all;
    for (int r = 0; r < reps; ++r) {
      progress->repetition = r + 1;
      std::map<std::string, double> m = bench.measure();
      if (r == 0) model_rss = peak_rss_mib();  // before any read-rate probe
      if (gen_tokens > 0) {
        const double gbps = measure_read_gbps(std::size_t(1) << 30, 2);
        m["read_gbps"] = gbps;
        for (const std::string& f : bench.formats())
          m["decode_" + sfx_of(f) + "bandwidth_fraction"] =
              m["decode_" + sfx_of(f) + "tokens_per_s"] * bench.weight_bytes_per_token(f) / (gbps * 1e9);
      }
      for (auto& [k, val] : m) all[k].push_back(val);
    }
    std::map<std::string, Stat> out;
    for (auto& [k, vals] : all) out[k] = stat(vals);
    return out;
  };
  // The GEMM peak training is set against: probed before and after the repetitions, the higher of
  // the two (a probe that met more load than training did would make the fraction exceed 1).
  auto gemm_peak = [&] { return measure_gemm_gflops(c.batch_size * c.context, c.d_model, c.ff_dim(), 7, c.precision); };
  const double peak_before = decode_only || contended ? 0.0 : gemm_peak();
  Run run{bench, metrics, repeat(), !ckpt.empty() ? ckpt : cfg.file.empty() ? cfg.preset : cfg.file, "", ""};
  run.model_rss_mib = model_rss;
  run.reps = reps;
  run.kv_cache = kv_cache;
  run.decode_only = decode_only;
  run.adaptive = threads == 0;
  // How idle OpenMP threads wait (tools/wait_policy.cpp sets the spin for a fixed count).
  std::string waiting;
  if (const char* e = std::getenv("GOMP_SPINCOUNT")) waiting = std::string(", GOMP_SPINCOUNT=") + e;
  if (const char* e = std::getenv("OMP_WAIT_POLICY")) waiting += std::string(", OMP_WAIT_POLICY=") + e;
  run.thread_mode = (threads > 0 ? std::to_string(threads) : "adaptive, at most " + std::to_string(cores_available())) + waiting;
  if (contended) {
    std::map<std::string, Stat> busy;
    double other = 0;
    {
      BusyNeighbour neighbour;
      busy = repeat();
      other = measured_other_load();
    }
    print_contended(run, busy, other, as_json);
    return 0;
  }

  print_results(run, decode_only ? 0 : std::max(peak_before, gemm_peak()), c.precision, as_json, as_csv);
  return 0;
}

}  // namespace looplm::cli
