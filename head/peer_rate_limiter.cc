#include "head/peer_rate_limiter.h"

#include <algorithm>
#include <cmath>

namespace ztune::head {
namespace {

// A bucket holds at least one message's worth, whatever the burst says.
double Capacity(const RateLimit& limit) { return std::max(limit.burst, 1.0); }

// The tokens a message takes from each bucket: none from an unlimited one;
// all of a full byte bucket when the message is larger than it (admitted
// once the bucket is full, never impossible).
struct Costs {
  double messages;
  double bytes;
};
Costs CostOf(const PeerLimits& limits, uint64_t bytes) {
  return Costs{limits.messages.unlimited() ? 0.0 : 1.0,
               limits.bytes.unlimited()
                   ? 0.0
                   : std::min(static_cast<double>(bytes), Capacity(limits.bytes))};
}

std::string Number(double x) { return std::to_string(static_cast<int64_t>(std::llround(x))); }

}  // namespace

std::string DescribeLimits(const PeerLimits& limits, const std::string& unit) {
  if (limits.unlimited()) return "no limit";
  std::string out;
  if (!limits.messages.unlimited()) {
    out = Number(limits.messages.per_second) + " " + unit + "/s (bursts of " +
          Number(Capacity(limits.messages)) + ")";
  }
  if (!limits.bytes.unlimited()) {
    if (!out.empty()) out += ", ";
    out += Number(limits.bytes.per_second / (1 << 20)) + " MiB/s";
  }
  return out;
}

PeerRateLimiter::PeerRateLimiter(const Clock& clock, PeerLimits limits, size_t max_peers)
    : clock_(clock), limits_(limits), max_peers_(std::max<size_t>(1, max_peers)) {}

PeerRateLimiter::Buckets PeerRateLimiter::Full(TimeMs now) const {
  return Buckets{Capacity(limits_.messages), Capacity(limits_.bytes), now};
}

void PeerRateLimiter::Refill(Buckets& b, TimeMs now) const {
  const TimeMs elapsed = now - b.refilled_at;
  if (elapsed <= 0) return;
  b.messages =
      std::min(Capacity(limits_.messages),
               b.messages + limits_.messages.per_second * static_cast<double>(elapsed) / 1000);
  b.bytes = std::min(Capacity(limits_.bytes),
                     b.bytes + limits_.bytes.per_second * static_cast<double>(elapsed) / 1000);
  b.refilled_at = now;
}

void PeerRateLimiter::PruneIdle(TimeMs now) {
  for (auto it = peers_.begin(); it != peers_.end();) {
    Refill(it->second, now);
    const bool full = it->second.messages >= Capacity(limits_.messages) &&
                      it->second.bytes >= Capacity(limits_.bytes);
    it = full ? peers_.erase(it) : std::next(it);
  }
}

bool PeerRateLimiter::Admit(std::string_view peer, uint64_t bytes) {
  if (limits_.unlimited()) return true;
  const TimeMs now = clock_.NowMs();
  auto it = peers_.find(peer);
  if (it == peers_.end()) {
    if (peers_.size() >= max_peers_) PruneIdle(now);
    it = peers_.emplace(std::string(peer), Full(now)).first;
  }
  Buckets& b = it->second;
  Refill(b, now);
  const Costs cost = CostOf(limits_, bytes);
  if (b.messages < cost.messages || b.bytes < cost.bytes) return false;
  b.messages -= cost.messages;
  b.bytes -= cost.bytes;
  return true;
}

TimeMs PeerRateLimiter::WaitMs(std::string_view peer, uint64_t bytes) const {
  if (limits_.unlimited()) return 0;
  auto it = peers_.find(peer);
  if (it == peers_.end()) return 0;
  Buckets b = it->second;
  Refill(b, clock_.NowMs());
  auto wait = [](const RateLimit& limit, double have, double need) -> double {
    if (limit.unlimited() || have >= need) return 0;
    return (need - have) * 1000 / limit.per_second;
  };
  const Costs cost = CostOf(limits_, bytes);
  const double ms = std::max(wait(limits_.messages, b.messages, cost.messages),
                             wait(limits_.bytes, b.bytes, cost.bytes));
  return static_cast<TimeMs>(std::ceil(ms));
}

}  // namespace ztune::head
