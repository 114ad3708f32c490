// Helpers for the store damage tests: find RocksDB's files in a data
// directory and damage them the way disks and people do (a flipped byte, a
// cut file), at exact record boundaries of RocksDB's log format (the WAL and
// the MANIFEST: 32 KiB blocks of records with a 7-byte header, LevelDB's
// format). Test-thread only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace ztune::storage::testutil {

// Paths of the files in `dir` whose names end in `suffix` (or start with it,
// for "MANIFEST-"), sorted by name (RocksDB's file numbers are zero-padded).
inline std::vector<std::string> FilesIn(const std::string& dir, const std::string& pattern) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    const bool prefix = pattern.back() == '-' && name.rfind(pattern, 0) == 0;
    const bool suffix = name.size() >= pattern.size() &&
                        name.compare(name.size() - pattern.size(), pattern.size(), pattern) == 0;
    if (prefix || suffix) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// One logical record of a log file: where it starts (its first fragment's
// header) and ends, and where its first fragment's payload starts.
struct LogRecord {
  uint64_t begin;
  uint64_t payload;
  uint64_t end;
};

// The complete records of a RocksDB log file (WAL or MANIFEST), in order.
inline std::vector<LogRecord> LogRecords(const std::string& bytes) {
  constexpr uint64_t kBlock = 32768;
  constexpr uint64_t kHeader = 7;
  std::vector<LogRecord> records;
  uint64_t off = 0;
  LogRecord current{};
  while (off + kHeader <= bytes.size()) {
    const uint64_t left = kBlock - off % kBlock;
    if (left < kHeader) {  // block trailer
      off += left;
      continue;
    }
    const uint64_t len = static_cast<unsigned char>(bytes[off + 4]) |
                         static_cast<uint64_t>(static_cast<unsigned char>(bytes[off + 5])) << 8;
    const unsigned type = static_cast<unsigned char>(bytes[off + 6]);
    if (type == 0 && len == 0) break;                                        // preallocated zeros
    if (off + kHeader + len > bytes.size()) break;                           // torn
    if (type == 1 || type == 2) current = LogRecord{off, off + kHeader, 0};  // full / first
    off += kHeader + len;
    if (type == 1 || type == 4) {  // full / last
      current.end = off;
      records.push_back(current);
    }
  }
  return records;
}

}  // namespace ztune::storage::testutil
