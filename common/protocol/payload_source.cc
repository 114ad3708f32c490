#include "common/protocol/payload_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/check.h"

namespace ztune::protocol {

Status StringPayloadSource::ReadAt(uint64_t offset, uint64_t n, std::string& out) {
  CHECK(offset <= bytes_.size() && n <= bytes_.size() - offset);
  out.assign(bytes_, offset, n);
  return Status::Ok();
}

Result<std::unique_ptr<FilePayloadSource>> FilePayloadSource::Open(const std::string& path,
                                                                   uint64_t expected_size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IOError("cannot open " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Status::IOError("cannot stat " + path + ": " + std::strerror(err));
  }
  if (static_cast<uint64_t>(st.st_size) != expected_size) {
    ::close(fd);
    return Status::FailedPrecondition(path + " holds " + std::to_string(st.st_size) + " bytes; " +
                                      std::to_string(expected_size) + " were recorded");
  }
  // Read once front to back: let the kernel read ahead generously.
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  return std::unique_ptr<FilePayloadSource>(new FilePayloadSource(fd, expected_size, path));
}

FilePayloadSource::~FilePayloadSource() { ::close(fd_); }

Status FilePayloadSource::ReadAt(uint64_t offset, uint64_t n, std::string& out) {
  CHECK(offset <= size_ && n <= size_ - offset);
  out.resize(n);
  uint64_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd_, out.data() + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Status::IOError("cannot read " + path_ + ": " + std::strerror(errno));
    if (r == 0) {
      return Status::IOError(path_ + " ended at " + std::to_string(offset + done) + " bytes; " +
                             std::to_string(size_) + " were recorded");
    }
    done += static_cast<uint64_t>(r);
  }
  return Status::Ok();
}

}  // namespace ztune::protocol
