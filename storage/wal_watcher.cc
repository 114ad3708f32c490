#include "storage/wal_watcher.h"

#include <string>

namespace ztune::storage::internal {

void WalWatcher::ColumnFamilyLogNumberMap(const std::map<uint32_t, uint64_t>& cf_lognumber_map,
                                          const std::map<std::string, uint32_t>& cf_name_id_map) {
  cf_log_number_ = cf_lognumber_map;
  for (const auto& [name, id] : cf_name_id_map) cf_name_[id] = name;
}

rocksdb::WalFilter::WalProcessingOption WalWatcher::LogRecordFound(
    unsigned long long log_number, const std::string& log_file_name,
    const rocksdb::WriteBatch& batch, rocksdb::WriteBatch* /*new_batch*/, bool* /*batch_changed*/) {
  if (mode_ == Mode::kStopAtFirstRecord) return WalProcessingOption::kStopReplay;
  // A WriteBatch's data starts with its sequence number, fixed64 little
  // endian (LevelDB's WAL format, kept by RocksDB); every entry takes one
  // sequence number (no two-phase commit, no seq_per_batch).
  const std::string& data = batch.Data();
  if (!dropping_ && data.size() >= 12) {
    uint64_t sequence = 0;
    for (int i = 7; i >= 0; --i) sequence = sequence << 8 | static_cast<unsigned char>(data[i]);
    if (next_sequence_ != 0 && sequence > next_sequence_ && mode_ != Mode::kCount) {
      gap_ = log_file_name + ": the records jump from sequence " + std::to_string(next_sequence_) +
             " to " + std::to_string(sequence) + " (" + std::to_string(sequence - next_sequence_) +
             " entries of committed batches are missing: a WAL was cut or deleted)";
      if (mode_ == Mode::kFailAtGap) return WalProcessingOption::kCorruptedRecord;
      dropping_ = true;
      gap_from_ = next_sequence_;
    }
    if (!dropping_) next_sequence_ = std::max(next_sequence_, sequence + batch.Count());
  }
  if (dropping_) {
    ++dropped_batches_;
  } else {
    ++batches_;
  }

  struct Counter final : rocksdb::WriteBatch::Handler {
    WalWatcher* self;
    uint64_t log;
    void Count(uint32_t cf) {
      const auto flushed = self->cf_log_number_.find(cf);
      // An entry in a WAL older than the family's log number is in its SST
      // files already.
      if (flushed != self->cf_log_number_.end() && log < flushed->second) return;
      const auto name = self->cf_name_.find(cf);
      auto& counts = self->dropping_ ? self->dropped_entries_ : self->entries_;
      ++counts[name == self->cf_name_.end() ? "#" + std::to_string(cf) : name->second];
    }
    rocksdb::Status PutCF(uint32_t cf, const rocksdb::Slice&, const rocksdb::Slice&) override {
      Count(cf);
      return rocksdb::Status::OK();
    }
    rocksdb::Status DeleteCF(uint32_t cf, const rocksdb::Slice&) override {
      Count(cf);
      return rocksdb::Status::OK();
    }
    rocksdb::Status SingleDeleteCF(uint32_t cf, const rocksdb::Slice&) override {
      Count(cf);
      return rocksdb::Status::OK();
    }
    rocksdb::Status DeleteRangeCF(uint32_t cf, const rocksdb::Slice&,
                                  const rocksdb::Slice&) override {
      Count(cf);
      return rocksdb::Status::OK();
    }
    rocksdb::Status MergeCF(uint32_t cf, const rocksdb::Slice&, const rocksdb::Slice&) override {
      Count(cf);
      return rocksdb::Status::OK();
    }
  } counter;
  counter.self = this;
  counter.log = log_number;
  // Counting is best effort: a batch we cannot walk is still replayed.
  batch.Iterate(&counter).PermitUncheckedError();
  return dropping_ ? WalProcessingOption::kIgnoreCurrentRecord
                   : WalProcessingOption::kContinueProcessing;
}

}  // namespace ztune::storage::internal
