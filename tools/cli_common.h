// Shared CLI plumbing: CLI11 parse errors become UsageError (exit 2); --help prints and exits 0;
// the model-config options (--preset / --config / --set) are one table used by train and bench.
#pragma once
#include <CLI/CLI.hpp>
#include <iostream>
#include <string>
#include <vector>

#include "looplm/config.h"
#include "looplm/error.h"

namespace looplm::cli {

// Returns false when --help was printed (the command should return 0).
inline bool parse(CLI::App& app, int argc, char** argv, const std::string& name) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return false;
  } catch (const CLI::ParseError& e) {
    throw UsageError(name + ": " + e.what() + " (see 'looplm " + name + " --help')");
  }
  return true;
}

struct ConfigArgs {
  std::string preset, file;
  std::vector<std::string> sets;
  void add(CLI::App& app, const std::string& default_preset) {
    preset = default_preset;
    app.add_option("--preset", preset, "named config from configs/ (default " + default_preset + ")")->type_name("NAME");
    app.add_option("--config", file, "config JSON file (instead of --preset)")->type_name("FILE");
    app.add_option("--set", sets, "override a config key, e.g. --set R=4 (repeatable)")->type_name("KEY=VALUE");
  }
  Config resolve() const {
    Config c = file.empty() ? load_preset(preset) : Config::from_file(file);
    for (const auto& kv : sets) {
      auto eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) throw UsageError("--set '" + kv + "': expected KEY=VALUE");
      c.set(kv.substr(0, eq), kv.substr(eq + 1));
    }
    c.validate();
    return c;
  }
};

}  // namespace looplm::cli
