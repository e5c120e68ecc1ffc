// `looplm info`: what a config (a preset, a config file or a checkpoint's) builds — layout, unique
// parameters, unrolled depth, FLOPs per token, memory per token — and, for a looped model, the
// dense controls a fair comparison needs: the dense depth with the same FLOPs (iso-FLOP) and with
// the same parameters (iso-param).
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "cli_common.h"
#include "looplm/looplm.h"
#include "looplm/util.h"

namespace looplm::cli {

namespace {

std::string with_commas(int64_t v) {
  std::string s = std::to_string(v), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out;
}

}  // namespace

int cmd_info(int argc, char** argv) {
  CLI::App app{"What a config builds: layout, parameters, unrolled depth, FLOPs and memory per token, dense controls.",
               "looplm info"};
  ConfigArgs ca;
  ca.add(app, "looped");
  std::string ckpt;
  bool as_json = false, no_measure = false;
  app.add_option("--checkpoint", ckpt, "a model.safetensors (or run directory): its config")->type_name("PATH");
  app.add_flag("--json", as_json, "print one JSON object");
  app.add_flag("--no-measure", no_measure, "skip measuring activation memory (one forward and backward at batch 1)");
  if (!parse(app, argc, argv, "info")) return 0;
  if (!ckpt.empty() && ca.explicit_base()) throw UsageError("--checkpoint names the config; do not give --preset or --config too");
  Config c;
  CheckpointSummary ck;  // a checkpoint's weights: their format and bytes (a quantized one's packed matrices)
  if (!ckpt.empty()) {
    ck = inspect_checkpoint(ckpt);
    c = ck.config;
    ca.apply_sets(c);
  } else {
    c = ca.resolve();
  }
  const ModelDescription d = describe_model(c, !no_measure);
  const ParamCounts& n = d.params;
  const int N = d.unrolled_depth;
  const double infer = d.infer_flops_per_token, train = d.train_flops_per_token, kv_bytes = d.kv_cache_bytes_per_token;
  const double act = d.activation_bytes_per_token, act_grad = d.activation_grad_bytes_per_token;
  const bool looped = d.looped;
  const DenseControl &iso_flop = d.iso_flop, &iso_param = d.iso_param;
  const std::string weights = ck.weights;
  const double weight_bytes = (double)ck.packed_bytes, file_bytes = (double)ck.file_bytes;
  const size_t n_matrices = ck.packed_matrices;

  if (as_json) {
    nlohmann::json j = {
        {"layout", {{"n_prelude", c.n_prelude}, {"n_core", c.n_core}, {"R", c.R}, {"n_coda", c.n_coda},
                    {"block", c.block}, {"loop_rule", c.loop_rule}, {"d_model", c.d_model}, {"n_heads", c.n_heads},
                    {"n_kv_heads", c.kv_heads()}, {"d_head", c.head_dim()}, {"context", c.context}, {"vocab_size", c.vocab_size}}},
        {"params", n.total},
        {"params_non_embedding", n.non_embedding()},
        {"params_embedding", n.embedding},
        {"params_by_section", {{"prelude", n.prelude}, {"core", n.core}, {"coda", n.coda}, {"loop", n.loop}, {"other", n.other}}},
        {"unrolled_depth", N},
        {"infer_flops_per_token", infer},
        {"train_flops_per_token", train},
        {"flops_per_token_parts", {{"prelude", d.flops_prelude}, {"core_per_step", d.flops_core_per_step},
                                   {"rule_per_step", d.flops_rule_per_step}, {"coda", d.flops_coda}, {"head", d.flops_head}}},
        {"kv_cache_bytes_per_token", kv_bytes}};
    if (!ckpt.empty()) {
      j["weights"] = weights;
      j["file_bytes"] = file_bytes;
      if (n_matrices) j["packed_matrix_bytes"] = weight_bytes;
    }
    if (act >= 0) {
      j["activation_bytes_per_token"] = act;
      j["activation_grad_bytes_per_token"] = act_grad;
    }
    if (looped) {
      for (auto [key, dc] : {std::pair{"iso_flop_dense", &iso_flop}, std::pair{"iso_param_dense", &iso_param}})
        j[key] = {{"n_core", dc->n_core}, {"params", dc->params.total}, {"params_non_embedding", dc->params.non_embedding()},
                  {"infer_flops_per_token", dc->infer_flops_per_token}};
    }
    j["looplm_version"] = version_text();
    j["cpu_features"] = cpu_features_text();
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }

  const double M = 1e6;
  const std::string heads = c.kv_heads() == c.n_heads ? std::to_string(c.n_heads) + " heads of " + std::to_string(c.head_dim())
                                                       : std::to_string(c.n_heads) + " heads of " + std::to_string(c.head_dim()) + " on " +
                                                             std::to_string(c.kv_heads()) + " key/value heads";
  std::printf("layout: %d + %d x %d + %d (prelude + core x R + coda); %s blocks, %s loop rule; d %d, %s, context %d, vocab %d\n",
              c.n_prelude, c.n_core, c.R, c.n_coda, c.block.c_str(), c.loop_rule.c_str(), c.d_model, heads.c_str(),
              c.context, c.vocab_size);
  std::printf("unrolled depth: %d block applications at R = %d\n", N, c.R);
  if (!ckpt.empty()) {
    std::printf("weights: %s", weights.c_str());
    if (n_matrices) std::printf(" (%zu weight matrices packed, %.2f MB; the rest fp32)", n_matrices, weight_bytes / 1e6);
    std::printf(", file %.2f MB\n", file_bytes / 1e6);
  }
  std::printf("parameters: %s (embeddings %s, non-embedding %s)\n", with_commas(n.total).c_str(),
              with_commas(n.embedding).c_str(), with_commas(n.non_embedding()).c_str());
  std::printf("  prelude %s | core %s | coda %s | loop rule %s | final norm %s\n", with_commas(n.prelude).c_str(),
              with_commas(n.core).c_str(), with_commas(n.coda).c_str(), with_commas(n.loop).c_str(),
              with_commas(n.other).c_str());
  std::printf("FLOPs per token at R: inference %.2f M, training %.2f M (forward + backward = 3 x forward)\n", infer / M,
              train / M);
  std::printf("  prelude %.2f M, core %.2f M per step, loop rule %.3f M per step, coda %.2f M, lm_head %.2f M\n",
              d.flops_prelude / M, d.flops_core_per_step / M, d.flops_rule_per_step / M, d.flops_coda / M, d.flops_head / M);
  std::printf("  (matrix products and attention at its causal average, T/2 keys per query)\n");
  std::printf("memory per token: KV cache %.1f KiB (keys and values per block and loop step)", kv_bytes / 1024);
  if (act >= 0)
    std::printf("; training activations %.1f KiB + activation gradients %.1f KiB (measured: batch 1, depth R, full backprop)",
                act / 1024, act_grad / 1024);
  std::printf("\n");
  if (looped) {
    std::printf("dense controls (%s blocks, d %d):\n", c.block.c_str(), c.d_model);
    std::printf("  iso-FLOP:  n_core = %d (%.2f M FLOPs per token, %s parameters, %s non-embedding)\n", iso_flop.n_core,
                iso_flop.infer_flops_per_token / M, with_commas(iso_flop.params.total).c_str(),
                with_commas(iso_flop.params.non_embedding()).c_str());
    std::printf("  iso-param: n_core = %d (%.2f M FLOPs per token, %s parameters, %s non-embedding)\n", iso_param.n_core,
                iso_param.infer_flops_per_token / M, with_commas(iso_param.params.total).c_str(),
                with_commas(iso_param.params.non_embedding()).c_str());
  }
  std::printf("looplm %s; CPU features used: %s\n", version_text().c_str(), cpu_features_text().c_str());
  return 0;
}

}  // namespace looplm::cli
