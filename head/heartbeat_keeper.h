// HeartbeatKeeper: keeps the head's heartbeats going while the loop thread is
// inside a commit it runs itself.
//
// The loop commits a turn's batch on its own thread when it must wait for it
// (a turn that answers a client, or handled many results), and waits for the
// commits it handed to PipelinedStore's thread before a read. Handing the
// commit to the store thread and waiting for it cost two thread wake-ups per
// turn: about 90 µs of every step cycle on a 2-vCPU VM (docs/benchmarks.md),
// more than all the rest of the head's work per result. But a commit can stall (a
// slow disk, a large batch) and heartbeats must not: the workers presume a
// silent head dead. So while the loop is inside a commit it lends the worker
// socket, and the state heartbeats read, to this class's thread, which wakes
// every quarter heartbeat interval and, while the loan lasts, sends the
// heartbeats that are due (the callback decides what is due).
//
// Who owns the socket is one atomic state, changed with acquire/release
// ordering (the full memory barrier ZeroMQ asks for when a socket moves
// between threads):
//   kLoop    the loop thread owns it (outside commits)
//   kLent    the loop is inside a commit: the keeper may take it
//   kKeeper  the keeper is sending; the loop, back from its commit, waits
// A commit therefore costs the loop one atomic store and one uncontended
// compare-and-swap, and no system call, unless the keeper is sending at that
// moment.
//
// Thread affinity: Lend and Reclaim (or a Loan) on the loop thread only; the
// callback runs on the keeper's thread, only between a Lend and its Reclaim.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "common/clock.h"

namespace ztune::head {

class HeartbeatKeeper {
 public:
  // `send` sends whatever heartbeats are due (nothing when none is); it may
  // touch what the loop lends (see above). Checks every `period_ms` (>= 1).
  HeartbeatKeeper(TimeMs period_ms, std::function<void()> send);
  // Stops and joins the thread. CHECK: nothing lent.
  ~HeartbeatKeeper();
  HeartbeatKeeper(const HeartbeatKeeper&) = delete;
  HeartbeatKeeper& operator=(const HeartbeatKeeper&) = delete;

  // Loop thread: what it lends is the keeper's to use until Reclaim.
  void Lend();
  // Loop thread: takes it back, waiting while the keeper is sending.
  void Reclaim();

  // Lend() for a scope.
  class Loan {
   public:
    explicit Loan(HeartbeatKeeper& keeper) : keeper_(keeper) { keeper_.Lend(); }
    ~Loan() { keeper_.Reclaim(); }
    Loan(const Loan&) = delete;
    Loan& operator=(const Loan&) = delete;

   private:
    HeartbeatKeeper& keeper_;
  };

  // Heartbeat rounds the keeper ran during loans (tests).
  uint64_t rounds() const { return rounds_.load(); }

 private:
  enum State : int { kLoop, kLent, kKeeper };
  void Run();

  const TimeMs period_ms_;
  const std::function<void()> send_;
  std::atomic<int> state_{kLoop};
  std::atomic<uint64_t> rounds_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool quit_ = false;   // guarded by mu_
  std::thread thread_;  // last: starts after the members it uses
};

}  // namespace ztune::head
