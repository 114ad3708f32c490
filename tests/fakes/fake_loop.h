// FakeLoop: a thread standing in for the head's loop in tests of what reads
// through LoopReads (the dashboard): every millisecond it answers the queued
// reads with `handle`, on its own thread, until it is destroyed. Declare it
// after what `handle` captures, so that it stops first.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>
#include <utility>

#include "common/json.h"
#include "head/loop_reads.h"

namespace ztune::testing {

class FakeLoop {
 public:
  FakeLoop(head::LoopReads& reads, std::function<Json(const Json&)> handle)
      : reads_(reads), handle_(std::move(handle)), thread_([this] {
          while (!stop_.load()) {
            reads_.AnswerAll(handle_);
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
        }) {}
  ~FakeLoop() {
    stop_ = true;
    thread_.join();
  }
  FakeLoop(const FakeLoop&) = delete;
  FakeLoop& operator=(const FakeLoop&) = delete;

 private:
  head::LoopReads& reads_;
  const std::function<Json(const Json&)> handle_;
  std::atomic<bool> stop_{false};
  std::thread thread_;  // last: it starts once the members above exist
};

}  // namespace ztune::testing
