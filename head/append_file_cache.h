// AppendFileCache: files kept open for appending, at most `capacity` at once
// (the least recently used is closed first), so that a writer appending a
// little to the same files turn after turn (ResultsDir: two files per trial
// per loop turn) pays one write per append instead of open, write and close
// and a path walk. Closing drops nothing: every Append has reached the kernel
// when it returns (no user-space buffer). A file renamed or removed while
// open keeps receiving appends until it is evicted or the cache is destroyed.
//
// Thread-compatible (the head's loop thread uses it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/status.h"

namespace ztune::head {

class AppendFileCache {
 public:
  explicit AppendFileCache(size_t capacity);
  ~AppendFileCache();
  AppendFileCache(const AppendFileCache&) = delete;
  AppendFileCache& operator=(const AppendFileCache&) = delete;

  // Appends `text` to `path` (created 0644 if missing). IOError naming the
  // file and the reason; the file is then closed, and the next Append opens
  // it again.
  Status Append(const std::string& path, std::string_view text);

  size_t open_files() const { return by_path_.size(); }

 private:
  struct Entry {
    int fd;
    std::list<std::string>::iterator lru;  // position in lru_
  };
  void Close(std::unordered_map<std::string, Entry>::iterator it);

  const size_t capacity_;
  std::list<std::string> lru_;  // paths, most recently used first
  std::unordered_map<std::string, Entry> by_path_;
};

}  // namespace ztune::head
