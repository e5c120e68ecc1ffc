// The one typed config of a looplm model and its training run (SPEC §1: every knob is a field,
// saved in every checkpoint). Flat JSON object; keys listed in docs/config.md.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace looplm {

struct Config {
  // ---- model layout: tokens -> embed -> prelude -> core x R -> coda -> norm_f -> lm_head
  int vocab_size = 256;
  int d_model = 128;
  int n_heads = 4;
  int context = 64;         // T_max: training window and generation limit
  int d_ff = 0;             // 0 -> 4 * d_model
  int n_prelude = 0;
  int n_core = 4;
  int n_coda = 0;
  int R = 1;                // trained loop count
  std::string block = "pre_norm";      // pre_norm | parallel | sandwich
  std::string norm = "rmsnorm";        // rmsnorm | layernorm
  std::string mlp = "gelu";            // gelu | swiglu
  std::string pos = "rope";            // rope | learned | none
  double rope_base = 10000.0;
  bool bias = false;                   // biases in attention / MLP linears (and untied lm_head)
  bool tie_embeddings = true;
  std::string loop_rule = "residual";  // residual
  double deeploop_p = 0.0;             // 0: off (α = 1). >0: α = (2N)^p, β = (8N)^-p (SPEC §2.2)
  double init_std = 0.02;
  double norm_eps = 1e-5;
  std::string tokenizer = "byte";      // byte | char
  std::string tokenizer_chars;         // char tokenizer alphabet (UTF-8), id = index of code point

  // ---- training
  std::string data_train = "data/kjv/train.txt";
  std::string data_val = "data/kjv/val.txt";
  int batch_size = 8;
  int grad_accum = 1;
  int steps = 1000;
  double lr = 1e-3;
  double min_lr_ratio = 0.1;           // cosine decays lr to lr * min_lr_ratio
  int warmup = 100;
  double weight_decay = 0.1;           // decoupled, matrices (ndim >= 2) only
  double beta1 = 0.9;
  double beta2 = 0.95;
  double adam_eps = 1e-8;
  double grad_clip = 1.0;              // 0: off
  uint64_t seed = 1337;
  std::string depth_sampler = "fixed"; // fixed | uniform | poisson_lognormal
  double depth_sigma = 0.5;            // poisson_lognormal sigma
  int depth_max = 0;                   // poisson_lognormal clip; 0 -> 3R
  int bptt = 0;                        // keep gradients for the last k loop steps; 0 -> all
  int eval_every = 100;                // also the checkpoint interval
  int eval_batches = 16;
  int log_every = 1;

  int ff_dim() const { return d_ff > 0 ? d_ff : 4 * d_model; }
  int head_dim() const { return d_model / n_heads; }
  int n_unrolled() const { return n_prelude + n_core * R + n_coda; }  // N in SPEC §1/§2.2

  // Parse/serialise. Unknown keys and bad values throw UsageError naming the key.
  static Config from_json_text(const std::string& text, const std::string& origin);
  static Config from_file(const std::string& path);
  std::string to_json_text(int indent = -1) const;
  void set(const std::string& key, const std::string& value);  // --set key=value
  void validate() const;                                        // throws UsageError
  static std::vector<std::string> keys();
};

// Named presets: configs/NAME.json, embedded in the binary at build time.
Config load_preset(const std::string& name);
std::vector<std::string> preset_names();

}  // namespace looplm
