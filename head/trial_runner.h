// TrialRunner: the step loop of Ray's TrialRunner. It owns the parts, turns
// protocol input (registrations, replies, results) and client requests into
// their calls, and runs the turn: liveness and request deadlines, trial
// generation, staging of placement groups, starts. The parts: the
// TrialLifecycle (each trial's phase changes only through its SetPhase,
// checked against trial_phase.h, and every attempt ends through its
// EndAttempt), the TrialLauncher (starts), the TrialControl (what clients
// change), the TrialRecovery (load, re-attach, reconnect, resume policies),
// the ActorManager (which trial holds which actor; reuse), the Executor
// (requests and their futures), the PlacementGroupManager and ResourceLedger,
// the TrialBook, the CheckpointManager and the TrialScheduler (FIFO by
// default: per-request queues, so a turn costs O(request shapes + staging
// groups), never O(trials)). Every state change goes into the turn's
// WriteBatch; the HeadServer commits it (one fsync) before sending anything
// that depends on it. The .cc is split in two: trial_runner.cc (the turn,
// client calls, reads) and trial_runner_worker_input.cc.
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

#include "common/clock.h"
#include "common/ids.h"
#include "common/json.h"
#include "common/protocol/messages.h"
#include "common/rate_limited_warning.h"
#include "common/status.h"
#include "head/actor_manager.h"
#include "head/checkpoint_manager.h"
#include "head/code_store.h"
#include "head/command_sink.h"
#include "head/executor.h"
#include "head/scheduler_set.h"
#include "head/placement_group_manager.h"
#include "head/recovery_waits.h"
#include "head/resource_ledger.h"
#include "head/result_processor.h"
#include "head/results_dir.h"
#include "head/search_space.h"
#include "head/searcher.h"
#include "head/starvation_warning.h"
#include "head/trial.h"
#include "head/trial_book.h"
#include "head/trial_control.h"
#include "head/trial_launcher.h"
#include "head/trial_lifecycle.h"
#include "head/trial_recovery.h"
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
  // A trial whose last TRAIN took at least this long (Trial::
  // train_round_trip_ms) gets its next TRAIN after the commit of the result,
  // in the ACK (SendTiming::kWithAck): one message where there were two, for
  // a wait of one commit, small next to such a step. 0: never.
  TimeMs train_with_ack_ms = 500;
  CodeStoreOptions code;  // submitted project archives
  // An illegal phase change or a broken trial invariant aborts (CHECK) instead
  // of being logged and refused, and every trial is checked at each FlushTo:
  // the unit tests set it. Off in ztune-head, where a refused change keeps the
  // trial in its phase and the log says what was refused.
  bool strict_invariants = false;
};

class TrialRunner {
 public:
  // Checkpoint files (not owned; nullptr: every checkpoint inline).
  void set_checkpoint_files(CheckpointFiles* files) { checkpoints_.set_files(files); }
  // Where stored results are also written in Ray's layout (not owned;
  // nullptr: nowhere). Each result goes in with the batch that stores it; the
  // caller flushes it after that batch's commit.
  void set_results_dir(ResultsDir* dir) { results_dir_ = dir; }
  CheckpointFiles* checkpoint_files() const { return checkpoints_.files(); }
  // Whether `rid` is a SAVE this head sent `worker_id` and awaits: the only
  // REPLYs that may announce a payload.
  bool AwaitsSave(const WorkerId& worker_id, uint64_t rid) const {
    const Future* f = executor_.Find(rid);
    return f != nullptr && f->type == FutureType::kSave && f->worker_id == worker_id;
  }
  // The files the loaded trials' checkpoint records name.
  std::set<std::string> CheckpointFilesInUse() const {
    std::set<std::string> names;
    for (const auto& [id, t] : book_.trials()) CheckpointManager::CollectFiles(t, names);
    return names;
  }
  // A persistent checkpoint's bytes, or its file's reference (nullopt when
  // the store has none under that id); read off the loop thread, heartbeats
  // keep going.
  Result<std::optional<std::string>> ReadCheckpoint(const TrialId& owner, uint64_t id) {
    return checkpoints_.Read(owner, id);
  }
  // `scheduler` decides which waiting trial starts and what results mean;
  // nullptr: Ray's FIFOScheduler.
  TrialRunner(storage::Store& store, CommandSink& sink, const Clock& clock, RunnerOptions options,
              std::unique_ptr<TrialScheduler> scheduler = nullptr);

  // Loads experiments and trials from the store (after a restart) and bumps
  // the head epoch. A trial that was RUNNING with a recorded worker stays
  // RUNNING and waits (the re-attach grace) for that worker to report its
  // live actor; others go back to the queue and restart from their newest
  // persistent checkpoint. Corruption if a record cannot be read.
  Status Load() { return recovery_.Load(); }

  // ---- worker input (the HeadServer has decoded and routed it) ----
  bool IsKnownWorker(const WorkerId& worker_id) const;
  // Registers the worker, answers REGISTERED (after the commit), re-attaches
  // the live actors of trials that were RUNNING there before a head restart,
  // and stops the live actors the head does not own.
  void HandleRegister(const protocol::Register& reg);
  void HandleHeartbeat(const WorkerId& worker_id);
  void HandleDisconnect(const WorkerId& worker_id, const std::string& reason);
  // The worker is gone for `why` (its key was revoked): its trials fail over
  // as for a dead worker. No-op for a worker that is not alive.
  void DropWorker(const WorkerId& worker_id, const std::string& why);
  // Takes the payload (a checkpoint can be large): moved into the store's
  // batch or the trial's memory checkpoint, never copied on the loop thread.
  void HandleReply(const WorkerId& worker_id, const protocol::Reply& reply, std::string payload);
  void HandleResultBatch(const WorkerId& worker_id, protocol::ResultBatch batch);

  // ---- client requests ----
  // TrialControl's: what clients may change (see there). A submitted
  // experiment's first trials are generated at once.
  Result<Json> Submit(const Json& spec, const ExperimentOwner& owner = {});
  Result<TrialId> AddTrial(const std::string& experiment_id, const Json& config,
                           const TrialId& restore_from = {}) {
    return control_.AddTrial(experiment_id, config, restore_from);
  }
  Result<std::vector<TrialId>> Stop(const std::string& id) { return control_.Stop(id); }
  Status PauseTrial(const TrialId& trial_id, bool hold) {
    return control_.PauseTrial(trial_id, hold);
  }
  Status Resume(const TrialId& trial_id) { return control_.Resume(trial_id); }
  // Ray's resume policies (TrialRecovery::ResumeExperiment).
  Result<Json> ResumeExperiment(const std::string& experiment_id, const std::string& errored,
                                bool unfinished) {
    return recovery_.ResumeExperiment(experiment_id, errored, unfinished);
  }

  // Timers and scheduling; call once per loop turn after the input.
  void Tick();
  // Moves the turn's state changes (dirty records included) into `batch`.
  void FlushTo(storage::WriteBatch& batch);
  // Whether the state changed since the last FlushTo (a record to rewrite,
  // a result or anything else for the store): false means a read now sees
  // what the last commit holds. Every durable change marks a record or
  // writes into the turn's batch; a scheduler decides only on such a change.
  bool HasUnflushedChanges() const { return book_.HasDirty() || !batch_.empty(); }

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
  // Whether `e` may have one more live trial now (Ray asks its searcher only
  // then): fewer PENDING trials than max_pending_trials in the head, and
  // fewer live trials than the spec's ConcurrencyLimit in `e`.
  bool HasTrialSlot(const Experiment& e) const;
  // A request id for a request the executor does not track (a log read):
  // same epoch, never used twice.
  uint64_t ReserveRid() { return executor_.ReserveRid(); }
  const TrialScheduler& scheduler() const { return *scheduler_; }
  const TrialBook& book() const { return book_; }
  storage::Store& store() { return store_; }
  // Submitted project archives: client uploads, worker fetches.
  CodeStore& code() { return code_; }
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
  uint64_t epoch() const { return recovery_.epoch(); }
  // The trials held back for a re-attach or a replay, with their deadlines.
  const RecoveryWaits& recovery_waits() const { return waits_; }

 private:
  // The trial a message is about, if it is the current attempt with an actor.
  Trial* CurrentTrial(const TrialId& trial_id, uint64_t attempt);

  void GenerateTrials();
  void StageAndReconcile();
  const std::string& RequestKeyOf(const Trial& t) const {
    return book_.ExperimentOf(t).request_key;
  }
  // Fails the attempts whose requests went unanswered past their deadline.
  void FailExpiredRequests();

  void OnSaveReply(Trial& t, const protocol::Reply& reply, std::string payload);
  // Stores a persistent checkpoint and applies retention (Ray's rules).
  void AddCheckpoint(Trial& t, std::string bytes, int64_t iteration);
  // PBT's exploit of `t` (trial_exploit.cc): its attempt ends, it takes the
  // donor's checkpoint as its own newest and the new config, its results
  // past the donor's iteration go (up to it they are its own, else the
  // donor's, copied), the exploit joins its lineage, and it waits PAUSED.
  void ApplyExploit(Trial& t, const Exploit& x);
  // A stored value, as this turn's batch will leave it.
  Result<std::optional<std::string>> ReadThroughBatch(storage::Family f, const std::string& key);

  void OnWorkerDead(const WorkerId& worker_id, const std::string& cause);
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
  ResultsDir* results_dir_ = nullptr;
  CheckpointManager checkpoints_{store_, batch_, sink_};  // after batch_: writes into it
  CodeStore code_{store_, batch_, clock_, options_.code};  // after batch_: writes into it
  // (worker, trial, attempt) -> highest result seq of the turn, ACKed after commit.
  std::map<std::tuple<WorkerId, TrialId, uint64_t>, uint64_t> acks_;

  RateLimitedWarning peer_warnings_;
  TimeMs last_expiry_check_ = 0;
  TimeMs last_tick_ = 0;  // a longer gap than a heartbeat interval: the head stalled
  StarvationWarning starvation_{options_.insufficient_resources_warn_ms};
  // Last: it works on the parts above.
  TrialLifecycle lifecycle_{TrialLifecycle::Parts{book_, executor_, actors_, *scheduler_, waits_,
                                                  searcher_, groups_, batch_},
                            options_.strict_invariants};
  TrialRecovery recovery_{TrialRecovery::Parts{store_, book_, lifecycle_, executor_, actors_,
                                               groups_, waits_, searcher_, sink_, clock_, batch_},
                          TrialRecovery::Options{options_.reattach_grace_ms, options_.heartbeat_ms,
                                                 options_.liveness, options_.force_cleanup_ms}};
  TrialLauncher launcher_{TrialLauncher::Parts{book_, lifecycle_, actors_, groups_, executor_,
                                               *scheduler_, checkpoints_, registry_}};
  TrialControl control_{
      TrialControl::Parts{book_, lifecycle_, searcher_, registry_, ledger_, code_, batch_},
      options_.max_trials_per_experiment};
};

}  // namespace ztune::head
