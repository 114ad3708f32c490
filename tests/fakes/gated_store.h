// GatedStore: an in-memory store whose commits wait at a gate the test
// opens, and which refuses or fails commits on demand: what a slow or full
// disk does. Thread-safe (a head commits on its own threads).
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <vector>

#include "storage/in_memory_store.h"

namespace ztune::testing {

class GatedStore final : public storage::Store {
 public:
  Status Commit(const storage::WriteBatch& batch) override {
    std::unique_lock<std::mutex> lock(mu_);
    ++entered_;
    const bool gated = !holds_ || holds_(batch);
    if (gated && !open_) ++held_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_ || !gated; });
    if (refuse_) return Status::ResourceExhausted("disk full (test)");
    if (fail_) return Status::IOError("injected (test)");
    committed_sizes_.push_back(batch.size());
    return base_.Commit(batch);
  }
  Result<std::optional<std::string>> Get(storage::Family f, std::string_view key) override {
    std::lock_guard<std::mutex> lock(mu_);
    return base_.Get(f, key);
  }
  Status Scan(storage::Family f, std::string_view prefix,
              const std::function<bool(std::string_view, std::string_view)>& fn) override {
    std::lock_guard<std::mutex> lock(mu_);
    return base_.Scan(f, prefix, fn);
  }

  void SetOpen(bool open) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = open;
    }
    cv_.notify_all();
  }
  void SetRefuse(bool refuse) {
    std::lock_guard<std::mutex> lock(mu_);
    refuse_ = refuse;
  }
  void SetFail(bool fail) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_ = fail;
  }
  // Only commits for which `holds` is true wait at a closed gate (all when
  // null).
  void SetHolds(std::function<bool(const storage::WriteBatch&)> holds) {
    std::lock_guard<std::mutex> lock(mu_);
    holds_ = std::move(holds);
  }
  // Waits until `n` commits have been stopped at the closed gate so far.
  void AwaitHeld(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return held_ >= n; });
  }
  // Waits until `n` commits have entered Commit (at the gate or past it).
  void AwaitEntered(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return entered_ >= n; });
  }
  // Commits that have entered Commit so far.
  int entered() {
    std::lock_guard<std::mutex> lock(mu_);
    return entered_;
  }
  std::vector<size_t> committed_sizes() {
    std::lock_guard<std::mutex> lock(mu_);
    return committed_sizes_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
  bool refuse_ = false;
  bool fail_ = false;
  int entered_ = 0;
  int held_ = 0;
  std::function<bool(const storage::WriteBatch&)> holds_;
  std::vector<size_t> committed_sizes_;
  storage::InMemoryStore base_;
};

}  // namespace ztune::testing
