// `looplm eval`: deterministic loss at every exit r = 1..depth over a data file, and the per-step
// diagnostics of the model's loop rule and blocks.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "backend/cpu/weight_format.h"
#include "cli.h"
#include "cli_common.h"
#include "looplm/looplm.h"

namespace looplm::cli {

int cmd_eval(int argc, char** argv) {
  CLI::App app{"Evaluate a checkpoint: mean token loss at every exit r = 1..depth over consecutive windows.", "looplm eval"};
  std::string ckpt, data;
  int depth = -1;
  bool as_json = false;
  LoadOptions lo;
  app.add_option("--checkpoint", ckpt, "model.safetensors (or its run directory)")->required()->type_name("FILE");
  app.add_option("--data", data, "text, .jsonl or .bin token file")->required()->type_name("FILE");
  app.add_option("--depth", depth,
                 "loop steps to run (default: the trained R; more shows the curve beyond R; 0: the loss of h_pre)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--weights", lo.weights, "weight format: " + weight_format_names() + " (default fp32, exact)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  ThreadsArg threads;
  threads.add(app);
  app.add_flag("--json", as_json, "print one JSON object");
  if (!parse(app, argc, argv, "eval")) return 0;
  set_threads(threads.n);

  LanguageModel lm = LanguageModel::load(ckpt, lo);
  EvalResult e = lm.evaluate_file(data, depth);
  const int R = lm.config().R, ran = (int)e.loss_by_depth.size();
  if (as_json) {
    nlohmann::json j = {{"loss", e.loss}, {"loss_by_depth", e.loss_by_depth}, {"diagnostics", e.diagnostics},
                        {"tokens", e.tokens}, {"windows", e.windows}, {"R", R}, {"depth", ran}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("%lld tokens in %lld windows of %d\nloss %.4f (depth %d)\n", (long long)e.tokens, (long long)e.windows,
              lm.config().context, e.loss, ran == 0 ? 0 : std::min(R, ran));
  if (ran == 0) return 0;
  std::printf("\n| r | loss |");
  for (auto& [name, v] : e.diagnostics) std::printf(" %s |", name.c_str());
  std::printf("\n|---|---|");
  for (size_t i = 0; i < e.diagnostics.size(); ++i) std::printf("---|");
  std::printf("\n");
  for (int i = 0; i < ran; ++i) {
    std::printf("| %d | %.4f |", i + 1, e.loss_by_depth[i]);
    for (auto& [name, v] : e.diagnostics) std::printf(" %.4g |", v[i]);
    std::printf("\n");
  }
  return 0;
}

}  // namespace looplm::cli
