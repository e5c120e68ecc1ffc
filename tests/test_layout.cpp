// The shape of the code that a test can hold: the CLI and the server stand on the public API
// (include/looplm/*.h); no tool file includes one of the library's internal headers; the folders
// of src/ are layers, each including only those below it; no function runs past ~120 lines
// without a reason on the list.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace {
const std::string kSrc = LOOPLM_SOURCE_DIR;

// The quoted includes of a source file ("looplm/util.h", "model/model.h", ...).
std::vector<std::string> includes_of(const std::filesystem::path& file) {
  static const std::regex include_line(R"re(^\s*#\s*include\s*"([^"]+)")re");
  std::vector<std::string> out;
  std::ifstream f(file);
  std::string line;
  while (std::getline(f, line)) {
    std::smatch m;
    if (std::regex_search(line, m, include_line)) out.push_back(m[1]);
  }
  return out;
}
}  // namespace

TEST(Layout, ToolsIncludeOnlyThePublicApi) {
  namespace fs = std::filesystem;
  int files = 0;
  for (const auto& e : fs::directory_iterator(kSrc + "/tools")) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() != ".cpp" && e.path().extension() != ".h") continue;
    ++files;
    for (const std::string& inc : includes_of(e.path())) {
      if (inc.rfind("looplm/", 0) == 0 || fs::exists(kSrc + "/tools/" + inc)) continue;  // public, or the tool's own
      ADD_FAILURE() << "tools/" << name << " includes the internal header \"" << inc
          << "\": the CLI stands on include/looplm/*.h (add what it needs there)";
    }
  }
  EXPECT_GT(files, 10);
  // The public headers name only each other; the Python module (another front end) them and its own files.
  for (const std::string dir : {"/include/looplm", "/python"})
    for (const auto& e : fs::directory_iterator(kSrc + dir))
      for (const std::string& inc : includes_of(e.path())) {
        if (inc.rfind("looplm/", 0) == 0 || (dir == "/python" && fs::exists(kSrc + dir + "/" + inc))) continue;
        ADD_FAILURE() << e.path() << " includes the internal header \"" << inc << "\"";
      }
}

// The layers of src/ (docs/architecture.md, "Layers of the code"): a folder includes its own
// headers and those of the folders before it in kLayers, never one after it. Of the public headers,
// the ground ones (error.h, config.h, util.h, types.h) may be included anywhere; each facade header
// only from the layer that implements it upward. The few lower files that still include a facade
// are listed, each with its reason: the list may only shrink.
namespace {
const std::vector<std::string> kLayers = {"core",  "backend/cpu", "ops",   "io",    "tokenizer",   "data",
                                          "text",  "model",       "infer", "quant", "interchange", "train", "bench"};
// public facade header -> the lowest layer that may include it
const std::map<std::string, std::string> kFacadeFloor = {
    {"looplm/looplm.h", "infer"}, {"looplm/data.h", "data"}, {"looplm/distributed.h", "train"}, {"looplm/bench.h", "bench"}};
// (file under src/, facade header) included below its floor, and why
const std::map<std::pair<std::string, std::string>, std::string> kBelowTheFloor = {
    {{"tokenizer/text_tokenizer.cpp", "looplm/looplm.h"}, "defines TextTokenizer, whose body is the tokenizer layer's"},
    {{"tokenizer/text_tokenizer_impl.h", "looplm/looplm.h"}, "the same"},
    {{"model/describe.cpp", "looplm/looplm.h"}, "defines describe_model / inspect_checkpoint (looplm info)"},
    {{"backend/cpu/gemm.h", "looplm/bench.h"}, "the measured GEMM peak it defines is bench.h's measure_gemm_gflops"},
};
}  // namespace

TEST(Layout, SrcLayersIncludeOnlyDownward) {
  namespace fs = std::filesystem;
  auto layer_of = [](const std::string& folder) {
    return (int)(std::find(kLayers.begin(), kLayers.end(), folder) - kLayers.begin());
  };
  std::set<std::string> folders;
  std::set<std::pair<std::string, std::string>> below_seen;
  for (const auto& e : fs::recursive_directory_iterator(kSrc + "/src")) {
    if (e.path().extension() != ".cpp" && e.path().extension() != ".h") continue;
    const std::string rel = fs::relative(e.path(), kSrc + "/src").string();
    const std::string folder = fs::path(rel).parent_path().string();
    folders.insert(folder);
    const int mine = layer_of(folder);
    ASSERT_LT(mine, (int)kLayers.size()) << "src/" << folder << " is in no layer: add it to kLayers and to docs/architecture.md";
    for (const std::string& inc : includes_of(e.path())) {
      if (inc.rfind("looplm/", 0) == 0) {
        auto floor = kFacadeFloor.find(inc);
        if (floor == kFacadeFloor.end() || mine >= layer_of(floor->second)) continue;
        if (kBelowTheFloor.count({rel, inc})) {
          below_seen.insert({rel, inc});
          continue;
        }
        ADD_FAILURE() << "src/" << rel << " includes the facade \"" << inc << "\" below " << floor->second
                      << ": put the type it needs in a ground header (looplm/types.h)";
        continue;
      }
      const std::string dir = fs::path(inc).parent_path().string();
      if (dir.empty() || dir == folder) continue;
      const int theirs = layer_of(dir);
      if (theirs >= (int)kLayers.size()) continue;  // not a src/ folder (a system or generated header)
      EXPECT_LE(theirs, mine) << "src/" << rel << " includes \"" << inc << "\": " << folder << " may not depend on "
                              << dir << ", a layer above it (docs/architecture.md)";
    }
  }
  for (const auto& [what, why] : kBelowTheFloor)
    EXPECT_TRUE(below_seen.count(what)) << what.first << " no longer includes " << what.second << ": strike it from the list";
  // docs/architecture.md's table names every layer, in this order
  std::ifstream doc(kSrc + "/docs/architecture.md");
  std::string text((std::istreambuf_iterator<char>(doc)), std::istreambuf_iterator<char>());
  size_t at = 0;
  for (const std::string& l : kLayers) {
    const size_t here = text.find("| `src/" + l + "` |");
    ASSERT_NE(here, std::string::npos) << "docs/architecture.md has no row for src/" << l;
    EXPECT_GT(here, at) << "docs/architecture.md lists src/" << l << " out of the layers' order";
    at = here;
  }
  EXPECT_EQ(folders.size(), kLayers.size());
}

// Functions that read: none in src/, tools/ or python/ longer than kLongFunction lines (from the
// line that starts its signature at column 0 to its closing brace at column 0), except the ones
// listed here, each with its reason; the list may only shrink.
namespace {
constexpr int kLongFunction = 120;
// "file: the first words of the signature" -> why it is long (or what is left to split)
const std::map<std::string, std::string> kLongFunctions = {
    {"src/train/trainer.cpp: TrainResult train(", "the training loop; its step would read best as a Run object's methods (llm.c's main), not split yet"},
    {"src/text/jinja.cpp: std::string Interp::percent_format(", "Python's %-formatting: one switch over conversion types"},
    {"src/text/jinja.cpp: Value str_method(", "Python's str methods: one dispatch over their names"},
    {"src/data/bpe_trainer.cpp: BpeTrainResult train_byte_level_bpe(", "the BPE merge loop with its incremental pair counts, not split yet"},
    {"src/interchange/gguf_vocab.cpp: GgufVocab vocab_of_spm_json(", "a SentencePiece vocabulary's cases, not split yet"},
    {"python/looplm_module.cpp: void bind_files(", "a list of short bindings, one per library call"},
    {"python/looplm_module.cpp: void bind_model_generate(", "one binding whose keyword arguments are the CLI's options"},
    {"tools/cmd_train.cpp: int cmd_train(", "the command's options (one add_option each) and their resolution into a config"},
    {"tools/cmd_generate.cpp: int cmd_generate(", "the command's options (one add_option each), then one call"},
};
}  // namespace

TEST(Layout, FunctionsReadTopToBottom) {
  namespace fs = std::filesystem;
  static const std::regex starts_function(R"re(^[A-Za-z_][\w:<>,\* &]*[\w>\*&]\s+[\w:~]+\()re");
  static const std::regex not_function(R"re(^(namespace|struct|class|using|template|typedef|enum|extern|static_assert|return|if|for|while|else|const\s+char|constexpr)\b)re");
  std::set<std::string> seen;
  for (const std::string root : {"src", "tools", "python"}) {
    for (const auto& e : fs::recursive_directory_iterator(kSrc + "/" + root)) {
      if (e.path().extension() != ".cpp") continue;
      const std::string rel = fs::relative(e.path(), kSrc).string();
      std::ifstream f(e.path());
      std::vector<std::string> lines;
      for (std::string l; std::getline(f, l);) lines.push_back(l);
      for (size_t i = 0; i < lines.size(); ++i) {
        if (!std::regex_search(lines[i], starts_function) || std::regex_search(lines[i], not_function) ||
            lines[i].find(';') != std::string::npos)
          continue;
        size_t open = i;  // the signature may go on: its body opens where a line ends with '{'
        while (open < lines.size() && open < i + 8 && (lines[open].empty() || lines[open].back() != '{')) ++open;
        if (open >= lines.size() || open >= i + 8) continue;
        size_t close = open + 1;
        while (close < lines.size() && lines[close] != "}") ++close;
        const int n = (int)(close - i + 1);
        const std::string key = rel + ": " + lines[i].substr(0, lines[i].find('(') + 1);
        if (n > kLongFunction) {
          seen.insert(key);
          EXPECT_TRUE(kLongFunctions.count(key)) << key << " is " << n << " lines: split it, or list it in "
                                                 << "kLongFunctions with the reason it is long";
        }
        i = close;
      }
    }
  }
  for (const auto& [key, why] : kLongFunctions)
    EXPECT_TRUE(seen.count(key)) << key << " is no longer over " << kLongFunction << " lines: take it off the list";
}
