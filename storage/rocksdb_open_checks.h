// The checks RocksDbStore::Open runs on a data directory before it writes
// anything (docs/storage.md, "Opening" and "Damage"): what the directory holds,
// a read-only inspection of an existing store, the verdict on it (schema,
// missing families, an interrupted creation), and the error messages that
// point to salvage. Nothing here changes a file.
//
// Storage-internal (includes RocksDB). Called on the opening thread only.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "storage/free_space.h"
#include "storage/rocksdb_internal.h"

namespace ztune::storage::internal {

// The way out of a Corruption, appended to its message: nothing was changed,
// and `ztune-head --salvage` keeps what is readable.
std::string SalvageHint(const std::string& dir);
// The same for damage a read finds after the open (nothing says that the
// open changed nothing then).
std::string ReadSalvageHint(const std::string& dir);

// A Corruption with `text` appended (its message ended by a period first);
// any other status as it is.
Status AppendToCorruption(Status s, const std::string& text);

// A Corruption from opening or reading `dir` gains RocksDB's own account of
// the damage (which WAL, how many bytes) and the way out.
Status WithSalvageHint(Status s, const std::string& dir, const InfoLog* log);

// A Corruption the WalWatcher caused says what the watcher saw.
Status WithGap(Status s, const WalWatcher& watcher);

// What Open found in the directory before touching it.
enum class DirState { kFresh, kExistingStore };

// Creates a missing `dir` (unless read_only). kFresh for a missing or empty
// directory; FailedPrecondition for a file, a read-only open of nothing, or a
// non-empty directory without a RocksDB store; IOError if it cannot be read.
Result<DirState> InspectDir(const std::string& dir, bool read_only,
                            const std::vector<std::string>& companion_files = {});

// Unavailable: process `pid` holds the store's LOCK.
Status InUse(const std::string& dir, long pid);

// What a read-only look at an existing store found.
struct Inspection {
  std::vector<std::string> families;         // on disk
  std::optional<std::string> schema;         // the raw meta/schema value
  bool any_data = false;                     // some family holds a key
  std::vector<std::string> ztune_meta_keys;  // meta keys only a ztune head writes
  // Table files on disk that the MANIFEST does not name. A crash leaves
  // some (a flush or compaction output not yet installed, an obsolete input
  // not yet deleted); a MANIFEST that lost records leaves others, and a
  // read-write open deletes them all.
  std::vector<std::string> orphan_tables;
  // Files in the directory: a store whose creation was interrupted has no
  // table or blob file and only empty WAL files.
  uint64_t table_files = 0;
  uint64_t blob_files = 0;
  uint64_t wal_bytes = 0;
};

// Reads the schema record, the meta keys only ztune writes, and whether any
// family holds a key, from an open database.
Status Look(RawDb& db, const std::string& dir, const InfoLog* log, Inspection* found);

// Opens `dir` read-only with the strict options (nothing on disk changes:
// RocksDB deletes files no MANIFEST names only in a read-write open, and that
// is exactly the evidence salvage needs) and reads the schema record. With
// `replay_wal` false the WAL is not replayed (a WalFilter stops at its first
// record), so this sees what the SST files hold, at the cost of opening the
// table files. `keep`, if given, receives the open database.
Result<Inspection> Inspect(const std::string& dir, const std::vector<std::string>& families,
                           bool replay_wal, std::unique_ptr<RawDb>* keep,
                           std::shared_ptr<InfoLog>* log_out);

// The verdict on an inspected store: the schema version, or nullopt for a
// store whose initialization was interrupted (no schema, no data) and is to
// be finished. Errors as documented on Open.
Result<std::optional<int>> Judge(const std::string& dir, const Inspection& found);

// The column families of a store, from its MANIFEST and its OPTIONS file.
struct Families {
  std::vector<std::string> names;  // in the MANIFEST
  // Ours that the OPTIONS file names and the MANIFEST does not: the MANIFEST
  // lost them (a creation interrupted before the OPTIONS file was written
  // leaves the OPTIONS file behind the MANIFEST, never ahead).
  std::vector<std::string> lost;
};

// Corruption: the families `lost` are named by the OPTIONS file but not by
// the MANIFEST.
Status LostFamilies(const std::string& dir, const std::vector<std::string>& lost);

// The store's families from its MANIFEST, and those of ours that its OPTIONS
// file names besides (a MANIFEST that lost them). FailedPrecondition if there
// is no meta family (not a ztune store), Corruption if it was lost.
Result<Families> ListStoreFamilies(const std::string& dir);

// A ResourceExhausted from the free-space check at open, explained (why the
// reserve, what to do); other statuses pass through.
Status ResourceMessageForOpen(const std::string& dir, const FreeSpaceGuard& space,
                              const Status& s);

}  // namespace ztune::storage::internal
