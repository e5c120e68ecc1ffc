// `looplm generate`: sample from a checkpoint, streaming tokens as they are made.
#include <cstdio>

#include "cli.h"
#include "cli_common.h"
#include "looplm/looplm.h"

namespace looplm::cli {

int cmd_generate(int argc, char** argv) {
  CLI::App app{"Generate text from a checkpoint (KV cache per block and loop step).", "looplm generate"};
  std::string ckpt, prompt;
  GenerateOptions g;
  LoadOptions lo;
  app.add_option("--checkpoint", ckpt, "model.safetensors (or its run directory)")->required()->type_name("FILE");
  app.add_option("--prompt", prompt, "prompt text")->required();
  app.add_option("--max-new", g.max_new, "tokens to generate (default 200)")->check(at_least(0));
  app.add_option("--temperature", g.temperature, "0 = greedy (default 1.0)")->check(at_least(0));
  app.add_option("--top-k", g.top_k, "keep the k most likely tokens (0 = off)")->check(at_least(0));
  app.add_option("--top-p", g.top_p, "nucleus sampling mass (1 = off)")->check(within(0, 1, true, "greater than 0 and at most 1"));
  app.add_option("--seed", g.seed, "sampling seed (default 0)");
  app.add_option("--depth", g.depth, "loop steps (default: the trained R; 0: none)")->check(at_least(0));
  app.add_option("--weights", lo.weights, "weight format read per token: fp32 (exact, default) or bf16 (about 2x faster)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_flag("--allow-nonfinite", lo.allow_nonfinite, "load a checkpoint whose tensors hold NaN/Inf");
  ThreadsArg threads;
  threads.add(app);
  if (!parse(app, argc, argv, "generate")) return 0;
  set_threads(threads.n);
  if (g.top_p <= 0) throw UsageError("generate: --top-p must be in (0, 1]");

  LanguageModel lm = LanguageModel::load(ckpt, lo);
  std::vector<int32_t> ids = lm.encode(prompt);
  if ((int)ids.size() > lm.config().context)
    std::fprintf(stderr, "warning: the prompt has %zu tokens and the context holds %d: the first %zu are not seen\n",
                 ids.size(), lm.config().context, ids.size() - lm.config().context);
  std::fputs(prompt.c_str(), stdout);
  // Stream each token's bytes as it is made (a byte token may be part of a UTF-8 character;
  // the terminal sees the complete sequence once its last byte arrives).
  lm.generate(ids, g, [&](int32_t t) {
    std::string s = lm.decode({t});
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  });
  std::fputs("\n", stdout);
  return 0;
}

}  // namespace looplm::cli
