#include "io/atomic_file.h"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/crc32c.h"
#include "io/fault.h"
#include "io/json_input.h"
#include "looplm/error.h"

namespace looplm::io {

namespace {

std::string parent_dir(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Some file systems refuse fsync on a directory; that is not a failed write.
bool fsync_dir(const std::string& dir, int* err) {
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) { *err = errno; return false; }
  int rc;
  do { rc = ::fsync(dfd); } while (rc != 0 && errno == EINTR);
  int e = errno;
  ::close(dfd);
  if (rc != 0 && e != EINVAL && e != ENOTSUP && e != EROFS) { *err = e; return false; }
  return true;
}

}  // namespace

AtomicWriter::AtomicWriter(const std::string& path)
    : path_(path), tmp_(path + ".tmp." + std::to_string(::getpid())) {
  if (path.empty()) throw Error("cannot write a file with an empty path");
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd_ < 0) {
    int e = errno;
    throw Error("cannot write '" + brief_path(path_) + "': cannot create temporary file '" + brief_path(tmp_) + "': " +
                std::strerror(e));
  }
}

AtomicWriter::~AtomicWriter() {
  if (!committed_) abort();
}

void AtomicWriter::abort() noexcept {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicWriter::fail(const std::string& what, int err) {
  abort();
  committed_ = true;  // nothing left to clean up in the destructor
  throw Error("cannot write '" + brief_path(path_) + "': " + what + ": " + std::strerror(err));
}

void AtomicWriter::write(const void* data, size_t n) {
  if (fd_ < 0) throw Error("cannot write '" + brief_path(path_) + "': writer already committed or failed");
  const char* p = static_cast<const char*>(data);
  crc_ = io::crc32c(crc_, data, n);
  while (n > 0) {
    // Linux write() moves at most ~2 GiB per call; loop on short writes and EINTR.
    if (const int e = fault_point("atomic.write")) fail("write to '" + brief_path(tmp_) + "' failed", e);
    ssize_t k = ::write(fd_, p, n);
    if (k < 0) {
      if (errno == EINTR) continue;
      fail("write to '" + brief_path(tmp_) + "' failed", errno);
    }
    if (k == 0) fail("write to '" + brief_path(tmp_) + "' made no progress", EIO);
    p += k;
    n -= static_cast<size_t>(k);
    written_ += static_cast<size_t>(k);
    fault_point("atomic.partial");  // a kill here leaves a torn temp file
  }
}

void AtomicWriter::commit() {
  if (fd_ < 0) throw Error("cannot write '" + brief_path(path_) + "': writer already committed or failed");
  int rc;
  do { rc = ::fsync(fd_); } while (rc != 0 && errno == EINTR);
  if (rc != 0) fail("fsync of '" + brief_path(tmp_) + "' failed", errno);
  rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0 && errno != EINTR) fail("close of '" + brief_path(tmp_) + "' failed", errno);
  fault_point("atomic.before_rename");  // a whole temp file, not yet in place
  if (::rename(tmp_.c_str(), path_.c_str()) != 0)
    fail("rename of '" + brief_path(tmp_) + "' over it failed", errno);
  committed_ = true;  // the new file is in place; the temp name no longer exists
  int err = 0;
  if (!fsync_dir(parent_dir(path_), &err))
    throw Error("cannot write '" + brief_path(path_) + "': fsync of directory '" + parent_dir(path_) +
                "' failed: " + std::strerror(err));
}

void write_file_atomic(const std::string& path, const void* data, size_t n) {
  AtomicWriter w(path);
  w.write(data, n);
  w.commit();
}

std::string read_file(const std::string& path, uint64_t max_bytes) {
  // Opened without waiting (a FIFO with no writer would block the open for ever), then read
  // blocking: a FIFO nobody writes reads as empty, a pipe as what it gives.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    int e = errno;
    throw Error("cannot read '" + brief_path(path) + "': " + std::strerror(e));
  }
  if (const int fl = ::fcntl(fd, F_GETFL); fl >= 0) ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  auto fail = [&](int e) {
    ::close(fd);
    throw Error("cannot read '" + brief_path(path) + "': " + std::strerror(e));
  };
  // Read straight into the result when the size is known (checkpoints can be large), then keep
  // reading in case the file grew or is not a regular file.
  struct stat st{};
  const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  auto too_big = [&] {
    ::close(fd);
    throw FileTooLarge("cannot read '" + brief_path(path) + "': it holds more than " + std::to_string(max_bytes) +
                " bytes, the most this read may take" + (regular ? "" : " (not a regular file: a stream that does not end?)"));
  };
  size_t got = 0;
  std::string out;
  if (regular && (uint64_t)st.st_size > max_bytes) too_big();
  if (regular && st.st_size > 0) {
    out.resize(static_cast<size_t>(st.st_size));
    while (got < out.size()) {
      ssize_t k = ::read(fd, out.data() + got, out.size() - got);
      if (k < 0) {
        if (errno == EINTR) continue;
        fail(errno);
      }
      if (k == 0) break;
      got += static_cast<size_t>(k);
    }
    out.resize(got);
  }
  char buf[1 << 16];
  for (;;) {
    ssize_t k = ::read(fd, buf, sizeof buf);
    if (k < 0) {
      if (errno == EINTR) continue;
      fail(errno);
    }
    if (k == 0) break;
    out.append(buf, static_cast<size_t>(k));
    if (out.size() > max_bytes) too_big();
  }
  ::close(fd);
  return out;
}

}  // namespace looplm::io
