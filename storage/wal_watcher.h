// WalWatcher: a WAL filter that counts what RocksDB replays at open and finds
// gaps in the sequence numbers (see the class comment).
//
// Storage-internal: includes RocksDB.
#pragma once

#include <rocksdb/wal_filter.h>
#include <rocksdb/write_batch.h>

#include <cstdint>
#include <map>
#include <string>

namespace ztune::storage::internal {

// Watches the WAL records RocksDB replays at open. It counts them per family
// (entries of a family that already flushed past a WAL are not counted:
// replaying them or not changes nothing), and it checks that the records'
// sequence numbers are contiguous: a record whose sequence is past the end of
// the previous one means records in between were lost (a WAL cut or deleted
// between two others), which RocksDB itself does not notice unless the WAL
// was tracked in the MANIFEST. What happens at such a gap depends on the mode.
class WalWatcher final : public rocksdb::WalFilter {
 public:
  enum class Mode {
    // Stop the replay at the first record: a cheap look at what the SST
    // files alone hold. Read-only opens only (a read-write open would
    // discard the WAL).
    kStopAtFirstRecord,
    // Count; ignore gaps (salvage's dry runs).
    kCount,
    // Apply nothing after a gap (every later record is ignored, and
    // counted): what comes after it is not a state the head had (salvage's
    // point-in-time recovery).
    kDropAfterGap,
    // Fail the open at a gap (Corruption "reported by Wal Filter"): the
    // normal open and --check.
    kFailAtGap,
  };

  explicit WalWatcher(Mode mode) : mode_(mode) {}

  void ColumnFamilyLogNumberMap(const std::map<uint32_t, uint64_t>& cf_lognumber_map,
                                const std::map<std::string, uint32_t>& cf_name_id_map) override;
  WalProcessingOption LogRecordFound(unsigned long long log_number,
                                     const std::string& log_file_name,
                                     const rocksdb::WriteBatch& batch,
                                     rocksdb::WriteBatch* new_batch, bool* batch_changed) override;
  const char* Name() const override { return "ztune.WalWatcher"; }

  // Records (commits) replayed, and with kDropAfterGap those ignored after a
  // gap; per family name, the entries (puts and deletes) of each.
  uint64_t batches() const { return batches_; }
  const std::map<std::string, uint64_t>& entries() const { return entries_; }
  uint64_t dropped_batches() const { return dropped_batches_; }
  const std::map<std::string, uint64_t>& dropped_entries() const { return dropped_entries_; }
  // The first gap seen, described ("<file>: the records jump from sequence
  // 1201 to 1456 ..."), or "".
  const std::string& gap() const { return gap_; }
  // The first missing sequence number of the first gap (0 if none): a family
  // whose table files hold entries from there on is ahead of the point
  // replay stopped at.
  uint64_t gap_from() const { return gap_from_; }

 private:
  const Mode mode_;
  std::map<uint32_t, uint64_t> cf_log_number_;
  std::map<uint32_t, std::string> cf_name_;
  uint64_t batches_ = 0;
  std::map<std::string, uint64_t> entries_;
  bool dropping_ = false;
  uint64_t dropped_batches_ = 0;
  std::map<std::string, uint64_t> dropped_entries_;
  // The sequence number the next record must start at; 0 before the first.
  uint64_t next_sequence_ = 0;
  std::string gap_;
  uint64_t gap_from_ = 0;
};

}  // namespace ztune::storage::internal
