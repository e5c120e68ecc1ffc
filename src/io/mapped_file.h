// Read-only bytes of a file or of memory, shared by whoever reads them. A file is mapped (mmap,
// private, read-only) rather than read: an fp32 checkpoint loaded for inference is used in place,
// so loading costs the pages that are touched, not a copy (docs/format.md). A quantized one's
// packed matrices are copied into 2 MB pages instead (model_io.cpp), the file's pages released.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace looplm::io {

class Bytes {
 public:
  virtual ~Bytes() = default;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // Done with [p, p + n) (inside these bytes) for now: a file mapping drops the whole pages in it
  // from the resident set (a later read faults them in again from the file); memory keeps them.
  virtual void release(const uint8_t* p, size_t n) const { (void)p, (void)n; }

 protected:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// The whole file, mapped. Error naming the path for a missing file, a directory or an I/O failure.
std::shared_ptr<const Bytes> map_file(const std::string& path);
// Bytes already in memory (owned).
std::shared_ptr<const Bytes> hold_bytes(std::string bytes);

// A mapped file overwritten in place while in use (a deploy script copying a new checkpoint over
// the served one) changes the mapped weights under the reader, and where it shrank, a read past
// its new end is SIGBUS. Replacing a file by rename (write beside it, rename over the name) is
// safe: the mapping keeps the old file. What is cheap to detect is detected:
// Error naming the file if a file mapped now has a size, modification time or sampled content (a
// few KB read through its descriptor) other than when it was mapped (the file itself, not its name: a rename over the name is not a change). Called at
// load and, during long generation and evaluation, periodically.
void check_mapped_files();
// The files mapped now ("a, b"), for a SIGBUS handler's message: a fixed buffer, safe to read from
// a signal handler (it may be mid-update if a file is being mapped at that moment).
const char* mapped_files_note();

}  // namespace looplm::io
