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

enum class Family { llama, nanbeige, ouro };

struct Layout {
  Family family;
  std::string arch;  // the architectures[0] name
  int kv_heads = 0;
  bool qkv_bias = false;
};

// The keys a family's files carry whose non-default values looplm does not compute: refused with
// exit 2 (a silently different model would be worse).
void refuse_unsupported(const HfConfig& h, const Layout& l, int64_t d, int64_t heads) {
  const std::string act = h.text("hidden_act", "silu");
  if (act != "silu") throw UsageError(h.path + ": hidden_act '" + act + "' (looplm's Llama MLP is SwiGLU: silu)");
  if (h.has("rope_scaling")) {
    const json& rs = h.j["rope_scaling"];
    const std::string type = rs.is_object() ? rs.value("rope_type", rs.value("type", std::string("?"))) : "?";
    if (type != "default") throw UsageError(h.path + ": rope_scaling '" + type + "' is not supported (looplm's RoPE has no scaling)");
  }
  if (h.has("head_dim") && h.integer("head_dim", 1, 1 << 16) * heads != d)
    throw UsageError(h.path + ": head_dim " + std::to_string(h.integer("head_dim", 1, 1 << 16)) + " with " + std::to_string(heads) +
                     " heads is not hidden_size " + std::to_string(d) + " (looplm's heads split the residual width)");
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
  } else {
    throw UsageError(h.path + ": architecture '" + (arch.empty() ? model_type : arch) +
                     "' (looplm converts LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, NanbeigeForCausalLM and "
                     "OuroForCausalLM)");
  }
  l.arch = arch.empty() ? model_type : arch;

  Config c;
  c.d_model = (int)h.integer("hidden_size", 1, 65536);
  c.n_heads = (int)h.integer("num_attention_heads", 1, 65536);
  l.kv_heads = (int)h.integer("num_key_value_heads", 1, c.n_heads, c.n_heads);
  if (c.n_heads % l.kv_heads) throw UsageError(h.path + ": num_attention_heads is not a multiple of num_key_value_heads");
  if (c.d_model % c.n_heads) throw UsageError(h.path + ": hidden_size is not a multiple of num_attention_heads");
  refuse_unsupported(h, l, c.d_model, c.n_heads);
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
  HfImportReport rep;
  rep.arch = l.arch;
  if (l.kv_heads != c.n_heads)
    rep.notes.push_back("grouped-query attention (" + std::to_string(l.kv_heads) + " key/value heads for " + std::to_string(c.n_heads) +
                        " query heads) is expanded to one key/value head per query head: the same model, with larger k / v "
                        "matrices and KV cache (looplm has no grouped-query attention yet)");

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
  // looplm param -> the file's tensor name (and how to read it).
  struct Source {
    std::string name;
    bool expand_kv = false;  // GQA: each key/value head's rows repeated for its query heads
  };
  std::map<std::string, Source> source;
  std::set<std::string> used;
  auto bind = [&](const std::string& ln, const std::string& hn, bool expand = false) {
    if (!t.has(hn)) throw Error(dir + ": tensor '" + hn + "' is missing");
    source[ln] = {hn, expand && l.kv_heads != c.n_heads};
    used.insert(hn);
  };
  bind("tok_emb.weight", "model.embed_tokens.weight");
  for (int i = 0; i < c.n_core; ++i) {
    const std::string p = "core." + std::to_string(i) + ".", q = "model.layers." + std::to_string(i) + ".";
    bind(p + "attn_norm.weight", q + "input_layernorm.weight");
    for (const char* m : {"q", "k", "v", "o"})
      bind(p + "attn." + m + ".weight", q + "self_attn." + m + "_proj.weight", m[0] == 'k' || m[0] == 'v');
    if (l.qkv_bias)
      for (const char* m : {"q", "k", "v"}) bind(p + "attn." + m + ".bias", q + "self_attn." + m + "_proj.bias", m[0] == 'k' || m[0] == 'v');
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
  for (const std::string& n : t.names()) {
    if (used.count(n)) continue;
    if (n == "lm_head.weight" && c.tie_embeddings) {  // a tied head stored anyway: the embedding is used
      rep.notes.push_back("lm_head.weight is in the file although tie_word_embeddings is true; the embedding is used, as the model does");
      continue;
    }
    if (n.size() > 15 && n.compare(n.size() - 15, 15, "rotary_emb.inv_freq") == 0) continue;  // a buffer, recomputed
    throw Error(dir + ": tensor '" + n + "' has no place in the " + l.arch + " layout looplm converts");
  }

  // Shapes against the layout before anything is allocated (the config decides the model's size).
  const int64_t hd = c.head_dim(), group = c.n_heads / l.kv_heads;
  for (const ParamInfo& info : Model::layout(c)) {
    auto it = source.find(info.name);
    if (it == source.end()) continue;  // a bias the file lacks: zero
    std::vector<int64_t> want = info.shape;
    if (it->second.expand_kv) want[0] /= group;
    const std::vector<int64_t> got = t.shape(it->second.name);
    if (got != want) throw Error(dir + ": tensor '" + it->second.name + "' has shape " + io::shape_str(got) + ", expected " + io::shape_str(want));
  }

  ParamStorage storage;
  storage.grads = false;
  Model m(c, storage);
  ParamStore& ps = m.params();
  for (size_t p = 0; p < ps.infos().size(); ++p) {
    const ParamInfo& info = ps.infos()[p];
    float* dst = ps.value((int)p);
    auto it = source.find(info.name);
    if (it == source.end()) {
      std::memset(dst, 0, info.numel * sizeof(float));  // o / MLP / head biases of a q/k/v-bias model
      continue;
    }
    if (!it->second.expand_kv) {
      t.file(it->second.name).read_f32(it->second.name, info.shape, dst);
    } else {
      // HF's repeat_kv: key/value head j serves query heads j·g .. j·g + g − 1.
      std::vector<int64_t> shape = info.shape;
      shape[0] /= group;
      const std::vector<float> src = t.read(it->second.name, shape);
      const int64_t cols = info.shape.size() > 1 ? info.shape[1] : 1;
      for (int64_t head = 0; head < c.n_heads; ++head)
        std::memcpy(dst + head * hd * cols, src.data() + (head / group) * hd * cols, hd * cols * sizeof(float));
    }
    for (int64_t i = 0; i < (int64_t)info.numel; ++i)
      if (!std::isfinite(dst[i])) throw Error(dir + ": tensor '" + it->second.name + "' holds NaN or Inf");
  }
  save_model(out_file, m, {{"converted_from", dir}});  // the tokenizer goes into the metadata with the config
  rep.tensors = (int)used.size();
  rep.shards = (int)t.shard_count();
  rep.config = c;
  return rep;
}

}  // namespace looplm
