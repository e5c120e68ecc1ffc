// `looplm data`: text / JSONL -> llm.c token shard; `looplm data listops`: the ListOps generator
// (docs/data.md).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "cli.h"
#include "cli_common.h"
#include "looplm/data.h"
#include "looplm/error.h"
#include "looplm/looplm.h"
#include "looplm/util.h"

namespace looplm::cli {

namespace {

// `looplm data listops --out DIR`: DIR/train.txt, DIR/test.txt (one "<compact>=\t<label>" per
// line) and DIR/listops.json (settings and counts). A preset gives the starting options; each flag
// given overrides one of them.
int cmd_data_listops(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::string out, preset = "lra", ops_list;
  ListOpsOptions flags;  // values of the flags given; the unset ones come from the preset
  int64_t n_train = 50000, n_test = 2000;
  uint64_t seed = 1;
  bool overwrite = false;
  CLI::App app{"Generate ListOps train / test sets (Long Range Arena semantics: MIN, MAX, MED, SM "
               "over digits 0-9).",
               "looplm data listops"};
  app.add_option("--out", out, "output directory: train.txt, test.txt, listops.json")
      ->required()
      ->type_name("DIR");
  app.add_option("--preset", preset,
                 "starting settings: lra (default: depth 10, 2-10 args, 500-2000 tokens, all operators) "
                 "or nrgpt_small (SM/MAX/MED, depth 2, 2-3 args, no length limit)")
      ->check(CLI::IsMember({"lra", "nrgpt_small"}))
      ->type_name("NAME");
  std::vector<std::pair<std::string, CLI::Option*>> gen_opts;
  auto gen = [&](CLI::Option* o, const char* key) { gen_opts.emplace_back(key, o); return o; };
  gen(app.add_option("--max-depth", flags.max_depth, "deepest list nesting (the root is depth 1)"), "max_depth")
      ->check(within(1, kListOpsDepthLimit, false, "1.." + std::to_string(kListOpsDepthLimit)))
      ->type_name("D");
  gen(app.add_option("--max-args", flags.max_args, "a list has 2..A arguments (uniform)"), "max_args")
      ->check(within(2, static_cast<double>(kListOpsLenLimit), false, "at least 2"))
      ->type_name("A");
  gen(app.add_option("--min-len", flags.min_len, "shortest accepted expression, in LRA tokens"), "min_len")
      ->check(at_least(0))
      ->type_name("L");
  gen(app.add_option("--max-len", flags.max_len, "longest accepted expression, in LRA tokens"), "max_len")
      ->check(within(1, static_cast<double>(kListOpsLenLimit), false, "1.." + std::to_string(kListOpsLenLimit)))
      ->type_name("M");
  gen(app.add_option("--fn-prob", flags.fn_prob,
                     "probability that an argument (below --max-depth) is a nested list"), "fn_prob")
      ->check(within(0, 1, false, "in [0, 1]"))
      ->type_name("P");
  gen(app.add_option("--ops", ops_list, "operators, comma-separated: MIN,MAX,MED,SM"), "ops")
      ->type_name("LIST");
  app.add_option("--train", n_train, "train examples (default 50000; duplicates kept)")
      ->check(at_least(0))
      ->type_name("N");
  app.add_option("--test", n_test, "test examples (default 2000; none of them is in train)")
      ->check(at_least(0))
      ->type_name("N");
  app.add_option("--seed", seed, "random seed (default 1); the same seed and settings give the same files")
      ->check(at_least(0))  // CLI11 would wrap a negative value into uint64 silently
      ->type_name("S");
  app.add_flag("--overwrite", overwrite, "write into a non-empty DIR (replaces the three files only)");
  app.footer(
      "Lines are '<expression>=\\t<label>', one character per LRA token: N=[MIN X=[MAX D=[MED S=[SM, "
      "']' and digits as themselves\n(e.g. 'X29N47]0]=\\t9' is [MAX 2 9 [MIN 4 7 ] 0 ] = 9). "
      "docs/data.md, \"ListOps\".\n"
      "Example:\n  looplm data listops --preset nrgpt_small --out data/listops_small");
  if (!parse(app, argc, argv, "data listops")) return 0;

  // The preset, then every flag given on top of it.
  ListOpsOptions opts = ListOpsOptions::preset(preset);
  std::vector<std::string> overridden;
  for (const auto& [key, o] : gen_opts) {
    if (o->count() == 0) continue;
    overridden.push_back(key);
    if (key == "max_depth") opts.max_depth = flags.max_depth;
    else if (key == "max_args") opts.max_args = flags.max_args;
    else if (key == "min_len") opts.min_len = flags.min_len;
    else if (key == "max_len") opts.max_len = flags.max_len;
    else if (key == "fn_prob") opts.fn_prob = flags.fn_prob;
    else if (key == "ops") opts.ops = parse_listops_ops(ops_list, "data listops: --ops");
  }
  // The one check across flags; name both and say where an unset one came from.
  if (opts.min_len > opts.max_len) {
    auto from = [&](const char* key) {
      for (const auto& k : overridden) if (k == key) return std::string();
      return " (from --preset " + preset + ")";
    };
    throw UsageError("data listops: --min-len " + std::to_string(opts.min_len) + from("min_len") +
                     " is greater than --max-len " + std::to_string(opts.max_len) + from("max_len"));
  }
  opts.validate();

  // The directory: a file, or someone's data, is never written over silently.
  std::error_code ec;
  if (fs::exists(out, ec) && !fs::is_directory(out, ec)) {
    throw UsageError("data listops: --out '" + brief_path(out) + "' is a file, not a directory");
  }
  if (fs::is_directory(out, ec) && !fs::is_empty(out, ec) && !overwrite) {
    throw UsageError("data listops: --out '" + brief_path(out) + "' is not empty; pass --overwrite to replace its "
                     "train.txt, test.txt and listops.json");
  }

  const auto t0 = std::chrono::steady_clock::now();
  const std::string dir = fs::path(out).string();
  const ListOpsWritten d = write_listops(dir, opts, seed, n_train, n_test, preset, overridden);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("wrote %s/train.txt: %lld examples (%lld distinct)\n", dir.c_str(), static_cast<long long>(d.train),
              static_cast<long long>(d.train_distinct));
  std::printf("wrote %s/test.txt: %lld examples (%lld distinct; %lld candidates dropped as in train)\n",
              dir.c_str(), static_cast<long long>(d.test), static_cast<long long>(d.test_distinct),
              static_cast<long long>(d.test_dropped));
  std::printf("wrote %s/listops.json (preset %s, seed %llu) in %.2f s\n", dir.c_str(), preset.c_str(),
              static_cast<unsigned long long>(seed), secs);
  return 0;
}

// A text's tokens as OUT (an llm.c shard) with the sidecar that names its tokenizer.
void write_shard(const std::string& input, const std::string& out, const TextTokenizer& tok) {
  const ShardWritten w = write_token_shard(input, out, tok);
  std::printf("wrote %s: %zu tokens (%.2f bytes of text each), %s tokenizer, vocab %d%s\n", out.c_str(), w.tokens,
              (double)w.text_bytes / (double)w.tokens, tok.kind().c_str(), tok.vocab_size(), w.uint32_ids ? ", uint32 ids" : "");
  for (const std::string& f : w.sidecars)
    std::printf("wrote %s: %s\n", f.c_str(), tok.kind() == "char" ? ("alphabet of " + std::to_string(tok.vocab_size()) + " code points").c_str()
                                                                   : "the tokenizer's identity");
  for (const std::string& f : w.removed) std::printf("removed stale %s\n", f.c_str());
}

// `looplm data --tokenizer-train bpe --vocab-size N --input FILE [--val FILE] --out DIR`:
// DIR/tokenizer.json, then FILE (and the validation text) encoded with it into DIR/train.bin
// (DIR/val.bin), each with its sidecar.
int data_train_bpe(const std::string& input, const std::string& val, const std::string& out, int vocab_size,
                   bool tokenizer_flags) {
  namespace fs = std::filesystem;
  if (tokenizer_flags)
    throw UsageError("data: --tokenizer-train makes its own tokenizer; leave out --tokenizer, --tokenizer-file and --alphabet");
  if (vocab_size <= 0) throw UsageError("data: --tokenizer-train bpe needs --vocab-size N (e.g. 2048)");
  for (const std::string& f : {input, val})
    if (!f.empty() && fs::path(f).extension() == ".bin")
      throw UsageError("data: '" + brief_path(f) + "' is already a token file (.bin); a tokenizer trains on text");
  std::error_code ec;
  if (fs::exists(out, ec) && !fs::is_directory(out, ec))
    throw UsageError("data: --out '" + brief_path(out) + "' is a file; with --tokenizer-train it is a directory");
  const auto t0 = std::chrono::steady_clock::now();
  const std::string text = read_text(input);
  BpeTraining r;
  try {
    r = train_bpe_tokenizer(text, vocab_size);
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw Error(input + ": " + e.what());
  }
  fs::create_directories(out, ec);
  if (ec) throw Error("cannot create directory '" + out + "': " + ec.message());
  const std::string tok_path = (fs::path(out) / "tokenizer.json").string();
  write_file_atomic(tok_path, r.tokenizer_json);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("trained a byte-level BPE on %s (%s, %lld distinct words) in %.2f s: %d merges, vocab %d%s\nwrote %s\n",
              input.c_str(), format_bytes((double)text.size()).c_str(), (long long)r.words, secs, r.merges, r.vocab_size,
              r.vocab_size < vocab_size ? " (the corpus has no more pairs seen twice)" : "", tok_path.c_str());
  const TextTokenizer tok = TextTokenizer::from_json(r.tokenizer_json, tok_path);
  write_shard(input, (fs::path(out) / "train.bin").string(), tok);
  if (!val.empty()) write_shard(val, (fs::path(out) / "val.bin").string(), tok);
  std::printf("train on it: looplm train --set tokenizer_file=%s --set data_train=%s/train.bin%s\n", tok_path.c_str(),
              out.c_str(), val.empty() ? "" : (" --set data_val=" + out + "/val.bin").c_str());
  return 0;
}

}  // namespace

int cmd_data(int argc, char** argv) {
  // `looplm data listops ...` is a subcommand; anything else is the tokeniser, whose flags all start
  // with '-', so a first word "listops" cannot be one of its arguments.
  if (argc >= 2 && std::strcmp(argv[1], "listops") == 0) return cmd_data_listops(argc - 1, argv + 1);
  namespace fs = std::filesystem;
  std::string input, out, kind = "byte", alphabet_file, hf_file, train_kind, val_input;
  int vocab_size = 0;
  CLI::App app{"Tokenise a text or JSONL file into an llm.c shard (uint16 tokens; uint32 beyond 65,536 ids), or "
               "train a BPE tokenizer on it.", "looplm data"};
  app.add_option("--input", input, "text file, or .jsonl with one {\"text\": ...} per line")
      ->required()
      ->type_name("FILE");
  auto* kind_opt = app.add_option("--tokenizer", kind, "byte (default), char or hf (with --tokenizer-file)")
                       ->check(CLI::IsMember({"byte", "char", "hf"}))
                       ->type_name("KIND");
  app.add_option("--alphabet", alphabet_file,
                 "char tokenizer: use this alphabet (e.g. train.bin.chars) instead of building it "
                 "from --input; implies --tokenizer char")
      ->type_name("FILE");
  app.add_option("--tokenizer-file", hf_file, "a Hugging Face tokenizer.json to encode with; implies --tokenizer hf")
      ->type_name("FILE");
  app.add_option("--tokenizer-train", train_kind,
                 "bpe: train a byte-level BPE tokenizer (GPT-2's scheme) on --input, then write --out DIR/tokenizer.json "
                 "and the shards DIR/train.bin (and DIR/val.bin with --val)")
      ->check(CLI::IsMember({"bpe"}))
      ->type_name("KIND");
  app.add_option("--vocab-size", vocab_size, "with --tokenizer-train: the vocabulary, 256 bytes + merges + <|endoftext|>")
      ->check(at_least(258))
      ->type_name("N");
  app.add_option("--val", val_input, "with --tokenizer-train: validation text, encoded into DIR/val.bin (not trained on)")
      ->type_name("FILE");
  app.add_option("--out", out, "output shard, must end in .bin (a char tokenizer's alphabet is "
                               "written beside it as OUT.chars, an hf tokenizer's identity as OUT.tokenizer); with "
                               "--tokenizer-train a directory")
      ->required()
      ->type_name("FILE");
  ThreadsArg threads;
  threads.add(app);
  app.footer(
      "Example:\n  looplm data --input data/kjv/train.txt --tokenizer char --out data/kjv/train.bin\n"
      "  looplm data --input data/kjv/val.txt --alphabet data/kjv/train.bin.chars "
      "--out data/kjv/val.bin\n"
      "  looplm data --tokenizer-train bpe --vocab-size 2048 --input data/kjv/train.txt --val data/kjv/val.txt "
      "--out data/kjv_bpe\n"
      "  looplm data --input mytext.txt --tokenizer-file tokenizer.json --out mytext.bin\n"
      "Subcommand:\n  looplm data listops --out DIR [--preset nrgpt_small] ...   ListOps train / test "
      "sets (looplm data listops --help)");
  if (!parse(app, argc, argv, "data")) return 0;

  set_threads(threads.n);
  if (!train_kind.empty()) return data_train_bpe(input, val_input, out, vocab_size, kind_opt->count() > 0 || !hf_file.empty() || !alphabet_file.empty());
  if (vocab_size > 0 || !val_input.empty())
    throw UsageError(std::string("data: ") + (vocab_size > 0 ? "--vocab-size" : "--val") + " goes with --tokenizer-train");
  if (!alphabet_file.empty()) {
    if (kind_opt->count() > 0 && kind != "char") {
      throw UsageError("data: --alphabet needs the char tokenizer, not --tokenizer " + kind);
    }
    kind = "char";
  }
  if (!hf_file.empty()) {
    if (kind_opt->count() > 0 && kind != "hf") throw UsageError("data: --tokenizer-file needs --tokenizer hf, not " + kind);
    kind = "hf";
  }
  if (kind == "hf" && hf_file.empty()) throw UsageError("data: --tokenizer hf needs --tokenizer-file FILE (a tokenizer.json)");
  if (fs::path(out).extension() != ".bin") {
    throw UsageError("data: --out '" + brief_path(out) + "' must end in .bin (the loader picks the format by "
                     "extension)");
  }
  if (fs::path(input).extension() == ".bin") {
    throw UsageError("data: --input '" + brief_path(input) + "' is already a token file (.bin)");
  }

  TextTokenizer tok = TextTokenizer::byte_level();
  if (kind == "hf") tok = TextTokenizer::open(hf_file);
  if (kind == "char") {
    if (!alphabet_file.empty()) {
      const std::string chars = read_file_bytes(alphabet_file);
      try {
        tok = TextTokenizer::char_level(chars);
      } catch (const Error& e) {
        throw Error(alphabet_file + ": " + e.what());
      }
    } else {
      const std::string text = read_text(input);
      try {
        tok = TextTokenizer::char_level_from_text(text);
      } catch (const Error& e) {
        throw Error(input + ": " + e.what());
      }
    }
  }

  write_shard(input, out, tok);
  return 0;
}

}  // namespace looplm::cli
