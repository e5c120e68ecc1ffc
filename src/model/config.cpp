// Config <-> JSON, --set overrides and validation: one table of fields (key, range, meaning), so a
// new knob is one line; components declare their own keys in the registries (registry.h).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <variant>

#include <nlohmann/json.hpp>

#include "looplm/config.h"
#include "looplm/error.h"
#include "core/text.h"
#include "io/json_input.h"
#include "model/components.h"

namespace looplm {

namespace {

using json = nlohmann::json;
using Member = std::variant<int Config::*, double Config::*, bool Config::*, std::string Config::*, uint64_t Config::*>;
constexpr double kInf = std::numeric_limits<double>::infinity();

struct Range {
  double lo = -kInf, hi = kInf;
  bool lo_excl = false, hi_excl = false;
};
struct Field {
  const char* key;
  Member m;
  const char* group;  // "model" | "training"
  Range range;        // numbers
  const char* meaning;
  std::vector<std::string> (*choices)() = nullptr;  // strings with a fixed set of values
};

std::vector<std::string> block_names() { return registries().blocks.names(); }
std::vector<std::string> loop_rule_names() { return registries().loop_rules.names(); }
std::vector<std::string> norm_names() { return {"rmsnorm", "layernorm"}; }
std::vector<std::string> mlp_names() { return {"gelu", "swiglu"}; }
std::vector<std::string> pos_names() { return {"rope", "learned", "none"}; }
std::vector<std::string> tokenizer_names() { return {"byte", "char", "hf"}; }
std::vector<std::string> sampler_names() { return {"fixed", "uniform", "poisson_lognormal"}; }
std::vector<std::string> data_mode_names() { return {"stream", "examples"}; }
std::vector<std::string> precision_names() { return {"fp32", "bf16"}; }
std::vector<std::string> exit_prior_names() { return {"token", "batch"}; }
std::vector<std::string> train_only_names() { return {"", "exit_gate"}; }

const Range kPositive{0, kInf, true};
const Range kNonNeg{0, kInf};
Range ints(double lo, double hi) { return {lo, hi}; }
constexpr double kIntMax = std::numeric_limits<int>::max();

const std::vector<Field>& fields() {
  static const std::vector<Field> f = {
      {"vocab_size", &Config::vocab_size, "model", ints(1, 1 << 24), "V (byte tokenizer: 256)"},
      {"d_model", &Config::d_model, "model", ints(1, 65536), "d, the width of the residual stream"},
      {"n_heads", &Config::n_heads, "model", ints(1, 65536), "attention (query) heads"},
      {"n_kv_heads", &Config::n_kv_heads, "model", ints(0, 65536),
       "key/value heads; 0 means n_heads; fewer is grouped-query attention (n_heads / n_kv_heads query heads share one)"},
      {"d_head", &Config::d_head, "model", ints(0, kMaxHeadDim), "the head dimension; 0 means d_model / n_heads (at most 1024)"},
      {"context", &Config::context, "model", ints(1, 1 << 20), "training window and generation window (tokens)"},
      {"d_ff", &Config::d_ff, "model", ints(0, 1 << 20), "MLP width; 0 means 4 * d_model"},
      {"n_prelude", &Config::n_prelude, "model", ints(0, 1024), "blocks run once before the loop"},
      {"n_core", &Config::n_core, "model", ints(1, 1024), "blocks of the shared core, applied R times"},
      {"n_coda", &Config::n_coda, "model", ints(0, 1024), "blocks run once after the loop"},
      {"R", &Config::R, "model", ints(1, 4096), "trained loop count"},
      {"block", &Config::block, "model", {}, "block kind", block_names},
      {"norm", &Config::norm, "model", {}, "normalisation (eps norm_eps)", norm_names},
      {"mlp", &Config::mlp, "model", {}, "MLP: gelu (exact erf, d -> d_ff -> d) or swiglu", mlp_names},
      {"pos", &Config::pos, "model", {}, "positions: rope (base rope_base), learned, or none", pos_names},
      {"rope_base", &Config::rope_base, "model", {1, kInf, true}, "RoPE base θ"},
      {"emb_scale", &Config::emb_scale, "model", kPositive, "the token embedding is multiplied by this before the prelude (Huginn: sqrt(d_model))"},
      {"bias", &Config::bias, "model", {}, "biases in attention / MLP linears (and an untied head)"},
      {"tie_embeddings", &Config::tie_embeddings, "model", {}, "lm_head = tok_emb"},
      {"loop_rule", &Config::loop_rule, "model", {}, "how the state moves around the core", loop_rule_names},
      {"exit_gate", &Config::exit_gate, "model", {},
       "a learned exit gate loop.exit_gate, lambda_r = sigmoid(w . x_r + b) on each exit's final hidden state (Ouro's form; "
       "any loop rule): trained with the exit objective (exit_prior), read by --exit-rule gate; needs R > 1"},
      {"deeploop_p", &Config::deeploop_p, "model", {0, 4},
       "0: off. p > 0: sandwich α = (2N)^p and init β = (8N)^-p on attn.v, attn.o and MLP matrices (N = n_prelude + n_core·R + n_coda)"},
      {"init_std", &Config::init_std, "model", kPositive, "N(0, init_std) for matrices; attn.o, mlp.down × 1/√(2N) unless DeepLoop"},
      {"norm_eps", &Config::norm_eps, "model", {0, 1, true}, "epsilon of RMSNorm / LayerNorm"},
      {"tokenizer", &Config::tokenizer, "model", {}, "byte (256 ids), char (alphabet from data_train and data_val, stored in tokenizer_chars) or hf (a Hugging Face tokenizer.json: tokenizer_file)", tokenizer_names},
      {"tokenizer_chars", &Config::tokenizer_chars, "model", {}, "char tokenizer alphabet (UTF-8; id = index of the code point)"},
      {"tokenizer_file", &Config::tokenizer_file, "model", {},
       "hf tokenizer: the tokenizer.json a run starts from (setting it selects tokenizer hf; checkpoints carry its text)"},
      {"data_train", &Config::data_train, "training", {}, "training data: text, .jsonl or .bin (llm.c shard / nanoGPT)"},
      {"data_val", &Config::data_val, "training", {},
       "validation data (same formats); empty: the last val_split of data_train, held out from training"},
      {"val_split", &Config::val_split, "training", {0, 0.5, true},
       "with data_val empty: the fraction of data_train (the last tokens, or the last examples) held out for validation"},
      {"data_mode", &Config::data_mode, "training", {},
       "stream (windows of a token stream) or examples (prompt<TAB>answer lines, trained and evaluated on the answer)",
       data_mode_names},
      {"batch_size", &Config::batch_size, "training", ints(1, 1 << 20), "sequences per micro-batch"},
      {"grad_accum", &Config::grad_accum, "training", ints(1, 1 << 16), "micro-batches per optimizer step"},
      {"steps", &Config::steps, "training", ints(0, kIntMax), "optimizer steps of the schedule"},
      {"lr", &Config::lr, "training", kPositive, "peak learning rate (AdamW)"},
      {"min_lr_ratio", &Config::min_lr_ratio, "training", {0, 1}, "cosine decays lr to lr * min_lr_ratio"},
      {"warmup", &Config::warmup, "training", ints(0, kIntMax), "linear warmup steps"},
      {"weight_decay", &Config::weight_decay, "training", kNonNeg, "decoupled weight decay, matrices only"},
      {"beta1", &Config::beta1, "training", {0, 1, false, true}, "AdamW β1"},
      {"beta2", &Config::beta2, "training", {0, 1, false, true}, "AdamW β2"},
      {"adam_eps", &Config::adam_eps, "training", kPositive, "AdamW ε"},
      {"grad_clip", &Config::grad_clip, "training", kNonNeg, "global-norm gradient clipping; 0 = off"},
      {"precision", &Config::precision, "training", {},
       "training's matrix products: fp32, or bf16 (bf16 operands, fp32 accumulation, master weights, optimizer state and "
       "checkpoints; needs a CPU with AVX512_BF16)",
       precision_names},
      {"seed", &Config::seed, "training", {}, "init, data order, depth sampling and noise (counter-based: resumable)"},
      {"depth_sampler", &Config::depth_sampler, "training", {},
       "training depth per step: fixed (R), uniform (U{1..R}), poisson_lognormal (Poisson(LogNormal(ln R − σ²/2, depth_sigma)) + 1, clipped to depth_max or 3R)",
       sampler_names},
      {"depth_sigma", &Config::depth_sigma, "training", kPositive, "poisson_lognormal σ"},
      {"depth_max", &Config::depth_max, "training", ints(0, 3 * 4096), "poisson_lognormal clip; 0 means 3R"},
      {"exit_prior", &Config::exit_prior, "training", {},
       "exit_gate, stage I (the whole model): L = sum_r p(r) L_r - exit_entropy_beta * H, H the entropy of each token's exit "
       "distribution (token, Ouro) or of the batch's mean distribution (batch)",
       exit_prior_names},
      {"exit_entropy_beta", &Config::exit_entropy_beta, "training", kNonNeg, "exit_gate: the weight beta of the exit prior's entropy"},
      {"train_only", &Config::train_only, "training", {},
       "\"\": train every tensor; exit_gate: stage II, the gate alone on the frozen model (BCE of 1 - lambda_r against "
       "w_r = sigmoid(exit_gate_k (max(0, L_(r-1) - L_r) - exit_gate_gamma)))",
       train_only_names},
      {"exit_gate_k", &Config::exit_gate_k, "training", kPositive, "stage II: the slope k of the continue target w_r"},
      {"exit_gate_gamma", &Config::exit_gate_gamma, "training", kNonNeg,
       "stage II: the loss improvement gamma (nats) at which the continue target w_r is 1/2"},
      {"bptt", &Config::bptt, "training", ints(0, 3 * 4096), "keep gradients for the last k loop steps only; 0 = all"},
      {"eval_every", &Config::eval_every, "training", ints(1, kIntMax), "validation (and checkpoint) interval in steps"},
      {"keep_checkpoints", &Config::keep_checkpoints, "training", ints(0, 1000000),
       "earlier checkpoints kept as DIR/checkpoints/model_step<N>.safetensors (the last K; 0: only the latest)"},
      {"eval_batches", &Config::eval_batches, "training", ints(1, kIntMax), "batches of validation windows per evaluation"},
      {"log_every", &Config::log_every, "training", ints(1, kIntMax), "progress-line interval in steps"},
  };
  return f;
}

// A number as a person writes it: 1e-05, 0.1, 65536, 1e+06.
std::string num(double x) {
  if (std::isinf(x)) return x > 0 ? "infinity" : "-infinity";
  char b[32];
  if (x == std::floor(x) && std::fabs(x) < 1e15) std::snprintf(b, sizeof b, "%.0f", x);
  else std::snprintf(b, sizeof b, "%g", x);
  return b;
}

std::string range_words(const Range& r) {
  const bool lo = std::isfinite(r.lo), hi = std::isfinite(r.hi);
  std::string l = r.lo_excl ? "greater than " + num(r.lo) : "at least " + num(r.lo);
  std::string h = r.hi_excl ? "below " + num(r.hi) : "at most " + num(r.hi);
  if (lo && hi && !r.lo_excl && !r.hi_excl) return "from " + num(r.lo) + " to " + num(r.hi);
  if (lo && hi) return l + " and " + h;
  if (lo) return l;
  if (hi) return h;
  return "any number";
}

bool in_range(double x, const Range& r) {
  return (r.lo_excl ? x > r.lo : x >= r.lo) && (r.hi_excl ? x < r.hi : x <= r.hi);
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + (v[i].empty() ? std::string("\"\"") : v[i]);
  return s;
}

// Every component key of the registries, with the component that declares it.
struct OwnedKey {
  const ConfigKey* key;
  std::string owner;  // "loop_rule gated"
};
std::vector<OwnedKey> component_keys() {
  std::vector<OwnedKey> out;
  const Registries& r = registries();
  for (auto& c : r.blocks.all())
    for (auto& k : c.keys) out.push_back({&k, "block " + c.name});
  for (auto& c : r.loop_rules.all())
    for (auto& k : c.keys) out.push_back({&k, "loop_rule " + c.name});
  return out;
}

// The component keys a config carries: its block kind's and its loop rule's. A checkpoint names
// only what its model uses, so renaming another component's key breaks no file; older files,
// which carry every registered key, still load (every key is still known).
std::vector<OwnedKey> used_component_keys(const Config& c) {
  std::vector<OwnedKey> out;
  for (auto& k : component_keys())
    if (k.owner == "block " + c.block || k.owner == "loop_rule " + c.loop_rule) out.push_back(k);
  return out;
}

const Field* find_field(const std::string& key) {
  for (auto& f : fields())
    if (key == f.key) return &f;
  return nullptr;
}
const ConfigKey* find_component_key(const std::string& key) {
  for (auto& k : component_keys())
    if (k.key->key == key) return k.key;
  return nullptr;
}

[[noreturn]] void unknown_key(const std::string& key, const std::string& origin) {
  const std::string best = did_you_mean(key, Config::keys());
  std::string msg = origin + ": unknown config key '" + io::brief(key) + "'";
  if (!best.empty()) msg += " (did you mean '" + best + "'?)";
  msg += "; 'looplm train --help-config' lists every key";
  throw UsageError(msg);
}

// A short rendering of a JSON value for messages (long strings are cut).
std::string shown(const json& v) { return io::brief_json(v); }

// The value checked for one key: an integer in range, a number in range, a bool, a string (one of
// the choices). Integers are checked before they are narrowed.
json checked(const std::string& key, bool is_int, bool is_uint, bool is_bool, bool is_string, const Range& range,
             const std::vector<std::string>& choices, const json& v, const std::string& origin) {
  const std::string where = origin + ": config key '" + key + "'";
  if (is_bool) {
    if (!v.is_boolean()) throw UsageError(where + " must be true or false, got " + shown(v));
    return v;
  }
  if (is_string) {
    if (!v.is_string()) throw UsageError(where + " must be a string, got " + shown(v));
    if (!choices.empty() && std::find(choices.begin(), choices.end(), v.get<std::string>()) == choices.end())
      throw UsageError(where + " must be one of " + join(choices) + ", got " + shown(v));
    return v;
  }
  if (!v.is_number()) throw UsageError(where + " must be " + (is_int || is_uint ? "an integer" : "a number") + ", got " + shown(v));
  if (is_uint) {
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
      throw UsageError(where + " must be an integer from 0 to 18446744073709551615, got " + shown(v));
    return v;
  }
  const double x = v.get<double>();
  if (is_int) {
    if (v.is_number_float() && x != std::floor(x)) throw UsageError(where + " must be an integer, got " + shown(v));
    if (!in_range(x, range) || (v.is_number_unsigned() && v.get<uint64_t>() > (uint64_t)range.hi))
      throw UsageError(where + " must be an integer " + range_words(range) + ", got " + shown(v));
    return json((int64_t)x);
  }
  if (!std::isfinite(x) || !in_range(x, range))
    throw UsageError(where + " must be a number " + range_words(range) + ", got " + shown(v));
  return v;
}

void assign(Config& c, const Field& f, const json& v, const std::string& origin) {
  std::visit(
      [&](auto m) {
        using T = std::remove_reference_t<decltype(c.*m)>;
        constexpr bool is_int = std::is_same_v<T, int>, is_uint = std::is_same_v<T, uint64_t>;
        constexpr bool is_bool = std::is_same_v<T, bool>, is_string = std::is_same_v<T, std::string>;
        json ok = checked(f.key, is_int, is_uint, is_bool, is_string, f.range, f.choices ? f.choices() : std::vector<std::string>{},
                          v, origin);
        if constexpr (is_uint) c.*m = ok.is_number_unsigned() ? ok.get<uint64_t>() : (uint64_t)ok.get<int64_t>();
        else c.*m = ok.get<T>();
      },
      f.m);
}

void assign(Config& c, const ConfigKey& k, const json& v, const std::string& origin) {
  using Ty = ConfigKey::Type;
  Range r{k.lo, k.hi, k.lo_exclusive, false};
  json ok = checked(k.key, k.type == Ty::Int, false, k.type == Ty::Bool, k.type == Ty::String, r, k.choices, v, origin);
  c.component_values[k.key] = ok.dump();
}

void assign_any(Config& c, const std::string& key, const json& v, const std::string& origin) {
  if (const Field* f = find_field(key)) return assign(c, *f, v, origin);
  if (const ConfigKey* k = find_component_key(key)) return assign(c, *k, v, origin);
  unknown_key(key, origin);
}

// A component key's value as `want`; the getters are public, so a key no component declares, or
// one read as the wrong type, is an error naming it (not an abort).
json component_value(const Config& c, const std::string& key, ConfigKey::Type want) {
  const ConfigKey* k = find_component_key(key);
  if (!k) {
    if (find_field(key)) throw UsageError("config key '" + io::brief(key) + "' is a field of Config, not a component's key: read the field");
    unknown_key(key, "config");
  }
  static const char* kTypeName[] = {"an integer", "a number", "a flag", "a string"};
  const bool ok = k->type == want || (want == ConfigKey::Type::Float && k->type == ConfigKey::Type::Int);
  if (!ok)
    throw UsageError("config key '" + key + "' is " + kTypeName[(int)k->type] + ", not " + kTypeName[(int)want]);
  auto it = c.component_values.find(key);
  return json::parse(it != c.component_values.end() ? it->second : k->default_json);
}

}  // namespace

// ---------------------------------------------------------------- component keys
ConfigKey ConfigKey::number(std::string key, double def, double lo, double hi, std::string meaning, bool lo_excl) {
  ConfigKey k;
  k.key = std::move(key);
  k.type = Type::Float;
  k.default_json = json(def).dump();
  k.lo = lo;
  k.hi = hi;
  k.lo_exclusive = lo_excl;
  k.meaning = std::move(meaning);
  return k;
}
ConfigKey ConfigKey::integer(std::string key, int64_t def, int64_t lo, int64_t hi, std::string meaning) {
  ConfigKey k = number(std::move(key), 0, (double)lo, (double)hi, std::move(meaning));
  k.type = Type::Int;
  k.default_json = json(def).dump();
  return k;
}
ConfigKey ConfigKey::flag(std::string key, bool def, std::string meaning) {
  ConfigKey k;
  k.key = std::move(key);
  k.type = Type::Bool;
  k.default_json = def ? "true" : "false";
  k.meaning = std::move(meaning);
  return k;
}
ConfigKey ConfigKey::choice(std::string key, std::string def, std::vector<std::string> choices, std::string meaning) {
  ConfigKey k;
  k.key = std::move(key);
  k.type = Type::String;
  k.default_json = json(def).dump();
  k.choices = std::move(choices);
  k.meaning = std::move(meaning);
  return k;
}

double Config::get_float(const std::string& key) const { return component_value(*this, key, ConfigKey::Type::Float).get<double>(); }
int64_t Config::get_int(const std::string& key) const { return component_value(*this, key, ConfigKey::Type::Int).get<int64_t>(); }
bool Config::get_bool(const std::string& key) const { return component_value(*this, key, ConfigKey::Type::Bool).get<bool>(); }
std::string Config::get_string(const std::string& key) const {
  return component_value(*this, key, ConfigKey::Type::String).get<std::string>();
}

// ---------------------------------------------------------------- parse / print
std::vector<std::string> Config::keys() {
  std::vector<std::string> k;
  for (auto& f : fields()) k.push_back(f.key);
  for (auto& ck : component_keys()) k.push_back(ck.key->key);
  return k;
}

std::vector<Config::KeyDoc> Config::documentation() {
  std::vector<KeyDoc> out;
  const Config defaults;
  const json d = json::parse(defaults.to_json_text());
  for (auto& f : fields()) {
    std::string meaning = f.meaning;
    if (f.choices) meaning += " (" + join(f.choices()) + ")";
    else if (!std::holds_alternative<bool Config::*>(f.m) && !std::holds_alternative<std::string Config::*>(f.m) &&
             !std::holds_alternative<uint64_t Config::*>(f.m))
      meaning += " [" + range_words(f.range) + "]";
    out.push_back({f.key, d.at(f.key).dump(), meaning, f.group});
  }
  for (auto& ck : component_keys()) {
    const ConfigKey& k = *ck.key;
    std::string meaning = k.meaning;
    if (!k.choices.empty()) meaning += " (" + join(k.choices) + ")";
    else if (k.type == ConfigKey::Type::Int || k.type == ConfigKey::Type::Float)
      meaning += " [" + range_words({k.lo, k.hi, k.lo_exclusive, false}) + "]";
    out.push_back({k.key, k.default_json, meaning, ck.owner});
  }
  return out;
}

Config Config::from_json_text(const std::string& text, const std::string& origin) {
  const json j = io::parse_json(text, origin, true);  // nesting bounded, duplicate keys refused
  if (!j.is_object()) throw UsageError(origin + ": a config must be a JSON object");
  Config c;
  for (auto it = j.begin(); it != j.end(); ++it) {
    // documentation keys, and the run a config.json was written by (train/checkpoint.h): not settings
    if (it.key() == "preset" || it.key() == "comment" || it.key() == "run_id") continue;
    assign_any(c, it.key(), it.value(), origin);
  }
  return c;
}

Config Config::from_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw UsageError("config file '" + io::brief_path(path) + "' is a directory");
  std::ifstream in(path);
  if (!in) throw UsageError("cannot read config file '" + io::brief_path(path) + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw UsageError("cannot read config file '" + io::brief_path(path) + "' (is it a directory?)");
  return from_json_text(ss.str(), path);
}

std::string Config::to_json_text(int indent) const {
  json j = json::object();
  for (auto& f : fields()) std::visit([&](auto m) { j[f.key] = this->*m; }, f.m);
  for (auto& ck : used_component_keys(*this)) j[ck.key->key] = component_value(*this, ck.key->key, ck.key->type);
  return j.dump(indent);
}

std::string Config::summary() const {
  const json j = json::parse(to_json_text());
  std::string out;
  auto line = [&](const std::string& title, const std::vector<std::string>& keys) {
    std::string s = "  " + title + ":";
    size_t width = s.size();
    for (auto& k : keys) {
      std::string item = " " + k + "=" + (j.at(k).is_string() ? j.at(k).get<std::string>() : j.at(k).dump());
      if (k == "tokenizer_chars" && !tokenizer_chars.empty()) item = " tokenizer_chars=(" + std::to_string(tokenizer_chars.size()) + " bytes)";
      if (k == "tokenizer_chars" && tokenizer_chars.empty()) continue;
      if (k == "tokenizer_file" && tokenizer_file.empty()) continue;
      if (width + item.size() > 100) { s += "\n   "; width = 3; }
      s += item;
      width += item.size();
    }
    out += s + "\n";
  };
  std::vector<std::string> model, training;
  for (auto& f : fields()) (std::string(f.group) == "model" ? model : training).push_back(f.key);
  line("model", model);
  line("training", training);
  std::vector<std::string> comp;
  for (auto& ck : component_keys())
    if (ck.owner == "block " + block || ck.owner == "loop_rule " + loop_rule) comp.push_back(ck.key->key);
  if (!comp.empty()) line(block + " / " + loop_rule, comp);
  return out;
}

void Config::set(const std::string& key, const std::string& value) {
  json v;
  const Field* f = find_field(key);
  const ConfigKey* k = f ? nullptr : find_component_key(key);
  if (!f && !k) unknown_key(key, argument_spelling().set_origin);
  bool is_string = f ? std::holds_alternative<std::string Config::*>(f->m) : k->type == ConfigKey::Type::String;
  if (is_string) {
    v = value;
    try {
      (void)v.dump();  // a config is stored as JSON (config.json, checkpoint metadata): UTF-8 only
    } catch (const json::exception&) {
      throw UsageError(set_arg(key) + ": the value is not valid UTF-8 text (a config is stored as JSON)");
    }
  } else {
    try {
      v = io::parse_json(value, set_arg(key), true);
    } catch (const Error&) {
      throw UsageError(set_arg(key, io::brief(value)) + ": '" + io::brief(value) + "' is not a valid value");
    }
  }
  assign_any(*this, key, v, argument_spelling().set_origin);
}

void Config::validate() const {
  auto need = [](bool ok, const std::string& msg) {
    if (!ok) throw UsageError("invalid config: " + msg);
  };
  // Every field again (a Config may be filled in code, not only parsed).
  const json j = json::parse(to_json_text());
  Config scratch;
  for (auto& f : fields()) assign(scratch, f, j.at(f.key), "invalid config");
  for (auto& ck : used_component_keys(*this)) assign(scratch, *ck.key, j.at(ck.key->key), "invalid config");

  need(d_head > 0 || d_model % n_heads == 0, "d_model (" + std::to_string(d_model) + ") must be divisible by n_heads (" +
                                                 std::to_string(n_heads) + "), or d_head set");
  need(n_heads % kv_heads() == 0, "n_heads (" + std::to_string(n_heads) + ") must be a multiple of n_kv_heads (" +
                                      std::to_string(kv_heads()) + ")");
  need(head_dim() % 2 == 0 || pos != "rope", "rope needs an even head dimension (it is " +
                                                 std::to_string(head_dim()) + ")");
  need(head_dim() <= kMaxHeadDim,
       "the head dimension must be at most " + std::to_string(kMaxHeadDim) + " (it is " + std::to_string(head_dim()) + ")");
  need(!exit_gate || R > 1, "exit_gate needs a loop (R > 1): with R = 1 every token exits at its only step");
  need(train_only != "exit_gate" || exit_gate,
       "train_only = exit_gate trains the model's exit gate, and this model has none (set exit_gate = true to add one)");
  const Registries& r = registries();
  if (auto& v = r.blocks.get(block, "block").validate) v(*this);
  if (auto& v = r.loop_rules.get(loop_rule, "loop_rule").validate) v(*this);
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
  const std::string best = did_you_mean(name, preset_names());
  throw UsageError("unknown preset '" + io::brief(name) + "'" + (best.empty() ? "" : " (did you mean '" + best + "'?)") +
                   "; the presets are " + list);
}

}  // namespace looplm
