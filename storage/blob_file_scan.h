// BlobFileIndex: reads RocksDB blob files (the integrated BlobDB's on-disk
// format, db/blob/blob_log_format.h in RocksDB 7.8: a 30-byte header, then
// records of a 32-byte header + key + value, each with CRC32C, then a footer)
// directly, without RocksDB.
//
// Salvage needs it because RocksDB's RepairDB rebuilds the MANIFEST from the
// table files only: the blob files holding the checkpoints family's large
// values are no longer named, and every checkpoint stored in one reads as
// "Invalid blob file number". Every blob record carries its key, so the bytes
// can be taken back from the damaged copy's blob files, CRC-checked.
//
// Single-threaded. Reads files only.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace ztune::storage {

// CRC32C (Castagnoli) of `n` bytes continuing from `crc` (0 to start), as
// RocksDB's crc32c::Extend computes it.
uint32_t Crc32c(uint32_t crc, const char* data, size_t n);
// RocksDB's masked form of a stored CRC (crc32c::Mask).
uint32_t MaskCrc(uint32_t crc);

class BlobFileIndex {
 public:
  // Indexes the records of every *.blob file in `dir` (not recursive).
  // Reading stops at a record whose header CRC fails (nothing after it can be
  // located); files with compressed blobs are skipped (ztune writes none).
  // Both are listed in problems(). IOError only if `dir` cannot be listed.
  static Result<BlobFileIndex> Build(const std::string& dir);

  // The value of `key` from the newest blob file (highest file number) that
  // holds a record for it whose CRC matches; nullopt if there is none.
  std::optional<std::string> Read(std::string_view key) const;

  size_t files() const { return files_; }
  size_t records() const { return records_; }
  const std::vector<std::string>& problems() const { return problems_; }

 private:
  struct Ref {
    uint64_t file_number;
    std::string path;
    uint64_t value_offset;
    uint64_t value_size;
    uint32_t blob_crc;  // masked, over key + value
  };
  void IndexFile(const std::string& path, uint64_t file_number);

  // Key -> its records, newest file first.
  std::map<std::string, std::vector<Ref>, std::less<>> refs_;
  size_t files_ = 0;
  size_t records_ = 0;
  std::vector<std::string> problems_;
};

}  // namespace ztune::storage
