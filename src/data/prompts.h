// Prompts for batch generation (`looplm generate --prompts FILE`): one prompt per line (blank lines
// skipped), or JSONL (a FILE.jsonl name) whose objects hold a string "prompt" (or "text").
#pragma once
#include <string>
#include <vector>

#include "looplm/util.h"

namespace looplm {

// True for a name that ends in ".jsonl" (after at least one other character).
bool prompts_are_jsonl(const std::string& path);

// The prompts in `body`, in order; may be empty. Lines end at '\n' (a trailing '\r' is dropped);
// blank lines (spaces and tabs only) are skipped. JSONL: each line is a JSON object (io::parse_json)
// with a string "prompt" (or, without one, "text"); anything else is a UsageError naming
// "ORIGIN line N".
std::vector<std::string> parse_prompts(const std::string& body, const std::string& origin, bool jsonl);

// read_prompts (PATH read and parsed as above): include/looplm/util.h.

}  // namespace looplm
