// looplm: train, evaluate, sample and benchmark looped transformer language models.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>
#include <algorithm>

#include "cli.h"
#include "signals.h"
#include "looplm/error.h"
#include "looplm/looplm.h"
#include "looplm/util.h"
#include "looplm/distributed.h"

namespace {

using looplm::cli::Command;

// The commands: name, entry point, one line of help. The usage text, the dispatch and the
// "did you mean" suggestion all read this table.
const Command kCommands[] = {
    {"train", looplm::cli::cmd_train, "train a model (--preset NAME | --config FILE) [--set key=value ...] --out DIR"},
    {"eval", looplm::cli::cmd_eval, "loss at every exit r = 1..R of a checkpoint on a data file"},
    {"generate", looplm::cli::cmd_generate, "sample text from a checkpoint (KV cache per block and loop step)"},
    {"chat", looplm::cli::cmd_chat, "talk with a model in the terminal, in its chat template (/reset, /exit; Ctrl-C stops an answer)"},
    {"bench", looplm::cli::cmd_bench, "training and generation speed against the machine's GEMM peak"},
    {"data", looplm::cli::cmd_data, "tokenise text / JSONL into an llm.c shard; data listops: ListOps train/test sets"},
    {"info", looplm::cli::cmd_info, "layout, parameters, FLOPs and memory per token of a config, and its dense controls"},
    {"quantize", looplm::cli::cmd_quantize, "a checkpoint's weight matrices to q8_0 / q4_0 / q4_k (read by eval, generate, info)"},
    {"tokenize", looplm::cli::cmd_tokenize,
     "a text's token ids (a Hugging Face tokenizer.json or a checkpoint's tokenizer), or ids back to text"},
    {"export", looplm::cli::cmd_export, "a checkpoint as GGUF for llama.cpp / ollama (--format gguf)"},
    {"convert", looplm::cli::cmd_convert, "a GGUF file or a Hugging Face model directory into a looplm run directory"},
    {"serve", looplm::cli::cmd_serve, "an OpenAI-compatible HTTP server with continuous batching and a web page"},
};

std::string usage() {
  std::string u =
      "usage: looplm <command> [options]   (looplm <command> --help for its options; looplm --version)\n"
      "commands:\n";
  for (const Command& c : kCommands) {
    std::string name = c.name;
    name.resize(std::max<size_t>(name.size() + 1, 11), ' ');
    u += "  " + name + c.summary + "\n";
  }
  return u;
}

// The command's exit code; errors printed here.
int run_command(const std::string& cmd, int argc, char** argv) {
  try {
    std::vector<std::string> names;
    for (const Command& c : kCommands) {
      if (cmd == c.name) return c.run(argc - 1, argv + 1);
      names.push_back(c.name);
    }
    const std::string best = looplm::did_you_mean(cmd, names);
    std::fprintf(stderr, "looplm: unknown command '%s'%s\n%s", looplm::brief(cmd).c_str(),
                 best.empty() ? "" : (" (did you mean '" + best + "'?)").c_str(), usage().c_str());
    return 2;
  } catch (const looplm::Error& e) {
    // Messages name values short (brief); this cap is the last guard against one that does not.
    const std::string what = e.what();
    // Under mpirun an error every rank found together is printed by rank 0 alone; an error of one
    // rank alone ends the job (looplm::end_distributed).
    looplm::note_error_here();
    if (!looplm::error_was_agreed() || looplm::rank_in_job() == 0)
      std::fprintf(stderr, "looplm %s: error: %s%s\n", looplm::brief(cmd, 40).c_str(), what.substr(0, 4000).c_str(),
                   what.size() > 4000 ? "..." : "");
    return e.exit_code();
  } catch (const std::bad_alloc&) {
    looplm::note_error_here();
    std::fprintf(stderr, "looplm %s: error: out of memory (looplm may use %s here: the memory available, or LOOPLM_MEMORY_LIMIT)\n",
                 looplm::brief(cmd, 40).c_str(), looplm::format_bytes((double)looplm::memory_budget()).c_str());
    return 1;
  } catch (const std::exception& e) {
    looplm::note_error_here();
    std::fprintf(stderr, "looplm %s: error: %s\n", looplm::brief(cmd, 40).c_str(),
                 looplm::brief(looplm::plain_message(e), 4000).c_str());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  looplm::cli::choose_wait_policy(argc, argv);
  looplm::cli::start_signal_thread();
  if (argc >= 2 && (!std::strcmp(argv[1], "--version") || !std::strcmp(argv[1], "-V"))) {
    std::printf("looplm %s\nCPU features used: %s\n", looplm::version_text().c_str(), looplm::cpu_features_text().c_str());
    return 0;
  }
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::fputs(usage().c_str(), argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  // Under mpirun an error on one rank alone ends the whole job (end_distributed).
  return looplm::end_distributed(run_command(cmd, argc, argv));
}
