// PeerRateLimiter: a token bucket per connection, for messages and for bytes,
// so that one peer (an authenticated but buggy worker, a client in a tight
// loop) gets a bounded share of the head's single loop thread and cannot
// starve the others (docs/security.md, "Limits per connection").
//
// A bucket holds up to `burst` tokens and refills at `per_second`; a message
// takes one message token and its size in byte tokens, and is admitted only
// if both buckets hold enough. A message larger than the byte burst is
// admitted when the byte bucket is full (it takes all of it), so a limit never
// makes a message impossible. Pure logic on a Clock: unit-tested with a fake.
//
// Not thread-safe: one per owning thread (the head loop).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/clock.h"

namespace ztune::head {

struct RateLimit {
  double per_second = 0;  // 0: unlimited
  double burst = 0;       // bucket size; at least one message's worth is used
  bool unlimited() const { return per_second <= 0; }
};

struct PeerLimits {
  RateLimit messages;
  RateLimit bytes;
  bool unlimited() const { return messages.unlimited() && bytes.unlimited(); }
};

// "500 requests/s (bursts of 1000), 64 MiB/s": for messages that explain a refusal.
std::string DescribeLimits(const PeerLimits& limits, const std::string& unit);

class PeerRateLimiter {
 public:
  // Peers whose buckets are full carry no state and are forgotten once
  // `max_peers` are tracked, which bounds memory however many connections
  // come and go (ZeroMQ does not tell a ROUTER when one closes).
  PeerRateLimiter(const Clock& clock, PeerLimits limits, size_t max_peers = 65536);

  // True, and the tokens taken, if a message of `bytes` fits `peer`'s budget
  // now; false, and nothing taken, otherwise.
  bool Admit(std::string_view peer, uint64_t bytes);
  // How long until a message of `bytes` from `peer` would be admitted (0 if
  // it would be now). For a "retry after" hint.
  TimeMs WaitMs(std::string_view peer, uint64_t bytes) const;

  const PeerLimits& limits() const { return limits_; }
  size_t tracked_peers() const { return peers_.size(); }

 private:
  struct Buckets {
    double messages = 0;
    double bytes = 0;
    TimeMs refilled_at = 0;
  };

  Buckets Full(TimeMs now) const;
  void Refill(Buckets& b, TimeMs now) const;
  // Forgets every peer whose buckets are full again.
  void PruneIdle(TimeMs now);

  const Clock& clock_;
  PeerLimits limits_;
  size_t max_peers_;
  // Looked up by string_view: no copy of the routing id per message.
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, Buckets, Hash, std::equal_to<>> peers_;
};

}  // namespace ztune::head
