// Config <-> JSON, --set overrides and validation: one table of fields, so a new knob is one line.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <variant>

#include <nlohmann/json.hpp>

#include "looplm/config.h"
#include "looplm/error.h"

namespace looplm {

namespace {

using json = nlohmann::json;
using Member = std::variant<int Config::*, double Config::*, bool Config::*, std::string Config::*, uint64_t Config::*>;
struct Field { const char* key; Member m; };

const std::vector<Field>& fields() {
  static const std::vector<Field> f = {
      {"vocab_size", &Config::vocab_size}, {"d_model", &Config::d_model}, {"n_heads", &Config::n_heads},
      {"context", &Config::context}, {"d_ff", &Config::d_ff}, {"n_prelude", &Config::n_prelude},
      {"n_core", &Config::n_core}, {"n_coda", &Config::n_coda}, {"R", &Config::R}, {"block", &Config::block},
      {"norm", &Config::norm}, {"mlp", &Config::mlp}, {"pos", &Config::pos}, {"rope_base", &Config::rope_base},
      {"bias", &Config::bias}, {"tie_embeddings", &Config::tie_embeddings}, {"loop_rule", &Config::loop_rule},
      {"deeploop_p", &Config::deeploop_p}, {"init_std", &Config::init_std}, {"norm_eps", &Config::norm_eps},
      {"tokenizer", &Config::tokenizer}, {"tokenizer_chars", &Config::tokenizer_chars},
      {"data_train", &Config::data_train}, {"data_val", &Config::data_val}, {"batch_size", &Config::batch_size},
      {"grad_accum", &Config::grad_accum}, {"steps", &Config::steps}, {"lr", &Config::lr},
      {"min_lr_ratio", &Config::min_lr_ratio}, {"warmup", &Config::warmup}, {"weight_decay", &Config::weight_decay},
      {"beta1", &Config::beta1}, {"beta2", &Config::beta2}, {"adam_eps", &Config::adam_eps},
      {"grad_clip", &Config::grad_clip}, {"seed", &Config::seed}, {"depth_sampler", &Config::depth_sampler},
      {"depth_sigma", &Config::depth_sigma}, {"depth_max", &Config::depth_max}, {"bptt", &Config::bptt},
      {"eval_every", &Config::eval_every}, {"eval_batches", &Config::eval_batches}, {"log_every", &Config::log_every},
  };
  return f;
}

// Edit distance, for "did you mean" hints on unknown keys.
size_t distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

const Field& find_field(const std::string& key, const std::string& origin) {
  for (auto& f : fields())
    if (key == f.key) return f;
  std::string best;
  size_t bd = 1000;
  for (auto& f : fields()) {
    size_t dd = distance(key, f.key);
    if (dd < bd) { bd = dd; best = f.key; }
  }
  std::string msg = origin + ": unknown config key '" + key + "'";
  if (bd <= 3) msg += " (did you mean '" + best + "'?)";
  throw UsageError(msg);
}

void assign_json(Config& c, const Field& f, const json& v, const std::string& origin) {
  auto bad = [&](const char* want) {
    return UsageError(origin + ": config key '" + f.key + "' must be " + want + ", got " + v.dump());
  };
  std::visit(
      [&](auto m) {
        using T = std::remove_reference_t<decltype(c.*m)>;
        if constexpr (std::is_same_v<T, bool>) {
          if (!v.is_boolean()) throw bad("true or false");
          c.*m = v.get<bool>();
        } else if constexpr (std::is_same_v<T, std::string>) {
          if (!v.is_string()) throw bad("a string");
          c.*m = v.get<std::string>();
        } else if constexpr (std::is_same_v<T, double>) {
          if (!v.is_number()) throw bad("a number");
          c.*m = v.get<double>();
        } else {  // integers: accept 12 or 12.0, reject 12.5
          if (!v.is_number()) throw bad("an integer");
          double x = v.get<double>();
          if (x != std::floor(x) || (std::is_same_v<T, uint64_t> && x < 0)) throw bad("an integer");
          c.*m = v.is_number_unsigned() ? (T)v.get<uint64_t>() : (T)v.get<int64_t>();
        }
      },
      f.m);
}

}  // namespace

std::vector<std::string> Config::keys() {
  std::vector<std::string> k;
  for (auto& f : fields()) k.push_back(f.key);
  return k;
}

Config Config::from_json_text(const std::string& text, const std::string& origin) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    throw UsageError(origin + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw UsageError(origin + ": a config must be a JSON object");
  Config c;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "preset" || it.key() == "comment") continue;  // documentation keys
    assign_json(c, find_field(it.key(), origin), it.value(), origin);
  }
  return c;
}

Config Config::from_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError("cannot read config file '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  Config c = from_json_text(ss.str(), path);
  return c;
}

std::string Config::to_json_text(int indent) const {
  json j = json::object();
  for (auto& f : fields()) std::visit([&](auto m) { j[f.key] = this->*m; }, f.m);
  return j.dump(indent);
}

void Config::set(const std::string& key, const std::string& value) {
  const Field& f = find_field(key, "--set");
  json v;
  bool is_string = std::holds_alternative<std::string Config::*>(f.m);
  if (is_string) {
    v = value;
  } else {
    try {
      v = json::parse(value);
    } catch (const json::parse_error&) {
      throw UsageError("--set " + key + "=" + value + ": '" + value + "' is not a valid value");
    }
  }
  assign_json(*this, f, v, "--set");
}

void Config::validate() const {
  auto need = [](bool ok, const std::string& msg) {
    if (!ok) throw UsageError("invalid config: " + msg);
  };
  auto one_of = [&](const std::string& key, const std::string& v, std::initializer_list<const char*> ok) {
    std::string list;
    for (auto* o : ok) {
      if (v == o) return;
      list += std::string(list.empty() ? "" : ", ") + o;
    }
    need(false, key + " = '" + v + "' (expected one of: " + list + ")");
  };
  need(vocab_size > 0 && vocab_size <= (1 << 24), "vocab_size must be in 1..16777216");
  need(d_model > 0, "d_model must be positive");
  need(n_heads > 0 && d_model % n_heads == 0, "d_model must be divisible by n_heads");
  need(head_dim() % 2 == 0 || pos != "rope", "rope needs an even head dimension");
  need(head_dim() <= 1024, "head dimension must be at most 1024");
  need(context > 0, "context must be positive");
  need(d_ff >= 0, "d_ff must be >= 0 (0 means 4*d_model)");
  need(n_prelude >= 0 && n_core >= 1 && n_coda >= 0, "need n_core >= 1 and n_prelude, n_coda >= 0");
  need(R >= 1, "R must be >= 1");
  one_of("block", block, {"pre_norm", "parallel", "sandwich"});
  one_of("norm", norm, {"rmsnorm", "layernorm"});
  one_of("mlp", mlp, {"gelu", "swiglu"});
  one_of("pos", pos, {"rope", "learned", "none"});
  one_of("loop_rule", loop_rule, {"residual"});
  one_of("tokenizer", tokenizer, {"byte", "char"});
  one_of("depth_sampler", depth_sampler, {"fixed", "uniform", "poisson_lognormal"});
  need(deeploop_p >= 0, "deeploop_p must be >= 0");
  need(init_std > 0 && norm_eps > 0, "init_std and norm_eps must be positive");
  need(batch_size >= 1 && grad_accum >= 1, "batch_size and grad_accum must be >= 1");
  need(steps >= 0 && warmup >= 0, "steps and warmup must be >= 0");
  need(lr > 0 && min_lr_ratio >= 0 && min_lr_ratio <= 1, "need lr > 0 and 0 <= min_lr_ratio <= 1");
  need(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1 && adam_eps > 0, "AdamW betas in [0,1), eps > 0");
  need(weight_decay >= 0 && grad_clip >= 0, "weight_decay and grad_clip must be >= 0");
  need(depth_sigma > 0 && depth_max >= 0 && bptt >= 0, "depth_sigma > 0, depth_max >= 0, bptt >= 0");
  need(eval_every >= 1 && eval_batches >= 1 && log_every >= 1, "eval_every, eval_batches, log_every must be >= 1");
}

}  // namespace looplm

namespace looplm {

const std::vector<std::pair<std::string, std::string>>& embedded_presets();  // generated

std::vector<std::string> preset_names() {
  std::vector<std::string> n;
  for (auto& p : embedded_presets()) n.push_back(p.first);
  return n;
}

Config load_preset(const std::string& name) {
  for (auto& p : embedded_presets())
    if (p.first == name) return Config::from_json_text(p.second, "preset '" + name + "'");
  std::string list;
  for (auto& p : embedded_presets()) list += (list.empty() ? "" : ", ") + p.first;
  throw UsageError("unknown preset '" + name + "' (available: " + list + ")");
}

}  // namespace looplm
