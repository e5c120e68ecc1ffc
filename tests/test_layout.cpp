// The shape of the code that a test can hold: the CLI and the server stand on the public API
// (include/looplm/*.h); no tool file includes one of the library's internal headers.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

namespace {
const std::string kSrc = LOOPLM_SOURCE_DIR;
}

TEST(Layout, ToolsIncludeOnlyThePublicApi) {
  namespace fs = std::filesystem;
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
      ADD_FAILURE() << "tools/" << name << " includes the internal header \"" << inc
          << "\": the CLI stands on include/looplm/*.h (add what it needs there)";
    }
  }
  EXPECT_GT(files, 10);
  // The public headers name only each other; the Python module (another front end) them and its own files.
  for (const std::string dir : {"/include/looplm", "/python"})
    for (const auto& e : fs::directory_iterator(kSrc + dir)) {
      std::ifstream f(e.path());
      std::string line;
      while (std::getline(f, line)) {
        std::smatch m;
        if (!std::regex_search(line, m, include_line)) continue;
        const std::string inc = m[1];
        if (inc.rfind("looplm/", 0) == 0 || (dir == "/python" && fs::exists(kSrc + dir + "/" + inc))) continue;
        ADD_FAILURE() << e.path() << " includes the internal header \"" << inc << "\"";
      }
    }
}
