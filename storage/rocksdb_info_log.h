// InfoLog: RocksDB's info log for a ztune store (see the class comment), and
// RocksDbSaid, which quotes it in error messages.
//
// Storage-internal: includes RocksDB.
#pragma once

#include <rocksdb/env.h>

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ztune::storage::internal {

// RocksDB's info log for a ztune store. RocksDB's own file logger aborts the
// process (an assertion in WritableFileWriter, which Debian's build keeps) on
// the log line after a failed write, i.e. as soon as the disk is full; this
// one stops writing the file after an error and carries on.
//
// It also keeps RocksDB's warnings (and the few INFO lines that describe WAL
// recovery and repair) in memory, so that errors can quote RocksDB's own
// account of what it dropped ("<dir>/000012.log: dropping 31211 bytes;
// Corruption: checksum mismatch").
//
// Thread-safe: RocksDB's background threads log concurrently.
class InfoLog final : public rocksdb::Logger {
 public:
  // Appends to `dir`/LOG after renaming an existing LOG to LOG.old.<micros>
  // (the newest few old ones are kept, as RocksDB does). If the file cannot
  // be written the log is kept in memory only.
  static std::shared_ptr<InfoLog> ToFile(const std::string& dir);
  // Writes nothing to disk: read-only opens and salvage's dry runs must not
  // touch the directory.
  static std::shared_ptr<InfoLog> InMemory();

  ~InfoLog() override;

  void Logv(const char* format, va_list ap) override;
  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override;
  void Flush() override;

  // The retained lines, oldest first (at most kMaxNotable).
  std::vector<std::string> Notable() const;

 protected:
  rocksdb::Status CloseImpl() override;

 private:
  static constexpr size_t kMaxNotable = 200;
  static constexpr uint64_t kMaxFileBytes = 16ull << 20;  // 16 MiB

  explicit InfoLog(std::string dir);
  void OpenFile();                                                   // mu_ held
  void Write(rocksdb::InfoLogLevel level, const std::string& line);  // mu_ held

  const std::string dir_;  // empty: memory only
  mutable std::mutex mu_;
  // Guarded by mu_.
  std::FILE* file_ = nullptr;
  uint64_t file_bytes_ = 0;
  std::deque<std::string> notable_;
};

// " RocksDB said: <line>; <line>" from `log`'s retained lines that mention a
// WAL, MANIFEST or table file, or "" if none.
std::string RocksDbSaid(const InfoLog& log);

}  // namespace ztune::storage::internal
