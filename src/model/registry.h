// Registries of named components (block kinds, loop rules; later exit rules and weight formats).
//
// A component is registered with its config name, a one-line summary, the config keys it reads
// (declared here, next to its code, so validation, `looplm train --help-config` and the
// docs/config.md check all read the same table), an optional extra validation and its factory.
// Built-ins are registered explicitly by register_builtins() (src/model/components.cpp), never by
// static initialisers, so nothing depends on which objects a static library keeps.
#pragma once
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "looplm/config.h"
#include "io/json_input.h"
#include "looplm/error.h"

namespace looplm {

// A config key that a component declares. Values are range-checked before they are stored.
struct ConfigKey {
  enum class Type { Int, Float, Bool, String };
  std::string key;
  Type type = Type::Float;
  std::string default_json;  // the default as JSON text: "0.1", "4", "true", "\"sinkhorn\""
  double lo = -std::numeric_limits<double>::infinity();  // numbers: allowed range [lo, hi]
  double hi = std::numeric_limits<double>::infinity();
  bool lo_exclusive = false;          // (lo, hi]: e.g. a temperature must be > 0
  std::vector<std::string> choices;   // strings: allowed values (empty: any)
  std::string meaning;

  static ConfigKey number(std::string key, double def, double lo, double hi, std::string meaning, bool lo_excl = false);
  static ConfigKey integer(std::string key, int64_t def, int64_t lo, int64_t hi, std::string meaning);
  static ConfigKey flag(std::string key, bool def, std::string meaning);
  static ConfigKey choice(std::string key, std::string def, std::vector<std::string> choices, std::string meaning);
};

template <class Factory>
struct Component {
  std::string name;
  std::string summary;                          // one line: what it computes
  std::vector<ConfigKey> keys;                  // config keys it reads
  Factory make;
  std::function<void(const Config&)> validate;  // optional: throw UsageError("...") naming the key
};

template <class Factory>
class Registry {
 public:
  explicit Registry(std::string what) : what_(std::move(what)) {}
  // Registering a name twice is a programming error.
  void add(Component<Factory> c) {
    LOOPLM_ASSERT(!c.name.empty() && c.make, "a component needs a name and a factory");
    if (find(c.name)) throw Error(what_ + " '" + c.name + "' is registered twice");
    items_.push_back(std::move(c));
  }
  // Removes a component (false when it is not registered): a test's own component lives only as
  // long as the test (ScopedComponent in tests/test_util.h), so no other test, and no key list such
  // as `--help-config` or docs/config.md's check, sees it.
  bool remove(const std::string& name) {
    for (auto it = items_.begin(); it != items_.end(); ++it)
      if (it->name == name) {
        items_.erase(it);
        return true;
      }
    return false;
  }
  const Component<Factory>* find(const std::string& name) const {
    for (auto& c : items_)
      if (c.name == name) return &c;
    return nullptr;
  }
  // UsageError listing the registered names when `name` is not one of them.
  const Component<Factory>& get(const std::string& name, const std::string& key) const {
    if (auto* c = find(name)) return *c;
    throw UsageError("invalid config: " + key + " = '" + io::brief(name) + "' is not a " + what_ + " (registered: " + list() + ")");
  }
  std::vector<std::string> names() const {
    std::vector<std::string> n;
    for (auto& c : items_) n.push_back(c.name);
    return n;
  }
  std::string list() const {
    std::string s;
    for (auto& c : items_) s += (s.empty() ? "" : ", ") + c.name;
    return s;
  }
  const std::vector<Component<Factory>>& all() const { return items_; }
  const std::string& what() const { return what_; }

 private:
  std::string what_;
  std::vector<Component<Factory>> items_;
};

}  // namespace looplm
