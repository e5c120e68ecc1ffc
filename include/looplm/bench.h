// Measuring speed (looplm bench, bench/README.md): one set-up of a config — a training model with
// AdamW (unless generation only) and one generation model per weight format — measured as often as
// a caller asks, plus the machine's own rates that the results are compared with in the same run.
// Not thread-safe: one Bench per thread.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "looplm/config.h"

namespace looplm {

struct BenchOptions {
  bool train = true;        // time training, evaluation and GPTQ (fp32 values, gradients, AdamW state); false: generation only
  int steps = 6;            // timed training steps (their median; after 2 warm-up steps)
  int prompt_tokens = 256;  // prompt processing: a prompt this long (at most the context)
  int gen_tokens = 256;     // new tokens of the generation tests (0: none)
  int gen_batch = 8;        // sequences of the batched generation test (1: none)
  std::string kv_cache = "fp32";
  // Weight formats for generation (available_weight_formats()), in order; the checkpoint's own
  // format is added when it is not among them.
  std::vector<std::string> formats = {"fp32", "bf16"};
  std::string checkpoint;   // generation from this checkpoint's weights ("" = random weights from config.seed)
  // Called with each metric as it is measured (key, tokens/s): a long run shows its progress.
  std::function<void(const std::string& key, double value)> on_measured;
};

struct BenchMetric {
  std::string key;    // JSON key, e.g. decode_q4_0_tokens_per_s
  std::string label;  // a table row's words
};

class Bench {
 public:
  // UsageError for an unknown format or KV cache, or no format to time.
  Bench(const Config& config, const BenchOptions& options);
  ~Bench();
  Bench(const Bench&) = delete;
  Bench& operator=(const Bench&) = delete;

  // What measure() reports, in table order.
  const std::vector<BenchMetric>& metrics() const;
  // Every metric once, tokens/s by key: training (fwd + bwd + clip + AdamW on random tokens,
  // median step), GPTQ q4_0 of a fresh copy calibrated on the training batch, evaluation at depth R
  // (fp32), and per format prompt processing, batch-1 decoding, batched decoding and (fp32, bf16)
  // end to end from a 16-token prompt, through the library's generate as `looplm generate` runs it.
  std::map<std::string, double> measure();

  const std::vector<std::string>& formats() const;
  int64_t n_params() const;
  double train_flops_per_token() const;  // 3 x inference at R (0 without training)
  double peak_rss_after_training_mib() const;  // after the first measure()'s training, before the generation models
  size_t activation_bytes_peak() const;        // of the training steps so far
  size_t grad_bytes_peak() const;
  // The bytes of weight matrices one decoded token reads in `format`: every matrix it multiplies,
  // a core or loop matrix once per loop step (the position table and an untied embedding are
  // lookups). Over the machine's read rate, the bound on batch-1 tokens/s.
  double weight_bytes_per_token(const std::string& format) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The machine's GEMM rate in GFLOP/s (the best of `reps` of each shape) on a model's training shapes ({M,3d,d}, {M,f,d}, {M,d,f}) in a
// training precision ("fp32", or "bf16": bf16 operands rounded from fp32, fp32 accumulation, as
// training with precision = bf16 multiplies): the reference for "fraction of peak".
double measure_gemm_gflops(int M, int d, int f, int reps, const std::string& precision = "fp32");
// This process's peak resident memory so far, in MiB (getrusage's ru_maxrss).
double peak_rss_mib();
// The memory read rate in GB/s with the current thread count: the best of `reps` streaming passes
// over `bytes` (far beyond the caches). The reference for memory-bound decoding.
double measure_read_gbps(std::size_t bytes = std::size_t(1) << 30, int reps = 5);
// The thread pool (set_threads, include/looplm/looplm.h): the CPUs this process may use, the size
// of the next parallel region, and the other processes' load measured last, in cores.
int cores_available();
int current_threads();
double measured_other_load();

}  // namespace looplm
