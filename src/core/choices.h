// A list of named choices as one table ({value, name, help} per row), from which parsing, naming,
// the list of names a CLI offers and the messages derive — llama.cpp's one table per enum, so
// that adding a choice is adding a row (docs/architecture.md).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "core/text.h"
#include "looplm/error.h"

namespace looplm {

template <class E>
struct Choice {
  E value;
  const char* name;  // as written in configs, flags and requests
  const char* help;  // one line for --help and docs
};

template <class E, size_t N>
struct Choices {
  const char* what;  // "exit rule": the messages' noun
  Choice<E> rows[N];

  std::vector<std::string> names() const {
    std::vector<std::string> v;
    for (const Choice<E>& c : rows) v.push_back(c.name);
    return v;
  }
  // "a, b or c"
  std::string list() const {
    std::string s;
    for (size_t i = 0; i < N; ++i) s += (i == 0 ? "" : i + 1 == N ? " or " : ", ") + std::string(rows[i].name);
    return s;
  }
  const Choice<E>* find(const std::string& name) const {
    for (const Choice<E>& c : rows)
      if (name == c.name) return &c;
    return nullptr;
  }
  // The value named `name`; UsageError "unknown <what> '<name>' (choose a, b or c)" otherwise
  // (the name quoted by brief: it may come from a request).
  E parse(const std::string& name) const {
    if (const Choice<E>* c = find(name)) return c->value;
    throw UsageError("unknown " + std::string(what) + " '" + brief(name) + "' (choose " + list() + ")");
  }
  const char* name(E v) const {
    for (const Choice<E>& c : rows)
      if (c.value == v) return c.name;
    return "?";
  }
};

}  // namespace looplm
