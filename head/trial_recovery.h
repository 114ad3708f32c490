// TrialRecovery: what a head does about the trials that a crash, a restart or
// a lost connection left behind (docs/recovery.md). It loads the store at
// start (and bumps the head epoch that fences request ids), re-attaches the
// live actors that workers report after a head restart (waiting for their
// replayed or in-flight results), gives a re-attach up when its grace runs
// out, reconciles a worker that reconnected (requests sent again, a lost
// start begun again), and applies Ray's experiment resume policies.
//
// The decisions themselves are recovery_policy.h's pure functions; this
// class applies them through the TrialLifecycle. It owns no containers: the
// waits are the RecoveryWaits, the actors the ActorManager's.
//
// Lives on the head loop thread; not thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "common/clock.h"
#include "common/ids.h"
#include "common/json.h"
#include "common/protocol/messages.h"
#include "common/status.h"
#include "head/actor_manager.h"
#include "head/command_sink.h"
#include "head/executor.h"
#include "head/placement_group_manager.h"
#include "head/recovery_waits.h"
#include "head/searcher.h"
#include "head/trial_book.h"
#include "head/trial_lifecycle.h"
#include "storage/store.h"

namespace ztune::head {

class TrialRecovery {
 public:
  struct Parts {
    storage::Store& store;
    TrialBook& book;
    TrialLifecycle& lifecycle;
    Executor& executor;
    ActorManager& actors;
    PlacementGroupManager& groups;
    RecoveryWaits& waits;
    Searcher& searcher;
    CommandSink& sink;
    const Clock& clock;
    storage::WriteBatch& batch;  // the turn's
  };
  struct Options {
    TimeMs reattach_grace_ms = 0;  // 0: two liveness windows
    TimeMs heartbeat_ms = 1000;
    int64_t liveness = 3;
    int64_t force_cleanup_ms = 600'000;  // kill deadline of STOPs of strays
  };
  TrialRecovery(Parts parts, Options options) : p_(parts), options_(options) {}

  // Loads experiments and trials from the store and bumps the head epoch. A
  // trial that was RUNNING with a recorded worker stays RUNNING and waits
  // (the re-attach grace) for that worker to report its live actor; others go
  // back to the queue and restart from their newest persistent checkpoint.
  // Corruption if a record cannot be read.
  Status Load();
  // This head's epoch (1 at the first start of a store; Load bumps it).
  uint64_t epoch() const { return epoch_; }

  // A worker registered (its REGISTERED is queued). With `reconnected` (a
  // live worker with a new incarnation) its trials are reconciled first. Then
  // each actor it reports is re-attached when a trial awaits it, kept when
  // the head owns it already, and stopped otherwise.
  void OnRegistered(const protocol::Register& reg, bool reconnected);
  // The re-attach waits whose grace ran out give up (the trial starts
  // again); the replay waits whose deadline passed drive on without it.
  void ExpireWaits();
  // A re-attached actor's replayed results reached what its REGISTER
  // announced: drive it from its stored state.
  void OnReplayReached(Trial& t) { DriveAfterReattach(t, SendTiming::kNow); }

  // Ray's resume policies for an experiment: `errored` "retry" puts ERROR
  // trials back in the queue with their id (from their newest persistent
  // checkpoint), "restart" adds a fresh trial (new id, same config, from
  // scratch) for each; `unfinished` false terminates every unfinished trial
  // and ends the search. Returns what changed.
  Result<Json> ResumeExperiment(const std::string& experiment_id, const std::string& errored,
                                bool unfinished);

 private:
  // Adopts a live actor reported by a registering worker (after a restart).
  bool Reattach(Trial& t, const WorkerId& worker_id, const protocol::LiveActor& live);
  // A trial awaiting a re-attach whose actor will not be re-attached:
  // it starts again (or stays paused when a user paused it).
  void GiveUpReattach(Trial& t, const std::string& why);
  // The first decision for a re-attached trial, from its stored state: finish
  // it if its last result stopped it, take a checkpoint that is due, or train.
  void DriveAfterReattach(Trial& t, SendTiming timing);
  // A live worker registered again with a new incarnation (it reconnected):
  // what the head sent it meanwhile, or what it answered, may be lost. Each
  // of its trials is checked against the actors and request ids it reports:
  // requests are sent again (same rid), a lost start begins again.
  void ReconcileAfterReconnect(const protocol::Register& reg);
  // The start of the trial's attempt was lost in transit (not the trial's
  // fault): it goes back to the queue without counting a failure.
  void RequeueLostStart(Trial& t, const std::string& why);

  Parts p_;
  const Options options_;
  // Persisted in meta, bumped at every Load: fences request ids across restarts.
  uint64_t epoch_ = 0;
};

}  // namespace ztune::head
