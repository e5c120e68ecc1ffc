// Hugging Face model directories → looplm (docs/interchange.md, "Hugging Face checkpoints"):
// config.json, tokenizer.json and model.safetensors or a sharded model.safetensors.index.json,
// for the Llama family (Llama, Mistral, Qwen2: grouped-query attention, q/k/v biases), Nanbeige4.2
// (the whole stack looped, the final norm between loops), Ouro (peri-norm blocks, 4 loops, the
// learned exit gate) and Huginn-0125 (prelude, injected core, coda). The config maps to looplm's
// (here), the tensors to its parameters through the family's binding table (hf_bindings.cpp), the
// text conventions to Config::text (hf_text.cpp).
#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"
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

struct Layout {
  HfFamily family;
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
  if (l.family == HfFamily::nanbeige)
    for (const char* k : {"enable_hyper_connection", "enable_mhc", "enable_depth_attention", "qk_layernorm", "enable_double_loop_split",
                          "loop_share_kv", "loop_middle_layers"})
      if (h.flag(k, false)) throw UsageError(h.path + ": Nanbeige's \"" + k + "\" is not supported");
  if (l.family == HfFamily::nanbeige && (h.has("emb_neighbor_num") || h.has("insert_ngram_layer_idx")))
    throw UsageError(h.path + ": Nanbeige's n-gram embeddings are not supported");
  if (h.has("layer_types"))
    for (const auto& t : h.j["layer_types"])
      if (!t.is_string() || t.get<std::string>() != "full_attention")
        throw UsageError(h.path + ": layer type '" + (t.is_string() ? t.get<std::string>() : std::string("?")) + "' (looplm runs full attention)");
}


// The architectures looplm converts: config.json's architectures[0], or its model_type.
struct FamilyName {
  const char* arch;
  const char* model_type;  // "" when only the architecture names it
  HfFamily family;
};
constexpr FamilyName kFamilies[] = {
    {"LlamaForCausalLM", "", HfFamily::llama},
    {"MistralForCausalLM", "", HfFamily::llama},
    {"Qwen2ForCausalLM", "", HfFamily::llama},
    {"NanbeigeForCausalLM", "nanbeige", HfFamily::nanbeige},
    {"OuroForCausalLM", "ouro", HfFamily::ouro},
    {"RavenForCausalLM", "huginn_raven", HfFamily::huginn},  // Huginn-0125
};

HfFamily family_of(const HfConfig& h, const std::string& arch) {
  const std::string model_type = h.text("model_type", "");
  for (const FamilyName& f : kFamilies)
    if (arch == f.arch || (*f.model_type && model_type == f.model_type)) return f.family;
  std::string known;
  for (const FamilyName& f : kFamilies) known += std::string(known.empty() ? "" : ", ") + f.arch;
  throw UsageError(h.path + ": architecture '" + (arch.empty() ? model_type : arch) + "' (looplm converts " + known + ")");
}

// A number of Huginn's init_values object; `fallback` when the file has no init_values or no such key.
double huginn_init_value(const HfConfig& h, const char* key, double fallback) {
  if (!h.has("init_values")) return fallback;
  const json& iv = h.j["init_values"];
  if (!iv.is_object()) throw UsageError(h.path + ": \"init_values\" is not an object");
  if (!iv.contains(key) || iv[key].is_null()) return fallback;
  const double v = iv[key].is_number() ? iv[key].get<double>() : -1;
  if (!(v >= 0) || !std::isfinite(v))
    throw UsageError(h.path + ": \"init_values\".\"" + key + "\" holds " + io::brief_json(iv[key]) + ", not a number >= 0");
  return v;
}

// Huginn's state before the first loop, as its own code makes it: the modeling code's
// initialize_state draws a normal of std init_values.std (RavenConfig's default √(2 / (5 n_embd))
// when the file has no init_values) cut at ±3 std, times the embedding scale, and starts at zero
// when that std is 0; the training code's state_init says "like-init" (that draw) or "zero".
// looplm's like_init rule draws with std √(2 / (5 n_embd)) (times emb_scale): another std is refused.
void huginn_state(const HfConfig& h, Config& c, std::vector<std::string>& notes) {
  const std::string state_init = h.text("state_init", "like-init");
  if (state_init != "like-init" && state_init != "zero")
    throw UsageError(h.path + ": state_init '" + state_init + "' (looplm draws Huginn's \"like-init\" state, or starts from \"zero\")");
  const double std_rule = std::sqrt(2.0 / (5.0 * c.d_model)), std_file = huginn_init_value(h, "std", std_rule);
  if (std_file == 0) {
    c.set("inject_state_init", "zero");
    notes.push_back("init_values.std is 0: the recurrent state starts at zero, as Huginn's initialize_state makes it");
    return;
  }
  if (state_init == "zero") {
    c.set("inject_state_init", "zero");
    notes.push_back("state_init \"zero\": the recurrent state starts at zero (Huginn's training code; its Hugging Face modeling code "
                    "reads only init_values.std, " + std::to_string(std_file) + ", and would draw the state)");
    return;
  }
  if (std::abs(std_file - std_rule) > 1e-6 * std_rule)
    throw UsageError(h.path + ": init_values.std " + std::to_string(std_file) + " (looplm's like_init state draws with sqrt(2 / (5 n_embd)) = " +
                     std::to_string(std_rule) + ", Huginn-0125's; 0 starts from zero)");
  // Huginn draws afresh on every call; looplm from a seed and each token's position
  // (inject_state_seed), so a prompt always gives the same logits.
  c.set("inject_state_init", "like_init");
  notes.push_back("the recurrent state starts at Huginn's like-init draw, seeded (inject_state_seed 0) instead of fresh on every call: "
                  "every run of a prompt gives the same logits (the config key inject_state_init = zero starts it at zero)");
}

// Huginn-0125 (docs/interchange.md): prelude, a sandwich core looped mean_recurrence times with the
// linear injection of [state, embedding], coda; norm_f before and after the coda.
Config huginn_config(const HfConfig& h, Layout& l, std::vector<std::string>& notes) {
  Config c;
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
    if (!ok.count(v))
      throw UsageError(h.path + ": \"" + k + "\" = '" + v + "' is not Huginn-0125's (looplm converts its sandwich block, RMSNorm and SiLU-gated MLP)");
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
  c.bias = l.qkv_bias;  // q/k biases; every other bias looplm's key adds is zero (the binding table says which)
  // The embedding scale: init_values.embed_scale (RavenConfig's default √n_embd without init_values).
  c.emb_scale = huginn_init_value(h, "embed_scale", std::sqrt((double)c.d_model));
  huginn_state(h, c, notes);
  return c;
}

// Llama, Mistral, Qwen2, Nanbeige4.2 and Ouro: Llama's config keys.
Config llama_family_config(const HfConfig& h, Layout& l) {
  Config c;
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
  c.block = l.family == HfFamily::ouro ? "peri_norm" : "pre_norm";
  c.norm = "rmsnorm", c.mlp = "swiglu", c.pos = "rope", c.loop_rule = "residual";
  l.qkv_bias = l.arch == "Qwen2ForCausalLM" || h.flag("attention_bias", false);
  c.bias = l.qkv_bias;  // looplm's bias covers every linear: the binding table says which the files hold
  c.R = 1;
  if (l.family == HfFamily::nanbeige) {
    c.R = (int)h.integer("num_loops", 1, 4096, 1);
    if (c.R > 1 && !h.flag("skip_loop_final_norm", false)) c.set("loop_norm", "true");
  } else if (l.family == HfFamily::ouro) {
    c.R = (int)h.integer("total_ut_steps", 1, 4096, 4);
    c.set("loop_norm", "true");
    c.set("exit_gate", "true");
  }
  return c;
}

// A looplm parameter's values in the files: a tensor, whole or the parameter's elements from
// `offset` of a fused one, q / k rows reordered from adjacent-pair RoPE to rotate-half (Huginn).
struct Source {
  std::string name;
  std::vector<int64_t> file_shape;
  int64_t offset = 0;
  bool pair_rope = false;
};

// The table against the files: the source of each parameter filled from a tensor; `zeros` gets the
// parameters filled with zeros (absent, or optional and not in the files). Error naming a required
// tensor the files lack, what asks for it and the parameter.
std::map<std::string, Source> resolve(const std::vector<HfBinding>& table, const HfTensors& t, const Config& c, const std::string& dir,
                                      const std::string& arch, std::set<std::string>& zeros, std::vector<std::string>& notes) {
  std::map<std::string, std::vector<int64_t>> shape_of;
  for (const ParamInfo& p : Model::layout(c)) shape_of[p.name] = p.shape;
  std::map<std::string, Source> source;
  std::map<std::string, std::vector<std::string>> zeroed;  // why -> the optional tensors not in the files
  for (const HfBinding& b : table) {
    if (b.need == HfNeed::absent) {
      zeros.insert(b.param);
      continue;
    }
    if (!t.has(b.tensor)) {
      if (b.need == HfNeed::required)
        throw Error(dir + ": tensor '" + b.tensor + "' is missing; the " + arch + " model needs it for looplm's '" + b.param + "'" +
                    (b.why.empty() ? "" : " (" + b.why + ")"));
      zeros.insert(b.param);
      zeroed[b.why].push_back(b.tensor);
      continue;
    }
    source[b.param] = {b.tensor, b.file_shape.empty() ? shape_of.at(b.param) : b.file_shape, b.offset, b.pair_rope};
  }
  for (const auto& [why, tensors] : zeroed)
    notes.push_back(std::to_string(tensors.size()) + " optional tensor" + (tensors.size() > 1 ? "s" : "") + " not in the files ('" +
                    tensors[0] + "'" + (tensors.size() > 1 ? ", ..." : "") + "): " + why);
  return source;
}

// Every tensor of the files must have its place: bound, or a buffer / tied head the model recomputes.
void refuse_extra_tensors(const HfTensors& t, const std::map<std::string, Source>& source, const Config& c, const std::string& dir,
                          const std::string& arch, std::vector<std::string>& notes) {
  std::set<std::string> used;
  for (const auto& [param, src] : source) used.insert(src.name);
  for (const std::string& n : t.names()) {
    if (used.count(n)) continue;
    if (n == "lm_head.weight" && c.tie_embeddings) {  // a tied head stored anyway: the embedding is used
      notes.push_back("lm_head.weight is in the file although the embeddings are tied; the embedding is used, as the model does");
      continue;
    }
    if (n.size() > 15 && n.compare(n.size() - 15, 15, "rotary_emb.inv_freq") == 0) continue;  // a buffer, recomputed
    if (n == "freqs_cis") continue;  // Huginn's RoPE table: a buffer, recomputed
    throw Error(dir + ": tensor '" + n + "' has no place in the " + arch + " layout looplm converts");
  }
}

// The parameters' values from their sources (zeros where the table says so), checked finite.
void fill_params(Model& m, const HfTensors& t, const std::map<std::string, Source>& source, const std::set<std::string>& zeros,
                 const std::string& dir) {
  ParamStore& ps = m.params();
  const int64_t hd = m.config().head_dim();
  std::string cached_name;  // a fused tensor is read once for the params it holds
  std::vector<float> cached;
  for (size_t p = 0; p < ps.infos().size(); ++p) {
    const ParamInfo& info = ps.infos()[p];
    float* dst = ps.value((int)p);
    if (zeros.count(info.name)) {
      std::memset(dst, 0, info.numel * sizeof(float));
      continue;
    }
    const Source& src = source.at(info.name);  // check_hf_bindings: every parameter has a binding
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
}

}  // namespace

HfImportReport import_hf(const std::string& dir, const std::string& out_file) {
  HfConfig h{io::parse_json(io::read_file(dir + "/config.json", 16 << 20), dir + "/config.json"), dir + "/config.json"};
  if (!h.j.is_object()) throw UsageError(h.path + ": not a JSON object");
  const std::string arch = h.has("architectures") && h.j["architectures"].is_array() && !h.j["architectures"].empty() &&
                                   h.j["architectures"][0].is_string()
                               ? h.j["architectures"][0].get<std::string>()
                               : "";
  Layout l;
  l.family = family_of(h, arch);
  l.arch = arch.empty() ? h.text("model_type", "") : arch;
  HfImportReport rep;
  rep.arch = l.arch;
  Config c = l.family == HfFamily::huginn ? huginn_config(h, l, rep.notes) : llama_family_config(h, l);

  // The tokenizer travels in the checkpoint (docs/format.md), with the model's text conventions.
  const std::string tok_path = dir + "/tokenizer.json";
  if (!exists(tok_path)) throw Error(dir + ": no tokenizer.json (looplm reads Hugging Face fast-tokenizer files)");
  const Tokenizer tok = Tokenizer::hf_from_file(tok_path);
  if (tok.vocab_size() > c.vocab_size)
    throw Error(tok_path + ": " + std::to_string(tok.vocab_size()) + " tokens, more than the model's vocab_size " + std::to_string(c.vocab_size));
  c.tokenizer = "hf";
  c.tokenizer_json = tok.hf_json();
  c.text = read_hf_text_conventions(dir, tok, c.vocab_size, rep.notes);
  try {
    c.validate();
  } catch (const Error& e) {
    throw UsageError(h.path + ": the model it describes is not valid for looplm: " + e.what());
  }

  const std::vector<HfBinding> table = hf_bindings(l.family, l.arch, c, l.qkv_bias);
  check_hf_bindings(table, c, l.arch);
  const HfTensors t(dir);
  std::set<std::string> zeros;
  const std::map<std::string, Source> source = resolve(table, t, c, dir, l.arch, zeros, rep.notes);
  refuse_extra_tensors(t, source, c, dir, l.arch, rep.notes);
  // Shapes against the layout before anything is allocated (the config decides the model's size).
  for (const auto& [param, src] : source) {
    const std::vector<int64_t> got = t.shape(src.name);
    if (got != src.file_shape)
      throw Error(dir + ": tensor '" + src.name + "' has shape " + io::shape_str(got) + ", expected " + io::shape_str(src.file_shape));
  }

  ParamStorage storage;
  storage.grads = false;
  Model m(c, storage);
  fill_params(m, t, source, zeros, dir);
  save_model(out_file, m, {{"converted_from", dir}});  // the tokenizer and text conventions go into the metadata with the config
  std::set<std::string> read;
  for (const auto& [param, src] : source) read.insert(src.name);
  rep.tensors = (int)read.size();
  rep.shards = (int)t.shard_count();
  rep.config = c;
  return rep;
}

}  // namespace looplm
