#include "storage/directory_copy.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>
#include <vector>

namespace ztune::storage::internal {
namespace {

namespace fs = std::filesystem;

Status ErrnoStatus(const std::string& what, const std::string& path) {
  return Status::IOError(what + " " + path + ": " + std::strerror(errno));
}

// Copies a regular file and fsyncs the copy: the copy is the only untouched
// version of the damaged store once salvage starts changing the original.
Status CopyFile(const fs::path& from, const fs::path& to) {
  const int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return ErrnoStatus("salvage: cannot read", from.string());
  const int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (out < 0) {
    const Status s = ErrnoStatus("salvage: cannot create", to.string());
    ::close(in);
    return s;
  }
  Status status;
  std::vector<char> buf(1 << 20);
  while (status.ok()) {
    const ssize_t n = ::read(in, buf.data(), buf.size());
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      status = ErrnoStatus("salvage: cannot read", from.string());
      break;
    }
    for (ssize_t done = 0; done < n;) {
      const ssize_t w = ::write(out, buf.data() + done, static_cast<size_t>(n - done));
      if (w < 0) {
        if (errno == EINTR) continue;
        status = ErrnoStatus("salvage: cannot write", to.string());
        break;
      }
      done += w;
    }
  }
  if (status.ok() && ::fsync(out) != 0) status = ErrnoStatus("salvage: cannot fsync", to.string());
  ::close(in);
  if (::close(out) != 0 && status.ok()) status = ErrnoStatus("salvage: cannot close", to.string());
  return status;
}

Status SyncDir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("salvage: cannot open directory", dir.string());
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return ErrnoStatus("salvage: cannot fsync directory", dir.string());
  return Status::Ok();
}

}  // namespace

Status CopyTree(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  if (!fs::create_directory(to, ec) || ec) {
    return Status::IOError("salvage: cannot create " + to.string() + ": " +
                           (ec ? ec.message() : "it exists"));
  }
  for (fs::directory_iterator it(from, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path target = to / it->path().filename();
    if (it->is_directory(ec)) {
      RETURN_IF_ERROR(CopyTree(it->path(), target));
    } else if (it->is_regular_file(ec)) {
      RETURN_IF_ERROR(CopyFile(it->path(), target));
    }
  }
  if (ec) return Status::IOError("salvage: cannot list " + from.string() + ": " + ec.message());
  RETURN_IF_ERROR(SyncDir(to));
  return SyncDir(to.parent_path().empty() ? fs::path(".") : to.parent_path());
}

uint64_t TreeBytes(const fs::path& dir, const std::string& only_ext) {
  uint64_t total = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    if (!only_ext.empty() && it->path().extension() != only_ext) continue;
    total += it->file_size(ec);
  }
  return total;
}

}  // namespace ztune::storage::internal
