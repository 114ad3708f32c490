// ClientWaits: client requests held on the head until they need not wait
// any more (docs/client-protocol.md, "Waiting requests"): an add_trial until
// its experiment has a trial slot, a wait_trials until one of its trials has
// finished; each at most until its deadline. Held in arrival order, so that
// the first add_trial waiting gets the first slot that comes free.
//
// Lives on the head loop thread; not thread-safe.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <string>

#include "common/clock.h"
#include "common/json.h"
#include "head/client_service.h"

namespace ztune::head {

class ClientWaits {
 public:
  struct Waiting {
    std::string identity;  // the client connection's routing id
    Json request;
    bool delimited = false;  // a REQ client: replies start with an empty frame
    ClientCaller caller;
    TimeMs deadline = 0;
  };
  // Bounds the head memory and the per-turn checks of held requests: a
  // client over it is refused at once.
  static constexpr size_t kMaxWaiting = 1024;

  // False (and nothing held) when kMaxWaiting requests wait already.
  bool Hold(Waiting w);
  // Hands each held request that need not wait any more (`still_waits` is
  // false) or whose deadline is past to `handle`, in arrival order. Each is
  // judged after the ones before it were handled: an add_trial handled takes
  // the slot the next one would have seen.
  void Release(TimeMs now, const std::function<bool(const Json&)>& still_waits,
               const std::function<void(Waiting&&)>& handle);
  // Whether Release would hand any over now.
  bool AnyDue(TimeMs now, const std::function<bool(const Json&)>& still_waits) const;
  // The earliest deadline, or -1 with nothing held.
  TimeMs NextDeadline() const;
  size_t size() const { return waiting_.size(); }

 private:
  std::deque<Waiting> waiting_;
};

}  // namespace ztune::head
