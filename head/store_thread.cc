#include "head/store_thread.h"

#include <chrono>

#include "common/check.h"

namespace ztune::head {

StoreThread::StoreThread() : thread_([this] { Run(); }) {}

StoreThread::~StoreThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void StoreThread::Begin(std::function<Status()> job) {
  CHECK(!in_progress_);
  CHECK(job != nullptr);
  in_progress_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = std::move(job);
    done_ = false;
  }
  cv_.notify_all();
}

std::optional<Status> StoreThread::Wait(TimeMs timeout_ms) {
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

void StoreThread::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return job_ != nullptr || quit_; });
    if (job_ != nullptr) {
      std::function<Status()> job = std::move(job_);
      job_ = nullptr;
      lock.unlock();
      Status s = job();
      job = nullptr;  // releases what the job captured before the loop goes on
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
