// Trial and Experiment: the head's in-memory records and their stored JSON
// form (docs/storage.md). Owned by the TrialRunner on the head loop thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/ids.h"
#include "common/clock.h"
#include "common/json.h"
#include "common/resources.h"
#include "common/status.h"
#include "head/experiment_spec.h"
#include "head/last_result.h"
#include "head/resource_ledger.h"
#include "head/trial_phase.h"

namespace ztune::head {

// TrialStatus (trial_phase.h, with its legal changes).
const char* TrialStatusName(TrialStatus s);
Result<TrialStatus> ParseTrialStatus(const std::string& s);
inline bool IsFinished(TrialStatus s) {
  return s == TrialStatus::kTerminated || s == TrialStatus::kError;
}

// A retained persistent checkpoint (its bytes live in the checkpoints family).
struct CheckpointRecord {
  uint64_t id = 0;
  int64_t iteration = 0;
  bool score_valid = false;  // false: NaN or missing score attribute (ranks worst)
  double score = 0;          // already multiplied by the order sign (higher is better)
  std::string file;          // its file in the checkpoint directory; empty: inline in the store
};

// A checkpoint record's JSON (its own record in the trials family; inline in
// a schema-1 trial record). An infinite score is written "inf" / "-inf" (JSON
// has no infinity); a null score (how schema 1 wrote one) reads as no score.
Json CheckpointRecordToJson(const CheckpointRecord& c);
Result<CheckpointRecord> CheckpointRecordFromJson(const Json& j);

// Id formats: experiments "e0001", trials "e0001_00003" (sortable by creation).
std::string ExperimentIdFor(uint64_t n);
TrialId TrialIdFor(const std::string& experiment_id, uint64_t index);
// The index k of an id TrialIdFor(experiment_id, k); nullopt for any other text.
std::optional<uint64_t> TrialIndexOf(const std::string& experiment_id, const TrialId& id);

// Corruption naming `what` unless `r`, a stored last result, is an object whose
// `done` and `should_checkpoint` (when present) are booleans.
Status CheckStoredLastResult(const Json& r, const std::string& what);

Json PlacementToJson(const Placement& p);
// Throws nlohmann's exceptions where a member is missing or of another type
// (Trial::FromJson catches them as Corruption).
Result<Placement> PlacementFromJson(const Json& j);

// The worker that hosted an attempt's actor: where that attempt's output
// files are (`ztune logs`).
struct AttemptHost {
  uint64_t attempt = 0;
  WorkerId worker_id;
};

// A trial record's [[attempt, worker_id], ...], oldest first; damage is
// Corruption, never a later CHECK (attempts must increase). Throws
// nlohmann's type_error where an attempt is not an integer.
Result<std::vector<AttemptHost>> AttemptHostsFromJson(const Json& j);

// One PBT exploit of a trial (Ray's pbt_policy log line): at `iteration` it
// took `donor`'s checkpoint at `donor_iteration` and `new_config`, explored
// from the donor's config, instead of `old_config`.
struct ExploitRecord {
  int64_t iteration = 0;
  TrialId donor;
  int64_t donor_iteration = 0;
  Json old_config;
  Json new_config;
  double time = 0;  // wall clock, seconds
};

// The lineage as stored and shown: [{"iteration", "donor", ...}, ...].
Json ExploitsToJson(const std::vector<ExploitRecord>& exploits);

struct Trial {
  // A trial keeps the hosts of its newest attempts only (a PBT trial may be
  // restarted thousands of times; its record is written at every restart).
  static constexpr size_t kMaxAttemptHosts = 64;
  // Likewise its newest exploits (the scheduler state counts them all).
  static constexpr size_t kMaxExploits = 64;

  // ---- persisted ----
  TrialId trial_id;
  std::string experiment_id;
  uint64_t seq = 0;  // global creation order (FIFO scheduling)
  Json config = Json::object();
  TrialStatus status = TrialStatus::kPending;
  uint64_t attempt = 0;  // bumped at every (re)start; fences stale messages
  int64_t num_failures = 0;
  int64_t iteration = 0;  // last stored training_iteration
  LastResult last_result;                     // null until the first result
  std::vector<CheckpointRecord> checkpoints;  // retained persistent, by id
  uint64_t next_checkpoint_id = 1;
  std::string error;  // last failure text
  std::vector<std::string> error_log;  // "Failure # N (occurred at ...)" entries
  double start_time = 0;  // unix s of the first start; 0 = never
  double end_time = 0;
  int64_t num_restores = 0;
  // Checkpoints with an id up to this one are never restored again: a
  // restore from one failed (Ray, TUNE_RESTORE_RETRY_NUM = 0: the checkpoint
  // is given up and the retry starts from scratch). 0 = all usable.
  uint64_t checkpoints_given_up_through = 0;
  // Start from this trial's newest persistent checkpoint while this trial has
  // none of its own (Ray's restore_path).
  TrialId restore_from;
  // The fresh trial `resume --errored restart` made of this ERROR trial: a
  // trial restarted once is neither restarted nor retried again (Ray replaces
  // it). Empty otherwise.
  TrialId restarted_as;
  // Where the actor of the current attempt lives (persisted while RUNNING so
  // that a restarted head can re-attach it).
  WorkerId actor_worker;
  Placement placement;
  // Oldest first, attempts increasing; see kMaxAttemptHosts.
  std::vector<AttemptHost> attempt_hosts;
  bool held = false;  // paused by a user: waits for `resume` instead of the scheduler
  Json exports;       // {format: content} from export_formats, when the trial terminated
  // What the experiment's scheduler remembers of the trial (ASHA: its bracket
  // and the values recorded for it at rungs); null under FIFO. Written only
  // by the ExperimentScheduler, committed with the result that changed it.
  Json scheduler_state;
  // Its PBT lineage, oldest first; see kMaxExploits.
  std::vector<ExploitRecord> exploits;
  // A scheduler asked for a persistent checkpoint at the last result (PBT's
  // top quantile): due until one is taken. Stored while true, so that a
  // restarted head that re-attaches the actor still takes it.
  bool checkpoint_requested = false;

  // ---- runtime only (the actor of the current attempt) ----
  // What the attempt is doing (trial_phase.h). Written only by
  // TrialLifecycle::SetPhase, which checks the change and keeps the runner's
  // per-phase indexes (RecoveryWaits, resets in flight) in step with it.
  TrialPhase phase = TrialPhase::kIdle;
  // Set exactly while PhaseHoldsActor(phase).
  WorkerId worker_id;
  uint64_t group_id = 0;  // in-use placement group, 0 = none
  bool stop_after_save = false;   // kSaving: the decision of the result that asked for it
  std::string memory_checkpoint;  // PAUSE checkpoint bytes (never persisted)
  // Pause at the end of the in-flight TRAIN / SAVE. Stored too (only while
  // true), so that a pause decided before a crash is done after a re-attach.
  bool pause_requested = false;
  // Iteration of the checkpoint the current actor was started from (0: from
  // scratch). Its first new result must be max(iteration, this) + 1.
  int64_t resume_iteration = 0;
  // The last answered TRAIN's time, from when the worker could start on it to
  // its RESULT (steps, the links, the head's queue): whether its next TRAIN
  // may wait for the commit and go with the ACK (SendTiming::kWithAck).
  TimeMs train_round_trip_ms = 0;

  // The trial record: everything persisted but `checkpoints` and
  // `error_log`, which are records of their own (head/trial_records.h).
  Json ToJson() const;
  // ToJson().dump(), byte for byte, written directly: the config and the last
  // result are serialised where they are instead of being copied into a DOM
  // first (building that DOM was 12% of the head's CPU with one-iteration
  // trials). Throws as dump() does (nlohmann::json::type_error on invalid
  // UTF-8; results are validated on the way in).
  std::string ToRecordText() const;
  // Reads a trial record; inline `checkpoints` and `error_log` (a schema-1
  // record) are read too.
  static Result<Trial> FromJson(const Json& j);
  // The same, taking the config and result DOMs from `j` instead of copying
  // them (a start reads 100,000 records).
  static Result<Trial> FromJson(Json&& j);
  // Newest retained persistent checkpoint, or nullptr.
  const CheckpointRecord* NewestCheckpoint() const;
  // Records that the current attempt's actor lives on `worker_id`.
  void NoteAttemptHost(const WorkerId& worker_id);
  // The host of `attempt`'s actor, or nullptr when it had none or is too old
  // to be remembered.
  const AttemptHost* HostOf(uint64_t attempt) const;
};

// Who submitted an experiment: the client key (Z85) and its name in the
// clients allow-list; empty when submitted to a head without CURVE.
struct ExperimentOwner {
  std::string key;
  std::string name;
};

struct Experiment {
  std::string experiment_id;
  ExperimentOwner owner;
  ExperimentSpec spec;
  bool finished = false;        // every trial finished and the searcher is done
  bool stopped = false;         // stopped by a user or fail_fast
  double created_at = 0;
  uint64_t next_variant = 0;    // searcher state: variants generated so far
  uint64_t total_variants = 0;  // grid x num_samples
  // Trials added by clients (add-trial, a resume that restarts errored
  // trials): not variants of the search, which they must not move.
  uint64_t added_trials = 0;
  uint64_t next_trial_index = 0;  // trial id counter (variants + added trials)
  // ---- runtime ----
  std::vector<TrialId> trial_ids;  // creation order
  std::map<TrialStatus, int64_t> counts;
  int64_t live_trials = 0;  // not finished
  // RequestKeyFor(spec), set by TrialBook::AddExperiment: what queues,
  // placement groups and cached actors of its trials are keyed by.
  std::string request_key;
  // TrialBook::BestTrial's last answer, kept up to date as results arrive
  // (TrialBook::NoteLastResult) so that a read does not walk every trial;
  // dropped when a change cannot tell the new best without that walk.
  struct BestTrialCache {
    bool known = false;
    std::string metric;  // the spec's metric and mode it was found for
    bool maximize = false;
    const Trial* trial = nullptr;  // nullptr: no trial reported the metric
    double value = 0;
  };
  mutable BestTrialCache best;

  bool SearchFinished() const { return stopped || next_variant >= total_variants; }
  uint64_t TotalTrials() const { return total_variants + added_trials; }
  // Whether add_trial may add to it now: not finished or stopped, and, with
  // an external search, not all of its num_samples added yet.
  bool AcceptsTrials() const {
    return !finished && !stopped && !(spec.ExternalSearch() && SearchFinished());
  }
  Json ToJson() const;
  static Result<Experiment> FromJson(const Json& j);
};

// The key of an experiment's requests: its placement request's shape, and,
// when it reuses actors, its trainable too, so that a cached actor only ever
// serves a trial of the same trainable that reuses actors (a RESET carries
// no trainable). Unambiguous: a shape's key delimits itself (its resource
// names are length-prefixed), and the trainable is all that follows it.
std::string RequestKeyFor(const ExperimentSpec& spec);

// Whether `trial_id` is an id `e` has issued: TrialIdFor(e, k) with k below
// its next_trial_index. Corruption otherwise: a store where it is not would
// issue the id again (a loaded head would abort on the duplicate).
Status CheckTrialIdIssued(const Experiment& e, const TrialId& trial_id);

}  // namespace ztune::head
