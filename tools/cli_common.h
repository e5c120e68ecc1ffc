// Shared CLI plumbing: CLI11 parse errors become UsageError (exit 2); --help prints and exits 0;
// the model-config options (--preset / --config / --set) are one table used by train and bench.
#pragma once
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "looplm/config.h"
#include "looplm/error.h"
#include "looplm/looplm.h"
#include "looplm/util.h"

namespace looplm::cli {

// Number checks whose messages say the range in words (CLI11's own print DBL_MAX in full).
inline CLI::Validator number_check(double lo, double hi, bool lo_excl, const std::string& words) {
  return CLI::Validator(
      [=](std::string& s) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (s.empty() || *end != '\0') return "'" + brief(s) + "' is not a number";
        if ((lo_excl ? !(v > lo) : !(v >= lo)) || !(v <= hi)) return "must be " + words + ", got " + brief(s);
        return "";
      },
      words, "number");
}
inline CLI::Validator at_least(int lo) { return number_check(lo, 1e300, false, "at least " + std::to_string(lo)); }
inline CLI::Validator positive() { return number_check(0, 1e300, true, "greater than 0"); }
inline CLI::Validator within(double lo, double hi, bool lo_excl, const std::string& words) {
  return number_check(lo, hi, lo_excl, words);
}

// What CLI11's "The following arguments were not expected: 0.5 --temprature" means: an unknown
// option (with the nearest real one), or a value with no option before it.
inline std::string explain_extras(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* o : app.get_options()) {
    for (const auto& l : o->get_lnames()) names.push_back("--" + l);
    for (const auto& s : o->get_snames()) names.push_back("-" + s);
  }
  const std::vector<std::string> rest = app.remaining();
  for (const std::string& a : rest) {
    const bool number = a.size() > 1 && (std::isdigit((unsigned char)a[1]) || a[1] == '.');
    if (a.size() > 1 && a[0] == '-' && !number) {
      const std::string opt = a.substr(0, a.find('='));
      const std::string best = did_you_mean(opt, names);
      return "unknown option '" + brief(opt) + "'" + (best.empty() ? "" : " (did you mean " + best + "?)");
    }
  }
  return "unexpected argument '" + brief(rest.empty() ? std::string() : rest[0]) +
         "': every value follows its option (e.g. -p \"some text\": text with spaces goes in quotes)";
}

// Returns false when --help was printed (the command should return 0).
inline bool parse(CLI::App& app, int argc, char** argv, const std::string& name) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return false;
  } catch (const CLI::ExtrasError&) {
    throw UsageError(name + ": " + explain_extras(app) + " (see 'looplm " + name + " --help')");
  } catch (const CLI::ParseError& e) {
    throw UsageError(name + ": " + brief(e.what(), 500) + " (see 'looplm " + name + " --help')");
  }
  return true;
}

struct ConfigArgs {
  std::string preset, file;
  std::vector<std::string> sets;
  CLI::Option *preset_opt = nullptr, *file_opt = nullptr;
  void add(CLI::App& app, const std::string& default_preset) {
    preset = default_preset;
    preset_opt = app.add_option("--preset", preset, "named config from configs/ (default " + default_preset + ")")->type_name("NAME");
    file_opt = app.add_option("--config", file, "config JSON file (instead of --preset)")->type_name("FILE");
    app.add_option("--set", sets, "override a config key, e.g. --set R=4 (repeatable; 'looplm train --help-config' lists the keys)")
        ->type_name("KEY=VALUE");
  }
  bool explicit_base() const { return preset_opt->count() > 0 || file_opt->count() > 0; }
  bool sets_key(const std::string& key) const {  // some --set names `key`
    for (const auto& kv : sets)
      if (kv.compare(0, key.size() + 1, key + "=") == 0) return true;
    return false;
  }
  // Apply every --set to c.
  void apply_sets(Config& c) const {
    for (const auto& kv : sets) {
      auto eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) throw UsageError("--set '" + brief(kv) + "': expected KEY=VALUE");
      c.set(kv.substr(0, eq), kv.substr(eq + 1));
    }
  }
  Config resolve() const {
    if (preset_opt->count() > 0 && file_opt->count() > 0)
      throw UsageError("--preset and --config name two starting configs; give one (then --set to change keys)");
    Config c = file.empty() ? load_preset(preset) : Config::from_file(file);
    apply_sets(c);
    c.validate();
    return c;
  }
};

// --threads N, taken by every command: 0 (default) adapts to the cores this process may use and
// to other processes' load (core/threads.h).
struct ThreadsArg {
  int n = 0;
  void add(CLI::App& app) {
    app.add_option("-t,--threads", n, "compute threads (default 0: adapt, at most the cores this process may use)")
        ->check(at_least(0))
        ->type_name("N");
  }
};

// Every config key with its default and meaning (looplm train --help-config); with `values` (the
// config --preset / --config / --set resolve to, named `source`), each key's value there, and the
// default beside it where they differ.
inline void print_config_keys(std::ostream& out, const Config* values = nullptr, const std::string& source = "") {
  out << "Config keys (JSON via --config FILE or --preset NAME, then --set KEY=VALUE; docs/config.md)";
  out << (values ? ", with their values in " + source : std::string()) << ":\n";
  const nlohmann::json v = values ? nlohmann::json::parse(values->to_json_text()) : nlohmann::json::object();
  std::string owner;
  for (const auto& k : Config::documentation()) {
    if (k.owner != owner) {
      owner = k.owner;
      out << "\n" << owner << ":\n";
    }
    const std::string now = v.contains(k.key) ? v[k.key].dump() : k.default_value;
    out << "  " << k.key << " = " << brief(now, 200);
    if (now != k.default_value) out << "   (default " << k.default_value << ")";
    out << "\n      " << k.meaning << "\n";
  }
}

// "ID=BIAS" of --logit-bias (generate, chat; the range against the vocabulary is checked by generate).
inline std::pair<int32_t, float> parse_logit_bias(const std::string& s, const std::string& command) {
  const size_t eq = s.find('=');
  size_t a = 0, b = 0;
  long long id = -1;
  double bias = 0;
  try {
    if (eq != std::string::npos) {
      id = std::stoll(s.substr(0, eq), &a);
      bias = std::stod(s.substr(eq + 1), &b);
    }
  } catch (const std::exception&) {
    a = 0;
  }
  if (eq == std::string::npos || a == 0 || a != eq || b == 0 || b != s.size() - eq - 1 || id < 0 || id > INT32_MAX)
    throw UsageError(command + ": --logit-bias '" + brief(s) + "' is not ID=BIAS (e.g. --logit-bias 50256=-100)");
  return {(int32_t)id, (float)bias};
}
// Sampling without --seed: a random seed, printed on stderr (unless quiet) so that `what` ("this
// sample") can be repeated. Greedy decoding needs none.
inline void draw_seed(GenerateOptions& g, bool quiet, const char* what) {
  if (g.temperature <= 0) return;
  g.seed = std::random_device{}() | (uint64_t)std::random_device{}() << 32;
  if (!quiet) std::fprintf(stderr, "seed: %llu (--seed %llu repeats %s)\n", (unsigned long long)g.seed, (unsigned long long)g.seed, what);
}

// A prompt's ids; characters a char model does not know become its fallback, with a warning on
// stderr naming them (`which`: "the prompt", "prompt 3").
inline std::vector<int32_t> encode_prompt(const LanguageModel& lm, const std::string& text, const std::string& which) {
  std::vector<std::string> unseen;
  std::vector<int32_t> ids = lm.encode_prompt(text, &unseen);
  if (!unseen.empty()) {
    std::string list;
    for (size_t i = 0; i < unseen.size() && i < 8; ++i) list += (i ? ", " : "") + unseen[i];
    if (unseen.size() > 8) list += ", ... (" + std::to_string(unseen.size()) + " in all)";
    std::fprintf(stderr, "warning: %s has characters the model's alphabet does not: %s; each was read as '%s'\n",
                 which.c_str(), list.c_str(), lm.fallback_symbol().c_str());
  }
  return ids;
}

// The early-exit table of train's report and eval: one row per exit r, the same columns in both
// (loss, bits per token, top-1 accuracy, then each per-step diagnostic), the trained R and the
// best exit marked in the r column.
inline void print_exit_table(const EvalResult& e, int trained_R) {
  const int ran = (int)e.loss_by_depth.size();
  std::vector<std::pair<std::string, const std::vector<double>*>> cols, lines;
  for (auto& [name, v] : e.diagnostics) ((int)v.size() == ran ? cols : lines).push_back({name, &v});
  int best = 0;
  for (int i = 1; i < ran; ++i)
    if (e.loss_by_depth[i] < e.loss_by_depth[best]) best = i;
  std::printf("\n| r | loss | bits/token | accuracy |");
  for (auto& [name, v] : cols) std::printf(" %s |", name.c_str());
  std::printf("\n|---|---|---|---|");
  for (size_t i = 0; i < cols.size(); ++i) std::printf("---|");
  std::printf("\n");
  for (int i = 0; i < ran; ++i) {
    std::string r = std::to_string(i + 1);
    if (i + 1 == trained_R) r += " (trained R)";
    if (i == best && ran > 1) r += " best";
    std::printf("| %s | %.4f | %.3f | %.4f |", r.c_str(), e.loss_by_depth[i], e.loss_by_depth[i] / 0.6931471805599453,
                e.accuracy_by_depth[i]);
    for (auto& [name, v] : cols) std::printf(" %.4g |", (*v)[i]);
    std::printf("\n");
  }
  for (auto& [name, v] : lines) {
    std::printf("%s:", name.c_str());
    for (double x : *v) std::printf(" %.4g", x);
    std::printf("\n");
  }
}

// --weights: one of the library's weight formats (available_weight_formats); "" = the checkpoint's own.
inline CLI::Validator weights_check() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        const auto names = available_weight_formats();
        return std::find(names.begin(), names.end(), s) != names.end() ? ""
               : "unknown weight format '" + brief(s) + "' (" + joined(names) + ")";
      },
      "FORMAT");
}

// --exit-rule / --exit-threshold / --kv-policy: per-token early exit and what incremental
// decoding keeps for tokens that exited (eval and generate).
struct ExitArgs {
  std::string rule = "fixed", policy = "per_step";
  double threshold = std::nan("");
  CLI::Option* policy_opt = nullptr;
  void add(CLI::App& app, const std::string& policy_note) {
    app.add_option("--exit-rule", rule,
                   "per-token early exit: fixed (every token runs the depth), kl (KL of successive exits' next-token "
                   "distributions), latent (|h_r - h_r-1| / |h_r|) or entropy (of the exit's distribution): a token "
                   "stops at the first step whose value is below --exit-threshold; gate (a model with a learned exit "
                   "gate, Ouro): at the first step whose cumulative exit probability reaches --exit-threshold q")
        ->check(CLI::IsMember(available_exit_rules()));
    app.add_option("--exit-threshold", threshold, "the early-exit threshold (needed with a rule other than fixed)");
    policy_opt = app.add_option("--kv-policy", policy,
                                "keys/values for the steps an exited token did not run: per_step (run them: exact), mean "
                                "(one averaged slot per block: least memory), last or first (reuse that step's)" +
                                    policy_note)
                     ->check(CLI::IsMember(available_kv_policies()));
  }
  bool policy_given() const { return policy_opt->count() > 0; }
  EarlyExit exit() const { return early_exit(rule, threshold, "--exit-rule", "--exit-threshold"); }
  KvPolicy kv_policy() const { return parse_kv_policy(policy); }
  // A note on stderr when --kv-policy was given without an exit rule: no token exits early, so
  // every step's keys and values exist and only mean (which averages them) differs.
  void note_unused_policy(const std::string& rest) const {
    if (policy_given() && parse_exit_rule(rule) == ExitRule::fixed && kv_policy() != KvPolicy::mean)
      std::fprintf(stderr, "note: --kv-policy %s changes nothing without --exit-rule: no token exits early, so every "
                           "step's keys and values exist (only mean, which averages them, differs)%s\n",
                   policy.c_str(), rest.c_str());
  }
};

// A note on stderr for --depth far beyond the trained R: how a looped model does past the depth it
// was trained at is not known beforehand.
inline void note_depth_beyond(int depth, int R, const std::string& rest) {
  if (depth > 2 * R)
    std::fprintf(stderr, "note: --depth %d is far beyond the trained R = %d: how a looped model does past the depth it "
                         "was trained at is not known%s\n", depth, R, rest.c_str());
}

}  // namespace looplm::cli
