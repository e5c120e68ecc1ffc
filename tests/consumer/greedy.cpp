// Greedy decoding through the installed library: `greedy CHECKPOINT PROMPT N` prints the N new
// tokens' text, what `looplm generate --checkpoint CHECKPOINT -p PROMPT -n N --temperature 0`
// prints after the prompt (tests/install.sh compares the two).
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include <looplm/looplm.h>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: greedy CHECKPOINT PROMPT N\n");
    return 2;
  }
  try {
    const looplm::LanguageModel model = looplm::LanguageModel::load(argv[1]);
    looplm::GenerateOptions o;
    o.max_new = std::atoi(argv[3]);
    o.temperature = 0;
    const std::vector<int32_t> prompt = model.encode_prompt(argv[2]);
    std::cout << model.decode_continuation(prompt, model.generate(prompt, o));
    std::cerr << "looplm " << looplm::kVersion << ", " << model.n_params() << " parameters\n";
  } catch (const std::exception& e) {
    std::fprintf(stderr, "greedy: %s\n", e.what());
    return 1;
  }
  return 0;
}
