// `looplm eval`: deterministic loss at every exit r = 1..R over a data file.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "cli_common.h"
#include "looplm/looplm.h"

namespace looplm::cli {

int cmd_eval(int argc, char** argv) {
  CLI::App app{"Evaluate a checkpoint: mean token loss at every exit r = 1..R over consecutive windows.", "looplm eval"};
  std::string ckpt, data;
  int depth = -1;
  bool as_json = false;
  app.add_option("--checkpoint", ckpt, "model.safetensors (or its run directory)")->required()->type_name("FILE");
  app.add_option("--data", data, "text, .jsonl or .bin token file")->required()->type_name("FILE");
  app.add_option("--depth", depth, "loop steps to run (default: the trained R; more shows the curve beyond R)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--json", as_json, "print one JSON object");
  if (!parse(app, argc, argv, "eval")) return 0;

  LanguageModel lm = LanguageModel::load(ckpt);
  EvalResult e = lm.evaluate_file(data, depth);
  if (as_json) {
    nlohmann::json j = {{"loss", e.loss}, {"loss_by_depth", e.loss_by_depth}, {"state_cosine", e.state_cosine},
                        {"tokens", e.tokens}, {"windows", e.windows}, {"R", lm.config().R},
                        {"depth", (int)e.loss_by_depth.size()}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%lld tokens in %lld windows of %d\nloss %.4f (depth %d)\n\n| r | loss | cos(h_r, h_r-1) |\n|---|---|---|\n",
                (long long)e.tokens, (long long)e.windows, lm.config().context, e.loss, std::min<int>(lm.config().R, (int)e.loss_by_depth.size()));
    for (size_t i = 0; i < e.loss_by_depth.size(); ++i)
      std::printf("| %zu | %.4f | %.3f |\n", i + 1, e.loss_by_depth[i], e.state_cosine[i]);
  }
  return 0;
}

}  // namespace looplm::cli
