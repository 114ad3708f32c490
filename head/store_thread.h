// StoreThread: runs the head loop's long store operations (reading a large
// checkpoint, syncing a checkpoint file, retrying a commit refused for lack of
// space) on its own thread, so that the loop can keep sending heartbeats
// meanwhile. Without it a 64 MiB checkpoint's read silenced the head for
// longer than the workers' liveness window and they reconnected in the middle
// of their work. (A turn's commit is not a job here: waiting for a hand-off
// here and back cost two thread wake-ups, about 90 µs of every step cycle.
// It runs on the loop thread with a HeartbeatKeeper, or, handed over and not
// waited for, on PipelinedStore's thread.)
//
// The loop still waits for each operation before it acts on anything else:
// while it waits it only sends heartbeats, which depend on no state. So the
// store is used by one thread at a time: this one between Begin() and the
// Wait() that returns the job's status, the loop otherwise.
//
// Thread affinity: Begin() and Wait() on the loop thread only.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "common/clock.h"
#include "common/status.h"

namespace ztune::head {

class StoreThread {
 public:
  StoreThread();
  // Joins the thread; a job in progress finishes first.
  ~StoreThread();
  StoreThread(const StoreThread&) = delete;
  StoreThread& operator=(const StoreThread&) = delete;

  // Starts `job` on the thread. CHECK: no job in progress.
  void Begin(std::function<Status()> job);
  // Waits up to `timeout_ms` for the job Begin() started; its status once it
  // is done (the thread is idle again), std::nullopt on timeout. CHECK: a job
  // was started.
  std::optional<Status> Wait(TimeMs timeout_ms);

 private:
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_.
  std::function<Status()> job_;
  bool done_ = false;
  bool quit_ = false;
  Status result_;
  // Loop thread only.
  bool in_progress_ = false;
  std::thread thread_;  // last: starts after the members it uses
};

}  // namespace ztune::head
