// The looplm binary: one file per subcommand, each an entry point taking the arguments after the
// subcommand name. Usage errors throw looplm::UsageError (exit 2), runtime failures looplm::Error
// (exit 1); main() turns them into a message on stderr and the exit code.
#pragma once

namespace looplm::cli {
struct Command {
  const char* name;
  int (*run)(int argc, char** argv);
  const char* summary;  // one line for `looplm --help`
};
int cmd_train(int argc, char** argv);
int cmd_eval(int argc, char** argv);
int cmd_generate(int argc, char** argv);
int cmd_chat(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_data(int argc, char** argv);
int cmd_info(int argc, char** argv);
int cmd_quantize(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_export(int argc, char** argv);
int cmd_convert(int argc, char** argv);
int cmd_serve(int argc, char** argv);
// For a fixed thread count of 2 or more, a short OpenMP spin before sleeping, which the OpenMP
// runtime reads only at start: sets GOMP_SPINCOUNT and executes the program again (wait_policy.cpp).
// Returns when there is nothing to do, or when that fails. Call first in main.
void choose_wait_policy(int argc, char** argv);
}  // namespace looplm::cli
