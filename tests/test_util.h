// Shared test helpers: a temporary directory removed at the end of the test, and a small corpus.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <string>

namespace looplm::test {

struct TempDir {
  std::string path;
  explicit TempDir(const std::string& name) {
    namespace fs = std::filesystem;
    path = (fs::temp_directory_path() / ("looplm_test_" + name + "_" + std::to_string(::getpid()))).string();
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string operator/(const std::string& f) const { return path + "/" + f; }
};

// `lines` lines of KJV-like text ending in a digit 0..6, so a byte model has a little to learn.
inline std::string corpus(int lines = 200) {
  std::string s;
  for (int i = 0; i < lines; ++i) s += "In the beginning God created the heaven and the earth. " + std::to_string(i % 7) + "\n";
  return s;
}

}  // namespace looplm::test
