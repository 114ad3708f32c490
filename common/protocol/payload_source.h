// Where a chunked payload's bytes come from (PayloadSource) and where they go
// (PayloadSink), so that a checkpoint of a gigabyte crosses a process in
// chunks without ever being whole in its memory (docs/protocol.md §7.1).
//
// A source is read in offset order by its ChunkSender, a sink is appended to
// in offset order by its ChunkAssembler; both live on one thread (their
// owner's loop). Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace ztune::protocol {

class PayloadSource {
 public:
  virtual ~PayloadSource() = default;
  virtual uint64_t size() const = 0;
  // Replaces `out` with bytes [offset, offset + n); the caller keeps
  // offset + n <= size(). An I/O error ends the transfer.
  virtual Status ReadAt(uint64_t offset, uint64_t n, std::string& out) = 0;
};

// Bytes held in memory.
class StringPayloadSource : public PayloadSource {
 public:
  explicit StringPayloadSource(std::string bytes) : bytes_(std::move(bytes)) {}
  uint64_t size() const override { return bytes_.size(); }
  Status ReadAt(uint64_t offset, uint64_t n, std::string& out) override;

 private:
  std::string bytes_;
};

// An open file, read with pread: the file may be unlinked while it is read.
class FilePayloadSource : public PayloadSource {
 public:
  // Opens `path`; FailedPrecondition/IOError naming it if it cannot be
  // opened or its size is not `expected_size`.
  static Result<std::unique_ptr<FilePayloadSource>> Open(const std::string& path,
                                                         uint64_t expected_size);
  ~FilePayloadSource() override;
  FilePayloadSource(const FilePayloadSource&) = delete;
  FilePayloadSource& operator=(const FilePayloadSource&) = delete;
  uint64_t size() const override { return size_; }
  Status ReadAt(uint64_t offset, uint64_t n, std::string& out) override;

 private:
  FilePayloadSource(int fd, uint64_t size, std::string path)
      : fd_(fd), size_(size), path_(std::move(path)) {}
  int fd_;
  uint64_t size_;
  std::string path_;
};

class PayloadSink {
 public:
  virtual ~PayloadSink() = default;
  // The next bytes of the payload. An error ends the transfer.
  virtual Status Append(std::string_view bytes) = 0;
};

}  // namespace ztune::protocol
