// `looplm generate`: sample from a checkpoint, streaming tokens as they are made, with a timing
// summary on stderr (as llama.cpp prints one).
#include <cstdio>
#include <iostream>
#include <iterator>

#include "cli.h"
#include "cli_common.h"
#include "io/atomic_file.h"
#include "looplm/looplm.h"

namespace looplm::cli {

int cmd_generate(int argc, char** argv) {
  CLI::App app{"Generate text from a checkpoint (KV cache per block and loop step).", "looplm generate"};
  std::string ckpt, prompt, prompt_file;
  int num_samples = 1;
  bool quiet = false;
  GenerateOptions g;
  LoadOptions lo;
  app.add_option("--checkpoint", ckpt, "model.safetensors (or its run directory)")->required()->type_name("FILE");
  auto* p_opt = app.add_option("-p,--prompt", prompt, "prompt text");
  auto* f_opt = app.add_option("--prompt-file", prompt_file, "read the prompt from FILE ('-': standard input)")->type_name("FILE");
  p_opt->excludes(f_opt);
  app.add_option("-n,--max-new", g.max_new, "tokens to generate (default 200)")->check(at_least(0));
  app.add_option("--num-samples", num_samples, "samples from the same prompt, seeds seed, seed+1, ... (default 1)")
      ->check(at_least(1));
  app.add_option("--temperature", g.temperature, "0 = greedy (default 1.0)")->check(at_least(0));
  app.add_option("--top-k", g.top_k, "keep the k most likely tokens (0 = off)")->check(at_least(0));
  app.add_option("--top-p", g.top_p, "nucleus sampling mass (1 = off)")->check(within(0, 1, true, "greater than 0 and at most 1"));
  app.add_option("--seed", g.seed, "sampling seed (default 0)");
  app.add_option("--depth", g.depth, "loop steps (default: the trained R; 0: none)")->check(at_least(0));
  app.add_option("--weights", lo.weights, "weight format read per token: fp32 (exact, default) or bf16 (a rounded copy: faster only for models too big for the cache)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_flag("--allow-nonfinite", lo.allow_nonfinite, "load a checkpoint whose tensors hold NaN/Inf");
  app.add_flag("--quiet", quiet, "no timing summary");
  ThreadsArg threads;
  threads.add(app);
  if (!parse(app, argc, argv, "generate")) return 0;
  set_threads(threads.n);
  if (p_opt->count() == 0 && f_opt->count() == 0)
    throw UsageError("generate: give the prompt with -p/--prompt TEXT or --prompt-file FILE ('-' for standard input)");
  if (f_opt->count() > 0) {
    if (prompt_file == "-") prompt.assign(std::istreambuf_iterator<char>(std::cin), {});
    else prompt = io::read_file(prompt_file);
    if (prompt.empty()) throw UsageError("generate: the prompt from " + (prompt_file == "-" ? std::string("standard input") : prompt_file) + " is empty");
  }

  LanguageModel lm = LanguageModel::load(ckpt, lo);
  std::vector<int32_t> ids = lm.encode(prompt);
  if ((int)ids.size() > lm.config().context)
    std::fprintf(stderr, "warning: the prompt has %zu tokens and the context holds %d: the first %zu are not seen\n",
                 ids.size(), lm.config().context, ids.size() - lm.config().context);
  GenerateStats total;
  for (int s = 0; s < num_samples; ++s) {
    if (s > 0) std::fputs("---------------\n", stdout);  // between samples, as nanoGPT's sample.py
    std::fputs(prompt.c_str(), stdout);
    GenerateStats st;
    g.stats = &st;
    // Stream each token's bytes as it is made (a byte token may be part of a UTF-8 character;
    // the terminal sees the complete sequence once its last byte arrives).
    lm.generate(ids, g, [&](int32_t t) {
      std::string str = lm.decode({t});
      std::fwrite(str.data(), 1, str.size(), stdout);
      std::fflush(stdout);
    });
    std::fputs("\n", stdout);
    total.prompt_tokens += st.prompt_tokens;
    total.prompt_seconds += st.prompt_seconds;
    total.new_tokens += st.new_tokens;
    total.gen_seconds += st.gen_seconds;
    ++g.seed;
  }
  if (!quiet)
    std::fprintf(stderr, "\nprompt: %d tokens in %.1f ms (%.1f tokens/s) | generation: %d tokens in %.1f ms (%.1f tokens/s)\n",
                 total.prompt_tokens, 1e3 * total.prompt_seconds, total.prompt_tokens / std::max(total.prompt_seconds, 1e-9),
                 total.new_tokens, 1e3 * total.gen_seconds, total.new_tokens / std::max(total.gen_seconds, 1e-9));
  return 0;
}

}  // namespace looplm::cli
