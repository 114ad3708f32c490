#include "head/peer_rate_limiter.h"

#include <algorithm>
#include <cmath>

namespace ztune::head {
namespace {

// A bucket holds at least one message's worth, whatever the burst says.
double Capacity(const RateLimit& limit, double one) { return std::max(limit.burst, one); }

// The tokens a message takes: all of a full bucket when it is larger than
// the bucket (admitted once the bucket is full, never impossible).
double Cost(const RateLimit& limit, double amount) { return std::min(amount, Capacity(limit, 1)); }

std::string Number(double x) { return std::to_string(static_cast<int64_t>(std::llround(x))); }

}  // namespace

std::string DescribeLimits(const PeerLimits& limits, const std::string& unit) {
  if (limits.unlimited()) return "no limit";
  std::string out;
  if (!limits.messages.unlimited()) {
    out = Number(limits.messages.per_second) + " " + unit + "/s (bursts of " +
          Number(Capacity(limits.messages, 1)) + ")";
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
  return Buckets{Capacity(limits_.messages, 1), Capacity(limits_.bytes, 1), now};
}

void PeerRateLimiter::Refill(Buckets& b, TimeMs now) const {
  const TimeMs elapsed = now - b.refilled_at;
  if (elapsed <= 0) return;
  b.messages =
      std::min(Capacity(limits_.messages, 1),
               b.messages + limits_.messages.per_second * static_cast<double>(elapsed) / 1000);
  b.bytes = std::min(Capacity(limits_.bytes, 1),
                     b.bytes + limits_.bytes.per_second * static_cast<double>(elapsed) / 1000);
  b.refilled_at = now;
}

void PeerRateLimiter::PruneIdle(TimeMs now) {
  for (auto it = peers_.begin(); it != peers_.end();) {
    Refill(it->second, now);
    const bool full = it->second.messages >= Capacity(limits_.messages, 1) &&
                      it->second.bytes >= Capacity(limits_.bytes, 1);
    it = full ? peers_.erase(it) : std::next(it);
  }
}

bool PeerRateLimiter::Admit(std::string_view peer, uint64_t bytes) {
  if (limits_.unlimited()) return true;
  const TimeMs now = clock_.NowMs();
  auto it = peers_.find(std::string(peer));
  if (it == peers_.end()) {
    if (peers_.size() >= max_peers_) PruneIdle(now);
    it = peers_.emplace(std::string(peer), Full(now)).first;
  }
  Buckets& b = it->second;
  Refill(b, now);
  const double message_cost = limits_.messages.unlimited() ? 0 : 1;
  const double byte_cost =
      limits_.bytes.unlimited() ? 0 : Cost(limits_.bytes, static_cast<double>(bytes));
  if (b.messages < message_cost || b.bytes < byte_cost) return false;
  b.messages -= message_cost;
  b.bytes -= byte_cost;
  return true;
}

TimeMs PeerRateLimiter::WaitMs(std::string_view peer, uint64_t bytes) const {
  if (limits_.unlimited()) return 0;
  auto it = peers_.find(std::string(peer));
  if (it == peers_.end()) return 0;
  Buckets b = it->second;
  Refill(b, clock_.NowMs());
  auto wait = [](const RateLimit& limit, double have, double need) -> double {
    if (limit.unlimited() || have >= need) return 0;
    return (need - have) * 1000 / limit.per_second;
  };
  const double ms =
      std::max(wait(limits_.messages, b.messages, 1),
               wait(limits_.bytes, b.bytes, Cost(limits_.bytes, static_cast<double>(bytes))));
  return static_cast<TimeMs>(std::ceil(ms));
}

}  // namespace ztune::head
