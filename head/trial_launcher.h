// TrialLauncher: how a waiting trial gets an actor, Ray's
// RayTrialExecutor.start_trial and reset_trial. Each turn it asks the
// scheduler for the next trial that has resources (a cached actor of its
// request shape, preferred as Ray does, or a ready placement group) and
// starts it: a new attempt, CREATE_ACTOR (+ RESTORE from its memory or newest
// persistent checkpoint) + TRAIN on the group's first worker, or a RESET of
// the cached actor under the trial's new key. It handles the answers to
// those starts: a failed setup or restore is a failure (a setup on a worker
// that does not host the trainable is not retried), a refused RESET is an
// ERROR as in Ray.
//
// Lives on the head loop thread; not thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "common/protocol/messages.h"
#include "head/actor_manager.h"
#include "head/checkpoint_manager.h"
#include "head/executor.h"
#include "head/placement_group_manager.h"
#include "head/trial.h"
#include "head/trial_book.h"
#include "head/trial_lifecycle.h"
#include "head/trial_scheduler.h"
#include "head/worker_registry.h"

namespace ztune::head {

class TrialLauncher {
 public:
  struct Parts {
    TrialBook& book;
    TrialLifecycle& lifecycle;
    ActorManager& actors;
    PlacementGroupManager& groups;
    Executor& executor;
    TrialScheduler& scheduler;
    CheckpointManager& checkpoints;
    const WorkerRegistry& registry;
  };
  explicit TrialLauncher(Parts parts) : p_(parts) {}

  // Starts trials while the scheduler chooses one that has resources. FIFO
  // across request shapes as the scheduler orders them; a shape without
  // resources never blocks another (Ray's _on_pg_ready fallback, without
  // its deadlock).
  void StartReadyTrials();

  // Answers to a start of the trial's current attempt.
  void OnCreateReply(Trial& t, const protocol::Reply& reply);
  void OnRestoreReply(Trial& t, const protocol::Reply& reply);
  void OnResetReply(Trial& t, const protocol::Reply& reply);

 private:
  void StartTrial(Trial& t, uint64_t group_id);
  void StartOnCachedActor(Trial& t, const CachedActor& actor);
  // The trial's checkpoint to start from (memory, else newest persistent,
  // else its restore_from trial's newest), or nullptr.
  std::string* CheckpointFor(Trial& t, std::string& storage);

  Parts p_;
};

}  // namespace ztune::head
