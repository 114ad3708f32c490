// TurnTimes: where the head's loop spends its turns, and for how long the
// results a turn acknowledges can have waited for their ACK inside the head.
// HeadServer::Run reports each step of a turn with a monotonic time in
// microseconds; `head_stats` (docs/client-protocol.md) shows the histograms.
// Loop thread only.
//
// A result's wait is bounded from the turn's own marks, without a time per
// message: a drain of the worker socket that ended on an empty socket read
// everything that had arrived, so what a later turn reads arrived after that
// drain ended ("unread since"); and when the socket had nothing to read as
// the loop went into its poll, it arrived as the poll returned or later (a
// worker message wakes the poll; the delay of that wake-up is the system's
// and not counted). The wait is from that moment to the end of the sends
// after the commit, where the turn's ACKs leave: the head's part of a
// worker's ACK latency, including the time messages sat in the socket while
// the loop was busy, and excluding the network and the worker. Every result
// of a turn takes the bound of its oldest, so after a drain cut by a bound
// the figure is looser than the truth.
#pragma once

#include <chrono>
#include <cstdint>

#include "common/json.h"
#include "head/latency_histogram.h"

namespace ztune::head {

class TurnTimes {
 public:
  using Micros = int64_t;

  explicit TurnTimes(Micros start) : unread_since_(start) {}

  // The steady clock in microseconds, for the marks of a running head.
  static Micros SteadyNow() {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // The loop is about to poll; `worker_readable` is whether the worker
  // socket had a message waiting at that moment.
  void PollEntered(bool worker_readable);
  void PollReturned(Micros now);
  // The worker drain ended: `read` messages, `emptied` when it stopped on an
  // empty socket (not on its per-turn cap).
  void WorkersDrained(Micros now, uint64_t read, bool emptied);
  // Client requests read and handled, the runner's tick and flush are done.
  void Prepared(Micros now);
  void Committed(Micros start, Micros end);
  // The turn handed its commit to run behind the loop: it counts as a turn
  // that committed, with no time of its own in commit.
  void CommitHandedOver() { committed_ = true; }
  // A commit that ran behind the loop (head/pipelined_store.h) ended: counted
  // in "commit", not in a turn's phases.
  void CommitEnded(Micros start, Micros end) { commit_.Record(end - start); }
  // The sends after the commit are done: the turn's ACKs have left.
  // `results`: the result batches the turn handled, each counted in
  // result_wait with the turn's bound (a result's wait, as a worker sees it,
  // not a turn's).
  void Answered(Micros now, uint64_t results) { Answered(now, results, oldest_unread_); }
  // The same for the results of an earlier turn whose commit ran behind the
  // loop: `oldest_unread` is that turn's oldest_unread().
  void Answered(Micros now, uint64_t results, Micros oldest_unread);
  // The bound of this turn's messages' arrival (see Answered).
  Micros oldest_unread() const { return oldest_unread_; }
  // The end of the turn (replies, dashboard reads and heartbeats sent).
  void TurnEnded(Micros now);

  const LatencyHistogram& result_wait() const { return result_wait_; }
  const LatencyHistogram& turn() const { return turn_; }
  const LatencyHistogram& commit() const { return commit_; }

  // {"turn": ..., "drain": ..., "handle": ..., "commit": ..., "send": ...,
  //  "result_wait": ...}: LatencyHistogram::ToJson() each. "turn" counts
  // turns that read a worker message or committed; the phases count the
  // same turns ("commit" only those that committed).
  Json ToJson() const;

 private:
  // The earliest moment a message not yet read can have arrived.
  Micros unread_since_;
  // This turn's marks.
  bool worker_readable_ = false;
  Micros poll_returned_ = 0;
  Micros drained_ = 0;
  Micros prepared_ = 0;
  uint64_t read_ = 0;
  bool committed_ = false;
  Micros commit_us_ = 0;
  Micros oldest_unread_ = 0;  // the bound for this turn's messages

  LatencyHistogram turn_;
  LatencyHistogram drain_;
  LatencyHistogram handle_;
  LatencyHistogram commit_;
  LatencyHistogram send_;
  LatencyHistogram result_wait_;
};

}  // namespace ztune::head
