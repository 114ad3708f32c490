// RateLimitedWarning: logs a warning about bad peer input at most once per
// interval and counts what it suppressed, so that a peer sending garbage in a
// loop cannot flood the log. Not thread-safe: one per owning thread.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

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

// The same, kept per peer: one peer's warnings never hide another's, and the
// suppressed count a line carries is that peer's own. Holds at most
// `max_peers` peers (all forgotten at once beyond that).
class PerPeerRateLimitedWarning {
 public:
  explicit PerPeerRateLimitedWarning(const Clock& clock, TimeMs interval_ms = 1000,
                                     size_t max_peers = 4096)
      : clock_(clock), interval_ms_(interval_ms), max_peers_(max_peers) {}

  void Warn(const std::string& peer, const std::string& what) {
    const TimeMs now = clock_.NowMs();
    auto it = peers_.find(peer);
    if (it != peers_.end() && now - it->second.last < interval_ms_) {
      ++it->second.suppressed;
      return;
    }
    if (it == peers_.end()) {
      if (peers_.size() >= max_peers_) peers_.clear();
      it = peers_.emplace(peer, Entry{}).first;
    }
    if (it->second.suppressed > 0) {
      spdlog::warn("{} (and {} more from the same peer suppressed)", what, it->second.suppressed);
    } else {
      spdlog::warn("{}", what);
    }
    it->second = Entry{now, 0};
  }

 private:
  struct Entry {
    TimeMs last = 0;
    uint64_t suppressed = 0;
  };
  const Clock& clock_;
  TimeMs interval_ms_;
  size_t max_peers_;
  std::unordered_map<std::string, Entry> peers_;
};

}  // namespace ztune
