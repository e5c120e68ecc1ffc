// The training loop: AdamW + warmup/cosine, clipping, gradient accumulation, depth samplers with
// truncated BPTT, periodic validation and atomic checkpoints, bit-exact resume. The run directory it
// writes: run_directory.h.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "backend/cpu/gemm.h"
#include "core/memory.h"
#include "core/threads.h"
#include "data/dataset.h"
#include "data/examples.h"
#include "tokenizer/tokenizer.h"
#include "infer/eval.h"
#include "io/atomic_file.h"
#include "io/json_input.h"
#include "io/safetensors.h"
#include "looplm/looplm.h"
#include "looplm/util.h"
#include "model/model_io.h"
#include "train/checkpoint.h"
#include "train/depth_sampler.h"
#include "train/distributed.h"
#include "train/run_directory.h"
#include "train/train_step.h"

namespace looplm {

namespace {

std::string fmt_num(double x) {
  if (std::isnan(x)) return "nan";
  char b[32];
  std::snprintf(b, sizeof b, "%g", x);
  return b;
}

std::string fmt_count(double n) {  // 1.2M, 35.0k, 512
  char b[32];
  if (n >= 1e9) std::snprintf(b, sizeof b, "%.2fG", n / 1e9);
  else if (n >= 1e6) std::snprintf(b, sizeof b, "%.2fM", n / 1e6);
  else if (n >= 1e3) std::snprintf(b, sizeof b, "%.1fk", n / 1e3);
  else std::snprintf(b, sizeof b, "%.0f", n);
  return b;
}

std::string fmt_duration(double s) {
  char b[32];
  if (s < 60) std::snprintf(b, sizeof b, "%.0fs", s);
  else if (s < 3600) std::snprintf(b, sizeof b, "%dm%02ds", (int)s / 60, (int)s % 60);
  else std::snprintf(b, sizeof b, "%dh%02dm", (int)s / 3600, ((int)s % 3600) / 60);
  return b;
}

// Keep the metrics lines of steps <= `step` (a resumed run rewrites what came after its checkpoint).
void truncate_metrics(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in) return;
  std::string line, kept;
  while (std::getline(in, line)) {
    try {
      auto j = io::parse_json(line, path);
      if (j.value("step", (int64_t)0) <= step) kept += line + "\n";
    } catch (...) {
    }
  }
  io::write_file_atomic(path, kept.data(), kept.size());
}

}  // namespace

namespace {

bool all_finite(std::span<const float> v) {
  bool ok = true;
#pragma omp parallel for reduction(&& : ok) schedule(static)
  for (size_t i = 0; i < v.size(); ++i) ok = ok && std::isfinite(v[i]);
  return ok;
}

// The weights a run starts from besides its own init: the resumed checkpoint's (and its config,
// with the keys a resume may change), or --init-from's (whose tokenizer the run takes).
std::unique_ptr<Model> starting_weights(const RunDirectory& run, const TrainOptions& opt, const Config& config_abs, Config& c,
                                        const Log& log) {
  LoadModelOptions lo;
  lo.for_training = true;
  if (run.found) {
    std::unique_ptr<Model> init;
    try {
      init = load_model(run.found->model_path, lo);
    } catch (const Error& e) {
      throw Error(resume_refused(run.dir, e.what()));
    }
    // The weights go into a model of the resumed config (its safe keys, e.g. steps, may differ
    // from the file's, and the next checkpoint records them).
    c = resumed_config(with_absolute_data_paths(init->config()), config_abs, run.dir);
    if (run.found->legacy)
      log("note: " + run.dir + " was written by an older looplm without a checkpoint manifest, so its weights and "
          "training state cannot be checked against each other; the next checkpoint writes one");
    return init;
  }
  if (opt.init_from.empty()) return nullptr;
  const std::string path = checkpoint_file(opt.init_from);
  std::unique_ptr<Model> init = load_model(path, lo);
  const Config& from = init->config();
  if (c.tokenizer == "hf" && c.tokenizer_json.empty() && !c.tokenizer_file.empty())
    c.tokenizer_json = Tokenizer::hf_from_file(c.tokenizer_file).hf_json();
  if (c.tokenizer != from.tokenizer || (!c.tokenizer_chars.empty() && c.tokenizer_chars != from.tokenizer_chars) ||
      (!c.tokenizer_json.empty() && c.tokenizer_json != from.tokenizer_json))
    throw UsageError(argument_spelling().init_from + argument_spelling().value_sep + path + ": its tokenizer (" + from.tokenizer + ") differs from the run's (" + c.tokenizer +
                     (c.tokenizer == from.tokenizer ? ", another " + c.tokenizer + " vocabulary" : std::string()) +
                     "); the weights are tied to their token ids");
  c.tokenizer_chars = from.tokenizer_chars;
  c.tokenizer_json = from.tokenizer_json;
  c.text = from.text;  // a fine-tuned converted model keeps its end tokens and chat template
  if (c.tokenizer_file.empty()) c.tokenizer_file = from.tokenizer_file;
  return init;
}

// A new run's tokenizer made whole in its config (docs/format.md: the run carries it): the
// tokenizer.json's text, read once here, or the char alphabet from a shard's sidecar or from the
// text the run will read.
void complete_tokenizer(Config& c) {
  if (c.tokenizer == "hf" && c.tokenizer_json.empty()) {
    if (c.tokenizer_file.empty())
      throw UsageError("tokenizer hf needs its tokenizer.json: " + set_arg("tokenizer_file", "FILE") + " (e.g. one 'looplm data "
                       "--tokenizer-train bpe' wrote)");
    Tokenizer::hf_from_file(c.tokenizer_file).to_config(c);
  }
  if (c.tokenizer == "char" && c.tokenizer_chars.empty()) {
    const std::string side = c.data_train + ".chars";
    if (detect_format(c.data_train) == DataFormat::LlmcShard || detect_format(c.data_train) == DataFormat::NanoGptBin) {
      if (!path_exists(side))
        throw UsageError(c.data_train + ": a token shard without its alphabet (" + side +
                         "); make it with 'looplm data --tokenizer char' or " + set_arg("tokenizer_chars", "..."));
      Tokenizer::char_level(read_file_bytes(side)).to_config(c);
    } else {
      // Every character the run will read: training and validation text (a char missing from the
      // alphabet would fail the validation data at the start or the end of the run).
      std::string text = load_text(c.data_train);
      if (!c.data_val.empty()) {
        const DataFormat f = detect_format(c.data_val);
        if (f != DataFormat::LlmcShard && f != DataFormat::NanoGptBin) text += load_text(c.data_val);  // not tokenised yet
      }
      Tokenizer::char_level_from_text(text).to_config(c);
    }
  }
}

// A run's data: its training batches (windows of a token stream, or examples: prompt<TAB>answer
// lines, data/examples.h) and its validation set, held in memory for the whole run (it may be a
// pipe; it is read once).
struct TrainData {
  bool examples = false;
  std::unique_ptr<BatchSource> batches;
  std::vector<int32_t> val_tokens;
  Examples val_examples;
  std::string val_origin;
  DataFingerprint fingerprint;  // what ranks compare (agree_on_data)

  TrainData(const Config& c, const Tokenizer& tok) : examples(c.data_mode == "examples") {
    val_origin = validation_name(c.data_train, c.data_val, c.val_split);  // data_val empty: the last val_split of data_train
    if (examples) {
      Examples train_examples = load_examples(c.data_train, tok, c.context);
      val_examples = c.data_val.empty() ? hold_out_examples(train_examples, c.val_split) : load_examples(c.data_val, tok, c.context);
      if (val_examples.size() == 0 || train_examples.size() == 0)
        throw Error(c.data_train + ": " + std::to_string(train_examples.size() + val_examples.size()) +
                    " examples are too few to hold out val_split " + std::to_string(c.val_split) +
                    " for validation; give more, or a validation file (" + set_arg("data_val", "FILE") + ")");
      fingerprint = {train_examples.size(), val_examples.size(), looplm::fingerprint(train_examples.tokens),
                     looplm::fingerprint(val_examples.tokens)};
      batches = std::make_unique<ExampleStream>(std::move(train_examples), c.context, c.batch_size, c.seed);
    } else {
      TrainValTokens d = load_train_val(c.data_train, c.data_val, c.val_split, tok);
      eval_windows(d.val, c.context, val_origin);  // fail early on too little validation data
      fingerprint = {(int64_t)d.train.size(), (int64_t)d.val.size(), looplm::fingerprint(d.train), looplm::fingerprint(d.val)};
      batches = std::make_unique<TokenStream>(std::move(d.train), c.context, c.batch_size, c.seed, c.data_train);
      val_tokens = std::move(d.val);
    }
  }
  // The validation loss of `m` at every depth (eval_batches batches).
  EvalResult evaluate(Model& m, const Config& c) const {
    const int64_t n = (int64_t)c.eval_batches * c.batch_size;
    return examples ? evaluate_examples(m, val_examples, c.R, c.batch_size, n) : evaluate_tokens(m, val_tokens, c.R, c.batch_size, n);
  }
  // The validation of the run (metrics, the best checkpoint): the same batches, each evaluated
  // alone and their sums added in batch order, so that ranks sharing the batches give one
  // process's numbers exactly (docs/training.md, "Data parallel (MPI)"). Loss and accuracy at
  // every depth; the deciles and diagnostics are evaluate()'s.
  EvalResult validate(Model& m, const Config& c, Communicator& comm) const {
    const int B = c.batch_size, T = c.context, R = c.R;
    const int64_t total = examples ? val_examples.size() : eval_windows(val_tokens, T);
    const int64_t items = std::min<int64_t>(total, (int64_t)c.eval_batches * B), nb = (items + B - 1) / B;
    const size_t W = 2 + 2 * (size_t)R;  // per batch: tokens, accuracy's denominator, R loss sums, R correct counts
    std::vector<double> mine((size_t)nb * W, 0.0), all(mine.size() * (size_t)comm.size());
    const int64_t b0 = nb * comm.rank() / comm.size(), b1 = nb * (comm.rank() + 1) / comm.size();
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t lo = b * B, hi = std::min(lo + B, items);
      EvalResult e;
      if (examples) {
        Examples part;
        part.offset.push_back(0);
        for (int64_t i = lo; i < hi; ++i) {
          part.tokens.insert(part.tokens.end(), val_examples.tokens.begin() + val_examples.offset[i],
                             val_examples.tokens.begin() + val_examples.offset[i + 1]);
          part.offset.push_back((int64_t)part.tokens.size());
          part.prompt_len.push_back(val_examples.prompt_len[i]);
        }
        e = evaluate_examples(m, part, R, B);
      } else {
        const std::vector<int32_t> part(val_tokens.begin() + lo * T, val_tokens.begin() + hi * T + 1);
        e = evaluate_tokens(m, part, R, B);
      }
      double* row = mine.data() + (size_t)b * W;
      row[0] = (double)e.tokens;
      row[1] = examples ? (double)(hi - lo) : (double)e.tokens;
      for (int r = 0; r < R; ++r) {
        row[2 + r] = e.loss_by_depth[r] * (double)e.tokens;
        row[2 + R + r] = std::round(e.accuracy_by_depth[r] * row[1]);
      }
    }
    comm.allgather(mine.data(), mine.size() * sizeof(double), all.data());
    EvalResult res;
    double acc_over = 0;
    std::vector<double> loss(R, 0.0), correct(R, 0.0);
    for (int64_t b = 0; b < nb; ++b) {
      int q = 0;  // the rank whose share [nb q / N, nb (q+1) / N) holds batch b
      while (b >= nb * (q + 1) / comm.size()) ++q;
      const double* row = all.data() + (size_t)q * mine.size() + (size_t)b * W;
      res.tokens += (int64_t)row[0];
      acc_over += row[1];
      for (int r = 0; r < R; ++r) {
        loss[r] += row[2 + r];
        correct[r] += row[2 + R + r];
      }
    }
    for (int r = 0; r < R; ++r) {
      res.loss_by_depth.push_back(loss[r] / (double)res.tokens);
      res.accuracy_by_depth.push_back(correct[r] / acc_over);
    }
    res.loss = res.loss_by_depth.back();
    res.accuracy = res.accuracy_by_depth.back();
    (examples ? res.examples : res.windows) = items;
    return res;
  }
};

// The model of config `c`: from `init`'s values by name and shape (the config may change training
// keys, not the model's shape), else initialised from the seed.
std::unique_ptr<Model> build_model(const Config& c, std::unique_ptr<Model> init, const std::string& init_from) {
  auto model = std::make_unique<Model>(c);
  if (!init) {
    model->init_weights(c.seed);
    return model;
  }
  // Every parameter of the file, by name and shape; the one addition allowed is an exit gate
  // (exit_gate = true on a model without one: stage II trains it from its init).
  model->init_weights(c.seed);
  const auto& to = model->params().infos();
  const auto& from = init->params().infos();
  size_t matched = 0;
  bool same = true;
  for (size_t i = 0; same && i < to.size(); ++i) {
    int j = -1;
    for (size_t k = 0; k < from.size(); ++k)
      if (from[k].name == to[i].name) j = (int)k;
    if (j < 0) {
      same = to[i].name.rfind("loop.exit_gate.", 0) == 0;
      continue;
    }
    same = from[j].shape == to[i].shape;
    if (same) std::copy(init->params().value(j), init->params().value(j) + to[i].numel, model->params().value((int)i));
    ++matched;
  }
  if (!same || matched != from.size())
    throw UsageError(argument_spelling().init_from + argument_spelling().value_sep + init_from + ": the config's model has other parameters than the file's "
                     "(a config key changed the model's shape); " + set_arg("KEY") + " may change training keys only, and add an exit gate "
                     "(" + set_arg("exit_gate", "true") + ")");
  return model;
}

// The memory plan: one forward and backward at the largest depth the sampler draws, with as many
// steps keeping gradients as training ever keeps, sizes the activation arena and the gradient pool
// before the first step (steps without gradients keep only the loop state, so only the steps that
// keep gradients cost memory). Weights and optimizer state are untouched. Returns the activation
// peak; Error with the figures when it does not fit.
size_t plan_memory(Model& m, const Config& c, int ranks, Graph& g, std::vector<int32_t>& x, std::vector<int32_t>& y, const Log& log) {
  const int B = c.batch_size, T = c.context;
  const int dmax = max_depth(c), kept = c.bptt > 0 ? std::min(c.bptt, dmax) : dmax;
  try {
    RunOptions ro;
    ro.depth = dmax;
    ro.grad_steps = c.bptt > 0 ? c.bptt : -1;
    ro.training = true;
    std::fill(x.begin(), x.end(), 0);
    std::fill(y.begin(), y.end(), 0);
    g.backward(micro_batch_loss(g, m, c, x.data(), y.data(), ro));
  } catch (const std::bad_alloc&) {
    const double P = (double)m.n_params() * 4;
    throw Error("out of memory in the memory plan (one forward and backward at batch " + std::to_string(B) + " x " +
                std::to_string(T) + " tokens, depth up to " + std::to_string(dmax) + ", " + std::to_string(kept) +
                " loop steps keeping gradients): the activations did not fit beside the parameters, gradients and "
                "AdamW (" + format_bytes(4 * P) + "); looplm may use " + format_bytes((double)memory_budget()) +
                " here. Lower batch_size (with grad_accum for the same batch), context, or the depth (bptt)");
  }
  g.reset();
  m.params().zero_grad();
  const double MiB = 1048576.0, P = (double)m.n_params() * 4;
  char line[512];
  std::snprintf(line, sizeof line,
                "memory plan: parameters %.1f MiB, gradients %.1f MiB, AdamW %.1f MiB, activations %.1f MiB + "
                "activation gradients %.1f MiB (batch %d x %d tokens, depth up to %d, %d loop step%s keeping gradients)",
                P / MiB, P / MiB, 2 * P / MiB, g.activation_bytes_peak() / MiB, g.grad_bytes_peak() / MiB, B, T, dmax, kept,
                kept == 1 ? "" : "s");
  std::string plan = line;
  if (const int sums = GradientSum::buffers_for(c.grad_accum / ranks); sums > 0) {
    std::snprintf(line, sizeof line, ", gradient partial sums %.1f MiB (%d micro-batches summed pairwise)", sums * P / MiB,
                  c.grad_accum / ranks);
    plan += line;
  }
  if (log) log(plan);
  return g.activation_bytes_peak();
}

// MFU: the training FLOPs achieved per second over the machine's fp32 GEMM rate on this model's
// shapes (at most 1024 rows: a fraction of a second), measured with the threads the steps run on:
// the cores actually available, so a step on one thread beside a busy process is measured against
// one thread's rate, not the idle machine's. A rate measured while the load was briefly higher is
// measured again once a step beats it, and MFU is never reported above 1.
class MfuMeter {
 public:
  explicit MfuMeter(const Config& c) : c_(c) {}
  double gemm_gflops(int threads) {
    Rate& r = rate_[threads];
    if (r.gflops == 0) r.gflops = measure();
    return r.gflops;
  }
  // A step of `depth` loop steps at `tokens_per_s`: forward over every step plus backward (≈ 2×
  // forward) over the steps that keep gradients. With an exit gate every exit runs the head (and
  // coda): stage I back-propagates through all of them, stage II (train_only) runs forward only.
  double mfu(const Model& m, int depth, double tokens_per_s) {
    const int kept = c_.bptt > 0 ? std::min(c_.bptt, depth) : depth;
    const Model::FlopParts f = m.flop_parts();
    const double extra_heads = c_.exit_gate ? (depth - 1) * (f.coda + f.head) : 0.0;
    double flops_tok = m.flops_per_token(depth) + extra_heads;
    if (c_.train_only.empty()) flops_tok += 2.0 * (m.flops_per_token(kept) + (c_.exit_gate ? (kept - 1) * (f.coda + f.head) : 0.0));
    const int threads = current_threads();
    double mfu = flops_tok * tokens_per_s / (gemm_gflops(threads) * 1e9);
    if (Rate& r = rate_[threads]; mfu > 1 && !r.remeasured) {
      r.remeasured = true;
      r.gflops = std::max(r.gflops, measure());
      mfu = flops_tok * tokens_per_s / (r.gflops * 1e9);
    }
    return std::min(mfu, 1.0);
  }

 private:
  struct Rate {
    double gflops = 0;
    bool remeasured = false;
  };
  double measure() const {
    return measure_gemm_gflops(std::min(c_.batch_size * c_.context, 1024), c_.d_model, c_.ff_dim(), 5, c_.precision);
  }
  const Config& c_;
  std::map<int, Rate> rate_;  // by pool size
};

// What a training step reports: a line of metrics.jsonl, the console's step line, the caller's
// on_step.
struct StepReport : TrainStep {
  double eta_s = 0, mfu = 0;  // for the console and metrics.jsonl (on_step sees the TrainStep)
  double allreduce_s = -1;    // under mpirun: seconds summing the gradients across ranks
  std::vector<double> exit_distribution;  // a model with an exit gate: StepOutcome's
  double exit_mean_step = 0;
};

// metrics.jsonl: one JSON object per training step and per validation (docs/cli.md).
class MetricsFile {
 public:
  MetricsFile(const std::string& path, bool resumed_at_step, int64_t step) {
    if (resumed_at_step) truncate_metrics(path, step);  // the lines of steps after the checkpoint are gone with them
    else std::ofstream(path, std::ios::trunc);
    out_.open(path, std::ios::app);
  }
  void train(const StepReport& r) {
    nlohmann::json j({{"step", r.step}, {"split", "train"}, {"loss", r.loss}, {"lr", r.lr}, {"grad_norm", r.grad_norm},
                      {"depth", r.depth}, {"tokens_per_s", r.tokens_per_s}, {"tokens_seen", r.tokens_seen},
                      {"elapsed_s", r.elapsed_s}, {"mfu", r.mfu}});
    if (r.allreduce_s >= 0) j["allreduce_s"] = r.allreduce_s;
    if (!r.exit_distribution.empty()) {
      j["exit_mean_step"] = r.exit_mean_step;
      j["exit_distribution"] = r.exit_distribution;
    }
    out_ << j.dump() << "\n";
  }
  void val(int64_t step, const EvalResult& e) {
    out_ << nlohmann::json({{"step", step}, {"split", "val"}, {"val_loss", e.loss}, {"val_loss_by_depth", e.loss_by_depth},
                            {"val_accuracy", e.accuracy}})
                .dump()
         << "\n";
    out_.flush();
  }

 private:
  std::ofstream out_;
};

std::string step_line(const StepReport& r, int steps) {
  char line[512];
  std::snprintf(line, sizeof line,
                "step %lld/%d | loss %.4f | lr %.2e | grad norm %.3f | depth %d | %.0f tok/s | MFU %.2f | %s tokens | "
                "%s elapsed | ETA %s",
                (long long)r.step, steps, r.loss, r.lr, r.grad_norm, r.depth, r.tokens_per_s, r.mfu,
                fmt_count(r.tokens_seen).c_str(), fmt_duration(r.elapsed_s).c_str(),
                fmt_duration(r.eta_s).c_str());
  std::string s = line;
  if (!r.exit_distribution.empty()) {  // the exit gate's mean exit step and distribution p(1..depth)
    char part[64];
    std::snprintf(part, sizeof part, " | exit step %.2f, p", r.exit_mean_step);
    s += part;
    for (double p : r.exit_distribution) std::snprintf(part, sizeof part, " %.2f", p), s += part;
  }
  return s;
}

std::string val_line(int64_t step, const EvalResult& e, bool examples, int R) {
  std::string s = "step " + std::to_string(step) + " | val loss " + std::to_string(e.loss).substr(0, 6);
  if (examples) s += " | accuracy " + std::to_string(e.accuracy).substr(0, 6);
  if (R > 1) {
    s += " | by depth";
    for (double l : e.loss_by_depth) s += " " + std::to_string(l).substr(0, 5);
  }
  return s;
}

// What TrainOptions::on_step sees of a step (`val`: the validation it ended with, if any).
TrainStep train_step_of(const StepReport& r, const EvalResult* val) {
  TrainStep ts = r;
  ts.validated = val != nullptr;
  ts.val_loss = val ? val->loss : std::nan("");
  if (val) ts.val_loss_by_depth = val->loss_by_depth;
  return ts;
}

[[noreturn]] void diverged(int64_t step, const StepOutcome& o, double lr, const Config& c, int64_t last_checkpoint,
                           const std::string& dir) {
  char msg[512];
  std::snprintf(msg, sizeof msg,
                "training diverged at step %lld: loss %s, gradient norm %s (the optimizer step was not taken). "
                "%s Likely cause: the learning rate (lr = %g, %g at this step) is too high for this model; try a "
                "lower %s or a longer warmup",
                (long long)step, fmt_num(o.loss).c_str(), fmt_num(o.grad_norm).c_str(),
                last_checkpoint >= 0 ? ("The checkpoint in " + dir + " is the last finite one (step " + std::to_string(last_checkpoint) + ").").c_str()
                                     : "No checkpoint was written.",
                c.lr, lr, set_arg("lr", "...").c_str());
  throw Error(msg);
}

}  // namespace

namespace {

void check_train_options(const TrainOptions& opt) {
  const ArgumentSpelling& a = argument_spelling();
  if (opt.out_dir.empty()) throw UsageError("train: " + a.out + a.value_sep + "DIR is required");
  if (opt.resume && opt.overwrite)
    throw UsageError("train: " + a.resume + " continues the run in DIR, " + a.overwrite + " starts it over; give one");
  if (opt.resume && !opt.init_from.empty())
    throw UsageError("train: " + a.resume + " continues DIR's own weights; " + a.init_from + " starts a new run from other weights; give one");
}

// Rank 0's config (a resumed run's own, its tokenizer completed) on every rank, each keeping its
// own data paths. On one rank, nothing to do: the broadcast is a no-op.
void share_lead_config(Communicator& comm, Config& c, const Config& config_abs) {
  std::string text = c.to_json_text();
  broadcast_string(comm, text);
  if (comm.rank() == 0) return;
  c = Config::from_json_text(text, "rank 0's config");
  c.data_train = config_abs.data_train;
  c.data_val = config_abs.data_val;
}

// Rank 0's weights, AdamW moments and training state on every rank: all start from the same.
void share_lead_state(Communicator& comm, Model& m, AdamW& adam, TrainState& st) {
  broadcast_floats(comm, m.params().values());
  broadcast_floats(comm, adam.m);
  broadcast_floats(comm, adam.v);
  comm.broadcast(&adam.t, sizeof adam.t);
  static_assert(std::is_trivially_copyable_v<TrainState>, "TrainState travels between ranks as bytes");
  comm.broadcast(&st, sizeof st);
}

// DIR/config.json: the run's id first (Config::from_json_text reads past it), then its config.
void write_run_config(const std::string& dir, const std::string& run_id, const Config& c) {
  nlohmann::ordered_json j = {{"run_id", run_id}};
  const nlohmann::ordered_json keys = nlohmann::ordered_json::parse(c.to_json_text());
  for (auto it = keys.begin(); it != keys.end(); ++it) j[it.key()] = it.value();
  const std::string text = j.dump(2) + "\n";
  io::write_file_atomic(dir + "/config.json", text.data(), text.size());
}

// The console's line about the model and the MFU meter's reference.
std::string model_line(const Model& m, const Config& c) {
  char line[512];
  std::snprintf(line, sizeof line, "model: %lld parameters, layout %d + %dx%d + %d (%s blocks, %s loop rule), d %d, context %d, vocab %d",
                (long long)m.n_params(), c.n_prelude, c.n_core, c.R, c.n_coda, c.block.c_str(), c.loop_rule.c_str(), c.d_model,
                c.context, c.vocab_size);
  return line;
}
std::string mfu_line(MfuMeter& mfu) {
  char line[256];
  std::snprintf(line, sizeof line, "MFU reference: fp32 GEMM %.0f GFLOP/s measured on this model's shapes (%d thread%s)",
                mfu.gemm_gflops(current_threads()), current_threads(), current_threads() == 1 ? "" : "s");
  return line;
}

// What the end-of-run report samples from: the first validation examples' prompts and answers,
// and the start of the validation text.
void add_report_samples(const TrainData& data, TrainResult& res) {
  for (int64_t i = 0; data.examples && i < std::min<int64_t>(3, data.val_examples.size()); ++i) {
    const auto* t = data.val_examples.tokens.data() + data.val_examples.offset[i];
    const int64_t pl = data.val_examples.prompt_len[i];
    res.report_examples.push_back({std::vector<int32_t>(t, t + pl), std::vector<int32_t>(t + pl, t + data.val_examples.length(i))});
  }
  res.sample_prompt.assign(data.val_tokens.begin(), data.val_tokens.begin() + std::min<size_t>(data.val_tokens.size(), 48));
}

}  // namespace

TrainResult train(const Config& config_in, const TrainOptions& opt) {
  check_train_options(opt);
  // Data parallel under mpirun (docs/training.md, "Data parallel (MPI)"): every rank runs this
  // function; rank 0 ("lead") alone owns the run directory and prints, the others follow it.
  Communicator& comm = world();
  const bool lead = comm.rank() == 0;
  const Log log = !lead ? Log([](const std::string&) {})
                        : opt.log ? opt.log : [](const std::string& s) { std::fprintf(stderr, "%s\n", s.c_str()); };
  const Log info = opt.quiet || !lead ? Log{} : log;
  // Data paths absolute, so the run evaluates (and resumes) from any directory; a resumed run's
  // saved paths the same way, so a relative path given again still matches.
  const Config config_abs = with_absolute_data_paths(config_in);
  agree_on_config(comm, config_abs.to_json_text());
  Config c = config_abs;
  std::optional<RunDirectory> run_dir;  // from here on this process alone writes in out_dir
  if (lead) run_dir.emplace(opt, config_abs, c, log);
  std::optional<FoundCheckpoint> found = lead ? run_dir->found : std::nullopt;
  std::unique_ptr<Model> init = lead ? starting_weights(*run_dir, opt, config_abs, c, log) : nullptr;
  if (lead && !found) {
    complete_tokenizer(c);
    c.validate();
  }
  share_lead_config(comm, c, config_abs);
  // This rank's block of each step's micro-batches. A grad_accum the ranks cannot share stops every
  // rank here (they all hold rank 0's config): an agreed error, printed once.
  GradientSum gradient_sum = [&] {
    try {
      return GradientSum(comm, c.grad_accum, opt.allreduce_bucket_bytes);
    } catch (const UsageError&) {
      note_agreed_error();  // every rank holds rank 0's config (on one rank: nothing to agree on)
      throw;
    }
  }();
  const Tokenizer tok = Tokenizer::from_config(c);
  if (tok.vocab_size() > c.vocab_size)
    throw UsageError("vocab_size " + std::to_string(c.vocab_size) + " is smaller than the " + c.tokenizer + " tokenizer's " +
                     std::to_string(tok.vocab_size()));
  require_precision_supported(c);
  TrainData data(c, tok);
  agree_on_data(comm, data.fingerprint, c.data_train, data.val_origin);
  if (info) info("validation: " + data.val_origin);
  BatchSource& stream = *data.batches;
  std::unique_ptr<Model> model = build_model(c, std::move(init), opt.init_from);
  Model& m = *model;
  AdamW adam(m.params());
  if (c.train_only == "exit_gate") adam.train_only(m.params(), "loop.exit_gate.");
  TrainState st;
  TrainResult res;
  int64_t last_checkpoint = -1;  // step of the checkpoint this run wrote or resumed from
  const std::string& dir = opt.out_dir;
  if (found) {
    try {
      load_train_state(found->state_path, m, c, found->step, adam, st);
    } catch (const Error& e) {
      throw Error(resume_refused(dir, e.what()));
    }
    tidy_run_directory(dir, *found, st.best_step == st.step);
    log(st.step >= c.steps ? dir + " is complete: step " + std::to_string(st.step) + " of " + std::to_string(c.steps) +
                                 " (a larger " + set_arg("steps", "N") + " extends it)"
                           : "resumed " + dir + " at step " + std::to_string(st.step));
  }
  share_lead_state(comm, m, adam, st);
  stream.set_cursor(st.data_cursor);
  last_checkpoint = found || st.step > 0 ? st.step : -1;
  std::optional<MetricsFile> metrics;
  if (lead) {
    metrics.emplace(dir + "/metrics.jsonl", found.has_value(), st.step);
    write_run_config(dir, run_dir->run_id, c);
  }
  const int B = c.batch_size, T = c.context;
  if (info) info(model_line(m, c));
  if (info && comm.size() > 1)
    info("data parallel: " + std::to_string(comm.size()) + " ranks, each " + std::to_string(c.grad_accum / comm.size()) +
         " of the step's " + std::to_string(c.grad_accum) + " micro-batches of " + std::to_string(B) + " x " + std::to_string(T) + " tokens");
  std::vector<int32_t> x((size_t)B * T), y((size_t)B * T);
  Graph g;
  res.activation_bytes_peak = plan_memory(m, c, comm.size(), g, x, y, info);
  adapt_threads();
  MfuMeter mfu(c);
  if (info) info(mfu_line(mfu));

  // Never write a model that is not finite: the checkpoint on disk stays the last good one. Each
  // checkpoint is the weights and the training state committed as one (train/checkpoint.h); the
  // last keep_checkpoints weights stay in DIR/checkpoints, the best by validation loss as
  // model.best.safetensors (hard links to the files written: no copies).
  auto checkpoint = [&](double val_loss) {
    last_checkpoint = st.step;
    if (!lead) return;  // every rank holds the same weights; rank 0 writes them
    if (!all_finite(m.params().values()))
      throw Error("training diverged before step " + std::to_string(st.step) + ": a weight is not finite; the checkpoint in " +
                  dir + " was not overwritten");
    const bool best = std::isfinite(val_loss) && (st.best_val_loss < 0 || val_loss < st.best_val_loss);
    if (best) {
      st.best_val_loss = val_loss;
      st.best_step = st.step;
    }
    st.data_cursor = stream.cursor();
    write_checkpoint(dir, m, adam, st, best, c.keep_checkpoints, run_dir->run_id);
  };
  auto validate_and_checkpoint = [&] {
    res.report = data.validate(m, c, comm);
    if (metrics) metrics->val(st.step, res.report);
    if (info) info(val_line(st.step, res.report, data.examples, c.R));
    res.val_loss = res.report.loss;
    checkpoint(res.val_loss);
  };

  // A stop request (TrainOptions::stop; the CLI sets it on Ctrl-C from its signal thread, never
  // from a handler: tools/signals.h says why) ends the run after the current step, with a
  // checkpoint. Checkpoints are atomic, so a run killed outright resumes from the last one.
  const int64_t last = opt.stop_after >= 0 ? std::min<int64_t>(opt.stop_after, c.steps) : c.steps;
  const auto t_start = std::chrono::steady_clock::now();
  int64_t steps_this_run = 0;
  while (st.step < last) {
    adapt_threads();  // fewer threads while other processes keep the cores busy (core/threads.h)
    const int64_t step = st.step;
    const auto t0 = std::chrono::steady_clock::now();
    StepReport r;
    r.lr = lr_at(c, (int)step);
    r.depth = sample_depth(c, (uint64_t)step);
    RunOptions ro;
    ro.depth = r.depth;
    ro.grad_steps = c.bptt > 0 ? c.bptt : -1;
    ro.step = (uint64_t)step;
    // This rank's block of the step's micro-batches; the cursor counts the whole global batch.
    const uint64_t cursor = stream.cursor();
    stream.set_cursor(cursor + (uint64_t)gradient_sum.first_micro());
    const StepOutcome o = train_step(m, adam, g, c, ro, r.lr, [&](int32_t* bx, int32_t* by) { stream.next_batch(bx, by); }, x, y,
                                     &gradient_sum);
    stream.set_cursor(cursor + (uint64_t)c.grad_accum);
    if (!o.taken) {
      note_agreed_error();  // every rank summed the same loss and norm
      diverged(step, o, r.lr, c, last_checkpoint, dir);
    }
    st.step = step + 1;
    st.tokens_seen += (double)B * T * c.grad_accum;
    ++steps_this_run;
    res.losses.push_back(o.loss);
    const auto now = std::chrono::steady_clock::now();
    r.step = st.step;
    r.last = last;
    r.loss = o.loss;
    r.grad_norm = o.grad_norm;
    r.exit_distribution = o.exit_distribution;
    r.exit_mean_step = o.exit_mean_step;
    if (comm.size() > 1) r.allreduce_s = o.sum_s;
    r.tokens_per_s = (double)B * T * c.grad_accum / std::chrono::duration<double>(now - t0).count();
    r.tokens_seen = st.tokens_seen;
    r.elapsed_s = std::chrono::duration<double>(now - t_start).count();
    r.eta_s = r.elapsed_s / steps_this_run * (last - st.step);
    if (lead) r.mfu = mfu.mfu(m, r.depth, r.tokens_per_s);
    if (metrics) metrics->train(r);
    if (info && (st.step % c.log_every == 0 || st.step == last)) info(step_line(r, c.steps));

    bool interrupted = any_rank(comm, opt.stop && opt.stop->load());
    bool validated = false;
    if (st.step % c.eval_every == 0 || st.step == last || interrupted) {
      validate_and_checkpoint();
      validated = true;
    }
    if (opt.on_step) {
      const bool go_on = !any_rank(comm, lead && !opt.on_step(train_step_of(r, validated ? &res.report : nullptr)));
      if (!go_on && !interrupted && st.step < last) {
        interrupted = true;
        if (!validated) validate_and_checkpoint();
      }
    }
    if (interrupted && st.step < last) {
      log("interrupted: checkpoint written at step " + std::to_string(st.step) + "; continue with " + argument_spelling().resume);
      res.interrupted = true;
      break;
    }
  }
  if (last_checkpoint != st.step) checkpoint(std::nan(""));  // e.g. steps = 0: the initial weights
  res.steps_done = st.step;
  if (st.step >= c.steps) {
    // The end-of-run report, from the validation data already in memory (never read again: it may
    // be a pipe, or gone): every metric of evaluate(), by rank 0 alone.
    if (lead) {
      res.report = data.evaluate(m, c);
      res.val_loss = res.report.loss;  // also for a run that was complete already (nothing ran in this call)
    }
    add_report_samples(data, res);
    res.complete = true;
  }
  return res;
}

}  // namespace looplm
