// The one typed config of a looplm model and its training run (every knob is a field, saved in
// every checkpoint: docs/format.md). Flat JSON object; keys listed in docs/config.md and by
// `looplm train --help-config`.
//
// Two kinds of keys, one namespace:
//  * the model family's and the trainer's keys are the fields below;
//  * a component (block kind, loop rule, ...) declares its own keys next to its code
//    (src/model/registry.h); their values live in `component_values` and are read with the typed
//    getters. Every key is range-checked when it is set, with a message naming the key.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace looplm {

// The largest head dimension (d_head, or d_model / n_heads): attention keeps one head's query and
// rotated key on the stack (src/ops/ops.cpp), and validation refuses a config beyond it.
inline constexpr int kMaxHeadDim = 1024;

// What a converted model says about its text beyond its tokenizer (docs/interchange.md): the ids
// that end a generation, its begin-of-text convention and its chat template, as `convert` read them
// from a Hugging Face directory (generation_config.json, tokenizer_config.json) or a GGUF file. Not
// config keys: a checkpoint stores them in its metadata under "looplm.text" (docs/format.md).
// Models trained here have none: their end-of-text token is found by name, and chat uses the
// documented convention (docs/serve.md).
struct TextConventions {
  std::vector<int32_t> eos_token_ids;  // generation ends at any of these; empty: by name (above)
  int32_t bos_token_id = -1;           // -1: none known (the tokenizer's, by name)
  int add_bos_token = -1;              // 1: a prompt starts with bos_token_id; 0: it does not; -1: not said (0)
  std::string chat_template;           // Jinja source; "": none
  // tokenizer_config.json's clean_up_tokenization_spaces: what transformers' decode does to
  // " ," and " 's" (`looplm tokenize --decode`, Python's detokenize); generation streams exact text.
  bool clean_up_tokenization_spaces = false;
  bool empty() const;
  // The metadata value: a JSON object (only the fields that are set). Parsing checks every field
  // and throws Error naming `origin` and the field.
  std::string to_json_text() const;
  static TextConventions from_json_text(const std::string& text, const std::string& origin);
};
inline constexpr const char* kTextMetadataKey = "looplm.text";

struct Config {
  // ---- model layout: tokens -> embed -> prelude -> core x R -> coda -> norm_f -> lm_head
  int vocab_size = 256;
  int d_model = 128;
  int n_heads = 4;
  int n_kv_heads = 0;       // 0 -> n_heads; fewer: grouped-query attention (n_heads a multiple of it)
  int d_head = 0;           // 0 -> d_model / n_heads
  int context = 64;         // T_max: training window and generation limit
  int d_ff = 0;             // 0 -> 4 * d_model
  int n_prelude = 0;
  int n_core = 4;
  int n_coda = 0;
  int R = 1;                // trained loop count
  std::string block = "pre_norm";      // a registered block kind
  std::string norm = "rmsnorm";        // rmsnorm | layernorm
  std::string mlp = "gelu";            // gelu | swiglu
  std::string pos = "rope";            // rope | learned | none
  double rope_base = 10000.0;
  double emb_scale = 1.0;              // the token embedding times this before the prelude (Huginn: √d)
  bool bias = false;                   // biases in attention / MLP linears (and untied lm_head)
  bool tie_embeddings = true;
  std::string loop_rule = "residual";  // a registered loop rule
  bool exit_gate = false;              // a learned exit gate λ_r = σ(w·x_r + b) (docs/systems.md, Learned exit gate)
  double deeploop_p = 0.0;             // 0: off (α = 1). >0: α = (2N)^p, β = (8N)^-p (docs/systems.md)
  double init_std = 0.02;
  double norm_eps = 1e-5;
  std::string tokenizer = "byte";      // byte | char | hf
  std::string tokenizer_chars;         // char tokenizer alphabet (UTF-8), id = index of code point
  std::string tokenizer_file;          // hf: the tokenizer.json a run starts from (stored absolute)
  // hf: that file's text. Not a config key (config.json stays small): a checkpoint stores it in its
  // metadata under "tokenizer.huggingface.json" (docs/format.md) and load_model puts it back here.
  std::string tokenizer_json;
  TextConventions text;  // the same: metadata "looplm.text", not config keys

  // ---- training
  std::string data_train = "data/kjv/train.txt";
  std::string data_val = "data/kjv/val.txt";  // "": the last val_split of data_train
  double val_split = 0.1;              // with data_val empty: the fraction of data_train held out
  std::string data_mode = "stream";    // stream | examples (data/examples.h)
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
  std::string precision = "fp32";      // fp32 | bf16: training's matrix products (docs/numerics.md)
  uint64_t seed = 1337;
  std::string depth_sampler = "fixed"; // fixed | uniform | poisson_lognormal
  double depth_sigma = 0.5;            // poisson_lognormal sigma
  int depth_max = 0;                   // poisson_lognormal clip; 0 -> 3R
  int bptt = 0;                        // keep gradients for the last k loop steps; 0 -> all
  // exit_gate training (docs/systems.md, Learned exit gate): stage I with the model, stage II alone
  std::string exit_prior = "token";    // token | batch: the entropy term of stage I
  double exit_entropy_beta = 0.05;     // β of stage I
  std::string train_only = "";         // "" | exit_gate (stage II: every other tensor frozen)
  double exit_gate_k = 50.0;           // stage II: w_r = σ(k (max(0, L_{r−1} − L_r) − γ))
  double exit_gate_gamma = 0.005;
  int eval_every = 100;                // also the checkpoint interval
  int keep_checkpoints = 2;            // last K checkpoints kept in DIR/checkpoints (0: only the latest)
  int eval_batches = 16;
  int log_every = 1;

  // ---- keys declared by components: key -> JSON text of the value, only for keys that were set
  // (an absent key reads as its declared default; to_json_text writes the keys of the block kind and
  // loop rule in use). The getters throw UsageError for a key no registered component declares,
  // or one read as another type (get_bool of a number).
  std::map<std::string, std::string> component_values;
  double get_float(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  std::string get_string(const std::string& key) const;

  int ff_dim() const { return d_ff > 0 ? d_ff : 4 * d_model; }
  int head_dim() const { return d_head > 0 ? d_head : d_model / n_heads; }
  int kv_heads() const { return n_kv_heads > 0 ? n_kv_heads : n_heads; }
  int64_t q_width() const { return (int64_t)n_heads * head_dim(); }    // the queries' (and attention output's) width
  int64_t kv_width() const { return (int64_t)kv_heads() * head_dim(); }  // the keys' and values' width
  // Attention whose queries, keys and output are d_model wide (every block kind computes that;
  // grouped-query attention and d_head are the Llama-style blocks' generalisation).
  bool plain_attention() const { return kv_heads() == n_heads && head_dim() * n_heads == d_model; }
  int n_unrolled() const { return n_prelude + n_core * R + n_coda; }  // N of docs/systems.md
  // A run's loop steps: `depth`, or the trained R when it is negative (the options' "default").
  int depth_or_R(int depth) const { return depth < 0 ? R : depth; }

  // Parse/serialise. Unknown keys and bad values throw UsageError naming the key (and `origin`).
  static Config from_json_text(const std::string& text, const std::string& origin);
  static Config from_file(const std::string& path);
  std::string to_json_text(int indent = -1) const;
  void set(const std::string& key, const std::string& value);  // --set key=value
  void validate() const;                                        // throws UsageError
  // The resolved config as readable lines "key = value" grouped like docs/config.md.
  std::string summary() const;

  // Every key (fields and component keys) with its default and meaning, for --help-config and docs.
  struct KeyDoc {
    std::string key, default_value, meaning, owner;  // owner: "model", "training" or e.g. "loop_rule gated"
  };
  static std::vector<KeyDoc> documentation();
  static std::vector<std::string> keys();
};

// Named presets: configs/NAME.json, embedded in the binary at build time.
Config load_preset(const std::string& name);
std::vector<std::string> preset_names();

}  // namespace looplm
