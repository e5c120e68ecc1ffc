// The training loop: AdamW + warmup/cosine, clipping, gradient accumulation, depth samplers with
// truncated BPTT, periodic validation and atomic checkpoints, bit-exact resume.
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "data/dataset.h"
#include "data/tokenizer.h"
#include "infer/eval.h"
#include "io/atomic_file.h"
#include "looplm/looplm.h"
#include "train/checkpoint.h"
#include "train/depth_sampler.h"

namespace looplm {

namespace {

bool exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

void make_dir(const std::string& p) {
  std::string cur;
  std::stringstream ss(p);
  std::string part;
  if (!p.empty() && p[0] == '/') cur = "/";
  while (std::getline(ss, part, '/')) {
    if (part.empty()) continue;
    cur += part + "/";
    if (::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST)
      throw Error("cannot create directory '" + cur + "': " + std::strerror(errno));
  }
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
      auto j = nlohmann::json::parse(line);
      if (j.value("step", (int64_t)0) <= step) kept += line + "\n";
    } catch (...) {
    }
  }
  io::write_file_atomic(path, kept.data(), kept.size());
}

}  // namespace

TrainResult train(const Config& config_in, const TrainOptions& opt) {
  if (opt.out_dir.empty()) throw UsageError("train: --out DIR is required");
  auto log = opt.log ? opt.log : [](const std::string& s) { std::fprintf(stderr, "%s\n", s.c_str()); };
  const std::string model_path = opt.out_dir + "/model.safetensors";
  const std::string state_path = opt.out_dir + "/train_state.safetensors";
  const std::string metrics_path = opt.out_dir + "/metrics.jsonl";
  const bool resuming = opt.resume && exists(model_path) && exists(state_path);

  Config c = config_in;
  std::unique_ptr<Model> model;
  if (resuming) {
    model = load_model(model_path);
    Config saved = model->config();
    // The run's own config wins; only the schedule length may be extended on resume.
    saved.steps = c.steps;
    c = saved;
  } else {
    if (c.tokenizer == "char" && c.tokenizer_chars.empty())
      Tokenizer::char_level_from_text(load_text(c.data_train)).to_config(c);
    c.validate();
  }
  Tokenizer tok = Tokenizer::from_config(c);
  if (tok.vocab_size() > c.vocab_size)
    throw UsageError("vocab_size " + std::to_string(c.vocab_size) + " is smaller than the " + c.tokenizer +
                     " tokenizer's " + std::to_string(tok.vocab_size()));
  std::vector<int32_t> train_tokens = load_tokens(c.data_train, tok);
  std::vector<int32_t> val_tokens = load_tokens(c.data_val, tok);
  TokenStream stream(std::move(train_tokens), c.context, c.batch_size, c.seed, c.data_train);
  eval_windows(val_tokens, c.context, c.data_val);  // fail early on too little validation data

  if (!model) {
    model = std::make_unique<Model>(c);
    model->init_weights(c.seed);
  }
  Model& m = *model;
  AdamW adam(m.params());
  TrainState st;
  make_dir(opt.out_dir);
  if (resuming) {
    load_train_state(state_path, m, adam, st);
    stream.set_cursor(st.data_cursor);
    truncate_metrics(metrics_path, st.step);
    log("resumed " + opt.out_dir + " at step " + std::to_string(st.step));
  } else {
    std::ofstream(metrics_path, std::ios::trunc);
  }
  {
    std::string cfg = c.to_json_text(2) + "\n";
    io::write_file_atomic(opt.out_dir + "/config.json", cfg.data(), cfg.size());
  }

  const int B = c.batch_size, T = c.context;
  char line[512];
  std::snprintf(line, sizeof line, "model: %lld parameters, layout %d + %dx%d + %d (%s blocks, %s loop rule), d %d, context %d, vocab %d",
                (long long)m.n_params(), c.n_prelude, c.n_core, c.R, c.n_coda, c.block.c_str(), c.loop_rule.c_str(),
                c.d_model, T, c.vocab_size);
  if (!opt.quiet) log(line);
  std::snprintf(line, sizeof line, "memory: parameters %.1f MiB, AdamW %.1f MiB, gradients %.1f MiB",
                m.n_params() * 4 / 1048576.0, m.n_params() * 8 / 1048576.0, m.n_params() * 4 / 1048576.0);
  if (!opt.quiet) log(line);

  std::ofstream metrics(metrics_path, std::ios::app);
  auto checkpoint = [&] {
    save_model(model_path, m);
    st.data_cursor = stream.cursor();
    save_train_state(state_path, m, adam, st);
  };
  auto validate = [&](int64_t step) {
    EvalResult e = evaluate_tokens(m, val_tokens, c.R, c.batch_size, (int64_t)c.eval_batches * c.batch_size);
    metrics << nlohmann::json({{"step", step}, {"val_loss", e.loss}, {"val_loss_by_depth", e.loss_by_depth}}).dump() << "\n";
    metrics.flush();
    if (!opt.quiet) {
      std::string s = "step " + std::to_string(step) + " | val loss " + std::to_string(e.loss).substr(0, 6);
      if (c.R > 1) {
        s += " | by depth";
        for (double l : e.loss_by_depth) s += " " + std::to_string(l).substr(0, 5);
      }
      log(s);
    }
    return e.loss;
  };

  // A stop request (TrainOptions::stop; the CLI sets it on Ctrl-C from its signal thread, never
  // from a handler: tools/signals.h says why) ends the run after the current step, with a
  // checkpoint. Checkpoints are atomic, so a run killed outright resumes from the last one.
  TrainResult res;
  std::vector<int32_t> x((size_t)B * T), y((size_t)B * T);
  Graph g;
  const int64_t last = opt.stop_after >= 0 ? std::min<int64_t>(opt.stop_after, c.steps) : c.steps;
  auto t_start = std::chrono::steady_clock::now();
  int64_t steps_this_run = 0;
  while (st.step < last) {
    const int64_t step = st.step;
    auto t0 = std::chrono::steady_clock::now();
    const double lr = lr_at(c, (int)step);
    const int depth = sample_depth(c, (uint64_t)step);
    RunOptions ro;
    ro.depth = depth;
    ro.grad_steps = c.bptt > 0 ? c.bptt : -1;
    ro.training = true;
    ro.step = (uint64_t)step;
    m.params().zero_grad();
    double loss = 0;
    for (int micro = 0; micro < c.grad_accum; ++micro) {
      stream.next_batch(x.data(), y.data());
      Node* l = op::cross_entropy(g, m.logits(g, x.data(), B, T, ro), y.data());
      loss += l->v[0] / c.grad_accum;
      g.backward(l, 1.0f / c.grad_accum);
      g.reset();
    }
    if (steps_this_run == 0 && !opt.quiet) {
      std::snprintf(line, sizeof line, "memory: activations %.1f MiB, activation gradients %.1f MiB (step at depth %d)",
                    g.activation_bytes_peak() / 1048576.0, g.grad_bytes_peak() / 1048576.0, depth);
      log(line);
    }
    const double gnorm = clip_grad_norm(m.params(), c.grad_clip);
    adam.step(m.params(), lr, c);
    st.step = step + 1;
    st.tokens_seen += (double)B * T * c.grad_accum;
    ++steps_this_run;
    res.losses.push_back(loss);
    if (!std::isfinite(loss)) {
      checkpoint();
      throw Error("training diverged at step " + std::to_string(step) + " (loss " + std::to_string(loss) +
                  "); try a lower lr (--set lr=...)");
    }
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    double tps = (double)B * T * c.grad_accum / dt;
    metrics << nlohmann::json({{"step", st.step}, {"loss", loss}, {"lr", lr}, {"grad_norm", gnorm}, {"depth", depth},
                               {"tokens_per_s", tps}})
                   .dump()
            << "\n";
    if (!opt.quiet && (st.step % c.log_every == 0 || st.step == last)) {
      double eta = elapsed / steps_this_run * (last - st.step);
      std::snprintf(line, sizeof line, "step %lld/%d | loss %.4f | lr %.2e | grad norm %.3f | depth %d | %.0f tok/s | ETA %s",
                    (long long)st.step, c.steps, loss, lr, gnorm, depth, tps, fmt_duration(eta).c_str());
      log(line);
    }
    const bool interrupted = opt.stop && opt.stop->load();
    if (st.step % c.eval_every == 0 || st.step == last || interrupted) {
      res.val_loss = validate(st.step);
      checkpoint();
    }
    if (interrupted && st.step < last) {
      log("interrupted: checkpoint written at step " + std::to_string(st.step) + "; continue with --resume");
      res.interrupted = true;
      break;
    }
  }
  if (steps_this_run == 0 && !exists(model_path)) checkpoint();
  res.steps_done = st.step;
  return res;
}

}  // namespace looplm
