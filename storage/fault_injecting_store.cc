#include "storage/fault_injecting_store.h"

#include <string>

namespace ztune::storage {

void FaultInjectingStore::FailNthCommit(uint64_t n) { fail_at_ = n == 0 ? 0 : attempted_ + n; }

Status FaultInjectingStore::Commit(const WriteBatch& batch) {
  ++attempted_;
  const bool all = fail_all_.load();
  if (all || attempted_ == fail_at_) {
    if (attempted_ == fail_at_) fail_at_ = 0;
    ++failed_;
    std::string what = "injected commit failure #" + std::to_string(failed_) + " (commit " +
                       std::to_string(attempted_) + ", " + std::to_string(batch.size()) +
                       " ops not applied)";
    if (all && fail_code_.load() == StatusCode::kResourceExhausted) {
      return Status::ResourceExhausted(std::move(what));
    }
    return Status::IOError(std::move(what));
  }
  return base_.Commit(batch);
}

Result<std::optional<std::string>> FaultInjectingStore::Get(Family f, std::string_view key) {
  return base_.Get(f, key);
}

Status FaultInjectingStore::Scan(
    Family f, std::string_view prefix,
    const std::function<bool(std::string_view, std::string_view)>& fn) {
  return base_.Scan(f, prefix, fn);
}

}  // namespace ztune::storage
