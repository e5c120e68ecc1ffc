// `looplm train`: train a model; prints a progress line per step, validation, and at the end the
// early-exit table (loss at every depth) and a sample.
#include <cstdio>

#include "cli.h"
#include "cli_common.h"
#include "signals.h"
#include "looplm/looplm.h"

namespace looplm::cli {

int cmd_train(int argc, char** argv) {
  CLI::App app{"Train a looplm model.", "looplm train"};
  ConfigArgs cfg;
  cfg.add(app, "looped");
  std::string out;
  int steps = -1, stop_after = -1, sample_len = 300;
  bool resume = false, quiet = false;
  std::string prompt = "And God said";
  app.add_option("--out", out, "run directory (checkpoint, metrics.jsonl)")->required()->type_name("DIR");
  app.add_option("--steps", steps, "total optimizer steps of the schedule (overrides the config)")->check(CLI::NonNegativeNumber);
  app.add_option("--stop-after", stop_after, "stop with a checkpoint after this step (resume later with --resume)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--resume", resume, "continue from DIR's checkpoint if there is one");
  app.add_flag("--quiet", quiet, "no progress lines");
  app.add_option("--sample-len", sample_len, "characters of the sample printed at the end (0: none)")->check(CLI::NonNegativeNumber);
  app.add_option("--prompt", prompt, "prompt of the final sample");
  if (!parse(app, argc, argv, "train")) return 0;

  Config c = cfg.resolve();
  if (steps >= 0) c.steps = steps;
  if (!quiet) std::fprintf(stderr, "config: %s\n", c.to_json_text().c_str());
  TrainOptions o;
  o.out_dir = out;
  o.resume = resume;
  o.stop_after = stop_after;
  o.quiet = quiet;
  GracefulStop graceful;  // Ctrl-C: finish the step, checkpoint, exit 130
  o.stop = graceful.flag();
  TrainResult r = train(c, o);
  if (r.interrupted) return 130;         // 128 + SIGINT, as if killed, but with a checkpoint
  if (r.steps_done < c.steps) return 0;  // --stop-after: no report yet

  // The report: loss at every exit on the validation data, and a sample.
  LanguageModel lm = LanguageModel::load(out);
  const Config& mc = lm.config();
  EvalResult e = lm.evaluate_file(mc.data_val);
  std::printf("\nearly-exit table (validation, %lld tokens): loss at every depth r\n\n", (long long)e.tokens);
  std::printf("| r | loss | bits/token | cos(h_r, h_r-1) |\n|---|---|---|---|\n");
  for (size_t i = 0; i < e.loss_by_depth.size(); ++i)
    std::printf("| %zu | %.4f | %.3f | %.3f |\n", i + 1, e.loss_by_depth[i], e.loss_by_depth[i] / 0.6931471805599453,
                e.state_cosine[i]);
  if (sample_len > 0) {
    GenerateOptions g;
    g.max_new = sample_len;
    g.temperature = 0.8;
    g.top_k = 40;
    g.seed = mc.seed;
    std::vector<int32_t> ids = lm.generate(lm.encode(prompt), g);
    std::printf("\nsample (temperature 0.8, top-k 40):\n%s%s\n", prompt.c_str(), lm.decode(ids).c_str());
  }
  return 0;
}

}  // namespace looplm::cli
