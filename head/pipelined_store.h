// PipelinedStore: the head's store, whose turn commits may run behind the loop.
//
// A turn's commit is one fsync, about 250 µs on this project's VMs: the loop
// used to wait for it before its next turn, so one trial's step cycle was a
// commit plus the loop's own work, however fast the worker answered. Handed
// over here (CommitLater), the commit runs on this class's thread while the
// loop reads and handles what came meanwhile; the batches handed over while
// one commit runs are committed together next (group commit). What depends on
// durability (a result's ACK, a client's reply) waits for the commit's end:
// the loop collects the ended commits with TakeEnded when ended_fd() is
// readable, in the order they were handed over.
//
// Every other use (Get, Scan, Last, Commit) first waits until everything
// handed over has been committed (Drain): reads see every write handed over,
// as they would had each turn committed before the next began, and the
// underlying store is used by one thread at a time (storage/store.h).
//
// A commit that fails stops the pipeline: what was handed over after it is
// not committed (the head stops, and restarts on what is durable). One
// refused for lack of disk space (ResourceExhausted) is held, with
// everything handed over after it, until CommitHeld succeeds.
//
// Thread affinity: everything on the loop thread (CommitHeld also on a
// thread the loop waits for); the commits run on this class's thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "common/status.h"
#include "head/heartbeat_keeper.h"
#include "storage/store.h"

namespace ztune::head {

class PipelinedStore final : public storage::Store {
 public:
  using Ticket = uint64_t;
  // What ended: every batch handed over up to `through` (inclusive, and
  // after the previous Ended's), in one commit that returned `status`.
  struct Ended {
    Ticket through = 0;
    Status status;
    int64_t start_us = 0;  // steady clock, microseconds (TurnTimes::SteadyNow)
    int64_t end_us = 0;
    size_t bytes = 0;
  };

  // Waits in Drain lend the head's heartbeats to `keeper` (may be null; not
  // used before the first Drain nor by the destructor, so it may be
  // constructed after this object).
  PipelinedStore(storage::Store& store, HeartbeatKeeper* keeper);
  // Commits what was handed over (unless a commit failed), then joins.
  ~PipelinedStore() override;
  PipelinedStore(const PipelinedStore&) = delete;
  PipelinedStore& operator=(const PipelinedStore&) = delete;

  // storage::Store: each waits for Drain first. Commit then commits on the
  // calling thread (CHECK: no commit failed or is held: the loop stops on
  // a failure, and waits for space on a refusal, before it commits again).
  // While batches are held, Get reads through them (Scan and Last do not:
  // like the loop's reads while it waits for space, they see the store).
  Status Commit(const storage::WriteBatch& batch) override;
  Result<std::optional<std::string>> Get(storage::Family f, std::string_view key) override;
  Status Scan(storage::Family f, std::string_view prefix,
              const std::function<bool(std::string_view, std::string_view)>& fn) override;
  Result<std::optional<Entry>> Last(storage::Family f, std::string_view prefix) override;

  // Hands `batch` (not empty) over to be committed after everything handed
  // over before it. Returns its ticket: 1, 2, ...
  Ticket CommitLater(storage::WriteBatch batch);
  // The newest ticket handed over, 0 before the first.
  Ticket last_ticket() const { return last_ticket_; }
  // Whether a ticket handed over has not been reported committed by
  // TakeEnded yet.
  bool outstanding() const { return taken_through_ < last_ticket_; }

  // An eventfd, readable while an ended commit waits for TakeEnded (-1 if it
  // could not be created: then the loop must not block while outstanding()).
  int ended_fd() const { return ended_fd_; }
  // The commits that ended since the last call, in order.
  std::vector<Ended> TakeEnded();

  // Waits until nothing handed over is waiting or being committed, or the
  // pipeline stopped on a failure or a refusal. Lends the heartbeats while
  // it waits.
  void Drain();
  // Waits while a batch waits behind the running commit (lending the
  // heartbeats): the loop hands over at most one group ahead. Without it a
  // loop with a backlog ran many small turns during each commit, each with
  // its own poll, sends and commit hand-off, and spent 20% more CPU per
  // result than one that waited (docs/benchmarks.md); a loop without one
  // (one trial's step cycle) never waits here.
  void AwaitRoom();

  // After an Ended with ResourceExhausted: commits, on the calling thread,
  // the refused batch and every batch handed over since, as one. Ok: they
  // ended (TakeEnded reports them) and the pipeline runs again. Otherwise
  // they stay held. CHECK: something is held.
  Status CommitHeld();

 private:
  struct Handed {
    storage::WriteBatch batch;
    Ticket ticket = 0;
  };
  void Run();
  // mu_ held. Records an end and signals ended_fd_.
  void PushEnded(Ended e);
  // mu_ held: nothing handed over is waiting or being committed, or the
  // pipeline stopped on a failure or a refusal.
  bool Idle() const;
  // Waits for Drain without lending the heartbeats (the destructor's).
  void WaitIdle(std::unique_lock<std::mutex>& lock);
  // mu_ held by `lock`: waits until `done()`, lending the heartbeats.
  template <class Done>
  void WaitLending(std::unique_lock<std::mutex>& lock, Done done);

  storage::Store& store_;
  HeartbeatKeeper* keeper_;
  const int ended_fd_;

  // Loop thread only.
  Ticket last_ticket_ = 0;
  Ticket taken_through_ = 0;  // every ticket up to here was reported committed

  std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_.
  std::vector<Handed> waiting_;  // handed over, not yet taken by the thread
  bool committing_ = false;      // the thread is inside a commit
  bool stopped_ = false;         // a commit failed: nothing more is committed
  storage::WriteBatch held_;     // refused for lack of space (with held_through_)
  Ticket held_through_ = 0;      // 0: nothing held
  std::vector<Ended> ended_;     // not yet taken
  bool quit_ = false;
  std::thread thread_;  // last: starts after the members it uses
};

}  // namespace ztune::head
