#include "head/commit_writer.h"

#include <chrono>

#include "common/check.h"

namespace ztune::head {

CommitWriter::CommitWriter(storage::Store& store) : store_(store), thread_([this] { Run(); }) {}

CommitWriter::~CommitWriter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CommitWriter::Begin(storage::WriteBatch batch) {
  CHECK(!in_progress_);
  in_progress_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    batch_ = std::move(batch);
    has_work_ = true;
    done_ = false;
  }
  cv_.notify_all();
}

std::optional<Status> CommitWriter::Wait(TimeMs timeout_ms) {
  CHECK(in_progress_);
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, std::chrono::milliseconds(std::max<TimeMs>(0, timeout_ms)),
                    [&] { return done_; })) {
    return std::nullopt;
  }
  in_progress_ = false;
  done_ = false;
  return std::move(result_);
}

void CommitWriter::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return has_work_ || quit_; });
    if (has_work_) {
      storage::WriteBatch batch = std::move(batch_);
      batch_.Clear();
      has_work_ = false;
      lock.unlock();
      Status s = store_.Commit(batch);
      lock.lock();
      result_ = std::move(s);
      done_ = true;
      cv_.notify_all();
      continue;
    }
    if (quit_) return;
  }
}

}  // namespace ztune::head
