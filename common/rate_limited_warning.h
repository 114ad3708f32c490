// RateLimitedWarning: logs a warning about bad peer input at most once per
// interval and counts what it suppressed, so that a peer sending garbage in a
// loop cannot flood the log. Not thread-safe: one per owning thread.
#pragma once

#include <cstdint>
#include <string>

#include <spdlog/spdlog.h>

#include "common/clock.h"

namespace ztune {

class RateLimitedWarning {
 public:
  explicit RateLimitedWarning(const Clock& clock, TimeMs interval_ms = 1000)
      : clock_(clock), interval_ms_(interval_ms) {}

  void Warn(const std::string& what) {
    const TimeMs now = clock_.NowMs();
    if (logged_once_ && now - last_ < interval_ms_) {
      ++suppressed_;
      return;
    }
    if (suppressed_ > 0) {
      spdlog::warn("{} (and {} similar messages suppressed)", what, suppressed_);
    } else {
      spdlog::warn("{}", what);
    }
    suppressed_ = 0;
    last_ = now;
    logged_once_ = true;
  }

 private:
  const Clock& clock_;
  TimeMs interval_ms_;
  TimeMs last_ = 0;
  bool logged_once_ = false;
  uint64_t suppressed_ = 0;
};

}  // namespace ztune
