// `looplm tokenize`: a text's ids under a tokenizer (a Hugging Face tokenizer.json, or the one a
// checkpoint carries), printed as one JSON array; --decode turns such an array back into text
// (docs/data.md, "Hugging Face tokenizers").
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "cli.h"
#include "cli_common.h"
#include "looplm/looplm.h"
#include "looplm/util.h"

namespace looplm::cli {

namespace {

// A JSON array of token ids ("[15496, 995]"), read by hand: nothing else is valid here, so no
// general JSON parser (and its nesting limits) is needed.
std::vector<int32_t> parse_ids(const std::string& text, const std::string& origin) {
  size_t i = 0;
  auto skip = [&] {
    while (i < text.size() && std::isspace((unsigned char)text[i])) ++i;
  };
  skip();
  if (i >= text.size() || text[i] != '[') throw Error(origin + ": expected a JSON array of token ids, got " + brief(text));
  ++i;
  std::vector<int32_t> ids;
  skip();
  if (i < text.size() && text[i] == ']') return ids;
  for (;;) {
    skip();
    const size_t start = i;
    if (i < text.size() && text[i] == '-') ++i;
    while (i < text.size() && std::isdigit((unsigned char)text[i])) ++i;
    const std::string num = text.substr(start, i - start);
    if (num.empty() || num == "-" || num.size() > 11 || std::stoll(num) < INT32_MIN || std::stoll(num) > INT32_MAX)
      throw Error(origin + ": element " + std::to_string(ids.size()) + " is " +
                  brief(text.substr(start, std::min<size_t>(text.size() - start, 20))) + ", not a token id");
    ids.push_back((int32_t)std::stoll(num));
    skip();
    if (i < text.size() && text[i] == ',') {
      ++i;
      continue;
    }
    if (i < text.size() && text[i] == ']') {
      ++i;
      skip();
      if (i != text.size()) throw Error(origin + ": text after the array of token ids");
      return ids;
    }
    throw Error(origin + ": expected ',' or ']' after element " + std::to_string(ids.size() - 1));
  }
}

}  // namespace

int cmd_tokenize(int argc, char** argv) {
  CLI::App app{"A text's token ids as one JSON array (or, with --decode, ids back to text).", "looplm tokenize"};
  std::string tok_path, input, prompt;
  bool add_special = false, decode = false, stats = false;
  app.add_option("--tokenizer", tok_path,
                 "a Hugging Face tokenizer.json, or a checkpoint (run directory or .safetensors) whose tokenizer to use")
      ->required()
      ->type_name("FILE");
  auto* in_opt = app.add_option("--input", input, "the text to encode (with --decode: a JSON array of ids)")->type_name("FILE");
  auto* p_opt = app.add_option("-p,--prompt", prompt, "the text itself (with --decode: the JSON array)")->type_name("TEXT");
  app.add_flag("--add-special", add_special,
               "add the tokenizer's special tokens (its post-processor: e.g. <s> before the text); Hugging Face tokenizers only");
  bool exact = false;
  app.add_flag("--decode", decode,
               "read ids, print their text as transformers' decode gives it (no newline is added): tidied by "
               "clean_up_tokenization_spaces when the tokenizer says so (its tokenizer_config.json, or a converted "
               "checkpoint's)");
  app.add_flag("--exact", exact, "with --decode: the exact text, never tidied (what generation streams)");
  app.add_flag("--stats", stats, "print the token count, the time and the speed on stderr");
  int repeat = 1;
  app.add_option("--repeat", repeat, "with --stats: encode N times and report the fastest (bench/tokenizer.py)")
      ->check(at_least(1))
      ->type_name("N");
  app.footer(
      "Examples:\n  looplm tokenize --tokenizer tokenizer.json -p \"Hello world\"        -> [15496,995]\n"
      "  looplm tokenize --tokenizer tokenizer.json --decode -p \"[15496,995]\"  -> Hello world\n"
      "  looplm tokenize --tokenizer runs/looped --input data/kjv/val.txt\n"
      "docs/data.md, \"Hugging Face tokenizers\".");
  if (!parse(app, argc, argv, "tokenize")) return 0;
  if (in_opt->count() + p_opt->count() != 1)
    throw UsageError("tokenize: give the text with exactly one of --input FILE and -p TEXT");
  if (add_special && decode) throw UsageError("tokenize: --add-special applies to encoding, not to --decode");
  if (exact && !decode) throw UsageError("tokenize: --exact applies to --decode");

  const auto t0 = std::chrono::steady_clock::now();
  const TextTokenizer tok = TextTokenizer::open(tok_path);
  if (add_special && tok.kind() != "hf")
    throw UsageError("tokenize: --add-special needs a Hugging Face tokenizer; the " + tok.kind() + " tokenizer has no special tokens");
  const std::string text = in_opt->count() ? read_file_bytes(input) : prompt;
  const auto t1 = std::chrono::steady_clock::now();
  if (decode) {
    const std::vector<int32_t> ids = parse_ids(text, in_opt->count() ? input : "-p");
    const std::string out = exact ? tok.decode(ids) : tok.decode_as_transformers(ids);
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  }
  std::vector<int32_t> ids;
  double secs = 0;
  for (int r = 0; r < repeat; ++r) {
    const auto t2 = std::chrono::steady_clock::now();
    ids = tok.encode(text, add_special);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t2).count();
    secs = r == 0 ? s : std::min(secs, s);
  }
  std::string out;
  out.reserve(ids.size() * 7 + 2);
  out += '[';
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(ids[i]);
  }
  out += "]\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  if (stats)
    std::fprintf(stderr, "%zu bytes -> %zu tokens in %.6f s (%.2f MB/s%s; loading the tokenizer took %.3f s)\n", text.size(),
                 ids.size(), secs, secs > 0 ? text.size() / secs / 1e6 : 0.0, repeat > 1 ? ", the fastest run" : "",
                 std::chrono::duration<double>(t1 - t0).count());
  return 0;
}

}  // namespace looplm::cli
