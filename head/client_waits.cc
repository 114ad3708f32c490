#include "head/client_waits.h"

#include <algorithm>
#include <utility>

namespace ztune::head {

bool ClientWaits::Hold(Waiting w) {
  if (waiting_.size() >= kMaxWaiting) return false;
  waiting_.push_back(std::move(w));
  return true;
}

void ClientWaits::Release(TimeMs now, const std::function<bool(const Json&)>& still_waits,
                          const std::function<void(Waiting&&)>& handle) {
  std::deque<Waiting> kept;
  while (!waiting_.empty()) {
    Waiting w = std::move(waiting_.front());
    waiting_.pop_front();
    if (now >= w.deadline || !still_waits(w.request)) {
      handle(std::move(w));
    } else {
      kept.push_back(std::move(w));
    }
  }
  waiting_.swap(kept);
}

bool ClientWaits::AnyDue(TimeMs now, const std::function<bool(const Json&)>& still_waits) const {
  return std::any_of(waiting_.begin(), waiting_.end(), [&](const Waiting& w) {
    return now >= w.deadline || !still_waits(w.request);
  });
}

TimeMs ClientWaits::NextDeadline() const {
  TimeMs next = -1;
  for (const Waiting& w : waiting_) {
    if (next < 0 || w.deadline < next) next = w.deadline;
  }
  return next;
}

}  // namespace ztune::head
