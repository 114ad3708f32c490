// StarvationWarning: when to say that trials wait while none runs (Ray's
// insufficient-resources warning): once the state has lasted an interval, and
// then at most once per interval while it lasts. A trial running (or none
// waiting) ends the state. What the warning says is the caller's.
//
// Lives on the head loop thread; not thread-safe.
#pragma once

#include "common/clock.h"

namespace ztune::head {

class StarvationWarning {
 public:
  explicit StarvationWarning(TimeMs interval_ms) : interval_ms_(interval_ms) {}

  // Called once per loop turn with the current counts. True when a warning
  // is due now (the caller says it); starved_ms() then says for how long.
  bool Due(TimeMs now, bool any_running, bool any_waiting);
  // How long trials have waited with none running, as of the last Due.
  TimeMs starved_ms() const { return since_ < 0 ? 0 : last_now_ - since_; }

 private:
  TimeMs interval_ms_;
  TimeMs since_ = -1;       // when the state began; -1: not starved
  TimeMs last_warning_ = -1;
  TimeMs last_now_ = 0;
};

}  // namespace ztune::head
