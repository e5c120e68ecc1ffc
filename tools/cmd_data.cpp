// `looplm data`: text / JSONL -> llm.c token shard (docs/data.md).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>

#include "cli.h"
#include "cli_common.h"
#include "looplm/looplm.h"
#include "data/dataset.h"
#include "data/tokenizer.h"
#include "looplm/error.h"

namespace looplm::cli {

int cmd_data(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::string input, out, kind = "byte", alphabet_file;
  CLI::App app{"Tokenise a text or JSONL file into an llm.c shard (uint16 tokens).", "looplm data"};
  app.add_option("--input", input, "text file, or .jsonl with one {\"text\": ...} per line")
      ->required()
      ->type_name("FILE");
  auto* kind_opt = app.add_option("--tokenizer", kind, "byte (default) or char")
                       ->check(CLI::IsMember({"byte", "char"}))
                       ->type_name("KIND");
  app.add_option("--alphabet", alphabet_file,
                 "char tokenizer: use this alphabet (e.g. train.bin.chars) instead of building it "
                 "from --input; implies --tokenizer char")
      ->type_name("FILE");
  app.add_option("--out", out, "output shard, must end in .bin (a char tokenizer's alphabet is "
                               "written beside it as OUT.chars)")
      ->required()
      ->type_name("FILE");
  ThreadsArg threads;
  threads.add(app);
  app.footer(
      "Example:\n  looplm data --input data/kjv/train.txt --tokenizer char --out data/kjv/train.bin\n"
      "  looplm data --input data/kjv/val.txt --alphabet data/kjv/train.bin.chars "
      "--out data/kjv/val.bin");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    throw UsageError(std::string("data: ") + e.what() + " (see 'looplm data --help')");
  }

  set_threads(threads.n);
  if (!alphabet_file.empty()) {
    if (kind_opt->count() > 0 && kind != "char") {
      throw UsageError("data: --alphabet needs the char tokenizer, not --tokenizer " + kind);
    }
    kind = "char";
  }
  if (fs::path(out).extension() != ".bin") {
    throw UsageError("data: --out '" + out + "' must end in .bin (the loader picks the format by "
                     "extension)");
  }
  if (fs::path(input).extension() == ".bin") {
    throw UsageError("data: --input '" + input + "' is already a token file (.bin)");
  }

  Tokenizer tok = Tokenizer::byte_level();
  if (kind == "char") {
    if (!alphabet_file.empty()) {
      const std::string chars = read_file_bytes(alphabet_file);
      try {
        tok = Tokenizer::char_level(chars);
      } catch (const Error& e) {
        throw Error(alphabet_file + ": " + e.what());
      }
    } else {
      const std::string text = load_text(input);
      try {
        tok = Tokenizer::char_level_from_text(text);
      } catch (const Error& e) {
        throw Error(input + ": " + e.what());
      }
    }
  }

  const std::vector<int32_t> ids = load_tokens(input, tok);
  write_llmc_shard(out, ids);
  std::printf("wrote %s: %zu tokens, %s tokenizer, vocab %d\n", out.c_str(), ids.size(),
              tok.kind_name(), tok.vocab_size());
  const std::string chars_path = out + ".chars";
  if (tok.kind() == Tokenizer::Kind::Char) {
    write_file_atomic(chars_path, tok.alphabet());
    std::printf("wrote %s: alphabet of %d code points\n", chars_path.c_str(), tok.vocab_size());
  } else if (fs::exists(chars_path)) {
    // A leftover alphabet beside a byte shard would describe the wrong tokenizer.
    fs::remove(chars_path);
    std::printf("removed stale %s\n", chars_path.c_str());
  }
  return 0;
}

}  // namespace looplm::cli
