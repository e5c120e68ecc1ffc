// Read-only bytes of a file or of memory, shared by whoever reads them. A file is mapped (mmap,
// private, read-only) rather than read: a checkpoint loaded for inference is used in place, so
// loading costs the pages that are touched, not a copy (docs/format.md).
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

 protected:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// The whole file, mapped. Error naming the path for a missing file, a directory or an I/O failure.
std::shared_ptr<const Bytes> map_file(const std::string& path);
// Bytes already in memory (owned).
std::shared_ptr<const Bytes> hold_bytes(std::string bytes);

}  // namespace looplm::io
