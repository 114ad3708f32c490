#include "storage/salvage_fixups.h"

#include <rocksdb/db.h>
#include <rocksdb/metadata.h>
#include <rocksdb/options.h>
#include <rocksdb/sst_file_reader.h>

#include <cstdio>
#include <optional>
#include <set>

#include "storage/blob_file_scan.h"
#include "storage/keys.h"

namespace ztune::storage::internal {
namespace {

// Where the checkpoints family is rebuilt before it replaces the original.
constexpr char kRebuildFamily[] = "ztune.salvage.checkpoints";

// "e0001_00003 checkpoint 7" for a checkpoint key, escaped bytes otherwise.
std::string Printable(std::string_view key) {
  if (const std::optional<uint64_t> n = KeySuffixNumber(key)) {
    return std::string(key.substr(0, key.size() - 9)) + " checkpoint " + std::to_string(*n);
  }
  std::string s;
  for (const char c : key) {
    if (c >= 0x20 && c < 0x7f) {
      s += c;
    } else {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", static_cast<unsigned char>(c));
      s += hex;
    }
  }
  return s;
}

}  // namespace

void AddMessages(const InfoLog& log, SalvageReport* report) {
  for (std::string& line : log.Notable()) report->rocksdb_messages.push_back(std::move(line));
}

Status SyncedWrite(RawDb& db, const std::string& dir, rocksdb::WriteBatch* batch) {
  rocksdb::WriteOptions wo;
  wo.sync = true;
  RETURN_IF_ERROR(FromRocks(db.db().Write(wo, batch), dir, "salvage write"));
  batch->Clear();
  return Status::Ok();
}

Status CheckAll(RawDb& db, const std::string& dir, bool* checkpoints_unreadable) {
  rocksdb::ReadOptions ro;
  ro.verify_checksums = true;
  ro.fill_cache = false;
  RETURN_IF_ERROR(FromRocks(db.db().VerifyChecksum(ro), dir, "verifying SST checksums"));
  *checkpoints_unreadable = false;
  for (const std::string& name : internal::FamiliesOfSchema(kSchemaVersion)) {
    rocksdb::ColumnFamilyHandle* h = db.Find(name);
    if (h == nullptr) continue;
    const Status s = internal::ReadWholeFamily(db.db(), h, dir).status();
    if (s.ok()) continue;
    if (name == FamilyName(Family::kCheckpoints) && s.code() == StatusCode::kCorruption) {
      *checkpoints_unreadable = true;
      continue;
    }
    return s;
  }
  return Status::Ok();
}

// The family is rewritten rather than patched because a table file that
// links to a blob file the MANIFEST does not name fails every compaction that
// touches it ("VersionBuilder: Blob file #N not found").
Status RebuildCheckpoints(RawDb& db, const std::string& dir, const std::string& copy,
                          SalvageReport* report) {
  const std::string name = FamilyName(Family::kCheckpoints);
  rocksdb::ColumnFamilyHandle* cf = db.Find(name);
  if (cf == nullptr) return Status::Ok();
  RETURN_IF_ERROR(FromRocks(db.db().Flush(rocksdb::FlushOptions(), cf), dir, "salvage flush"));

  // Every key of the family, from its table files (an iterator over the
  // family stops at the first unreadable value).
  std::set<std::string> keys;
  rocksdb::ColumnFamilyMetaData meta;
  db.db().GetColumnFamilyMetaData(cf, &meta);
  const rocksdb::Options reader_options(internal::MakeDbOptions(WalRecovery::kPointInTime),
                                        internal::MakeFamilyOptions(Family::kCheckpoints));
  for (const rocksdb::LevelMetaData& level : meta.levels) {
    for (const rocksdb::SstFileMetaData& file : level.files) {
      const std::string path = file.directory + "/" + file.relative_filename;
      rocksdb::SstFileReader reader(reader_options);
      rocksdb::Status s = reader.Open(path);
      std::unique_ptr<rocksdb::Iterator> it;
      if (s.ok()) {
        // SstFileReader shows blob references as they are, without reading
        // the blob: exactly the keys are wanted here.
        it.reset(reader.NewIterator(rocksdb::ReadOptions()));
        for (it->SeekToFirst(); it->Valid(); it->Next()) keys.emplace(ToView(it->key()));
        s = it->status();
      }
      if (!s.ok()) {
        report->lost.push_back("checkpoints table " + file.relative_filename +
                               " is partly unreadable (" + s.ToString() +
                               "); checkpoints only it held are gone");
      }
    }
  }

  std::optional<BlobFileIndex> blobs;
  RETURN_IF_ERROR(db.DropFamily(dir, kRebuildFamily));  // left by an interrupted salvage
  RETURN_IF_ERROR(
      db.CreateFamily(dir, kRebuildFamily, internal::MakeFamilyOptions(Family::kCheckpoints)));
  rocksdb::ColumnFamilyHandle* rebuilt = db.Find(kRebuildFamily);
  rocksdb::WriteBatch batch;
  rocksdb::ReadOptions ro;
  ro.verify_checksums = true;
  for (const std::string& key : keys) {
    rocksdb::PinnableSlice value;
    const rocksdb::Status got = db.db().Get(ro, cf, ToSlice(key), &value);
    if (got.IsNotFound()) continue;  // deleted by a newer table
    if (got.ok()) {
      RETURN_IF_ERROR(FromRocks(batch.Put(rebuilt, ToSlice(key), value), dir, "salvage batch"));
    } else {
      if (!blobs) {
        ASSIGN_OR_RETURN(BlobFileIndex index, BlobFileIndex::Build(copy));
        for (const std::string& p : index.problems()) report->lost.push_back("blob file " + p);
        blobs = std::move(index);
      }
      const std::optional<std::string> bytes = blobs->Read(key);
      if (!bytes) {
        report->checkpoints_lost.push_back(Printable(key));
        continue;
      }
      ++report->checkpoints_rescued;
      RETURN_IF_ERROR(FromRocks(batch.Put(rebuilt, ToSlice(key), *bytes), dir, "salvage batch"));
    }
    if (batch.GetDataSize() >= kSalvageBatchBytes) RETURN_IF_ERROR(SyncedWrite(db, dir, &batch));
  }
  RETURN_IF_ERROR(SyncedWrite(db, dir, &batch));

  RETURN_IF_ERROR(db.DropFamily(dir, name));
  RETURN_IF_ERROR(db.CreateFamily(dir, name, internal::MakeFamilyOptions(Family::kCheckpoints)));
  cf = db.Find(name);
  {
    std::unique_ptr<rocksdb::Iterator> it(db.db().NewIterator(ro, rebuilt));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      RETURN_IF_ERROR(FromRocks(batch.Put(cf, it->key(), it->value()), dir, "salvage batch"));
      if (batch.GetDataSize() >= kSalvageBatchBytes) {
        RETURN_IF_ERROR(SyncedWrite(db, dir, &batch));
      }
    }
    RETURN_IF_ERROR(FromRocks(it->status(), dir, "salvage: reading the rebuilt checkpoints"));
  }
  RETURN_IF_ERROR(SyncedWrite(db, dir, &batch));
  return db.DropFamily(dir, kRebuildFamily);
}

Status CreateMissingFamilies(RawDb& db, const std::string& dir, SalvageReport* report) {
  for (int i = 0; i < kNumFamilies; ++i) {
    const auto f = static_cast<Family>(i);
    if (db.Find(FamilyName(f)) != nullptr) continue;
    RETURN_IF_ERROR(db.CreateFamily(dir, FamilyName(f), internal::MakeFamilyOptions(f)));
    report->families_recreated.emplace_back(FamilyName(f));
  }
  return Status::Ok();
}

Status WriteSchemaIfMissing(RawDb& db, const std::string& dir, SalvageReport* report) {
  rocksdb::ColumnFamilyHandle* meta = db.Find(FamilyName(Family::kMeta));
  std::string value;
  const rocksdb::Status got =
      db.db().Get(rocksdb::ReadOptions(), meta, ToSlice(kMetaSchema), &value);
  if (!got.IsNotFound()) return FromRocks(got, dir, "salvage: reading the schema record");
  rocksdb::WriteBatch batch;
  RETURN_IF_ERROR(FromRocks(batch.Put(meta, ToSlice(kMetaSchema), std::to_string(kSchemaVersion)),
                            dir, "salvage batch"));
  RETURN_IF_ERROR(SyncedWrite(db, dir, &batch));
  report->lost.push_back("the schema record was missing; it was written again (schema " +
                         std::to_string(kSchemaVersion) + ")");
  return Status::Ok();
}

Status FinishFamiliesAndSchema(RawDb& db, const std::string& dir, SalvageReport* report) {
  RETURN_IF_ERROR(CreateMissingFamilies(db, dir, report));
  return WriteSchemaIfMissing(db, dir, report);
}

}  // namespace ztune::storage::internal
