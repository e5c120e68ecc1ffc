// Hugging Face model directories → looplm (docs/interchange.md, "Hugging Face checkpoints"):
// config.json, tokenizer.json and model.safetensors or a sharded model.safetensors.index.json,
// for the Llama family (Llama, Mistral, Qwen2: grouped-query attention, q/k/v biases), Nanbeige4.2
// (the whole stack looped, the final norm between loops) and Ouro (peri-norm blocks, 4 loops, the
// learned exit gate).
#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "data/tokenizer.h"
#include "interchange/hf_model.h"
#include "io/atomic_file.h"
#include "io/json_input.h"
#include "io/safetensors.h"
#include "interchange/gguf_layout.h"
#include "looplm/error.h"
#include "model/model_io.h"

namespace looplm {

namespace {

using json = nlohmann::json;

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The checkpoint's tensors by name, over its shards.
class HfTensors {
 public:
  explicit HfTensors(const std::string& dir) : dir_(dir) {
    const std::string single = dir + "/model.safetensors", index = dir + "/model.safetensors.index.json";
    if (exists(index)) {
      const json j = io::parse_json(io::read_file(index, 64 << 20), index);  // 64 MB: an index is a name per tensor
      if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
        throw Error(index + ": no \"weight_map\" object (not a sharded safetensors index)");
      for (const auto& [name, file] : j["weight_map"].items()) {
        if (!file.is_string()) throw Error(index + ": the shard of '" + name + "' is not a file name");
        const std::string f = file.get<std::string>();
        if (f.find('/') != std::string::npos || f.empty() || f[0] == '.')
          throw Error(index + ": shard name '" + io::brief(f) + "' is not a file in the model directory");
        where_[name] = f;
      }
      for (const auto& [name, f] : where_)
        if (!shards_.count(f)) {
          const std::string path = dir + "/" + f;
          if (!exists(path)) throw Error(index + ": shard " + f + " (holding '" + name + "') is missing from " + dir);
          shards_.emplace(f, io::SafetensorsFile::open(path));
        }
      for (const auto& [name, f] : where_)
        if (!shards_.at(f).has(name)) throw Error(dir + "/" + f + ": no tensor '" + name + "', which the index places there");
    } else if (exists(single)) {
      shards_.emplace("model.safetensors", io::SafetensorsFile::open(single));
      for (const std::string& n : shards_.at("model.safetensors").names()) where_[n] = "model.safetensors";
    } else {
      throw Error(dir + ": neither model.safetensors nor model.safetensors.index.json (not a Hugging Face model directory?)");
    }
  }
  bool has(const std::string& name) const { return where_.count(name) != 0; }
  const io::SafetensorsFile& file(const std::string& name) const {
    auto it = where_.find(name);
    if (it == where_.end()) throw Error(dir_ + ": tensor '" + name + "' is missing");
    return shards_.at(it->second);
  }
  std::vector<int64_t> shape(const std::string& name) const { return file(name).get(name).shape; }
  std::vector<float> read(const std::string& name, const std::vector<int64_t>& shape) const { return file(name).read_f32(name, shape); }
  std::vector<std::string> names() const {
    std::vector<std::string> n;
    for (const auto& [k, v] : where_) n.push_back(k);
    return n;
  }
  size_t shard_count() const { return shards_.size(); }

 private:
  std::string dir_;
  std::map<std::string, std::string> where_;  // tensor -> shard file
  std::map<std::string, io::SafetensorsFile> shards_;
};

// A config.json value, checked.
struct HfConfig {
  json j;
  std::string path;
  bool has(const char* k) const { return j.contains(k) && !j[k].is_null(); }
  int64_t integer(const char* k, int64_t lo, int64_t hi) const {
    if (!has(k)) throw UsageError(path + ": no \"" + k + "\"");
    if (!j[k].is_number_integer()) throw UsageError(path + ": \"" + k + "\" is not an integer");
    const int64_t v = j[k].get<int64_t>();
    if (v < lo || v > hi) throw UsageError(path + ": \"" + k + "\" = " + std::to_string(v) + " is outside " + std::to_string(lo) + ".." + std::to_string(hi));
    return v;
  }
  int64_t integer(const char* k, int64_t lo, int64_t hi, int64_t fallback) const { return has(k) ? integer(k, lo, hi) : fallback; }
  double number(const char* k, double fallback) const {
    if (!has(k)) return fallback;
    if (!j[k].is_number()) throw UsageError(path + ": \"" + k + "\" is not a number");
    return j[k].get<double>();
  }
  bool flag(const char* k, bool fallback) const {
    if (!has(k)) return fallback;
    if (!j[k].is_boolean()) throw UsageError(path + ": \"" + k + "\" is not true or false");
    return j[k].get<bool>();
  }
  std::string text(const char* k, const std::string& fallback) const {
    if (!has(k)) return fallback;
    if (!j[k].is_string()) throw UsageError(path + ": \"" + k + "\" is not a string");
    return j[k].get<std::string>();
  }
};

enum class Family { llama, nanbeige, ouro, huginn };

struct Layout {
  Family family;
  std::string arch;  // the architectures[0] name
  int kv_heads = 0;
  bool qkv_bias = false;
};

// The keys a family's files carry whose non-default values looplm does not compute: refused with
// exit 2 (a silently different model would be worse).
void refuse_unsupported(const HfConfig& h, const Layout& l) {
  const std::string act = h.text("hidden_act", "silu");
  if (act != "silu") throw UsageError(h.path + ": hidden_act '" + act + "' (looplm's Llama MLP is SwiGLU: silu)");
  if (h.has("rope_scaling")) {
    const json& rs = h.j["rope_scaling"];
    const std::string type = rs.is_object() ? rs.value("rope_type", rs.value("type", std::string("?"))) : "?";
    if (type != "default") throw UsageError(h.path + ": rope_scaling '" + type + "' is not supported (looplm's RoPE has no scaling)");
  }
  if (h.flag("use_sliding_window", false)) throw UsageError(h.path + ": sliding-window attention is not supported");
  if (h.flag("mlp_bias", false)) throw UsageError(h.path + ": mlp_bias true is not supported");
  if (h.has("partial_rotary_factor") && h.number("partial_rotary_factor", 1.0) != 1.0)
    throw UsageError(h.path + ": partial_rotary_factor " + std::to_string(h.number("partial_rotary_factor", 1.0)) + " (looplm rotates whole heads)");
  if (l.family == Family::nanbeige)
    for (const char* k : {"enable_hyper_connection", "enable_mhc", "enable_depth_attention", "qk_layernorm", "enable_double_loop_split",
                          "loop_share_kv", "loop_middle_layers"})
      if (h.flag(k, false)) throw UsageError(h.path + ": Nanbeige's \"" + k + "\" is not supported");
  if (l.family == Family::nanbeige && (h.has("emb_neighbor_num") || h.has("insert_ngram_layer_idx")))
    throw UsageError(h.path + ": Nanbeige's n-gram embeddings are not supported");
  if (h.has("layer_types"))
    for (const auto& t : h.j["layer_types"])
      if (!t.is_string() || t.get<std::string>() != "full_attention")
        throw UsageError(h.path + ": layer type '" + (t.is_string() ? t.get<std::string>() : std::string("?")) + "' (looplm runs full attention)");
}

}  // namespace

HfImportReport import_hf(const std::string& dir, const std::string& out_file) {
  HfConfig h{io::parse_json(io::read_file(dir + "/config.json", 16 << 20), dir + "/config.json"), dir + "/config.json"};
  if (!h.j.is_object()) throw UsageError(h.path + ": not a JSON object");
  Layout l;
  std::string arch = h.has("architectures") && h.j["architectures"].is_array() && !h.j["architectures"].empty() &&
                             h.j["architectures"][0].is_string()
                         ? h.j["architectures"][0].get<std::string>()
                         : "";
  const std::string model_type = h.text("model_type", "");
  if (arch == "LlamaForCausalLM" || arch == "MistralForCausalLM" || arch == "Qwen2ForCausalLM") {
    l.family = Family::llama;
  } else if (arch == "NanbeigeForCausalLM" || model_type == "nanbeige") {
    l.family = Family::nanbeige;
  } else if (arch == "OuroForCausalLM" || model_type == "ouro") {
    l.family = Family::ouro;
  } else if (arch == "RavenForCausalLM" || model_type == "huginn_raven") {
    l.family = Family::huginn;
  } else {
    throw UsageError(h.path + ": architecture '" + (arch.empty() ? model_type : arch) +
                     "' (looplm converts LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, NanbeigeForCausalLM, "
                     "OuroForCausalLM and RavenForCausalLM, Huginn-0125)");
  }
  l.arch = arch.empty() ? model_type : arch;
  HfImportReport rep;
  rep.arch = l.arch;

  Config c;
  if (l.family == Family::huginn) {
    // Huginn-0125 (docs/interchange.md): prelude, a sandwich core looped mean_recurrence times
    // with the linear injection of [state, embedding], coda; norm_f before and after the coda.
    c.d_model = (int)h.integer("n_embd", 1, 65536);
    c.n_heads = (int)h.integer("n_heads", 1, 65536);
    l.kv_heads = (int)h.integer("num_key_value_heads", 1, c.n_heads, c.n_heads);
    if (l.kv_heads != c.n_heads) throw UsageError(h.path + ": grouped-query attention in a Huginn model is not supported");
    if (c.d_model % c.n_heads) throw UsageError(h.path + ": n_embd is not a multiple of n_heads");
    if (h.has("head_dim") && h.integer("head_dim", 1, 1 << 16) * c.n_heads != c.d_model)
      throw UsageError(h.path + ": head_dim is not n_embd / n_heads");
    const std::string inj = h.text("injection_type", "linear");
    if (inj != "linear") throw UsageError(h.path + ": injection_type '" + inj + "' (looplm's inject_linear rule is Huginn's \"linear\")");
    for (const char* k : {"norm_class_name", "mlp_class_name", "nonlin_name", "block_class_name"}) {
      const std::string v = h.text(k, "");
      static const std::set<std::string> ok = {"", "RMSNorm_llama", "RMSNorm", "GatedMLP", "SiLU", "SandwichBlock"};
      if (!ok.count(v)) throw UsageError(h.path + ": \"" + k + "\" = '" + v + "' is not Huginn-0125's (looplm converts its sandwich block, RMSNorm and SiLU-gated MLP)");
    }
    if (h.flag("bias", false)) throw UsageError(h.path + ": \"bias\" true (Huginn-0125 has q/k biases only) is not supported");
    c.n_prelude = (int)h.integer("n_layers_in_prelude", 0, 1024);
    c.n_core = (int)h.integer("n_layers_in_recurrent_block", 1, 1024);
    c.n_coda = (int)h.integer("n_layers_in_coda", 0, 1024);
    c.R = (int)h.integer("mean_recurrence", 1, 4096);
    c.d_ff = (int)h.integer("intermediate_size", 1, 1 << 20);
    c.vocab_size = (int)(h.has("padded_vocab_size") ? h.integer("padded_vocab_size", 1, 1 << 24) : h.integer("vocab_size", 1, 1 << 24));
    c.context = (int)std::min<int64_t>(h.integer("block_size", 1, INT64_MAX, 4096), 1 << 20);
    c.rope_base = h.number("rope_base", 50000.0);
    c.norm_eps = h.number("norm_eps", 1e-6);
    c.tie_embeddings = h.flag("tie_embeddings", true);
    c.block = "sandwich", c.norm = "rmsnorm", c.mlp = "swiglu", c.pos = "rope", c.loop_rule = "inject_linear";
    c.set("inject_readout_norm", "true");
    l.qkv_bias = h.flag("qk_bias", false);
    c.bias = l.qkv_bias;  // q/k biases; every other bias looplm's key adds is zero
    // The embedding scale: init_values.embed_scale when the file names it, else √n_embd (Huginn-0125's).
    c.emb_scale = std::sqrt((double)c.d_model);
    if (h.has("init_values") && h.j["init_values"].is_object() && h.j["init_values"].contains("embed_scale") &&
        h.j["init_values"]["embed_scale"].is_number())
      c.emb_scale = h.j["init_values"]["embed_scale"].get<double>();
    // The state before the first loop: Huginn-0125 draws it at random ("like-init": a normal of std
    // √(2 / (5 n_embd)) cut at ±3 std, times the embedding scale) on every call; looplm draws it from
    // a seed and each token's position (inject_state_seed), so a prompt always gives the same logits.
    const std::string state_init = h.text("state_init", "like-init");
    if (state_init == "like-init") {
      c.set("inject_state_init", "like_init");
      if (h.has("init_values") && h.j["init_values"].is_object() && h.j["init_values"].contains("std") && h.j["init_values"]["std"].is_number()) {
        const double std_file = h.j["init_values"]["std"].get<double>(), std_rule = std::sqrt(2.0 / (5.0 * c.d_model));
        if (std::abs(std_file - std_rule) > 1e-6 * std_rule)
          throw UsageError(h.path + ": init_values.std " + std::to_string(std_file) + " (looplm's like_init state draws with sqrt(2 / (5 n_embd)) = " +
                           std::to_string(std_rule) + ", Huginn-0125's)");
      }
      rep.notes.push_back("the recurrent state starts at Huginn's like-init draw, seeded (inject_state_seed 0) instead of fresh on every call: "
                          "every run of a prompt gives the same logits (the config key inject_state_init = zero starts it at zero)");
    } else if (state_init == "zero") {
      c.set("inject_state_init", "zero");
    } else {
      throw UsageError(h.path + ": state_init '" + state_init + "' (looplm draws Huginn's \"like-init\" state, or starts from \"zero\")");
    }
  } else {
    c.d_model = (int)h.integer("hidden_size", 1, 65536);
    c.n_heads = (int)h.integer("num_attention_heads", 1, 65536);
    l.kv_heads = (int)h.integer("num_key_value_heads", 1, c.n_heads, c.n_heads);
    if (c.n_heads % l.kv_heads) throw UsageError(h.path + ": num_attention_heads is not a multiple of num_key_value_heads");
    if (l.kv_heads != c.n_heads) c.n_kv_heads = l.kv_heads;
    // head_dim (Nanbeige4.2, Qwen3, Mistral): the heads need not split hidden_size
    if (h.has("head_dim") && h.integer("head_dim", 1, 1024) * c.n_heads != c.d_model) c.d_head = (int)h.integer("head_dim", 1, 1024);
    if (c.d_head == 0 && c.d_model % c.n_heads)
      throw UsageError(h.path + ": hidden_size is not a multiple of num_attention_heads, and no head_dim");
    refuse_unsupported(h, l);
    c.d_ff = (int)h.integer("intermediate_size", 1, 1 << 20);
    c.n_core = (int)h.integer("num_hidden_layers", 1, 1024);
    c.vocab_size = (int)h.integer("vocab_size", 1, 1 << 24);
    c.context = (int)std::min<int64_t>(h.integer("max_position_embeddings", 1, INT64_MAX, 2048), 1 << 20);
    c.rope_base = h.number("rope_theta", 10000.0);
    c.norm_eps = h.number("rms_norm_eps", 1e-6);
    c.tie_embeddings = h.flag("tie_word_embeddings", false);  // the default of these families' configs
    c.block = l.family == Family::ouro ? "peri_norm" : "pre_norm";
    c.norm = "rmsnorm", c.mlp = "swiglu", c.pos = "rope", c.loop_rule = "residual";
    l.qkv_bias = arch == "Qwen2ForCausalLM" || h.flag("attention_bias", false);
    c.bias = l.qkv_bias;  // looplm's bias covers every linear: the ones the file lacks are zero
    c.R = 1;
    if (l.family == Family::nanbeige) {
      c.R = (int)h.integer("num_loops", 1, 4096, 1);
      if (c.R > 1 && !h.flag("skip_loop_final_norm", false)) c.set("loop_norm", "true");
    } else if (l.family == Family::ouro) {
      c.R = (int)h.integer("total_ut_steps", 1, 4096, 4);
      c.set("loop_norm", "true");
      c.set("exit_gate", "true");
    }
  }

  // The tokenizer travels in the checkpoint (docs/format.md).
  const std::string tok_path = dir + "/tokenizer.json";
  if (!exists(tok_path)) throw Error(dir + ": no tokenizer.json (looplm reads Hugging Face fast-tokenizer files)");
  const Tokenizer tok = Tokenizer::hf_from_file(tok_path);
  if (tok.vocab_size() > c.vocab_size)
    throw Error(tok_path + ": " + std::to_string(tok.vocab_size()) + " tokens, more than the model's vocab_size " + std::to_string(c.vocab_size));
  c.tokenizer = "hf";
  c.tokenizer_json = tok.hf_json();
  try {
    c.validate();
  } catch (const Error& e) {
    throw UsageError(h.path + ": the model it describes is not valid for looplm: " + e.what());
  }

  const HfTensors t(dir);
  // looplm param -> the file's tensor and how to read it: whole, or the param's values from element
  // `offset` of a fused tensor (Huginn's Wqkv, mlp.fc, qk_bias), or with q / k rows reordered from
  // adjacent-pair RoPE to rotate-half (Huginn).
  struct Source {
    std::string name;
    std::vector<int64_t> file_shape;  // the tensor's shape in the file
    int64_t offset = 0;
    bool pair_rope = false;
  };
  std::map<std::string, Source> source;
  std::set<std::string> used;
  const std::vector<ParamInfo> layout = Model::layout(c);
  std::map<std::string, const ParamInfo*> info_of;
  for (const ParamInfo& p : layout) info_of[p.name] = &p;
  auto bind_slice = [&](const std::string& ln, const std::string& hn, std::vector<int64_t> file_shape, int64_t offset, bool pair_rope) {
    if (!t.has(hn)) throw Error(dir + ": tensor '" + hn + "' is missing");
    LOOPLM_ASSERT(info_of.count(ln), "hf import: a looplm param the layout lacks");
    source[ln] = {hn, std::move(file_shape), offset, pair_rope};
    used.insert(hn);
  };
  auto bind = [&](const std::string& ln, const std::string& hn) {
    if (!t.has(hn)) throw Error(dir + ": tensor '" + hn + "' is missing");
    LOOPLM_ASSERT(info_of.count(ln), "hf import: a looplm param the layout lacks");
    source[ln] = {hn, info_of.at(ln)->shape, 0, false};
    used.insert(hn);
  };
  if (l.family == Family::huginn) {
    const int64_t d = c.d_model, f = c.ff_dim(), H = c.n_heads, hd = c.head_dim();
    bind("tok_emb.weight", "transformer.wte.weight");
    auto section = [&](const std::string& ls, const std::string& hs, int n) {
      for (int i = 0; i < n; ++i) {
        const std::string p = ls + "." + std::to_string(i) + ".", q = "transformer." + hs + "." + std::to_string(i) + ".";
        bind(p + "attn_norm.weight", q + "norm_1.weight");
        bind(p + "attn_post_norm.weight", q + "norm_2.weight");
        bind(p + "mlp_norm.weight", q + "norm_3.weight");
        bind(p + "mlp_post_norm.weight", q + "norm_4.weight");
        bind_slice(p + "attn.q.weight", q + "attn.Wqkv.weight", {3 * d, d}, 0, true);  // rows Q | K | V
        bind_slice(p + "attn.k.weight", q + "attn.Wqkv.weight", {3 * d, d}, d * d, true);
        bind_slice(p + "attn.v.weight", q + "attn.Wqkv.weight", {3 * d, d}, 2 * d * d, false);
        if (l.qkv_bias) {  // qk_bias [2, 1, H, hd]: q's, then k's (no v bias)
          bind_slice(p + "attn.q.bias", q + "attn.qk_bias", {2, 1, H, hd}, 0, true);
          bind_slice(p + "attn.k.bias", q + "attn.qk_bias", {2, 1, H, hd}, d, true);
        }
        bind(p + "attn.o.weight", q + "attn.proj.weight");
        bind_slice(p + "mlp.gate.weight", q + "mlp.fc.weight", {2 * f, d}, 0, false);  // rows gate | up
        bind_slice(p + "mlp.up.weight", q + "mlp.fc.weight", {2 * f, d}, f * d, false);
        bind(p + "mlp.down.weight", q + "mlp.proj.weight");
      }
    };
    section("prelude", "prelude", c.n_prelude);
    section("core", "core_block", c.n_core);
    section("coda", "coda", c.n_coda);
    bind("loop.proj.weight", "transformer.adapter.weight");
    bind("norm_f.weight", "transformer.ln_f.weight");
    if (!c.tie_embeddings) bind("lm_head.weight", "lm_head.weight");
  } else {
    bind("tok_emb.weight", "model.embed_tokens.weight");
    for (int i = 0; i < c.n_core; ++i) {
      const std::string p = "core." + std::to_string(i) + ".", q = "model.layers." + std::to_string(i) + ".";
      bind(p + "attn_norm.weight", q + "input_layernorm.weight");
      for (const char* m : {"q", "k", "v", "o"})
        bind(p + "attn." + m + ".weight", q + "self_attn." + m + "_proj.weight");
      if (l.qkv_bias)
        for (const char* m : {"q", "k", "v"}) bind(p + "attn." + m + ".bias", q + "self_attn." + m + "_proj.bias");
      bind(p + "mlp_norm.weight", q + "post_attention_layernorm.weight");
      for (const char* m : {"gate", "up", "down"}) bind(p + "mlp." + m + ".weight", q + "mlp." + m + "_proj.weight");
      if (l.family == Family::ouro) {
        bind(p + "attn_post_norm.weight", q + "input_layernorm_2.weight");
        bind(p + "mlp_post_norm.weight", q + "post_attention_layernorm_2.weight");
      }
    }
    bind("norm_f.weight", "model.norm.weight");
    if (!c.tie_embeddings) bind("lm_head.weight", "lm_head.weight");
    if (l.family == Family::ouro) {
      bind("loop.exit_gate.weight", "model.early_exit_gate.weight");
      bind("loop.exit_gate.bias", "model.early_exit_gate.bias");
    }
  }
  for (const std::string& n : t.names()) {
    if (used.count(n)) continue;
    if (n == "lm_head.weight" && c.tie_embeddings) {  // a tied head stored anyway: the embedding is used
      rep.notes.push_back("lm_head.weight is in the file although tie_word_embeddings is true; the embedding is used, as the model does");
      continue;
    }
    if (n.size() > 15 && n.compare(n.size() - 15, 15, "rotary_emb.inv_freq") == 0) continue;  // a buffer, recomputed
    if (n == "freqs_cis") continue;  // Huginn's RoPE table: a buffer, recomputed
    throw Error(dir + ": tensor '" + n + "' has no place in the " + l.arch + " layout looplm converts");
  }

  // Shapes against the layout before anything is allocated (the config decides the model's size).
  for (const auto& [ln, src] : source) {
    const std::vector<int64_t> got = t.shape(src.name);
    if (got != src.file_shape)
      throw Error(dir + ": tensor '" + src.name + "' has shape " + io::shape_str(got) + ", expected " + io::shape_str(src.file_shape));
  }

  ParamStorage storage;
  storage.grads = false;
  Model m(c, storage);
  ParamStore& ps = m.params();
  const int64_t hd = c.head_dim();
  std::string cached_name;  // a fused tensor is read once for the params it holds
  std::vector<float> cached;
  for (size_t p = 0; p < ps.infos().size(); ++p) {
    const ParamInfo& info = ps.infos()[p];
    float* dst = ps.value((int)p);
    auto it = source.find(info.name);
    if (it == source.end()) {
      std::memset(dst, 0, info.numel * sizeof(float));  // a bias the file lacks (q/k/v-bias models): zero
      continue;
    }
    const Source& src = it->second;
    if (src.name != cached_name) {
      cached = t.read(src.name, src.file_shape);
      cached_name = src.name;
    }
    const int64_t cols = info.shape.size() > 1 ? info.shape[1] : 1, rows = info.shape[0];
    if (src.pair_rope) {  // looplm's row r (rotate-half) is the file's row rope_target_row(r)
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(dst + r * cols, cached.data() + src.offset + gguf_layout::rope_target_row(r, hd) * cols, cols * sizeof(float));
    } else {
      std::memcpy(dst, cached.data() + src.offset, info.numel * sizeof(float));
    }
    for (int64_t i = 0; i < (int64_t)info.numel; ++i)
      if (!std::isfinite(dst[i])) throw Error(dir + ": tensor '" + src.name + "' holds NaN or Inf");
  }
  save_model(out_file, m, {{"converted_from", dir}});  // the tokenizer goes into the metadata with the config
  rep.tensors = (int)used.size();
  rep.shards = (int)t.shard_count();
  rep.config = c;
  return rep;
}

}  // namespace looplm
