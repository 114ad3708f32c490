#include "head/code_store.h"

#include <algorithm>
#include <optional>

#include <spdlog/spdlog.h>

#include "common/json_parse.h"
#include "common/protocol/messages.h"
#include "storage/keys.h"

namespace ztune::head {
namespace {

constexpr uint64_t kPage = protocol::kCodePageBytes;
// common/checkpoint/directory_archive.h: what every project archive starts with.
constexpr std::string_view kArchiveMagic = "ZTDIR";

std::string Mib(uint64_t bytes) { return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB"; }

}  // namespace

Result<std::optional<Json>> CodeStore::Record(std::string_view hex) {
  const std::string key = storage::CodeKey(hex);
  std::optional<std::string> value;
  if (const storage::WriteBatch::Op* op = batch_.NewestWrite(storage::Family::kMeta, key)) {
    if (!op->is_delete) value = op->value;
  } else {
    ASSIGN_OR_RETURN(value, store_.Get(storage::Family::kMeta, key));
  }
  if (!value.has_value()) return std::optional<Json>();
  Result<Json> record = ParseJson(*value);
  if (!record.ok() || !record->is_object() || !(*record)["size"].is_number_unsigned() ||
      !(*record)["pages"].is_number_unsigned() ||
      (*record)["pages"].get<uint64_t>() !=
          ((*record)["size"].get<uint64_t>() + kPage - 1) / kPage) {
    return Status::Corruption("the stored record of code sha256:" + std::string(hex) +
                              " is damaged");
  }
  return std::optional<Json>(std::move(record).value());
}

Result<bool> CodeStore::Has(std::string_view hex) {
  if (!IsSha256Hex(hex)) return false;
  ASSIGN_OR_RETURN(std::optional<Json> record, Record(hex));
  return record.has_value();
}

Status CodeStore::MakeRoom(uint64_t size) {
  if (upload_bytes_ + size <= options_.max_upload_bytes) return Status::Ok();
  const TimeMs now = clock_.NowMs();
  for (auto it = uploads_.begin(); it != uploads_.end();) {
    if (now - it->second.last_activity >= options_.upload_idle_ms) {
      spdlog::info("upload of code sha256:{} dropped: idle for {} s ({} of {} bytes received)",
                   it->first, (now - it->second.last_activity) / 1000, it->second.bytes.size(),
                   it->second.size);
      upload_bytes_ -= it->second.size;
      it = uploads_.erase(it);
    } else {
      ++it;
    }
  }
  if (upload_bytes_ + size <= options_.max_upload_bytes) return Status::Ok();
  return Status::ResourceExhausted("the head holds " + std::to_string(uploads_.size()) +
                                   " code upload(s) in progress (" + Mib(upload_bytes_) +
                                   " of its " + Mib(options_.max_upload_bytes) +
                                   "); nothing was stored: retry when they have finished");
}

void CodeStore::Store(const std::string& hex, const std::string& bytes) {
  const uint64_t pages = (bytes.size() + kPage - 1) / kPage;
  for (uint64_t i = 0; i < pages; ++i) {
    batch_.Put(storage::Family::kMeta, storage::CodePageKey(hex, i),
               bytes.substr(i * kPage, kPage));
  }
  // After its pages: a reader that finds the record finds them (one batch).
  batch_.Put(storage::Family::kMeta, storage::CodeKey(hex),
             Json{{"size", bytes.size()}, {"pages", pages}}.dump());
}

Result<Json> CodeStore::Put(std::string_view hex_view, uint64_t size, uint64_t offset,
                            std::string_view data) {
  if (!IsSha256Hex(hex_view)) {
    return Status::InvalidArgument("code must be the archive's sha256: 64 lowercase hex digits");
  }
  const std::string hex(hex_view);
  Json reply{{"code", hex}, {"size", size}, {"stored", false}, {"next_offset", Json()}};
  ASSIGN_OR_RETURN(std::optional<Json> record, Record(hex));
  if (record.has_value()) {
    // Equal addresses are equal bytes: whatever else arrives is not needed.
    if (auto it = uploads_.find(hex); it != uploads_.end()) {
      upload_bytes_ -= it->second.size;
      uploads_.erase(it);
    }
    reply["size"] = (*record)["size"];
    reply["stored"] = true;
    return reply;
  }
  if (size == 0)
    return Status::InvalidArgument("size must be positive (an archive is never empty)");
  if (size > options_.max_code_bytes) {
    return Status::ResourceExhausted(
        "the project archive is " + std::to_string(size) + " bytes, more than this head takes (" +
        std::to_string(options_.max_code_bytes) +
        " bytes, ztune-head --max-code-bytes); keep data sets, outputs and environments out "
        "of the working directory");
  }
  if (data.size() > kPage) {
    return Status::InvalidArgument("a page of code holds at most " + std::to_string(kPage) +
                                   " bytes, got " + std::to_string(data.size()));
  }
  if (offset > size || data.size() > size - offset) {
    return Status::InvalidArgument(
        "bytes [" + std::to_string(offset) + ", " + std::to_string(offset + data.size()) +
        ") lie outside an archive of " + std::to_string(size) + " bytes");
  }
  auto it = uploads_.find(hex);
  if (it != uploads_.end() && it->second.size != size) {
    if (offset != 0) {
      return Status::InvalidArgument("the upload of sha256:" + hex + " is of " +
                                     std::to_string(it->second.size) + " bytes, not " +
                                     std::to_string(size));
    }
    upload_bytes_ -= it->second.size;  // a client starting over with another size
    uploads_.erase(it);
    it = uploads_.end();
  }
  if (it == uploads_.end()) {
    if (offset != 0) {
      return Status::FailedPrecondition("no upload of sha256:" + hex +
                                        " is in progress; start at offset 0");
    }
    RETURN_IF_ERROR(MakeRoom(size));
    it = uploads_.emplace(hex, Upload{}).first;
    it->second.size = size;
    upload_bytes_ += size;
  }
  Upload& u = it->second;
  u.last_activity = clock_.NowMs();
  if (data.empty()) {
    reply["next_offset"] = u.bytes.size();
    return reply;
  }
  if (offset != u.bytes.size()) {
    return Status::FailedPrecondition("the upload of sha256:" + hex + " goes on at offset " +
                                      std::to_string(u.bytes.size()) + ", not " +
                                      std::to_string(offset));
  }
  if (u.bytes.empty()) u.bytes.reserve(size);
  u.bytes.append(data);
  u.hasher.Update(data);
  if (u.bytes.size() < size) {
    reply["next_offset"] = u.bytes.size();
    return reply;
  }
  const Sha256::Digest digest = u.hasher.Finish();
  std::string bytes = std::move(u.bytes);
  upload_bytes_ -= u.size;
  uploads_.erase(it);
  const std::string got = DigestHex(digest);
  if (got != hex) {
    return Status::InvalidArgument("the uploaded bytes have sha256 " + got + ", not " + hex +
                                   "; nothing was stored (upload again)");
  }
  if (bytes.compare(0, kArchiveMagic.size(), kArchiveMagic) != 0) {
    return Status::InvalidArgument("the uploaded bytes are not a project archive (" +
                                   std::string("docs/protocol.md \"Checkpoint directories\")"));
  }
  Store(hex, bytes);
  spdlog::info("code sha256:{} stored ({} bytes)", hex, bytes.size());
  reply["stored"] = true;
  return reply;
}

Result<CodeStore::Page> CodeStore::ReadPage(std::string_view hex, uint64_t offset) {
  if (!IsSha256Hex(hex)) {
    return Status::InvalidArgument("code must be a sha256: 64 lowercase hex digits");
  }
  ASSIGN_OR_RETURN(std::optional<Json> record, Record(hex));
  if (!record.has_value()) {
    return Status::NotFound("code sha256:" + std::string(hex) + " is not in the head's store");
  }
  Page page;
  page.size = (*record)["size"].get<uint64_t>();
  if (offset % kPage != 0 || offset >= page.size) {
    return Status::InvalidArgument(
        "offset " + std::to_string(offset) +
        " is not the start of a page of code sha256:" + std::string(hex) + " (" +
        std::to_string(page.size) + " bytes, pages of " + std::to_string(kPage) + ")");
  }
  const std::string key = storage::CodePageKey(hex, offset / kPage);
  std::optional<std::string> bytes;
  if (const storage::WriteBatch::Op* op = batch_.NewestWrite(storage::Family::kMeta, key)) {
    if (!op->is_delete) bytes = op->value;
  } else {
    ASSIGN_OR_RETURN(bytes, store_.Get(storage::Family::kMeta, key));
  }
  const uint64_t want = std::min<uint64_t>(kPage, page.size - offset);
  if (!bytes.has_value() || bytes->size() != want) {
    return Status::Corruption("page " + std::to_string(offset / kPage) +
                              " of code sha256:" + std::string(hex) + " is " +
                              (bytes.has_value() ? "damaged" : "missing") + " in the store");
  }
  page.bytes = std::move(*bytes);
  return page;
}

}  // namespace ztune::head
