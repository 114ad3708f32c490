#include "head/turn_times.h"

#include <algorithm>

namespace ztune::head {

void TurnTimes::PollEntered(bool worker_readable) {
  worker_readable_ = worker_readable;
  read_ = 0;
  committed_ = false;
  commit_us_ = 0;
}

void TurnTimes::PollReturned(Micros now) {
  poll_returned_ = now;
  drained_ = prepared_ = now;
  // Nothing was waiting as the poll began: a worker message that came during
  // the poll woke it, so what this turn reads came at its return or later
  // (the wake-up's delay is the system's, not counted).
  if (!worker_readable_) unread_since_ = std::max(unread_since_, now);
  oldest_unread_ = unread_since_;
}

void TurnTimes::WorkersDrained(Micros now, uint64_t read, bool emptied) {
  drained_ = prepared_ = now;
  read_ = read;
  // A drain cut by a bound (messages, time) left messages as old as the
  // bound it began with.
  if (emptied) unread_since_ = now;
}

void TurnTimes::Prepared(Micros now) { prepared_ = now; }

void TurnTimes::Committed(Micros start, Micros end) {
  committed_ = true;
  commit_us_ = end - start;
  commit_.Record(commit_us_);
}

void TurnTimes::Answered(Micros now, uint64_t results, Micros oldest_unread) {
  result_wait_.Record(now - oldest_unread, results);
}

void TurnTimes::TurnEnded(Micros now) {
  // Turns that only timed out (timers, heartbeats) would swamp the figures.
  if (read_ == 0 && !committed_) return;
  turn_.Record(now - poll_returned_);
  drain_.Record(drained_ - poll_returned_);
  handle_.Record(prepared_ - drained_);
  send_.Record(now - prepared_ - commit_us_);
}

Json TurnTimes::ToJson() const {
  return Json{{"turn", turn_.ToJson()},     {"drain", drain_.ToJson()},
              {"handle", handle_.ToJson()}, {"commit", commit_.ToJson()},
              {"send", send_.ToJson()},     {"result_wait", result_wait_.ToJson()}};
}

}  // namespace ztune::head
