// `looplm generate --prompts FILE` (data/prompts.h): the input parsed as a plain prompts file and as
// JSONL, and read from a file of each kind by read_prompts. Only looplm::Error (UsageError is one)
// may come out.
#include "fuzz_common.h"

#include "data/prompts.h"
#include "looplm/error.h"

using namespace looplm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body((const char*)data, size);
  for (bool jsonl : {false, true}) {
    try {
      parse_prompts(body, "fuzz", jsonl);
    } catch (const Error&) {
    }
  }
  for (const char* name : {"prompts.txt", "prompts.jsonl"}) {
    try {
      bool jsonl = false;
      read_prompts(fuzz::write_scratch(name, body), jsonl);
    } catch (const Error&) {
    }
  }
  return 0;
}
