// Which tensor of a Hugging Face checkpoint fills each looplm parameter, per family (hf_model.h,
// docs/interchange.md "What is read from a model"). Every parameter of the converted layout is
// declared here: filled from a tensor the files must have (required), from one they may have
// (optional: zeros without it), or with zeros because the family has no such tensor (absent).
// check_hf_bindings holds the table to the layout, so a parameter nothing fills is an error
// instead of a silent zero.
#include <map>
#include <set>

#include "interchange/hf_model.h"
#include "looplm/error.h"
#include "model/model.h"

namespace looplm {

namespace {

struct Table {
  std::vector<HfBinding> rows;
  void required(const std::string& param, const std::string& tensor, const std::string& why = "") {
    rows.push_back({param, tensor, HfNeed::required, why, {}, 0, false});
  }
  void optional(const std::string& param, const std::string& tensor, const std::string& why) {
    rows.push_back({param, tensor, HfNeed::optional, why, {}, 0, false});
  }
  void absent(const std::string& param, const std::string& why) { rows.push_back({param, "", HfNeed::absent, why, {}, 0, false}); }
  // A slice of a fused tensor of shape `file_shape` from element `offset`.
  void slice(const std::string& param, const std::string& tensor, std::vector<int64_t> file_shape, int64_t offset, bool pair_rope,
             const std::string& why = "") {
    rows.push_back({param, tensor, HfNeed::required, why, std::move(file_shape), offset, pair_rope});
  }
};

// Llama, Mistral, Qwen2, Nanbeige4.2 and Ouro share Llama's tensor names.
std::vector<HfBinding> llama_family(HfFamily family, const std::string& arch, const Config& c, bool qkv_bias) {
  Table t;
  const bool qwen2 = arch == "Qwen2ForCausalLM";
  const std::string qkv_why = qwen2 ? "Qwen2's attention has q/k/v biases" : "config.json's attention_bias is true";
  t.required("tok_emb.weight", "model.embed_tokens.weight");
  for (int i = 0; i < c.n_core; ++i) {
    const std::string p = "core." + std::to_string(i) + ".", q = "model.layers." + std::to_string(i) + ".";
    t.required(p + "attn_norm.weight", q + "input_layernorm.weight");
    for (const char* m : {"q", "k", "v", "o"}) t.required(p + "attn." + m + ".weight", q + "self_attn." + m + "_proj.weight");
    if (qkv_bias)
      for (const char* m : {"q", "k", "v"}) t.required(p + "attn." + m + ".bias", q + "self_attn." + m + "_proj.bias", qkv_why);
    if (c.bias) {  // looplm's bias key covers every linear; these families put biases on q/k/v (and Llama on o)
      if (qwen2) t.absent(p + "attn.o.bias", "Qwen2's o_proj has no bias");
      else t.optional(p + "attn.o.bias", q + "self_attn.o_proj.bias", "Llama's o_proj has a bias with attention_bias, other models' none: zero");
      for (const char* m : {"gate", "up", "down"}) t.absent(p + "mlp." + m + ".bias", "the MLP has no biases (mlp_bias false)");
    }
    t.required(p + "mlp_norm.weight", q + "post_attention_layernorm.weight");
    for (const char* m : {"gate", "up", "down"}) t.required(p + "mlp." + m + ".weight", q + "mlp." + m + "_proj.weight");
    if (family == HfFamily::ouro) {  // peri-norm: a second norm after attention and after the MLP
      t.required(p + "attn_post_norm.weight", q + "input_layernorm_2.weight");
      t.required(p + "mlp_post_norm.weight", q + "post_attention_layernorm_2.weight");
    }
  }
  t.required("norm_f.weight", "model.norm.weight");
  if (!c.tie_embeddings) {
    t.required("lm_head.weight", "lm_head.weight", "config.json's tie_word_embeddings is false");
    if (c.bias) t.absent("lm_head.bias", "the head has no bias");
  }
  if (family == HfFamily::ouro) {
    t.required("loop.exit_gate.weight", "model.early_exit_gate.weight", "Ouro's exit gate");
    t.required("loop.exit_gate.bias", "model.early_exit_gate.bias", "Ouro's exit gate");
  }
  return t.rows;
}

// Huginn-0125: fused q/k/v (Wqkv) and gate/up (mlp.fc) tensors, q/k biases in one qk_bias tensor,
// q / k rows for adjacent-pair RoPE.
std::vector<HfBinding> huginn(const Config& c, bool qk_bias) {
  Table t;
  const int64_t d = c.d_model, f = c.ff_dim(), H = c.n_heads, hd = c.head_dim();
  t.required("tok_emb.weight", "transformer.wte.weight");
  auto section = [&](const std::string& ls, const std::string& hs, int n) {
    for (int i = 0; i < n; ++i) {
      const std::string p = ls + "." + std::to_string(i) + ".", q = "transformer." + hs + "." + std::to_string(i) + ".";
      t.required(p + "attn_norm.weight", q + "norm_1.weight");
      t.required(p + "attn_post_norm.weight", q + "norm_2.weight");
      t.required(p + "mlp_norm.weight", q + "norm_3.weight");
      t.required(p + "mlp_post_norm.weight", q + "norm_4.weight");
      t.slice(p + "attn.q.weight", q + "attn.Wqkv.weight", {3 * d, d}, 0, true);  // rows Q | K | V
      t.slice(p + "attn.k.weight", q + "attn.Wqkv.weight", {3 * d, d}, d * d, true);
      t.slice(p + "attn.v.weight", q + "attn.Wqkv.weight", {3 * d, d}, 2 * d * d, false);
      if (qk_bias) {  // qk_bias [2, 1, H, hd]: q's, then k's
        t.slice(p + "attn.q.bias", q + "attn.qk_bias", {2, 1, H, hd}, 0, true, "config.json's qk_bias is true");
        t.slice(p + "attn.k.bias", q + "attn.qk_bias", {2, 1, H, hd}, d, true, "config.json's qk_bias is true");
      }
      if (c.bias) {  // looplm's bias key (on for the q/k biases) covers every linear
        t.absent(p + "attn.v.bias", "Huginn's qk_bias holds q and k biases only");
        t.absent(p + "attn.o.bias", "Huginn's attention projection has no bias");
        for (const char* m : {"gate", "up", "down"}) t.absent(p + "mlp." + m + ".bias", "Huginn's MLP has no biases");
      }
      t.required(p + "attn.o.weight", q + "attn.proj.weight");
      t.slice(p + "mlp.gate.weight", q + "mlp.fc.weight", {2 * f, d}, 0, false);  // rows gate | up
      t.slice(p + "mlp.up.weight", q + "mlp.fc.weight", {2 * f, d}, f * d, false);
      t.required(p + "mlp.down.weight", q + "mlp.proj.weight");
    }
  };
  section("prelude", "prelude", c.n_prelude);
  section("core", "core_block", c.n_core);
  section("coda", "coda", c.n_coda);
  t.required("loop.proj.weight", "transformer.adapter.weight");
  if (c.bias) t.absent("loop.proj.bias", "Huginn's adapter has no bias (bias false)");
  t.required("norm_f.weight", "transformer.ln_f.weight");
  if (!c.tie_embeddings) {
    t.required("lm_head.weight", "lm_head.weight", "config.json's tie_embeddings is false");
    if (c.bias) t.absent("lm_head.bias", "the head has no bias");
  }
  return t.rows;
}

}  // namespace

std::vector<HfBinding> hf_bindings(HfFamily family, const std::string& arch, const Config& c, bool qkv_bias) {
  return family == HfFamily::huginn ? huginn(c, qkv_bias) : llama_family(family, arch, c, qkv_bias);
}

void check_hf_bindings(const std::vector<HfBinding>& table, const Config& c, const std::string& arch) {
  const std::vector<ParamInfo> layout = Model::layout(c);
  std::set<std::string> params;
  for (const ParamInfo& p : layout) params.insert(p.name);
  std::set<std::string> bound;
  for (const HfBinding& b : table) {
    if (!params.count(b.param))
      throw Error(arch + ": the binding table fills looplm parameter '" + b.param + "', which the converted layout does not have");
    if (!bound.insert(b.param).second) throw Error(arch + ": the binding table fills looplm parameter '" + b.param + "' twice");
  }
  for (const ParamInfo& p : layout)
    if (!bound.count(p.name))
      throw Error(arch + ": nothing in the " + arch + " binding table fills looplm parameter '" + p.name +
                  "' (the converted config asks for a parameter this family's files do not define)");
}

}  // namespace looplm
