#include "head/heartbeat_keeper.h"

#include <algorithm>
#include <chrono>

#include "common/check.h"

namespace ztune::head {

HeartbeatKeeper::HeartbeatKeeper(TimeMs period_ms, std::function<void()> send)
    : period_ms_(std::max<TimeMs>(1, period_ms)), send_(std::move(send)) {
  thread_ = std::thread([this] { Run(); });
}

HeartbeatKeeper::~HeartbeatKeeper() {
  CHECK(state_.load() == kLoop);
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void HeartbeatKeeper::Lend() {
  CHECK(state_.load(std::memory_order_relaxed) == kLoop);
  state_.store(kLent, std::memory_order_release);
}

void HeartbeatKeeper::Reclaim() {
  int expected = kLent;
  while (!state_.compare_exchange_weak(expected, kLoop, std::memory_order_acquire,
                                       std::memory_order_relaxed)) {
    // The keeper is sending (for as long as a round of heartbeats takes):
    // let it run rather than spin against it.
    CHECK(expected == kKeeper || expected == kLent);
    expected = kLent;
    std::this_thread::yield();
  }
}

void HeartbeatKeeper::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!quit_) {
    cv_.wait_for(lock, std::chrono::milliseconds(period_ms_), [this] { return quit_; });
    if (quit_) break;
    int expected = kLent;
    if (!state_.compare_exchange_strong(expected, kKeeper, std::memory_order_acquire,
                                        std::memory_order_relaxed)) {
      continue;  // the loop has it: it sends its own heartbeats
    }
    send_();
    rounds_.fetch_add(1);
    state_.store(kLent, std::memory_order_release);
  }
}

}  // namespace ztune::head
