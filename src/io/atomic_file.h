// Crash-safe file output and checked file input.
//
// A file written here is either the complete old version or the complete new one, never a torn mix:
// the bytes go to `PATH.tmp.<pid>` in the same directory, the temp file is fsync'ed, renamed over PATH,
// and the directory is fsync'ed so the rename itself survives a power cut. Any failure removes the
// temp file and throws looplm::Error naming the path and strerror(errno). A temp file left by a
// process killed mid-write keeps its `.tmp.<pid>` name; whoever owns the directory removes it
// (train does on every start, under its lock).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "looplm/error.h"

namespace looplm::io {

// Streaming atomic write: write() any number of times, then commit(). Destroying an uncommitted
// writer (an exception on the way, a forgotten commit) removes the temp file and leaves PATH as it was.
class AtomicWriter {
 public:
  explicit AtomicWriter(const std::string& path);  // creates PATH.tmp.<pid>; throws Error
  ~AtomicWriter();
  AtomicWriter(const AtomicWriter&) = delete;
  AtomicWriter& operator=(const AtomicWriter&) = delete;

  void write(const void* data, size_t n);  // all n bytes or Error
  void commit();                           // fsync, rename over PATH, fsync the directory
  size_t bytes_written() const { return written_; }
  uint32_t crc32c() const { return crc_; }  // of the bytes written (io/crc32c.h)
  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return tmp_; }

 private:
  [[noreturn]] void fail(const std::string& what, int err);  // abort + throw
  void abort() noexcept;                                      // close + unlink temp

  std::string path_, tmp_;
  int fd_ = -1;
  size_t written_ = 0;
  uint32_t crc_ = 0;
  bool committed_ = false;
};

// One-shot atomic write of n bytes.
void write_file_atomic(const std::string& path, const void* data, size_t n);
inline void write_file_atomic(const std::string& path, const std::string& bytes) {
  write_file_atomic(path, bytes.data(), bytes.size());
}

// Whole file into memory. Error names the path and strerror (missing file, directory, I/O error),
// or says the file holds more than `max_bytes` (a regular file is refused by its size before it
// is read; a pipe or device, such as /dev/zero, once that much has been read).
std::string read_file(const std::string& path, uint64_t max_bytes = UINT64_MAX);
struct FileTooLarge : Error {  // read_file's error for more than max_bytes
  using Error::Error;
};

}  // namespace looplm::io
