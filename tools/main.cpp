// looplm: train, evaluate, sample and benchmark looped transformer language models.
#include <cstdio>
#include <cstring>
#include <string>

#include "cli.h"
#include "signals.h"
#include "looplm/error.h"
#include "looplm/looplm.h"
#include "looplm/util.h"

namespace {

const char* kUsage =
    "usage: looplm <command> [options]   (looplm <command> --help for its options; looplm --version)\n"
    "commands:\n"
    "  train      train a model (--preset NAME | --config FILE) [--set key=value ...] --out DIR\n"
    "  eval       loss at every exit r = 1..R of a checkpoint on a data file\n"
    "  generate   sample text from a checkpoint (KV cache per block and loop step)\n"
    "  bench      training and generation speed against the machine's GEMM peak\n"
    "  data       tokenise text / JSONL into an llm.c shard; data listops: ListOps train/test sets\n"
    "  info       layout, parameters, FLOPs and memory per token of a config, and its dense controls\n"
    "  quantize   a checkpoint's weight matrices to q8_0 / q4_0 / q4_k (read by eval, generate, info)\n"
    "  tokenize   a text's token ids (a Hugging Face tokenizer.json or a checkpoint's tokenizer), or ids back to text\n"
    "  export     a checkpoint as GGUF for llama.cpp / ollama (--format gguf)\n"
    "  convert    a GGUF file (llama, nanbeige) into a looplm run directory\n"
    "  serve      an OpenAI-compatible HTTP server with continuous batching and a web page\n";

}  // namespace

int main(int argc, char** argv) {
  looplm::cli::choose_wait_policy(argc, argv);
  looplm::cli::start_signal_thread();
  if (argc >= 2 && (!std::strcmp(argv[1], "--version") || !std::strcmp(argv[1], "-V"))) {
    std::printf("looplm %s\n", looplm::kVersion);
    return 0;
  }
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  try {
    using namespace looplm::cli;
    if (cmd == "train") return cmd_train(argc - 1, argv + 1);
    if (cmd == "eval") return cmd_eval(argc - 1, argv + 1);
    if (cmd == "generate") return cmd_generate(argc - 1, argv + 1);
    if (cmd == "bench") return cmd_bench(argc - 1, argv + 1);
    if (cmd == "data") return cmd_data(argc - 1, argv + 1);
    if (cmd == "info") return cmd_info(argc - 1, argv + 1);
    if (cmd == "quantize") return cmd_quantize(argc - 1, argv + 1);
    if (cmd == "tokenize") return cmd_tokenize(argc - 1, argv + 1);
    if (cmd == "export") return cmd_export(argc - 1, argv + 1);
    if (cmd == "convert") return cmd_convert(argc - 1, argv + 1);
    if (cmd == "serve") return cmd_serve(argc - 1, argv + 1);
    std::fprintf(stderr, "looplm: unknown command '%s'\n%s", looplm::brief(cmd).c_str(), kUsage);
    return 2;
  } catch (const looplm::Error& e) {
    // Messages name values short (brief); this cap is the last guard against one that does not.
    const std::string what = e.what();
    std::fprintf(stderr, "looplm %s: error: %s%s\n", looplm::brief(cmd, 40).c_str(), what.substr(0, 4000).c_str(),
                 what.size() > 4000 ? "..." : "");
    return e.exit_code();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "looplm %s: error: out of memory (looplm may use %s here: the memory available, or LOOPLM_MEMORY_LIMIT)\n",
                 looplm::brief(cmd, 40).c_str(), looplm::format_bytes((double)looplm::memory_budget()).c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "looplm %s: error: %s\n", looplm::brief(cmd, 40).c_str(),
                 looplm::brief(looplm::plain_message(e), 4000).c_str());
    return 1;
  }
}
