// The shape of the code that a test can hold: the CLI and the server stand on the public API
// (include/looplm/*.h). Three commands still reach into the library's internals (what they need has
// no public entry point yet); no other tool file may, and those three may not start using more.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>

namespace {
const std::string kSrc = LOOPLM_SOURCE_DIR;
}

TEST(Layout, ToolsIncludeOnlyThePublicApi) {
  namespace fs = std::filesystem;
  // file -> the internal headers it still includes (to be replaced by public calls)
  const std::map<std::string, std::set<std::string>> still_internal = {
      {"cmd_bench.cpp", {"backend/cpu/gemm.h", "io/json_input.h", "backend/cpu/weight_format.h", "core/rng.h", "core/threads.h",
                         "model/model.h", "model/model_io.h", "ops/ops.h", "quant/gptq.h", "train/optimizer.h"}},
      {"cmd_data.cpp", {"io/json_input.h", "core/memory.h", "data/bpe_trainer.h", "data/dataset.h", "data/listops.h", "data/tokenizer.h"}},
      {"cmd_info.cpp", {"io/json_input.h", "backend/cpu/weight_format.h", "data/tokenizer.h", "model/model.h", "model/model_io.h", "ops/ops.h"}},
  };
  const std::regex include_line(R"re(^\s*#\s*include\s*"([^"]+)")re");
  int files = 0;
  for (const auto& e : fs::directory_iterator(kSrc + "/tools")) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() != ".cpp" && e.path().extension() != ".h") continue;
    ++files;
    std::ifstream f(e.path());
    std::string line;
    while (std::getline(f, line)) {
      std::smatch m;
      if (!std::regex_search(line, m, include_line)) continue;
      const std::string inc = m[1];
      if (inc.rfind("looplm/", 0) == 0 || fs::exists(kSrc + "/tools/" + inc)) continue;  // public, or the tool's own
      const auto it = still_internal.find(name);
      EXPECT_TRUE(it != still_internal.end() && it->second.count(inc))
          << "tools/" << name << " includes the internal header \"" << inc
          << "\": the CLI stands on include/looplm/*.h (add what it needs there)";
    }
  }
  EXPECT_GT(files, 10);
}
