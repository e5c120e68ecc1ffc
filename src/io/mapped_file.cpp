#include "io/mapped_file.h"
#include "looplm/util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <cstdlib>
#include <algorithm>
#include <mutex>
#include <vector>

#include "io/atomic_file.h"
#include "io/crc32c.h"
#include "io/json_input.h"
#include "looplm/error.h"

namespace looplm::io {

namespace {

// Every mapping alive, for check_mapped_files and the SIGBUS note.
class Mapping;
std::mutex g_mu;
std::vector<const Mapping*> g_live;
char g_note[4096];  // "a, b": the paths of g_live, cut to fit

class Mapping : public Bytes {
 public:
  Mapping(void* p, size_t n, int fd, std::string path, const struct stat& st)
      : base_(p), fd_(fd), path_(std::move(path)), file_size_(st.st_size), mtime_(st.st_mtim) {
    data_ = static_cast<const uint8_t*>(p);
    size_ = n;
    fingerprint_ = sampled_crc();
    std::lock_guard<std::mutex> lock(g_mu);
    g_live.push_back(this);
    update_note();
  }
  ~Mapping() override {
    {
      std::lock_guard<std::mutex> lock(g_mu);
      g_live.erase(std::find(g_live.begin(), g_live.end(), this));
      update_note();
    }
    if (base_) ::munmap(base_, size_);
    if (fd_ >= 0) ::close(fd_);
  }
  void release(const uint8_t* p, size_t n) const override {
    const uintptr_t page = (uintptr_t)::sysconf(_SC_PAGESIZE);
    const uintptr_t lo = ((uintptr_t)p + page - 1) / page * page, hi = ((uintptr_t)p + n) / page * page;
    if (hi > lo) ::madvise((void*)lo, hi - lo, MADV_DONTNEED);  // read-only and private: nothing is lost
  }
  // "" or what changed: the open file (its inode), so a rename over the name is no change.
  std::string changed() const {
    struct stat st{};
    if (::fstat(fd_, &st) != 0) return "";
    if (st.st_size != file_size_)
      return path_ + " changed on disk while in use: it was " + std::to_string(file_size_) + " bytes when loaded and is " +
             std::to_string(st.st_size) + " now";
    // The modification time, and the bytes themselves: some file systems (network and sandboxed
    // ones) report a cached mtime through fstat, while a read through the descriptor sees the write.
    if (st.st_mtim.tv_sec != mtime_.tv_sec || st.st_mtim.tv_nsec != mtime_.tv_nsec || sampled_crc() != fingerprint_)
      return path_ + " changed on disk while in use: it was written to after it was loaded";
    return "";
  }

 private:
  static void update_note() {  // under g_mu
    std::string s;
    for (const Mapping* m : g_live) s += (s.empty() ? "" : ", ") + m->path_;
    const size_t n = std::min(s.size(), sizeof g_note - 1);
    std::memcpy(g_note, s.data(), n);
    g_note[n] = '\0';
  }
  // CRC-32C of kSamples blocks of kBlock bytes spread evenly over the file, read through the
  // descriptor (pread, not the mapping): a few KB per check, so checking twice a second costs nothing.
  uint32_t sampled_crc() const {
    constexpr int kSamples = 32;
    constexpr size_t kBlock = 128;
    uint8_t buf[kBlock];
    uint32_t crc = 0;
    const size_t n = (size_t)file_size_;
    for (int i = 0; i < kSamples; ++i) {
      const size_t at = n <= kBlock ? 0 : (size_t)((double)(n - kBlock) * i / (kSamples - 1));
      const ssize_t got = ::pread(fd_, buf, std::min(kBlock, n), (off_t)at);
      if (got > 0) crc = crc32c(crc, buf, (size_t)got);
      if (n <= kBlock) break;
    }
    return crc;
  }
  void* base_;
  int fd_;
  std::string path_;
  off_t file_size_;
  struct timespec mtime_;
  uint32_t fingerprint_ = 0;
};

class Owned : public Bytes {
 public:
  explicit Owned(std::string s) : s_(std::move(s)) {
    data_ = reinterpret_cast<const uint8_t*>(s_.data());
    size_ = s_.size();
  }

 private:
  std::string s_;
};

}  // namespace

std::shared_ptr<const Bytes> map_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    throw Error("cannot read '" + brief_path(path) + "': " + std::strerror(e));
  }
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    throw Error("cannot read '" + brief_path(path) + "': " + std::strerror(e));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw Error("cannot read '" + brief_path(path) + "': is a directory");
  }
  if (!S_ISREG(st.st_mode)) {  // a device (/dev/zero would be read for ever), a FIFO, a socket
    ::close(fd);
    throw Error("cannot read '" + brief_path(path) + "': not a regular file (a model file is a file)");
  }
  if (st.st_size == 0) {  // nothing to map; the reader names what is missing
    ::close(fd);
    return hold_bytes(read_file(path));
  }
  void* p = ::mmap(nullptr, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) {
    const int e = errno;
    ::close(fd);
    throw Error("cannot map '" + brief_path(path) + "': " + std::strerror(e));
  }
  // The descriptor stays open: check_mapped_files asks it whether this file was changed in place.
  return std::make_shared<Mapping>(p, (size_t)st.st_size, fd, path, st);
}

std::shared_ptr<const Bytes> hold_bytes(std::string bytes) { return std::make_shared<Owned>(std::move(bytes)); }

void check_mapped_files() {
  std::lock_guard<std::mutex> lock(g_mu);
  for (const Mapping* m : g_live)
    if (const std::string what = m->changed(); !what.empty())
      throw Error(what + ". It was overwritten in place; replace a checkpoint by writing the new one beside it and "
                  "renaming it over the old name (mv), which readers survive, then load it again");
}

const char* mapped_files_note() { return g_note; }

}  // namespace looplm::io

namespace looplm {
const char* mapped_files_note() { return io::mapped_files_note(); }
}  // namespace looplm
