#include "head/append_file_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/check.h"

namespace ztune::head {

AppendFileCache::AppendFileCache(size_t capacity) : capacity_(capacity) { CHECK(capacity_ > 0); }

AppendFileCache::~AppendFileCache() {
  while (!by_path_.empty()) Close(by_path_.begin());
}

void AppendFileCache::Close(std::unordered_map<std::string, Entry>::iterator it) {
  ::close(it->second.fd);
  lru_.erase(it->second.lru);
  by_path_.erase(it);
}

Status AppendFileCache::Append(const std::string& path, std::string_view text) {
  auto it = by_path_.find(path);
  if (it != by_path_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
  } else {
    if (by_path_.size() >= capacity_) Close(by_path_.find(lru_.back()));
    const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return Status::IOError("cannot open " + path + ": " + std::strerror(errno));
    lru_.push_front(path);
    it = by_path_.emplace(path, Entry{fd, lru_.begin()}).first;
  }
  while (!text.empty()) {
    const ssize_t n = ::write(it->second.fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string reason = n < 0 ? std::strerror(errno) : "nothing written";
      Close(it);
      return Status::IOError("cannot append to " + path + ": " + reason);
    }
    text.remove_prefix(static_cast<size_t>(n));
  }
  return Status::Ok();
}

}  // namespace ztune::head
