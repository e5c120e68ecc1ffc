// Training and evaluation data (data/dataset.h, data/examples.h): the input written as a text file,
// a .jsonl file and two .bin token files (llm.c shard or headerless nanoGPT uint16, by the first
// int32; one with a char alphabet beside it as `looplm data` writes, one without), then
// detect_format, load_text, load_tokens and load_examples on each with the byte tokenizer and a
// char tokenizer; what loads is fed to the batch samplers and eval windows. Also a char alphabet
// built from the input (Tokenizer::char_level_from_text) and the ListOps expression parser
// (data/listops.h). Only looplm::Error may come out; loaded ids outside the vocabulary abort.
#include "fuzz_common.h"

#include <vector>

#include "data/dataset.h"
#include "data/examples.h"
#include "data/listops.h"
#include "tokenizer/tokenizer.h"
#include "looplm/error.h"

using namespace looplm;

namespace {

// Printable ASCII, tab, newline, carriage return, and a few code points of 2, 3 and 4 bytes.
const std::string& alphabet() {
  static const std::string a = [] {
    std::string s = "\t\n\r";
    for (char c = ' '; c <= '~'; ++c) s += c;
    return s + "\xC3\xA9\xC3\xBC\xE4\xB8\xAD\xF0\x9F\x98\x80";  // é ü 中 😀
  }();
  return a;
}

constexpr int kContext = 16;

void use_tokens(const std::vector<int32_t>& ids, const Tokenizer& tok) {
  for (int32_t id : ids)
    if (id < 0 || id >= tok.vocab_size()) {
      std::fprintf(stderr, "load_tokens returned id %d outside the %s vocabulary (%d)\n", id, tok.kind_name(),
                   tok.vocab_size());
      std::abort();
    }
  tok.decode(ids);
  const int T = 4, B = 2;
  if (ids.size() < (size_t)T + 1) return;
  int32_t x[T * B], y[T * B];
  TokenStream s(ids, T, B, /*seed=*/ids.size());
  s.next_batch(x, y);
  const int64_t n = eval_windows(ids, T, "fuzz");
  eval_window(ids, T, 0, x, y);
  eval_window(ids, T, n - 1, x, y);
}

void use_examples(const Examples& ex) {
  int32_t x[kContext * 2], y[kContext * 2];
  ExampleStream s(ex, kContext, 2, /*seed=*/ex.size());
  s.next_batch(x, y);
  fill_example(ex, ex.size() - 1, kContext, x, y);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Tokenizer byte_tok = Tokenizer::byte_level();
  static const Tokenizer char_tok = Tokenizer::char_level(alphabet());
  static const bool sidecar = (fuzz::write_scratch("chars.bin.chars", alphabet()), true);
  (void)sidecar;

  const std::string_view in((const char*)data, size);
  const std::string txt = fuzz::write_scratch("data.txt", in);
  const std::string jsonl = fuzz::write_scratch("data.jsonl", in);
  const std::string bin = fuzz::write_scratch("bytes.bin", in);  // no sidecar: a byte shard
  const std::string cbin = fuzz::write_scratch("chars.bin", in);  // chars.bin.chars: a char shard
  for (const std::string& path : {txt, jsonl, bin, cbin}) {
    try {
      detect_format(path);
    } catch (const Error&) {
    }
    try {
      load_text(path);
    } catch (const Error&) {
    }
    for (const Tokenizer* tok : {&byte_tok, &char_tok}) {
      try {
        use_tokens(load_tokens(path, *tok), *tok);
      } catch (const Error&) {
      }
      if (path == bin || path == cbin) continue;
      try {
        use_examples(load_examples(path, *tok, kContext));
      } catch (const Error&) {
      }
    }
  }
  try {  // a char alphabet made from the text (looplm data --tokenizer char), then the text in it
    const Tokenizer t = Tokenizer::char_level_from_text(std::string(in));
    t.decode(t.encode(in));
  } catch (const Error&) {
  }
  try {
    evaluate_listops(in);
  } catch (const Error&) {
  }
  try {
    to_lra(in);
  } catch (const Error&) {
  }
  try {
    parse_listops_ops(in);
  } catch (const Error&) {
  }
  return 0;
}
