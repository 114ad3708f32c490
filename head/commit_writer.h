// CommitWriter: runs Store::Commit on its own thread so that the head loop can
// keep sending heartbeats while a large batch (a 64 MiB checkpoint, a turn of
// thousands of results) is written and fsync'd. Without it a slow commit
// silences the head for longer than the workers' liveness window and they
// reconnect in the middle of their work.
//
// The loop still waits for every commit before it acts on anything else
// (group commit is unchanged): while it waits it only sends heartbeats, which
// depend on no state. The store is touched by one thread at a time: the
// writer between Begin() and the Wait() that returns its status, the loop
// otherwise.
//
// Thread affinity: Begin() and Wait() on the loop thread only.
#pragma once

#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "common/clock.h"
#include "common/status.h"
#include "storage/store.h"

namespace ztune::head {

class CommitWriter {
 public:
  explicit CommitWriter(storage::Store& store);
  // Joins the thread; a commit in progress finishes first.
  ~CommitWriter();
  CommitWriter(const CommitWriter&) = delete;
  CommitWriter& operator=(const CommitWriter&) = delete;

  // Starts committing `batch`. CHECK: no commit in progress.
  void Begin(storage::WriteBatch batch);
  // Waits up to `timeout_ms` for the commit that Begin() started; its status
  // once it is done (the writer is idle again), std::nullopt on timeout.
  // CHECK: a commit was started.
  std::optional<Status> Wait(TimeMs timeout_ms);

 private:
  void Run();

  storage::Store& store_;
  std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_.
  bool has_work_ = false;
  bool done_ = false;
  bool quit_ = false;
  storage::WriteBatch batch_;
  Status result_;
  // Loop thread only.
  bool in_progress_ = false;
  std::thread thread_;  // last: starts after the members it uses
};

}  // namespace ztune::head
