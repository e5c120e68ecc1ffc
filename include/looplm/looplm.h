// looplm's public C++ API: train, evaluate and generate with looped transformer LMs.
// The `looplm` CLI is built on exactly these calls.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "looplm/config.h"
#include "looplm/error.h"

namespace looplm {

// ---------------------------------------------------------------- training
struct TrainOptions {
  std::string out_dir;       // run directory: config.json, model.safetensors, train_state.safetensors, metrics.jsonl
  bool resume = false;       // continue from out_dir's checkpoint when there is one
  int stop_after = -1;       // stop (with a checkpoint) after this step although the schedule is longer
  bool quiet = false;        // no progress lines
  std::function<void(const std::string&)> log;  // progress lines (default: stderr)
  // Set by the caller (e.g. from a signal-handling thread) to end the run after the current step,
  // with a checkpoint; --resume continues it.
  const std::atomic<bool>* stop = nullptr;
};
struct TrainResult {
  std::vector<double> losses;  // training loss per step run in this call
  double val_loss = 0;         // last validation loss
  int64_t steps_done = 0;      // total optimizer steps in the checkpoint
  bool interrupted = false;    // ended by TrainOptions::stop
};
TrainResult train(const Config& config, const TrainOptions& options);

// ---------------------------------------------------------------- a loaded model
struct EvalResult {
  double loss = 0;                    // mean token loss at the configured depth R
  std::vector<double> loss_by_depth;  // exits r = 1..depth
  std::vector<double> state_cosine;   // mean cos(h^(r), h^(r-1)) per token, r = 1..depth
  int64_t tokens = 0, windows = 0;
};
struct GenerateOptions {
  int max_new = 200;
  double temperature = 1.0;  // 0 = greedy
  int top_k = 0;             // 0 = off
  double top_p = 1.0;        // 1 = off
  uint64_t seed = 0;
  int depth = -1;            // loop steps; -1 = trained R
  // Weights the per-token steps read: "fp32" (exact: greedy output equals a full forward) or
  // "bf16" (a rounded copy made once per model; half the memory traffic, logits within ~1e-2).
  std::string weights = "fp32";
};

class LanguageModel {
 public:
  static LanguageModel load(const std::string& checkpoint);  // model.safetensors (or its run dir)
  LanguageModel(LanguageModel&&) noexcept;
  LanguageModel& operator=(LanguageModel&&) noexcept;
  ~LanguageModel();

  const Config& config() const;
  int64_t n_params() const;
  std::vector<int32_t> encode(const std::string& text) const;
  std::string decode(const std::vector<int32_t>& ids) const;

  // Deterministic evaluation over consecutive non-overlapping windows of `context` tokens
  // (targets shifted by one); depth -1 = R. Noise off.
  EvalResult evaluate(const std::vector<int32_t>& tokens, int depth = -1, int batch = 8) const;
  EvalResult evaluate_file(const std::string& data_path, int depth = -1) const;
  // Sampling with a KV cache per (block, loop step); on_token gets each new id as it is made.
  std::vector<int32_t> generate(const std::vector<int32_t>& prompt, const GenerateOptions& o,
                                const std::function<void(int32_t)>& on_token = {}) const;
  // Logits [T, V] of a full forward pass (no cache) over `tokens` at `depth`; for tests/tools.
  std::vector<float> forward_logits(const std::vector<int32_t>& tokens, int depth = -1) const;

  struct Impl;
 private:
  explicit LanguageModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace looplm
