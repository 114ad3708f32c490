// CheckpointFiles: checkpoints that arrive in chunks (above
// protocol::kInlinePayloadBytes) are files in <data-dir>/checkpoint-files,
// not RocksDB values. A RocksDB value is written whole from memory, and
// twice (WAL and blob file); a file is written as its chunks arrive, made
// durable with one fdatasync, and read back a chunk at a time for a restore,
// so a gigabyte checkpoint never sits in the head's memory. The checkpoints
// family then holds a reference (name and size) and the checkpoint's record
// names the file (docs/storage.md, "Checkpoint files").
//
// Lifetimes: an upload writes <name>.part and renames it to <name> once
// durable; the store's commit that records it comes after. A file is removed
// only after the commit that drops its record (RemoveAfterCommit), so a crash
// in between leaves an unreferenced file, which the next start removes
// (RemoveUnreferenced), as it removes pause (memory) checkpoints, which a
// head restart forgets by design.
//
// Thread affinity: the loop thread, except CheckpointUpload::Finish, which
// blocks on the disk and runs off it. Not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/protocol/payload_source.h"
#include "common/status.h"

namespace ztune::head {

// The directory's name inside the data directory.
inline constexpr char kCheckpointFilesDir[] = "checkpoint-files";

struct CheckpointFileRef {
  std::string name;  // a file in the checkpoint directory: [0-9a-f-]+.ckpt
  uint64_t size = 0;
};

// The value stored for a file checkpoint: "ZTFILE1\0" + u64 size (little
// endian) + name. An inline checkpoint is an envelope ("ZTCKPT..."), which
// never starts with that magic.
std::string EncodeCheckpointFileRef(const CheckpointFileRef& ref);
// nullopt for inline bytes; Corruption for the magic with a bad reference.
Result<std::optional<CheckpointFileRef>> DecodeCheckpointFileRef(std::string_view value);
bool IsCheckpointFileName(std::string_view name);

class CheckpointUpload : public protocol::PayloadSink {
 public:
  CheckpointUpload(const CheckpointUpload&) = delete;
  CheckpointUpload& operator=(const CheckpointUpload&) = delete;
  // An upload that is not finished removes its partial file.
  ~CheckpointUpload() override;

  // Loop thread. With O_DIRECT (where the file system has it) the bytes are
  // gathered in an aligned 1 MiB buffer written straight to the disk when
  // full: on this project's VM, copying a gigabyte into the page cache cost
  // the head 2.6 s of CPU (fresh pages, perf: copy_folio_from_iter_atomic)
  // while dd oflag=direct wrote it in 0.8 s. Without O_DIRECT the bytes go
  // to the page cache and every 16 MiB their writeback starts
  // (sync_file_range), so that Finish has little left to wait for.
  Status Append(std::string_view bytes) override;
  // Blocking, off the loop thread: fdatasync, rename to the final name,
  // fsync of the directory. The file is durable when this returns.
  Result<CheckpointFileRef> Finish();

 private:
  friend class CheckpointFiles;
  CheckpointUpload(std::string dir, std::string name, int fd, uint64_t size, bool direct);
  std::string PartPath() const;
  Status WriteAt(const char* data, size_t n, uint64_t offset);
  // Writes the staging buffer (padded to the block size) at staged_at_.
  Status FlushStaging();

  std::string dir_;
  std::string name_;
  int fd_;
  uint64_t size_;
  uint64_t written_ = 0;
  uint64_t writeback_started_ = 0;
  bool finished_ = false;
  // O_DIRECT: bytes [staged_at_, written_) wait in `staging_` (aligned,
  // kStagingBytes) for a whole buffer.
  bool direct_ = false;
  std::unique_ptr<char, void (*)(void*)> staging_{nullptr, nullptr};
  uint64_t staged_at_ = 0;
  // For the log line at Finish: a checkpoint's rate to disk is an operator's
  // figure (bench/checkpoint_transfer.py reads it).
  std::chrono::steady_clock::time_point started_;
};

class CheckpointFiles {
 public:
  // `direct`: write with O_DIRECT where the file system has it (false: always
  // through the page cache; tests cover both paths with it).
  explicit CheckpointFiles(std::string dir, bool direct = true);

  // Creates the directory and removes partial files a crash left behind.
  Status Open();
  const std::string& dir() const { return dir_; }

  // A new file for `size` bytes. The space is reserved now (fallocate): a
  // disk without room refuses the checkpoint before its first chunk.
  Result<std::unique_ptr<CheckpointUpload>> Begin(uint64_t size);
  // The file, opened for a restore or a download; FailedPrecondition if it
  // is missing or not of the recorded size.
  Result<std::unique_ptr<protocol::FilePayloadSource>> Open(const CheckpointFileRef& ref) const;
  // A second file with the same bytes (a hard link): a PBT clone owns its
  // copy, which outlives the donor's retention.
  Result<CheckpointFileRef> Clone(const CheckpointFileRef& ref);

  // Removes the file once the turn's batch is committed (RemovePending).
  void RemoveAfterCommit(std::string name) { pending_removal_.push_back(std::move(name)); }
  // A finished upload was handed to the runner, which adopts it in the same
  // turn (a checkpoint record, a pause's memory checkpoint) or drops the
  // reply (a stale request, a trial that moved on): RemovePending removes
  // every file delivered and not adopted.
  void Delivered(const std::string& name) { unadopted_.insert(name); }
  void Adopt(const std::string& name) { unadopted_.erase(name); }
  void RemovePending();
  // Whether RemovePending has anything to consider: the turn's commit must
  // end before the turn's end then (files are removed only after the commit
  // that dropped their records).
  bool HasPending() const { return !pending_removal_.empty() || !unadopted_.empty(); }
  // At start: removes every complete file not in `referenced`. Returns how
  // many were removed.
  Result<size_t> RemoveUnreferenced(const std::set<std::string>& referenced);
  // Every complete file (for ztune-head --check).
  Result<std::vector<std::pair<std::string, uint64_t>>> List() const;

 private:
  std::string NewName();

  std::string dir_;
  bool direct_;
  uint64_t name_prefix_;
  uint64_t next_name_ = 0;
  std::vector<std::string> pending_removal_;
  std::set<std::string> unadopted_;
};

}  // namespace ztune::head
