// Shared by the libFuzzer targets in fuzz/ (fuzz/README.md).
#pragma once
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "io/mapped_file.h"

namespace looplm::fuzz {

// A directory of this process's own for the files a target writes (loaders that take a path):
// $TMPDIR (else /tmp)/looplm-fuzz-<pid>. Each input overwrites the same few files; the directory
// is removed at exit (scripts/test.sh --fuzz points TMPDIR at a directory of its own, on a tmpfs
// when there is one, and removes it, so what a crash leaves behind goes too).
inline const std::string& scratch_dir() {
  // Never destroyed: the exit handler that removes the directory runs after static destructors.
  static const std::string& dir = *new std::string([] {
    const char* t = std::getenv("TMPDIR");
    std::string d = std::string(t && *t ? t : "/tmp") + "/looplm-fuzz-" + std::to_string(::getpid());
    if (::mkdir(d.c_str(), 0700) != 0 && errno != EEXIST) {
      std::perror(("mkdir " + d).c_str());
      std::abort();
    }
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_dir(), ec);
    });
    return d;
  }());
  return dir;
}

// Writes `bytes` to scratch_dir()/name (truncating) and returns the path. Plain write(2), no fsync:
// the loaders read it back at once, and it is rewritten for every input.
inline std::string write_scratch(const std::string& name, std::string_view bytes) {
  const std::string path = scratch_dir() + "/" + name;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    std::perror(("open " + path).c_str());
    std::abort();
  }
  for (size_t at = 0; at < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + at, bytes.size() - at);
    if (n <= 0) {
      std::perror(("write " + path).c_str());
      std::abort();
    }
    at += (size_t)n;
  }
  ::close(fd);
  return path;
}

// The fuzzer's own input buffer as io::Bytes, without a copy: libFuzzer passes each input in a heap
// block of exactly its size, so ASan reports a read even one byte past the end (a std::string or a
// mapped file would hide it in their spare capacity or the rest of the page).
class InputBytes : public io::Bytes {
 public:
  InputBytes(const uint8_t* data, size_t size) {
    data_ = data;
    size_ = size;
  }
};

inline std::shared_ptr<const io::Bytes> input_bytes(const uint8_t* data, size_t size) {
  return std::make_shared<InputBytes>(data, size);
}


}  // namespace looplm::fuzz

// A mutator for safetensors files that keeps the 8-byte header length right: most mutations then
// change the JSON header (tensor entries, __metadata__, a checkpoint's config and packed list) or
// the data section and still reach the code behind the length check. A quarter of the time, or when
// the length does not fit the file, the whole file is mutated as bytes (the length included).
// Define LOOPLM_FUZZ_SAFETENSORS_MUTATOR before including this file in one target to install it.
#ifdef LOOPLM_FUZZ_SAFETENSORS_MUTATOR
extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  uint64_t n = 0;
  if (size >= 8)
    for (int i = 0; i < 8; ++i) n |= (uint64_t)data[i] << (8 * i);
  if (size < 8 || n == 0 || n > size - 8 || seed % 4 == 0) return LLVMFuzzerMutate(data, size, max_size);
  const size_t rest = size - 8 - n;  // the data section
  if (seed % 4 == 1 && rest > 0) {   // the data section alone; its length is kept (offsets stay valid)
    LLVMFuzzerMutate(data + 8 + n, rest, rest);
    return size;
  }
  // The header: mutated in a buffer with the room max_size leaves beside the data section, then
  // put back with its new length.
  const size_t room = max_size - 8 - rest;
  std::string header((const char*)data + 8, n);
  header.resize(room);
  const size_t m = LLVMFuzzerMutate((uint8_t*)header.data(), n, room);
  if (8 + m + rest > max_size) return LLVMFuzzerMutate(data, size, max_size);
  std::memmove(data + 8 + m, data + 8 + n, rest);
  std::memcpy(data + 8, header.data(), m);
  for (int i = 0; i < 8; ++i) data[i] = (uint8_t)((uint64_t)m >> (8 * i));
  return 8 + m + rest;
}
#endif
