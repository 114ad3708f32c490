// Clock: every timeout in ztune goes through this seam (steady in production,
// FakeClock in tests). Thread-safe for SteadyClock; FakeClock is test-thread only.
#pragma once

#include <chrono>
#include <cstdint>

namespace ztune {

// Milliseconds on a monotonic timeline; only differences are meaningful.
using TimeMs = int64_t;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual TimeMs NowMs() const = 0;
};

class SteadyClock final : public Clock {
 public:
  TimeMs NowMs() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

class FakeClock final : public Clock {
 public:
  explicit FakeClock(TimeMs start = 1'000'000) : now_(start) {}
  TimeMs NowMs() const override { return now_; }
  void AdvanceMs(TimeMs d) { now_ += d; }
  void SetMs(TimeMs t) { now_ = t; }

 private:
  TimeMs now_;
};

// Wall-clock seconds since the Unix epoch: timestamps shown to people (results,
// reports, ETAs), never for measuring durations.
inline double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace ztune
