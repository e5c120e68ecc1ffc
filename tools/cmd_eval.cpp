// `looplm eval`: deterministic loss at every exit r = 1..depth over a data file, and the per-step
// diagnostics of the model's loop rule and blocks.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "cli_common.h"
#include "eval_calibration.h"
#include "looplm/looplm.h"
#include "signals.h"

namespace looplm::cli {

namespace {

// An incremental evaluation (every token fed one at a time through the KV cache): one loss at each
// token's exit, the loop steps run and the KV policy's memory.
void print_incremental(const EvalResult& e, const EvalOptions& eo, const ExitArgs& ex, bool as_json, int R, int depth_run,
                       int window_len) {
  if (as_json) {
    nlohmann::json j = {{"loss", e.loss}, {"accuracy", e.accuracy}, {"tokens", e.tokens}, {"windows", e.windows},
                        {"R", R}, {"depth", depth_run}, {"mean_steps", e.mean_steps}, {"exit_fraction", e.exit_fraction},
                        {"exit_rule", ex.rule}, {"kv_policy", ex.policy}, {"kv_bytes_per_token", e.kv_bytes_per_token},
                        {"kv_cache_bytes", e.kv_cache_bytes}, {"kv_cache", eo.kv_cache}, {"incremental", true}};
    if (eo.exit.rule != ExitRule::fixed) j["exit_threshold"] = ex.threshold;
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("%lld tokens in %lld windows of %d, decoded one at a time (kv policy %s, kv cache %s)\n", (long long)e.tokens,
              (long long)e.windows, window_len, ex.policy.c_str(), eo.kv_cache.c_str());
  std::printf("loss %.4f, accuracy %.4f (at each token's exit: %s", e.loss, e.accuracy, ex.rule.c_str());
  if (eo.exit.rule != ExitRule::fixed) std::printf(eo.exit.rule == ExitRule::gate ? " >= %g" : " < %g", ex.threshold);
  std::printf(", %.3f loop steps per token of %d)\nkv cache: %.0f bytes per token kept by the policy, %.1f KiB allocated\n",
              e.mean_steps, depth_run, e.kv_bytes_per_token, e.kv_cache_bytes / 1024.0);
}

// The full pass: the headline loss, then the loss at every exit (the early-exit table) and its
// diagnostics, the gate's expected depth, the loss by token difficulty.
void print_by_exit(const EvalResult& e, const EvalOptions& eo, const ExitArgs& ex, bool as_json, int R, int window_len,
                   double loss_budget) {
  const int ran = (int)e.loss_by_depth.size();
  if (as_json) {
    nlohmann::json j = {{"loss", e.loss}, {"accuracy", e.accuracy}, {"loss_by_depth", e.loss_by_depth},
                        {"accuracy_by_depth", e.accuracy_by_depth}, {"diagnostics", e.diagnostics},
                        {"tokens", e.tokens}, {"windows", e.windows}, {"R", R}, {"depth", ran}};
    if (e.examples > 0) j["examples"] = e.examples;
    if (ran > 0) {
      j["mean_steps"] = e.mean_steps;
      j["exit_fraction"] = e.exit_fraction;
      j["exit_rule"] = ex.rule;
      if (eo.exit.rule != ExitRule::fixed) j["exit_threshold"] = ex.threshold;
      if (e.gate_expected_depth > 0) j["gate_expected_depth"] = e.gate_expected_depth;
      if (e.exit_gate)
        j["exit_gate"] = {{"objective", e.exit_gate->objective}, {"expected_loss", e.exit_gate->expected_loss},
                          {"entropy", e.exit_gate->entropy}, {"mean_exit_step", e.exit_gate->mean_exit_step},
                          {"exit_distribution", e.exit_gate->exit_distribution}};
    }
    if (!e.difficulty_first.empty())
      j["loss_by_difficulty"] = {{"first_exit", e.difficulty_first}, {"last_exit", e.difficulty_last}};
    if (e.calibration) j["calibration"] = calibration_json(*e.calibration, loss_budget);
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  char at[160];  // where the headline loss is taken
  if (eo.exit.rule != ExitRule::fixed && ran > 0)
    std::snprintf(at, sizeof at, "at each token's exit: %s %s %g, %.3f loop steps per token of %d", ex.rule.c_str(),
                  eo.exit.rule == ExitRule::gate ? ">=" : "<", ex.threshold, e.mean_steps, ran);
  else
    std::snprintf(at, sizeof at, "depth %d", ran == 0 ? 0 : std::min(R, ran));
  if (e.examples > 0)
    std::printf("%lld examples (%lld answer tokens)\nloss %.4f, accuracy %.4f (%s)\n", (long long)e.examples,
                (long long)e.tokens, e.loss, e.accuracy, at);
  else
    std::printf("%lld tokens in %lld windows of %d\nloss %.4f (%s)\n", (long long)e.tokens, (long long)e.windows,
                window_len, e.loss, at);
  if (ran == 0) return;
  print_exit_table(e, R);  // per-step diagnostics are columns; others (e.g. energy_final) lines below
  if (e.exit_gate) {
    std::printf("the exit gate's expected depth: %.3f loop steps per token (of %d); expected loss %.4f, entropy %.3f nats; "
                "p(r) =", e.exit_gate->mean_exit_step, ran, e.exit_gate->expected_loss, e.exit_gate->entropy);
    for (double p : e.exit_gate->exit_distribution) std::printf(" %.3f", p);
    std::printf(" (the last step taking what remains; trained with %s)\n", e.exit_gate->objective.c_str());
  }
  if (!e.difficulty_first.empty()) {
    std::printf("\nloss by token difficulty (deciles of the exit-1 loss; 1 = easiest):\n| decile | exit 1 | exit %d | gain |\n|---|---|---|---|\n", ran);
    for (size_t q = 0; q < e.difficulty_first.size(); ++q)
      std::printf("| %zu | %.4f | %.4f | %+.4f |\n", q + 1, e.difficulty_first[q], e.difficulty_last[q],
                  e.difficulty_first[q] - e.difficulty_last[q]);
  }
  if (e.calibration) print_calibration(*e.calibration, loss_budget);
}

}  // namespace

int cmd_eval(int argc, char** argv) {
  CLI::App app{"Evaluate a checkpoint: mean token loss at every exit r = 1..depth over consecutive windows.", "looplm eval"};
  std::string ckpt, data;
  int depth = -1, window = 0;
  bool as_json = false;
  LoadOptions lo;
  app.add_option("--checkpoint", ckpt, "model.safetensors (or its run directory)")->required()->type_name("FILE");
  app.add_option("--data", data, "text, .jsonl or .bin token file (default: the run's validation data: data_val, or the part of data_train it held out)")->type_name("FILE");
  app.add_option("--depth", depth,
                 "loop steps to run (default: the trained R; more shows the curve beyond R; 0: the loss of h_pre)")
      ->check(at_least(0));
  app.add_option("--window", window,
                 "tokens per window (default: the model's context; a converted model's, e.g. Ouro's 32768, needs "
                 "gigabytes per window: a shorter one scores the same text in less memory)")
      ->check(at_least(1));
  app.add_option("--weights", lo.weights,
                 "weight format: " + joined(available_weight_formats()) + " (default: the checkpoint's own; q8_0 / q4_0 / q4_k quantize at load)")
      ->check(weights_check());
  ExitArgs ex;
  ex.add(app, "; given, eval scores through incremental decoding, token by token (default: full passes, per_step)");
  std::string kv_cache;
  CLI::Option* kv_opt = app.add_option("--kv-cache", kv_cache,
                                       "KV cache precision for incremental scoring: fp32, bf16 or int8 (given, eval scores "
                                       "incrementally; default fp32)")
                            ->check(CLI::IsMember(available_kv_caches()))
                            ->type_name("TYPE");
  app.add_flag("--allow-nonfinite", lo.allow_nonfinite, "load a checkpoint whose tensors hold NaN/Inf");
  ThreadsArg threads;
  threads.add(app);
  std::string progress = "auto";
  app.add_option("--progress", progress, "progress line on stderr: auto (on a terminal), on, off")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  app.add_flag("--json", as_json, "print one JSON object");
  bool calibrate = false;
  std::string loss_budget = "1%", plot;
  app.add_flag("--calibrate", calibrate,
               "score every early-exit rule (the exit gate, kl, entropy, latent, fewer steps) over its thresholds in one "
               "pass: loss against loop steps per token, and each rule's threshold within --loss-budget");
  CLI::Option* budget_opt = app.add_option("--loss-budget", loss_budget,
                                           "with --calibrate: the loss allowed above every token at full depth, a "
                                           "fraction or percentage (default 1%)")
                                ->type_name("B");
  CLI::Option* plot_opt =
      app.add_option("--plot", plot, "with --calibrate: draw the frontiers into this PNG (needs gnuplot)")->type_name("FILE");
  if (!parse(app, argc, argv, "eval")) return 0;
  const double budget = parse_loss_budget(loss_budget);
  if (!calibrate && (budget_opt->count() > 0 || plot_opt->count() > 0))
    throw UsageError("eval: --loss-budget and --plot go with --calibrate");
  if (calibrate && ex.exit().rule != ExitRule::fixed)
    throw UsageError("eval: --calibrate scores every exit rule itself; do not give --exit-rule with it");
  EvalOptions eo;
  eo.depth = depth;
  eo.window = window;
  eo.exit = ex.exit();
  if (depth == 0 && eo.exit.rule != ExitRule::fixed)
    throw UsageError("eval: --exit-rule " + ex.rule + " needs loop steps (--depth 0 runs none)");
  eo.incremental = ex.policy_given() || kv_opt->count() > 0;
  eo.calibrate = calibrate;
  if (calibrate && depth == 0) throw UsageError("eval: --calibrate needs loop steps (--depth 0 runs none)");
  eo.kv_policy = ex.kv_policy();
  if (!kv_cache.empty()) eo.kv_cache = kv_cache;
  set_threads(threads.n);
  set_interrupt_note("looplm eval: interrupted (nothing was written)");

  LanguageModel lm = LanguageModel::load(ckpt, lo);
  if (!as_json) {
    note_depth_beyond(depth, lm.config().R, ": this measures it");
    ex.note_unused_policy("; it scores through incremental decoding");
  }
  const Config& mc = lm.config();
  if (data.empty() && !as_json)
    std::fprintf(stderr, "data: %s (the run's validation data)\n",
                 validation_name(mc.data_train, mc.data_val, mc.val_split).c_str());
  if (progress == "on" || (progress == "auto" && isatty(STDERR_FILENO))) {
    // windows done, tokens/s and the time left, rewritten in place
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t T = window > 0 ? window : lm.config().context;
    eo.progress = [t0, T](int64_t done, int64_t total) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double rate = done * T / std::max(s, 1e-9);
      std::fprintf(stderr, "\reval: %lld/%lld windows, %.0f tokens/s, %.0f s left   ", (long long)done, (long long)total,
                   rate, (total - done) * T / std::max(rate, 1e-9));
      if (done == total) std::fprintf(stderr, "\n");
      std::fflush(stderr);
    };
  }
  EvalResult e = data.empty() ? lm.evaluate_validation(eo) : lm.evaluate_file(data, eo);
  for (size_t i = 0; i <= e.loss_by_depth.size(); ++i) {
    const double l = i < e.loss_by_depth.size() ? e.loss_by_depth[i] : e.loss;
    if (!std::isfinite(l))
      throw Error("the loss is not finite (" + std::to_string(l) + (i < e.loss_by_depth.size() ? " at exit " + std::to_string(i + 1) : "") +
                  "): the model's outputs overflow or are NaN on this data");
  }
  const int R = lm.config().R, window_len = window > 0 ? window : lm.config().context;
  if (eo.incremental)
    print_incremental(e, eo, ex, as_json, R, lm.config().depth_or_R(depth), window_len);
  else
    print_by_exit(e, eo, ex, as_json, R, window_len, budget);
  if (e.calibration && !plot.empty()) {
    plot_calibration(*e.calibration, budget, plot);
    if (!as_json) std::printf("wrote %s\n", plot.c_str());
  }
  return 0;
}

}  // namespace looplm::cli
