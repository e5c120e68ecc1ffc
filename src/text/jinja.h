// A Jinja interpreter for Hugging Face chat templates (docs/chat_templates.md). It renders a
// template as transformers does: jinja2's ImmutableSandboxedEnvironment with trim_blocks,
// lstrip_blocks and the loopcontrols extension, Python semantics for values (printing, comparison,
// arithmetic, `in`), transformers' `tojson` (json.dumps, ensure_ascii=False) and the globals
// raise_exception() and strftime_now(). Parse once, render many times: render() is const and
// thread-safe.
//
// Errors: a template that cannot be parsed throws SyntaxError (a looplm::Error: the model's file is
// at fault) naming the line; one that fails while rendering throws RenderError (a
// looplm::UsageError: usually the request was at fault, e.g. roles out of order). A
// raise_exception(message) call gives a RenderError whose what() is the message verbatim.
#pragma once
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "looplm/error.h"

namespace looplm::jinja {

class SyntaxError : public looplm::Error {
 public:
  SyntaxError(const std::string& msg, int line) : Error(msg), line_(line) {}
  int line() const { return line_; }  // 1-based line of the template source
 private:
  int line_;
};

class RenderError : public looplm::UsageError {
 public:
  RenderError(const std::string& msg, bool raised, int line) : UsageError(msg), raised_(raised), line_(line) {}
  bool raised() const { return raised_; }  // the template called raise_exception(what())
  int line() const { return line_; }       // the template line being rendered (0 when unknown)
 private:
  bool raised_;
  int line_;
};

// What one render may use, so that a hostile template cannot run away: exceeding one throws
// RenderError. Python's Jinja has no such limits except range() (its sandbox's MAX_RANGE); a
// template that stays under them renders the same.
struct Limits {
  size_t max_output_bytes = size_t{32} << 20;  // the rendered text, and any one string value
  size_t max_items = size_t{1} << 20;          // elements of one list the template builds
  size_t max_range = 100000;                   // range() length (jinja2.sandbox.MAX_RANGE)
  int max_call_depth = 100;                    // nested macro calls and recursive loops
  int max_data_depth = 256;                    // nesting of lists/dicts (input, printing, tojson)
  uint64_t max_steps = 5'000'000;              // statements, loop iterations and calls, plus
                                               // one per 64 bytes of every string built (a
                                               // real template takes a few per message)
};

struct RenderOptions {
  Limits limits;
  // The clock of strftime_now(format), as the broken-down local time to format; empty: now.
  // Formats like Python's naive datetime.now().strftime: %z and %Z print nothing.
  std::function<std::tm()> now;
};

namespace detail {
struct Program;
}

class Template {
 public:
  // `name` only labels error messages. Throws SyntaxError.
  explicit Template(std::string_view source, std::string name = "template");
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // `variables` (a JSON object) are the template's names, e.g. messages and add_generation_prompt.
  // Keys keep their order (dict order matters to tojson and to items()); numbers keep JSON's
  // int/float distinction. Throws RenderError.
  std::string render(const nlohmann::ordered_json& variables, const RenderOptions& options = {}) const;

  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::shared_ptr<const detail::Program> program_;
};

}  // namespace looplm::jinja
