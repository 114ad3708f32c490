// CodeStore: the submitted project archives (docs/storage.md "Submitted
// code"). A client with the submit role uploads an archive page by page
// (client op put_code); once every byte is there and its sha256 matches the
// address the client named, the archive goes into the turn's batch, under that
// address, once; workers then read it page by page (FETCH_CODE). An archive
// is never replaced: equal addresses are equal bytes.
//
// Uploads in progress live in memory, bounded: one archive at most
// max_code_bytes, all of them together at most max_upload_bytes; an upload
// idle for upload_idle_ms is dropped when room is needed.
//
// Head loop thread only (it reads the store between commits, as every loop
// read does).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/json.h"
#include "common/sha256.h"
#include "common/status.h"
#include "storage/store.h"

namespace ztune::head {

struct CodeStoreOptions {
  uint64_t max_code_bytes = 64ULL << 20;     // one archive (ztune-head --max-code-bytes)
  uint64_t max_upload_bytes = 256ULL << 20;  // all uploads in progress together
  TimeMs upload_idle_ms = 600'000;
};

class CodeStore {
 public:
  // `batch` is the turn's: a finished upload is written into it.
  CodeStore(storage::Store& store, storage::WriteBatch& batch, const Clock& clock,
            CodeStoreOptions options)
      : store_(store), batch_(batch), clock_(clock), options_(options) {}

  // One put_code request: `data` is bytes [offset, offset + data.size()) of
  // the archive of `size` bytes whose sha256 is `hex`. Data at an offset
  // other than what was received so far is refused (FailedPrecondition
  // naming the expected offset); offset 0 with no data asks where to go on.
  // Answers {"code", "size", "stored", "next_offset"}: stored = the archive
  // is in the store (or this turn's batch); next_offset = the offset the
  // head wants next, null once stored. InvalidArgument for a bad address, a
  // page over protocol::kCodePageBytes, data past `size`, a size that
  // differs from the upload's, bytes whose sha256 is not `hex` or that are
  // not a project archive; ResourceExhausted for an archive over
  // max_code_bytes or no room for another upload.
  Result<Json> Put(std::string_view hex, uint64_t size, uint64_t offset, std::string_view data);

  // Whether the archive `hex` is stored (committed or in this turn's batch).
  Result<bool> Has(std::string_view hex);

  struct Page {
    uint64_t size = 0;  // the whole archive's
    std::string bytes;  // [offset, offset + kCodePageBytes) clipped to size
  };
  // NotFound for an archive that is not stored; InvalidArgument for an
  // offset that is not a page boundary below the size; Corruption for a
  // damaged record.
  Result<Page> ReadPage(std::string_view hex, uint64_t offset);

  // Uploads in progress (for tests and status).
  size_t uploads_in_progress() const { return uploads_.size(); }

 private:
  struct Upload {
    uint64_t size = 0;
    std::string bytes;
    Sha256 hasher;
    TimeMs last_activity = 0;
  };
  // The stored record {"size", "pages"} of `hex`, nullopt if none.
  Result<std::optional<Json>> Record(std::string_view hex);
  // Room for an upload of `size` more bytes: drops idle uploads if needed.
  Status MakeRoom(uint64_t size);
  void Store(const std::string& hex, const std::string& bytes);

  storage::Store& store_;
  storage::WriteBatch& batch_;
  const Clock& clock_;
  const CodeStoreOptions options_;
  std::map<std::string, Upload, std::less<>> uploads_;
  uint64_t upload_bytes_ = 0;  // sum of uploads_' sizes
};

}  // namespace ztune::head
