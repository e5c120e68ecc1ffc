// `looplm generate`: sample from a checkpoint, streaming tokens as they are made, with a timing
// summary on stderr (as llama.cpp prints one).
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "cli_common.h"
#include "looplm/looplm.h"
#include "looplm/util.h"

namespace looplm::cli {

namespace {
constexpr int kAutoSpeculativeMinTokens = 1000;  // greedy generate runs --speculative auto from here

// --speculative K (>= 1; 0: plain decoding) or auto (-1).
int speculative_of(const std::string& s) {
  if (s == "auto") return -1;
  size_t used = 0;
  long k = 0;
  try {
    k = std::stol(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s.size() || k < 0 || k > 1 << 20)
    throw UsageError("generate: --speculative takes K (a number of drafts, 1 or more; 0: plain decoding) or auto, not '" + brief(s) + "'");
  return (int)k;
}

void add_stats(GenerateStats& total, const GenerateStats& st) {
  total.prompt_tokens += st.prompt_tokens;
  total.prompt_seconds += st.prompt_seconds;
  total.new_tokens += st.new_tokens;
  total.gen_seconds += st.gen_seconds;
  total.mean_steps += st.mean_steps * st.new_tokens;  // summed per token; print_stats divides
  total.computed_steps += st.computed_steps * st.new_tokens;
  total.kv_bytes_per_token = st.kv_bytes_per_token;
  total.draft_tokens += st.draft_tokens;
  total.accepted_tokens += st.accepted_tokens;
  total.weight_streams += st.weight_streams;
  total.speculative = st.speculative;
  total.draft_depth = st.draft_depth;
  total.speculative_why = st.speculative_why;
}

// Every (prompt, sample) sequence in batches of `batch` (sequence i samples with seed + i), each
// printed whole after its prompt (or as a JSONL line), text in whole characters.
void generate_in_batches(const LanguageModel& lm, const std::vector<std::vector<int32_t>>& ids,
                         const std::vector<std::string>& texts, const std::vector<int>& text_of, GenerateOptions g, int batch,
                         bool jsonl, GenerateStats& total) {
  const uint64_t seed0 = g.seed;
  for (size_t i0 = 0; i0 < ids.size(); i0 += batch) {
    const size_t n = std::min(ids.size() - i0, (size_t)batch);
    std::vector<std::vector<int32_t>> chunk(ids.begin() + i0, ids.begin() + i0 + n);
    GenerateStats st;
    g.stats = &st;
    g.seed = seed0 + i0;
    const auto outs = lm.generate_batch(chunk, g);
    for (size_t k = 0; k < n; ++k) {
      const size_t i = i0 + k;
      const std::string& text = texts[text_of[i]];
      TextStream ts = lm.text_stream({g.stop, false});
      std::string completion;
      for (int32_t t : outs[k]) completion += ts.push(t);
      completion += ts.finish();
      if (jsonl) {
        // completion: the bytes as text (invalid UTF-8 becomes U+FFFD); tokens: the ids, lossless
        nlohmann::json j = {{"prompt", text}, {"completion", completion}, {"tokens", outs[k]}, {"seed", seed0 + i}};
        std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
        continue;
      }
      if (i > 0) std::fputs("---------------\n", stdout);  // between samples, as nanoGPT's sample.py
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fwrite(completion.data(), 1, completion.size(), stdout);
      std::fputs("\n", stdout);
    }
    std::fflush(stdout);
    add_stats(total, st);
  }
}

// The summary line(s) on stderr: prompt and generation rates, early exit's steps and KV bytes per
// token, speculative decoding's acceptance.
void print_stats(const GenerateStats& total, const GenerateOptions& g, const ExitArgs& ex, size_t sequences, int batch, int R) {
  std::fprintf(stderr, "\nprompt: %d tokens in %.1f ms (%.1f tokens/s) | generation: %d tokens in %.1f ms (%.1f tokens/s)",
               total.prompt_tokens, 1e3 * total.prompt_seconds, total.prompt_tokens / std::max(total.prompt_seconds, 1e-9),
               total.new_tokens, 1e3 * total.gen_seconds, total.new_tokens / std::max(total.gen_seconds, 1e-9));
  if (sequences > 1) std::fprintf(stderr, " | %zu sequences, batches of %d", sequences, std::min<int>(batch, (int)sequences));
  if (g.exit.rule != ExitRule::fixed) {
    // What the exit saved: the steps to each token's exit, and the steps computed (per_step runs
    // the rest for the cache, so it saves none).
    const int n = std::max(total.new_tokens, 1);
    const double to_exit = total.mean_steps / n, computed = total.computed_steps / n;
    const int depth = g.depth < 0 ? R : g.depth;
    std::fprintf(stderr, "\nearly exit %s %s %g: %.3f loop steps per token to its exit, %.3f computed of %d (%.0f%% of the loop's compute saved%s) | kv policy %s: %.0f bytes per token",
                 ex.rule.c_str(), g.exit.rule == ExitRule::gate ? ">=" : "<", ex.threshold, to_exit, computed, depth,
                 100.0 * (1 - computed / std::max(depth, 1)),
                 g.kv_policy == KvPolicy::per_step ? ": per_step runs the steps after an exit for the cache; --kv-policy last, first or mean skips them" : "",
                 ex.policy.c_str(), total.kv_bytes_per_token);
  }
  if (g.speculative < 0) std::fprintf(stderr, "\nspeculative auto: %s", total.speculative_why.c_str());
  if (total.draft_tokens > 0)
    std::fprintf(stderr, "\nspeculative: %lld drafts at depth %d, %lld accepted (%.1f%%), %.2f tokens per weight stream",
                 (long long)total.draft_tokens, g.speculative < 0 ? total.draft_depth : g.draft_depth, (long long)total.accepted_tokens,
                 100.0 * total.accepted_tokens / std::max<int64_t>(total.draft_tokens, 1),
                 (double)total.new_tokens / std::max(total.weight_streams, 1e-9));
  std::fprintf(stderr, "\n");
}

}  // namespace

int cmd_generate(int argc, char** argv) {
  CLI::App app{"Generate text from a checkpoint (KV cache per block and loop step).", "looplm generate"};
  std::string ckpt, prompt, prompt_file, prompts_file;
  int num_samples = 1, batch = 16;
  bool quiet = false;
  GenerateOptions g;
  LoadOptions lo;
  app.add_option("--checkpoint", ckpt, "model.safetensors (or its run directory)")->required()->type_name("FILE");
  auto* p_opt = app.add_option("-p,--prompt", prompt, "prompt text");
  auto* f_opt = app.add_option("--prompt-file", prompt_file, "read the prompt from FILE ('-': standard input)")->type_name("FILE");
  auto* ps_opt = app.add_option("--prompts", prompts_file,
                                "many prompts, generated together in batches: one per line, or JSONL (FILE.jsonl, objects "
                                "with \"prompt\"; the output is then JSONL with \"completion\" and \"tokens\")")
                     ->type_name("FILE");
  p_opt->excludes(f_opt);
  ps_opt->excludes(p_opt)->excludes(f_opt);
  app.add_option("--batch", batch, "sequences decoded together (default 16)")->check(at_least(1));
  app.add_option("-n,--max-new,--max-tokens", g.max_new, "tokens to generate (default 200)")->check(at_least(0));
  app.add_option("--num-samples", num_samples, "samples from the same prompt, seeds seed, seed+1, ... (default 1)")
      ->check(at_least(1));
  auto* temp_opt = app.add_option("--temperature", g.temperature, "0 = greedy (default 1.0; with --speculative 0)")->check(at_least(0));
  app.add_option("--top-k", g.top_k, "keep the k most likely tokens (0 = off)")->check(at_least(0));
  app.add_option("--top-p", g.top_p, "nucleus sampling mass (1 = off)")->check(within(0, 1, true, "greater than 0 and at most 1"));
  auto* seed_opt = app.add_option("--seed", g.seed, "sampling seed (default: a random one, printed, so a sample can be repeated)");
  app.add_option("--depth", g.depth, "loop steps (default: the trained R; 0: none)")->check(at_least(0));
  ExitArgs ex;
  ex.add(app, " (default per_step)");
  std::string speculative;
  auto* spec_opt = app.add_option("--speculative", speculative,
                                  "self-speculative decoding: draft K tokens with the first --draft-depth loop steps, verify them with "
                                  "the remaining steps in one pass (greedy: plain greedy decoding's output; sampling: its "
                                  "distribution); auto: measure whether and how drafting pays here, and choose K and the depth; "
                                  "0: plain decoding (default: auto with --temperature 0 and -n 1000 or more, else 0)")
                       ->type_name("K|auto");
  app.add_option("--draft-depth", g.draft_depth, "the draft's loop steps (1 .. depth - 1), with --speculative")->check(at_least(1));
  app.add_option("--weights", lo.weights,
                 "weight format read per token: " + joined(available_weight_formats()) +
                     " (default: the checkpoint's own; bf16 / q8_0 / q4_0 / q4_k copies are made at load)")
      ->check(weights_check());
  app.add_option("--kv-cache", g.kv_cache,
                 "KV cache precision: fp32 (exact), bf16 (half the bytes each attention pass reads: faster batched "
                 "decoding; logits within ~1e-2) or int8 (a quarter: each head vector in 8 bits with one scale) "
                 "(default fp32)")
      ->check(CLI::IsMember(available_kv_caches()))
      ->type_name("TYPE");
  app.add_flag("--ignore-eos", g.ignore_eos, "go on past the model's end tokens (they end a sample otherwise)");
  app.add_option("--stop", g.stop, "end a sample's text before TEXT (repeatable)")->type_name("TEXT");
  std::vector<std::string> biases;
  app.add_option("--logit-bias", biases, "ID=BIAS: add BIAS (-100 to 100) to token ID's logit before it is chosen (repeatable)")
      ->type_name("ID=BIAS");
  app.add_flag("--allow-nonfinite", lo.allow_nonfinite, "load a checkpoint whose tensors hold NaN/Inf");
  app.add_flag("--quiet", quiet, "no timing summary");
  ThreadsArg threads;
  threads.add(app);
  if (!parse(app, argc, argv, "generate")) return 0;
  const size_t temperature_given = temp_opt->count();
  for (const std::string& b : biases) g.logit_bias.push_back(parse_logit_bias(b, "generate"));
  set_threads(threads.n);
  g.exit = ex.exit();
  if (spec_opt->count() > 0) g.speculative = speculative_of(speculative);
  // Greedy decoding drafts where that pays: auto measures it, and its output is plain greedy
  // decoding's token for token (it falls back to plain decoding where drafting does not pay, for
  // several prompts and for an exit rule). Measuring costs ~70 plain tokens' time on a d640 model
  // (0.3-1.2 s), lost where drafting does not pay (bench/README.md, Self-speculative decoding): from
  // 1000 tokens that is under a tenth of the run; shorter greedy runs decode plainly unless auto
  // is asked for.
  else if (temperature_given > 0 && g.temperature == 0 && g.draft_depth == 0 && g.max_new >= kAutoSpeculativeMinTokens)
    g.speculative = -1;
  if (g.speculative < 0 && g.draft_depth > 0) throw UsageError("generate: --speculative auto chooses the draft depth (no --draft-depth)");
  if ((g.speculative > 0) != (g.draft_depth > 0))
    throw UsageError("generate: --speculative K and --draft-depth r go together");
  if (g.speculative != 0 && temperature_given == 0) g.temperature = 0;  // speculative decoding defaults to greedy
  g.kv_policy = ex.kv_policy();
  if (g.depth == 0 && g.exit.rule != ExitRule::fixed)
    throw UsageError("generate: --exit-rule " + ex.rule + " needs loop steps (--depth 0 runs none)");
  if (p_opt->count() == 0 && f_opt->count() == 0 && ps_opt->count() == 0)
    throw UsageError("generate: give the prompt with -p/--prompt TEXT, --prompt-file FILE ('-' for standard input) or --prompts FILE");
  if (f_opt->count() > 0) {
    prompt = read_file_bytes(prompt_file == "-" ? "/dev/stdin" : prompt_file);  // bounded by the memory budget
    if (prompt.empty()) throw UsageError("generate: the prompt from " + (prompt_file == "-" ? std::string("standard input") : prompt_file) + " is empty");
  }
  bool jsonl = false;
  std::vector<std::string> texts = ps_opt->count() > 0 ? read_prompts(prompts_file, jsonl) : std::vector<std::string>{prompt};

  LanguageModel lm = LanguageModel::load(ckpt, lo);
  const int R = lm.config().R;
  if (!quiet) {
    note_depth_beyond(g.depth, R, " (looplm eval --depth " + std::to_string(g.depth) + " measures it)");
    ex.note_unused_policy("");
  }
  // Sampling varies from run to run unless --seed is given; the seed used is printed to repeat it.
  if (seed_opt->count() == 0) draw_seed(g, quiet, "this sample");
  const int ctx = lm.config().context;
  std::vector<std::vector<int32_t>> ids;  // every (prompt, sample): sequence i samples with seed + i
  std::vector<int> text_of;
  for (size_t p = 0; p < texts.size(); ++p) {
    std::vector<int32_t> t = encode_prompt(lm, texts[p], texts.size() == 1 ? "the prompt" : "prompt " + std::to_string(p + 1));
    if (t.empty()) throw UsageError("generate: prompt " + std::to_string(p + 1) + " is empty");
    if ((int)t.size() > ctx) {
      const std::string which = texts.size() == 1 ? "the prompt" : "prompt " + std::to_string(p + 1);
      std::fprintf(stderr, "warning: %s has %zu tokens and the context holds %d: the first %zu are not seen\n",
                   which.c_str(), t.size(), ctx, t.size() - ctx);
    }
    for (int s = 0; s < num_samples; ++s) {
      ids.push_back(t);
      text_of.push_back((int)p);
    }
  }
  GenerateStats total;
  // One sequence from -p / --prompt-file: stream each token's bytes as it is made. --prompts always
  // takes the batch path, however many prompts the file holds (the prompt echoed, JSONL kept).
  if (ids.size() == 1 && ps_opt->count() == 0) {
    std::fputs(prompt.c_str(), stdout);
    GenerateStats st;
    g.stats = &st;
    // Each token's text as it comes, in whole characters (a character split across tokens is
    // printed when its last byte arrives).
    TextStream text = lm.text_stream({g.stop, false});
    auto print = [](const std::string& s) {
      std::fwrite(s.data(), 1, s.size(), stdout);
      std::fflush(stdout);
    };
    lm.generate(ids[0], g, [&](int32_t t) { print(text.push(t)); });
    print(text.finish());
    std::fputs("\n", stdout);
    add_stats(total, st);
  } else {
    generate_in_batches(lm, ids, texts, text_of, g, batch, jsonl, total);
  }
  if (!quiet) print_stats(total, g, ex, ids.size(), batch, R);
  return 0;
}

}  // namespace looplm::cli
