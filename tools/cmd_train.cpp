// `looplm train`: train a model; prints a progress line per step, validation, and at the end the
// early-exit table (loss at every depth, on a bounded part of the validation data) and a sample.
#include <cstdio>
#include <filesystem>
#include <optional>

#include "cli.h"
#include "cli_common.h"
#include "signals.h"
#include "looplm/looplm.h"
#include "looplm/distributed.h"

namespace looplm::cli {

namespace {

// The end-of-training report: loss at every exit on (a bounded part of) the validation data,
// computed by train() from the data it holds, and a sample. Ctrl-C here ends the process at once:
// the run is saved.
void print_report(const TrainResult& r, const std::string& out, int sample_len, std::string prompt) {
  set_interrupt_note("looplm train: interrupted during the end-of-training report; the run in " + out +
                     " is complete and saved (step " + std::to_string(r.steps_done) +
                     "); 'looplm eval --checkpoint " + out + "' prints the table again");
  LanguageModel lm = LanguageModel::load(out);
  const Config& mc = lm.config();
  const EvalResult& e = r.report;
  if (e.examples > 0)  // data_mode = examples: the answer's loss and exact-match accuracy
    std::printf("\nearly-exit table (validation: the first %lld examples = eval_batches x batch_size; all of it: "
                "looplm eval): loss and accuracy on the answers at every depth r\n",
                (long long)e.examples);
  else
    std::printf("\nearly-exit table (validation: %lld tokens, the first %lld windows = eval_batches x batch_size; "
                "all of it: looplm eval): loss at every depth r\n",
                (long long)e.tokens, (long long)e.windows);
  print_exit_table(e, mc.R);
  if (sample_len > 0 && e.examples > 0) {  // examples: greedy answers to the first validation prompts
    std::printf("\nsamples (greedy, the first validation examples: prompt -> answer [label]):\n");
    for (const auto& [prompt_ids, answer_ids] : r.report_examples) {
      GenerateOptions g;
      g.temperature = 0;
      g.max_new = (int)answer_ids.size();
      const std::string got = lm.decode_continuation(prompt_ids, lm.generate(prompt_ids, g));
      std::printf("  %s -> %s [%s]\n", lm.decode(prompt_ids).c_str(), got.c_str(), lm.decode(answer_ids).c_str());
    }
  } else if (sample_len > 0) {
    GenerateOptions g;
    g.max_new = sample_len;
    g.temperature = 0.8;
    g.top_k = 40;
    g.seed = mc.seed;
    std::vector<int32_t> ids;
    std::string from = "the start of the validation text";
    if (!prompt.empty()) {
      ids = encode_prompt(lm, prompt, "the prompt");
      from = "--prompt";
    } else {  // the validation text's first line, or its first words
      prompt = lm.decode(r.sample_prompt);
      if (const size_t nl = prompt.find('\n'); nl != std::string::npos && nl > 0) prompt.resize(nl);
      else if (const size_t sp = prompt.find_last_of(' '); sp != std::string::npos && sp >= 8) prompt.resize(sp);
      ids = encode_prompt(lm, prompt, "the prompt");
    }
    std::printf("\nsample (temperature 0.8, top-k 40, %d tokens; the prompt is %s):\n%s", sample_len, from.c_str(),
                prompt.c_str());
    std::fflush(stdout);
    TextStream text = lm.text_stream();  // streamed as it is made, in whole characters
    auto print = [](const std::string& s) {
      std::fwrite(s.data(), 1, s.size(), stdout);
      std::fflush(stdout);
    };
    lm.generate(ids, g, [&](int32_t t) { print(text.push(t)); });
    print(text.finish());
    std::printf("\n");
  }
}

}  // namespace

int cmd_train(int argc, char** argv) {
  CLI::App app{"Train a looplm model.", "looplm train"};
  ConfigArgs cfg;
  cfg.add(app, "looped");
  std::string out;
  int steps = -1, stop_after = -1, sample_len = 300;
  bool resume = false, overwrite = false, quiet = false, help_config = false;
  std::string prompt, data;
  app.add_option("--out", out, "run directory (checkpoint, metrics.jsonl); required")->type_name("DIR");
  app.add_option("--data", data,
                 "train on FILE (text, .jsonl or .bin), validating on its last val_split (10%), which is not trained on "
                 "(--set data_train=FILE --set data_val=)")
      ->type_name("FILE");
  app.add_option("--steps", steps, "total optimizer steps of the schedule (overrides the config)")->check(at_least(0));
  app.add_option("--stop-after", stop_after, "stop with a checkpoint after this step (resume later with --resume)")
      ->check(at_least(0));
  std::string safe_keys;  // from the trainer's own list, so the help cannot drift from what it accepts
  for (const std::string& k : resume_safe_keys()) safe_keys += (safe_keys.empty() ? "" : ", ") + k;
  app.add_flag("--resume", resume,
               "continue from DIR's checkpoint if there is one, with the run's own config (--set may change only "
               "the keys that are safe to change on resume: " + safe_keys + ")");
  app.add_flag("--overwrite", overwrite,
               "DIR already holds a run: remove its files (checkpoints, metrics) and start over (without it, that is an error)");
  std::string init_from;
  auto* init_opt = app.add_option("--init-from", init_from,
                                  "start a new run from this checkpoint's weights (a model.safetensors or run directory; its "
                                  "config, with --set for training keys, e.g. new data or lr) instead of random ones; "
                                  "AdamW starts afresh")
                       ->type_name("FILE");
  app.add_flag("--quiet", quiet, "no progress lines");
  double bucket_mb = 4;
  app.add_option("--allreduce-bucket-mb", bucket_mb,
                 "under mpirun: the gradient is summed across ranks in pieces of this many MiB (docs/training.md)")
      ->check(CLI::Range(0.0625, 1024.0));
  app.add_option("--sample-len", sample_len, "tokens of the sample printed at the end (0: none)")->check(at_least(0));
  app.add_option("--prompt", prompt, "prompt of the final sample (default: the start of the validation text)");
  ThreadsArg threads;
  threads.add(app);
  app.add_flag("--help-config", help_config, "print every config key with its default and meaning, and exit");
  bool print_config = false;
  app.add_flag("--print-config", print_config, "print the resolved config (preset/config, then --set) as JSON, and exit");
  {
    std::string presets;
    for (const std::string& n : preset_names()) presets += (presets.empty() ? "" : ", ") + n;
    app.footer("Presets: " + presets + ".\nConfig keys: looplm train --help-config, or docs/config.md.");
  }
  if (!parse(app, argc, argv, "train")) return 0;
  set_threads(threads.n);
  if (help_config) {
    if (cfg.explicit_base() || !cfg.sets.empty()) {
      const Config c = cfg.resolve();
      const std::string source = cfg.file.empty() ? "preset " + cfg.preset : cfg.file;
      print_config_keys(std::cout, &c, source + (cfg.sets.empty() ? "" : " with --set"));
    } else {
      print_config_keys(std::cout);
    }
    return 0;
  }
  if (resume && overwrite) throw UsageError("train: --resume continues the run in DIR, --overwrite starts it over; give one");
  if (init_opt->count() > 0 && (resume || cfg.explicit_base()))
    throw UsageError("train: --init-from takes the config of its checkpoint (change training keys with --set); do not give "
                     "--resume, --preset or --config with it");
  // The config: a resumed run's own (its checkpoint's, or the config.json of a run that stopped
  // before its first checkpoint), an --init-from checkpoint's, or the preset / file; then --set.
  const bool own = resume && !out.empty() && (has_checkpoint(out) || std::filesystem::exists(out + "/config.json") ||
                                              std::filesystem::exists(out + "/model.safetensors"));
  auto resolve = [&] {
    if (!own && init_from.empty()) return cfg.resolve();
    std::string from = init_from;
    if (!from.empty() && std::filesystem::is_directory(from)) from += "/model.safetensors";
    Config c = own ? run_config(out) : LanguageModel::load(from).config();
    if (own && cfg.explicit_base() && !quiet)
      std::fprintf(stderr, "resuming %s: its saved config is used (--preset / --config are ignored)\n", out.c_str());
    cfg.apply_sets(c);  // on resume, train() refuses keys that may not change
    return c;
  };
  // Your own text: --data FILE, or data_train set without data_val, holds out the file's last
  // val_split for validation rather than validating on the preset's corpus.
  auto with_data = [&](Config c) {
    const bool train_set = cfg.sets_key("data_train"), val_set = cfg.sets_key("data_val");
    if (!data.empty()) {
      if (train_set) throw UsageError("train: --data FILE is data_train; give one of --data and --set data_train");
      c.data_train = data;
      if (!val_set) c.data_val = "";
    } else if (!own && init_from.empty()) {
      std::string note;
      c = with_own_data(c, train_set, val_set, &note);
      if (!quiet && !note.empty()) std::fprintf(stderr, "note: %s\n", note.c_str());
    }
    return c;
  };
  if (print_config) {
    Config c = with_data(resolve());
    if (steps >= 0) c.steps = steps;
    std::printf("%s\n", c.to_json_text(2).c_str());
    return 0;
  }
  if (out.empty()) throw UsageError("train: --out DIR is required (see 'looplm train --help')");
  // Under mpirun every rank runs this command; rank 0 alone owns DIR and prints (docs/training.md).
  start_distributed();
  const bool lead = rank_in_job() == 0;
  if (!lead) quiet = true;
  std::optional<RunLock> lock;
  if (lead) lock.emplace(out);  // before the run's config is read: another trainer may be writing it
  Config c = with_data(resolve());
  if (steps >= 0) c.steps = steps;
  if (!quiet) std::fprintf(stderr, "config:\n%s", c.summary().c_str());
  TrainOptions o;
  o.out_dir = out;
  o.resume = resume;
  o.overwrite = overwrite;
  o.init_from = init_from;
  o.stop_after = stop_after;
  o.quiet = quiet;
  o.allreduce_bucket_bytes = (size_t)(bucket_mb * 1048576.0);
  TrainResult r;
  {
    // while training, Ctrl-C finishes the step, checkpoints, exits 130
    GracefulStop graceful("stopping after this step with a checkpoint (resume with --resume; again to quit at once)");
    o.stop = graceful.flag();
    r = train(c, o);
  }
  if (r.interrupted) return 130;         // 128 + SIGINT, as if killed, but with a checkpoint
  if (!r.complete || !lead) return 0;    // --stop-after: no report yet; the report is rank 0's

  print_report(r, out, sample_len, prompt);
  return 0;
}

}  // namespace looplm::cli
