// Configs (looplm/config.h): a config file's JSON (Config::from_json_text), and one --set KEY=VALUE
// (the input split at its first '=' or newline) on the defaults, each then validated and laid out
// as a model (Model::layout: the parameter shapes, no values). Only looplm::Error (UsageError is
// one) may come out. A config that validates must also print and parse back to itself, since a
// checkpoint stores it that way: a failure there aborts, so it is a finding.
#include "fuzz_common.h"

#include "looplm/config.h"
#include "looplm/error.h"
#include "model/model.h"

using namespace looplm;

namespace {
void check(const Config& c) {
  try {
    c.validate();
    Model::layout(c);
  } catch (const Error&) {
    return;  // refused, as an invalid config should be
  }
  try {
    c.summary();
    const std::string text = c.to_json_text();
    const Config back = Config::from_json_text(text, "fuzz: to_json_text");
    back.validate();
    if (back.to_json_text() != text) {
      std::fprintf(stderr, "a valid config does not round-trip:\n%s\n%s\n", text.c_str(), back.to_json_text().c_str());
      std::abort();
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "a valid config fails after it validated: %s\n", e.what());
    std::abort();
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text((const char*)data, size);
  try {
    check(Config::from_json_text(text, "fuzz"));
  } catch (const Error&) {
  }
  const size_t split = text.find_first_of("=\n");
  if (split != std::string::npos) {
    try {
      Config c;
      c.set(text.substr(0, split), text.substr(split + 1));
      check(c);
    } catch (const Error&) {
    }
  }
  return 0;
}
