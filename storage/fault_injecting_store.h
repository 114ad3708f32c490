// FaultInjectingStore: a Store decorator for tests (LevelDB's ErrorEnv idea).
// It forwards to a wrapped Store and can make a chosen Commit fail with
// IOError *without* forwarding it, i.e. with nothing of the batch applied,
// which is exactly what a failed RocksDB write looks like to the head.
//
// Reads are always forwarded. Not thread-safe; owned by the test's thread. The
// wrapped store must outlive this object.
#pragma once

#include <atomic>
#include <cstdint>

#include "storage/store.h"

namespace ztune::storage {

class FaultInjectingStore final : public Store {
 public:
  explicit FaultInjectingStore(Store& base) : base_(base) {}
  FaultInjectingStore(const FaultInjectingStore&) = delete;
  FaultInjectingStore& operator=(const FaultInjectingStore&) = delete;

  // Makes the n-th Commit from now fail (n = 1: the next one), once.
  // Replaces any earlier FailNthCommit request; n = 0 cancels it.
  void FailNthCommit(uint64_t n);
  // While set, every Commit fails (a full or read-only disk) with `code`
  // (IOError or ResourceExhausted). Any thread: a head commits on its store
  // thread while a test flips this.
  void FailAllCommits(bool fail, StatusCode code = StatusCode::kIOError) {
    fail_code_.store(code);
    fail_all_.store(fail);
  }

  // Commit calls seen so far, and how many of them were failed on purpose.
  uint64_t commits_attempted() const { return attempted_; }
  uint64_t commits_failed() const { return failed_; }

  // IOError("injected ...") if this commit is chosen to fail (nothing
  // applied); otherwise whatever the wrapped store returns.
  Status Commit(const WriteBatch& batch) override;
  Result<std::optional<std::string>> Get(Family f, std::string_view key) override;
  Status Scan(Family f, std::string_view prefix,
              const std::function<bool(std::string_view, std::string_view)>& fn) override;
  Result<std::optional<Entry>> Last(Family f, std::string_view prefix) override {
    return base_.Last(f, prefix);
  }

 private:
  Store& base_;
  // Commit number (1-based, over attempted_) that fails; 0 = none pending.
  uint64_t fail_at_ = 0;
  std::atomic<bool> fail_all_{false};
  std::atomic<StatusCode> fail_code_{StatusCode::kIOError};
  std::atomic<uint64_t> attempted_{0};
  std::atomic<uint64_t> failed_{0};
};

}  // namespace ztune::storage
