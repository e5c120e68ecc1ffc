#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <cstdlib>

#include "io/atomic_file.h"
#include "looplm/error.h"

namespace looplm::io {

namespace {

class Mapping : public Bytes {
 public:
  Mapping(void* p, size_t n) : base_(p) {
    data_ = static_cast<const uint8_t*>(p);
    size_ = n;
  }
  ~Mapping() override {
    if (base_) ::munmap(base_, size_);
  }

 private:
  void* base_;
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
    throw Error("cannot read '" + path + "': " + std::strerror(e));
  }
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    throw Error("cannot read '" + path + "': " + std::strerror(e));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw Error("cannot read '" + path + "': is a directory");
  }
  if (!S_ISREG(st.st_mode) || st.st_size == 0) {  // a pipe or an empty file: read it instead
    ::close(fd);
    return hold_bytes(read_file(path));
  }
  if (getenv("LOOPLM_HUGE")) {
    size_t n = (size_t)st.st_size, cap = (n + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
    void* a = ::mmap(nullptr, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ::madvise(a, cap, MADV_HUGEPAGE);
    size_t got = 0;
    while (got < n) { ssize_t r = ::pread(fd, (char*)a + got, n - got, got); if (r <= 0) break; got += r; }
    ::close(fd);
    return std::make_shared<Mapping>(a, cap);
  }
  void* p = ::mmap(nullptr, (size_t)st.st_size, PROT_READ, getenv("LOOPLM_POP") ? MAP_PRIVATE | MAP_POPULATE : MAP_PRIVATE, fd, 0);
  int e = errno;
  ::close(fd);
  if (p == MAP_FAILED) throw Error("cannot map '" + path + "': " + std::strerror(e));
  return std::make_shared<Mapping>(p, (size_t)st.st_size);
}

std::shared_ptr<const Bytes> hold_bytes(std::string bytes) { return std::make_shared<Owned>(std::move(bytes)); }

}  // namespace looplm::io
