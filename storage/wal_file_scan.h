// ScanWalFile: reads a RocksDB WAL file directly (LevelDB's log format, kept
// by RocksDB 7.8: 32 KiB blocks of fragments with a 7-byte header holding a
// masked CRC32C of type + payload, the length and the type FULL / FIRST /
// MIDDLE / LAST), without RocksDB and without the MANIFEST.
//
// Salvage needs it when the MANIFEST is too damaged for RocksDB to replay the
// WAL (it has no record of the families a WAL entry belongs to, or cannot be
// read at all): RocksDB's RepairDB then drops every WAL batch that touches a
// family it found no table file for, which for a young store is nearly all.
//
// Single-threaded. Reads the file only.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace ztune::storage {

struct WalFileScan {
  // Complete records with a good CRC handed to the callback.
  uint64_t records = 0;
  // A damaged fragment (bad CRC, impossible length or type) was found before
  // the end of the file. A fragment cut short by the end of the file (a torn
  // tail) is not damage.
  bool damaged = false;
  uint64_t damage_offset = 0;
  std::string damage;
  // Complete, intact records found after the damage (not handed over; the
  // scan resumes at the next 32 KiB block, as RocksDB's skipping recovery
  // does), and the bytes from the damage to the end of the file.
  uint64_t records_after_damage = 0;
  uint64_t bytes_after_damage = 0;
  // The file could not be read.
  std::string error;
};

// Calls `fn` with every complete record of `path` in order, up to the first
// damage or the end; stops early if `fn` returns false. Each record is a
// serialized rocksdb::WriteBatch.
WalFileScan ScanWalFile(const std::string& path,
                        const std::function<bool(std::string_view record)>& fn);

}  // namespace ztune::storage
