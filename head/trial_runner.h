// TrialRunner: the step loop of Ray's TrialRunner. Turns protocol input
// (registrations, replies, results) and client requests into trial
// transitions: each trial's phase changes only through SetPhase (checked
// against trial_phase.h) and every attempt ends through EndAttempt. It drives
// the Executor and the PlacementGroupManager, applies its decisions to the
// TrialBook, and records every state change in the current loop turn's
// WriteBatch. The HeadServer commits that batch (one fsync) before sending
// anything that depends on it. The TrialScheduler (FIFO by default) keeps
// per-request queues, so a turn costs O(request shapes + staging groups),
// never O(trials). Which trial holds which actor, and what becomes of an
// actor when its attempt ends, is the ActorManager's. The .cc is split by
// job: trial_runner.cc (the turn),
// _phases.cc (the state machine, finish, failure), _worker_input.cc,
// _actors.cc (reuse, pause), _recovery.cc, _client_api.cc.
//
// Lives on the head loop thread; not thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/ids.h"
#include "common/clock.h"
#include "common/json.h"
#include "common/rate_limited_warning.h"
#include "common/protocol/messages.h"
#include "common/status.h"
#include "head/actor_manager.h"
#include "head/checkpoint_manager.h"
#include "head/command_sink.h"
#include "head/executor.h"
#include "head/fifo_scheduler.h"
#include "head/placement_group_manager.h"
#include "head/recovery_waits.h"
#include "head/resource_ledger.h"
#include "head/result_processor.h"
#include "head/search_space.h"
#include "head/searcher.h"
#include "head/starvation_warning.h"
#include "head/trial_book.h"
#include "head/trial.h"
#include "head/worker_registry.h"
#include "storage/store.h"

namespace ztune::head {

struct RunnerOptions {
  int64_t max_pending_trials = 0;  // 0 = auto: max(16, 1.1 x cluster CPUs)
  TimeMs pg_removal_delay_ms = 2000;
  int64_t force_cleanup_ms = 600'000;  // kill deadline carried by STOP
  TimeMs heartbeat_ms = 1000;
  // How long a trial RUNNING at a head restart waits for its worker to
  // re-attach it before it restarts from its checkpoint; 0 = 2 x liveness window.
  TimeMs reattach_grace_ms = 0;
  int64_t liveness = 3;
  TimeMs insufficient_resources_warn_ms = 60'000;
  // Trials one experiment may have (grid x num_samples, plus added ones).
  uint64_t max_trials_per_experiment = 100'000;
  // An illegal phase change or a broken trial invariant aborts (CHECK) instead
  // of being logged and refused, and every trial is checked at each FlushTo:
  // the unit tests set it. Off in ztune-head, where a refused change keeps the
  // trial in its phase and the log says what was refused.
  bool strict_invariants = false;
};

class TrialRunner {
 public:
  // `scheduler` decides which waiting trial starts and what results mean;
  // nullptr: Ray's FIFOScheduler.
  TrialRunner(storage::Store& store, CommandSink& sink, const Clock& clock, RunnerOptions options,
              std::unique_ptr<TrialScheduler> scheduler = nullptr);

  // Loads experiments and trials from the store (after a restart) and bumps
  // the head epoch. A trial that was RUNNING with a recorded worker stays
  // RUNNING and waits (the re-attach grace) for that worker to report its
  // live actor; others go back to the queue and restart from their newest
  // persistent checkpoint. Corruption if a record cannot be read.
  Status Load();

  // ---- worker input (the HeadServer has decoded and routed it) ----
  bool IsKnownWorker(const WorkerId& worker_id) const;
  // Registers the worker, answers REGISTERED (after the commit), re-attaches
  // the live actors of trials that were RUNNING there before a head restart,
  // and stops the live actors the head does not own.
  void HandleRegister(const protocol::Register& reg);
  void HandleHeartbeat(const WorkerId& worker_id);
  void HandleDisconnect(const WorkerId& worker_id, const std::string& reason);
  void HandleReply(const WorkerId& worker_id, const protocol::Reply& reply,
                   const std::string& payload);
  void HandleResultBatch(const WorkerId& worker_id, const protocol::ResultBatch& batch);

  // ---- client requests ----
  Result<Json> Submit(const Json& spec);
  // Adds a trial with `config`; with `restore_from` (a trial with a persistent
  // checkpoint) it starts from that checkpoint.
  Result<TrialId> AddTrial(const std::string& experiment_id, const Json& config,
                           const TrialId& restore_from = {});
  Result<std::vector<TrialId>> Stop(const std::string& id);
  // Pauses a trial: a RUNNING trial takes a memory checkpoint at the end of its
  // current step, releases its actor (or hands it to the next trial with actor
  // reuse) and becomes PAUSED. `hold` (a user's pause) keeps it PAUSED until
  // Resume; without it the trial goes back to the queue (a scheduler's pause),
  // behind every PENDING trial, and resumes from the memory checkpoint.
  Status PauseTrial(const TrialId& trial_id, bool hold);
  Status Resume(const TrialId& trial_id);
  // Ray's resume policies for an experiment: `errored` "retry" puts ERROR
  // trials back in the queue with their id (from their newest persistent
  // checkpoint), "restart" adds a fresh trial (new id, same config, from
  // scratch) for each; `unfinished` false terminates every unfinished trial
  // and ends the search. Returns what changed.
  Result<Json> ResumeExperiment(const std::string& experiment_id, const std::string& errored,
                                bool unfinished);

  // Timers and scheduling; call once per loop turn after the input.
  void Tick();
  // Moves the turn's state changes (dirty records included) into `batch`.
  void FlushTo(storage::WriteBatch& batch);

  // ---- reads (client service) ----
  const std::map<std::string, Experiment>& experiments() const { return book_.experiments(); }
  const Trial* FindTrial(const TrialId& trial_id) const { return book_.FindTrial(trial_id); }
  const Experiment* FindExperiment(const std::string& experiment_id) const {
    return book_.FindExperiment(experiment_id);
  }
  const WorkerRegistry& registry() const { return registry_; }
  const ResourceLedger& ledger() const { return ledger_; }
  const PlacementGroupManager& groups() const { return groups_; }
  const Executor& executor() const { return executor_; }
  const TrialScheduler& scheduler() const { return *scheduler_; }
  const TrialBook& book() const { return book_; }
  storage::Store& store() { return store_; }
  // Name of the worker hosting the trial's actor, or empty.
  std::string WorkerNameOf(const Trial& t) const;
  int64_t ActorsOn(const WorkerId& worker_id) const;
  // Ray's has_resources_for_trial: a cached actor or a ready group of the
  // trial's request exists, one is staging, or another may be staged.
  bool HasResourcesForTrial(const TrialId& trial_id) const;
  // "Resources requested: 3/4 CPUs, 0/0 GPUs" (Ray's debug_string).
  std::string DebugString() const;
  // Time until Tick has timed work to do (heartbeats, removals), for poll.
  TimeMs NextTimerMs() const;
  // This head's epoch (1 at the first start of a store; Load bumps it).
  uint64_t epoch() const { return epoch_; }
  // The trials held back for a re-attach or a replay, with their deadlines.
  const RecoveryWaits& recovery_waits() const { return waits_; }

 private:

  // A new PENDING trial of `e` (TrialBook::AddTrial), queued.
  Trial& NewTrial(Experiment& e, Json config);
  void Enqueue(Trial& t);
  void Dequeue(Trial& t);
  // The trial a message is about, if it is the current attempt with an actor.
  Trial* CurrentTrial(const TrialId& trial_id, uint64_t attempt);

  void GenerateTrials();
  void StageAndReconcile();
  void StartReadyTrials();
  void StartTrial(Trial& t, uint64_t group_id);
  void StartTrialOnCachedActor(Trial& t, const CachedActor& actor);
  // The trial's checkpoint to start from (memory, else newest persistent).
  std::string* CheckpointFor(Trial& t, std::string& storage);
  const std::string& RequestKeyOf(const Trial& t) const {
    return book_.ExperimentOf(t).request_key;
  }
  // The only writer of Trial::phase. Checks the change (IsLegalTransition)
  // and keeps the per-phase indexes in step with it: waits_ (re-attach,
  // replay) and the actors' RESETs in flight hold a trial exactly while it
  // is in that phase (the caller begins the RESET before entering and fills
  // waits_ after).
  // An illegal change is IllegalState and is refused (returns false).
  bool SetPhase(Trial& t, TrialPhase to);
  // How EndAttempt disposes of the attempt's actor.
  enum class ActorEnd {
    kStop,         // stop it (its group is freed when the STOP completes)
    kReuseOrStop,  // cache it for a waiting trial of its shape, else stop it
    kGone,         // it is gone and its group dealt with (its worker died, or
                   // it was stopped under its key before a RESET): forget it
  };
  // The single exit from every phase: disposes of the actor as `end` says
  // (dropping every request of the attempt), forgets a re-attach that will
  // not happen, leaves every per-phase index, clears the attempt's intents
  // (pause requested, stop after save) and marks the trial for the turn's
  // commit. The phase is kIdle afterwards; the caller sets the status.
  void EndAttempt(Trial& t, ActorEnd end);
  // A broken invariant or illegal change: aborts under strict_invariants,
  // otherwise logs `what` as an error.
  void IllegalState(const std::string& what) const;
  // Checks the trial's phase against its status, its actor fields and the
  // per-phase indexes (IllegalState on a mismatch).
  void CheckInvariants(const Trial& t) const;
  void StartPause(Trial& t, SendTiming timing = SendTiming::kNow);
  void OnPauseSaved(Trial& t, const std::string& payload);
  void OnResetReply(Trial& t, const protocol::Reply& reply);
  // What a trial does when its TRAIN or SAVE completes without stopping.
  void ContinueOrPause(Trial& t);
  TrainBuffer BufferFor(const Trial& t) const;
  // A trial awaiting a re-attach whose actor will not be re-attached:
  // it starts again (or stays paused when a user paused it).
  void GiveUpReattach(Trial& t, const std::string& why);
  RequestTimeouts TimeoutsFor(const Trial& t) const;
  // Fails the attempts whose requests went unanswered past their deadline.
  void FailExpiredRequests();
  void ContinueTraining(Trial& t);

  void OnCreateReply(Trial& t, const protocol::Reply& reply);
  void OnRestoreReply(Trial& t, const protocol::Reply& reply);
  void OnSaveReply(Trial& t, const protocol::Reply& reply, const std::string& payload);
  void OnStopDone(const Future& f);
  // Stores a persistent checkpoint and applies retention (Ray's rules).
  void AddCheckpoint(Trial& t, const std::string& bytes, int64_t iteration);

  // Ends the trial's attempt (EndAttempt: its actor is stopped, or cached when
  // the trial TERMINATED with reuse_actors, unless `end` is kGone) and makes it
  // TERMINATED or ERROR.
  void FinishTrial(Trial& t, TrialStatus final_status, ActorEnd end = ActorEnd::kStop);
  // Counts a failure; retries within max_failures (from the newest persistent
  // checkpoint), otherwise ERROR. `retry` false forces ERROR. `end` as for
  // FinishTrial (kReuseOrStop is never used: an actor is not reused after an
  // error).
  void FailTrial(Trial& t, const std::string& error, bool retry,
                 ActorEnd end = ActorEnd::kStop);
  void OnWorkerDead(const WorkerId& worker_id, const std::string& cause);
  // Adopts a live actor reported by a registering worker (after a restart).
  bool Reattach(Trial& t, const WorkerId& worker_id, const protocol::LiveActor& live);
  // The first decision for a re-attached trial, from its stored state: finish
  // it if its last result stopped it, take a checkpoint that is due, or train.
  void DriveAfterReattach(Trial& t, SendTiming timing);
  // Whether a persistent checkpoint is due after the trial's last result.
  bool CheckpointDue(const Trial& t) const;
  void ExpireReattachWaits();
  // A live worker registered again with a new incarnation (it reconnected):
  // what the head sent it meanwhile, or what it answered, may be lost. Each
  // of its trials is checked against the actors and request ids it reports:
  // requests are sent again (same rid), a lost start begins again.
  void ReconcileAfterReconnect(const protocol::Register& reg);
  // The start of the trial's attempt was lost in transit (not the trial's
  // fault): it goes back to the queue without counting a failure.
  void RequeueLostStart(Trial& t, const std::string& why);
  void MaybeFinishExperiment(Experiment& e);
  // The experiment's searcher yields no more trials: its search space goes.
  void EndSearch(const Experiment& e) { searcher_.End(e.experiment_id); }
  void StopExperiment(Experiment& e, std::vector<TrialId>* stopped);
  void RecomputeMaxPending();
  void CheckInsufficientResources();

  storage::Store& store_;
  CommandSink& sink_;
  const Clock& clock_;
  RunnerOptions options_;
  WorkerRegistry registry_;
  ResourceLedger ledger_;
  PlacementGroupManager groups_;
  Executor executor_;
  TrialBook book_;  // experiments, trials, their counts, the turn's changed records

  // Owns the queue of waiting trials and chooses which starts (FIFO today).
  std::unique_ptr<TrialScheduler> scheduler_;
  // Which trial holds an actor where, cached actors, RESETs in flight.
  ActorManager actors_{executor_, groups_, book_, *scheduler_, options_.force_cleanup_ms};
  Searcher searcher_;  // the search spaces of the experiments that may yield more
  RecoveryWaits waits_;  // the trials in kAwaitingReattach and kAwaitingReplay
  int64_t max_pending_ = 16;

  storage::WriteBatch batch_;
  CheckpointManager checkpoints_{store_, batch_, sink_};  // after batch_: writes into it
  // (worker, trial, attempt) -> highest result seq of the turn, ACKed after commit.
  std::map<std::tuple<WorkerId, TrialId, uint64_t>, uint64_t> acks_;

  // Persisted in meta, bumped at every Load: fences request ids across restarts.
  uint64_t epoch_ = 0;
  RateLimitedWarning peer_warnings_;
  TimeMs last_expiry_check_ = 0;
  TimeMs last_tick_ = 0;  // a longer gap than a heartbeat interval: the head stalled
  StarvationWarning starvation_{options_.insufficient_resources_warn_ms};
};

}  // namespace ztune::head
