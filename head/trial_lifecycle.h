// TrialLifecycle: the trial state machine that every part of the runner goes
// through. SetPhase is the only writer of a trial's phase (checked against
// trial_phase.h's table); EndAttempt is the single exit from every phase (the
// actor disposed of, every request of the attempt dropped, every per-phase
// index left, the trial marked for the turn's commit); FinishTrial and
// FailTrial are the two ways an attempt ends for good or for a retry; Enqueue
// and Dequeue keep the scheduler's queues; and the next-step commands
// (ContinueTraining, StartPause, SaveCheckpoint) move a trial that holds an
// actor into its next phase and send what that phase needs.
//
// It holds no state of its own beyond a limit: it works on the TrialBook, the
// ActorManager, the RecoveryWaits and the scheduler, all owned by the
// TrialRunner, and writes error records into the turn's WriteBatch.
//
// Lives on the head loop thread; not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/ids.h"
#include "head/actor_manager.h"
#include "head/checkpoint_manager.h"
#include "head/command_sink.h"
#include "head/executor.h"
#include "head/placement_group_manager.h"
#include "head/recovery_waits.h"
#include "head/searcher.h"
#include "head/trial.h"
#include "head/trial_book.h"
#include "head/trial_scheduler.h"
#include "storage/store.h"

namespace ztune::head {

// How EndAttempt disposes of the attempt's actor.
enum class ActorEnd {
  kStop,         // stop it (its group is freed when the STOP completes)
  kReuseOrStop,  // cache it for a waiting trial of its shape, else stop it
  kGone,         // it is gone and its group dealt with (its worker died, or
                 // it was stopped under its key before a RESET): forget it
};

class TrialLifecycle {
 public:
  struct Parts {
    TrialBook& book;
    Executor& executor;
    ActorManager& actors;
    TrialScheduler& scheduler;
    RecoveryWaits& waits;
    Searcher& searcher;
    PlacementGroupManager& groups;
    storage::WriteBatch& batch;  // the turn's
  };
  // `strict_invariants`: an illegal change or a broken invariant aborts
  // (the unit tests) instead of being logged and refused (ztune-head).
  TrialLifecycle(Parts parts, bool strict_invariants);

  // At most this many actors are cached for reuse (Ray: max_pending_trials).
  void set_max_cached_actors(int64_t n) { max_cached_actors_ = n; }
  // How a kExploit action is applied (TrialRunner::ApplyExploit); set once.
  void set_exploit_applier(std::function<void(Trial&, const Exploit&)> f) {
    apply_exploit_ = std::move(f);
  }
  // Forgets a pause's memory checkpoint (the runner's CheckpointManager
  // removes its file); without one, the bytes are just cleared.
  void set_memory_checkpoint_dropper(std::function<void(Trial&)> f) {
    drop_memory_checkpoint_ = std::move(f);
  }

  // ---- the state machine ----
  // The only writer of Trial::phase. Checks the change (IsLegalTransition)
  // and keeps the per-phase indexes in step with it: the RecoveryWaits
  // (re-attach, replay) and the actors' RESETs in flight hold a trial exactly
  // while it is in that phase (the caller begins the RESET before entering
  // and fills the waits after). An illegal change is IllegalState and is
  // refused (returns false).
  bool SetPhase(Trial& t, TrialPhase to);
  // The only way the runner's parts change a trial's stored status: checks
  // the change (IsLegalStatusChange) and records it in the TrialBook (its
  // counts, the turn's commit). An illegal change is IllegalState and is
  // refused (returns false).
  bool SetStatus(Trial& t, TrialStatus to);
  // The single exit from every phase: disposes of the actor as `end` says
  // (dropping every request of the attempt), forgets a re-attach that will
  // not happen, leaves every per-phase index, clears the attempt's intents
  // (pause requested, stop after save) and marks the trial for the turn's
  // commit. The phase is kIdle afterwards; the caller sets the status.
  void EndAttempt(Trial& t, ActorEnd end);
  // Ends the trial's attempt (EndAttempt: its actor is stopped, or cached when
  // the trial TERMINATED with reuse_actors, unless `end` is kGone) and makes it
  // TERMINATED or ERROR.
  void FinishTrial(Trial& t, TrialStatus final_status, ActorEnd end = ActorEnd::kStop);
  // Counts a failure; retries within max_failures (from the newest persistent
  // checkpoint), otherwise ERROR. `retry` false forces ERROR. `end` as for
  // FinishTrial (kReuseOrStop is never used: an actor is not reused after an
  // error).
  void FailTrial(Trial& t, const std::string& error, bool retry, ActorEnd end = ActorEnd::kStop);
  // An attempt that ended early without ending the trial (a retried failure,
  // a lost start, a re-attach given up) starts again: queued as PENDING, or
  // PAUSED when a user paused it (held, out of the queue until resumed; it
  // then starts from its newest persistent checkpoint).
  void StartAgain(Trial& t);
  // A broken invariant or illegal change: aborts under strict invariants,
  // otherwise logs `what` as an error.
  void IllegalState(const std::string& what) const;
  // Checks the trial's phase against its status, its actor fields and the
  // per-phase indexes (IllegalState on a mismatch).
  void CheckInvariants(const Trial& t) const;

  // ---- queues and experiments ----
  // A new PENDING trial of `e` (TrialBook::AddTrial), queued.
  Trial& NewTrial(Experiment& e, Json config);
  // Adds a submitted or loaded experiment to the book and its scheduler
  // (before any of its trials).
  Experiment& AddExperiment(Experiment e, bool loaded);
  // Adds a loaded trial to the book, after its experiment's scheduler took
  // it in: Corruption (and nothing added) when its stored scheduler state is
  // damaged. `changed`: see TrialBook::AddLoadedTrial; `stored_results`
  // reads the trial's stored results (for a scheduler that rebuilds from them).
  Result<Trial*> AddLoadedTrial(Trial t, bool changed, const StoredResultsReader& stored_results);
  // Queues a waiting trial, unless its scheduler holds it back (MayQueue).
  void Enqueue(Trial& t);
  void Dequeue(Trial& t);
  // Applies what the schedulers decided about trials other than the one
  // they were called for (SchedulerAction): stops, and releases of trials
  // they held back, each with the trial's new scheduler state. Called before
  // the turn's commit and before trials start.
  void ApplySchedulerActions();
  void MaybeFinishExperiment(Experiment& e);
  // Terminates every unfinished trial of `e` and ends its search; appends
  // the trials it stopped to `stopped` when given.
  void StopExperiment(Experiment& e, std::vector<TrialId>* stopped);

  // ---- next steps of a trial that holds an actor ----
  void ContinueTraining(Trial& t, SendTiming timing = SendTiming::kNow);
  // What a trial does when its TRAIN or SAVE completes without stopping:
  // pause if asked to, else train on.
  // `train_timing`: the TRAIN's, when it continues (a pause's SAVE goes now).
  void ContinueOrPause(Trial& t, SendTiming train_timing = SendTiming::kNow);
  // A memory checkpoint, after which the trial releases its actor (PAUSED).
  void StartPause(Trial& t, SendTiming timing = SendTiming::kNow);
  // The pause's memory checkpoint is in: the attempt ends (its actor cached
  // for reuse when the experiment reuses actors, else stopped) and the trial
  // is PAUSED with it, queued again unless a user holds it.
  void FinishPause(Trial& t, std::string memory_checkpoint);
  void DropMemoryCheckpoint(Trial& t);
  // A persistent checkpoint; with `then_stop` the trial TERMINATES once saved.
  void SaveCheckpoint(Trial& t, bool then_stop, SendTiming timing = SendTiming::kNow);
  // Whether a persistent checkpoint is due after the trial's last result.
  bool CheckpointDue(const Trial& t) const;
  TrainBuffer BufferFor(const Trial& t) const;
  RequestTimeouts TimeoutsFor(const Trial& t) const;

 private:
  Parts p_;
  const bool strict_invariants_;
  std::function<void(Trial&, const Exploit&)> apply_exploit_;
  std::function<void(Trial&)> drop_memory_checkpoint_;
  int64_t max_cached_actors_ = 16;
};

}  // namespace ztune::head
