// TrialBook: the head's records of experiments and trials, the counts kept
// with them (per experiment and status, PENDING and RUNNING overall), and
// which records changed in the current loop turn. The runner decides every
// change; the book applies it, keeps the counts exact and writes the changed
// records into the turn's batch (WriteDirty), so that one commit stores the
// whole turn.
//
// Lives on the head loop thread; not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "common/json.h"
#include "head/trial.h"
#include "storage/store.h"

namespace ztune::head {

class TrialBook {
 public:
  // ---- experiments ----
  // The id of the next new experiment ("e0001", ...), after every stored one.
  std::string NextExperimentId();
  // What the meta record next_experiment stores.
  uint64_t next_experiment() const { return next_experiment_; }
  // Adds an experiment (new, or loaded: its number is counted past) and
  // marks it changed unless `loaded`. Its id must be new (CHECKed).
  Experiment& AddExperiment(Experiment e, bool loaded = false);
  Experiment* FindExperiment(const std::string& experiment_id);
  const Experiment* FindExperiment(const std::string& experiment_id) const;
  // The experiment of a trial of the book (CHECKed: a trial's experiment is
  // added first and never removed).
  Experiment& ExperimentOf(const Trial& t);
  const Experiment& ExperimentOf(const Trial& t) const;
  const std::map<std::string, Experiment>& experiments() const { return experiments_; }

  // ---- trials ----
  // A new PENDING trial of `e` with the next id and queue position (seq);
  // both records are marked changed.
  Trial& AddTrial(Experiment& e, Json config);
  // A trial read from the store, with the status the loader decided (counted
  // as such; marked changed only if `changed`). Its experiment must be in the
  // book (CHECKed); its seq is counted past.
  Trial& AddLoadedTrial(Trial t, bool changed);
  // Room for `n` trials in all, before a load adds them (no rehash per
  // growth step: a start on 100,000 trials spent 6% of its time adding).
  void ReserveTrials(size_t n) { trials_.reserve(n); }
  Trial* FindTrial(const TrialId& trial_id);
  const Trial* FindTrial(const TrialId& trial_id) const;
  // A trial of the book (CHECKed).
  Trial& TrialRef(const TrialId& trial_id);
  const Trial& TrialRef(const TrialId& trial_id) const;
  size_t num_trials() const { return trials_.size(); }
  const std::unordered_map<TrialId, Trial>& trials() const { return trials_; }
  // The trial of `e` whose last result is best by the spec's metric and mode
  // (the first such on a tie); nullptr without a metric or a trial that
  // reported it as a number (NaN never counts). O(1) while results keep the
  // best where it was or move it to their trial (the experiment's cache);
  // a walk of the experiment's trials otherwise. With VerifyRecords every
  // call walks and CHECKs the cache against the walk.
  const Trial* BestTrial(const Experiment& e) const;
  // `t`'s last result changed: keeps its experiment `e`'s best trial up to
  // date (`e` is the caller's, which has it at hand: no lookup per result).
  // Every change of a live trial's last_result must be followed by it.
  void NoteLastResult(const Experiment& e, const Trial& t);
  // Changes the status and every count that depends on it; marks the trial.
  void SetStatus(Trial& t, TrialStatus s);
  // The next queue position: a trial requeued at the end of the queue.
  uint64_t NextSeq() { return next_seq_++; }
  int64_t num_pending() const { return num_pending_; }
  int64_t num_running() const { return num_running_; }

  // ---- the turn ----
  // The trial's record changed: WriteDirty rewrites it.
  void MarkDirty(const Trial& t) { dirty_trials_.insert(t.trial_id); }
  // Only the trial's progress (iteration, last_result) changed: its results
  // went into the batch under their own keys and the record is not rewritten
  // (a restart reads the progress back from them: ReadStoredProgress). With
  // VerifyRecords, WriteDirty checks that nothing else of the record changed.
  void NoteProgress(const Trial& t) {
    if (verify_records_) progressed_.insert(t.trial_id);
  }
  // Strict invariants (tests): a change to a trial's record that was not
  // marked dirty, and would be lost at a restart, aborts at the next
  // WriteDirty after results of that trial (one record dump per such trial).
  void VerifyRecords() { verify_records_ = true; }
  void MarkDirty(const Experiment& e) { dirty_experiments_.insert(e.experiment_id); }
  // Puts every changed record into `batch` and forgets the changes.
  void WriteDirty(storage::WriteBatch& batch);
  // Whether a record changed since the last WriteDirty.
  bool HasDirty() const {
    return !dirty_trials_.empty() || !dirty_experiments_.empty() || !progressed_.empty();
  }

 private:
  void Count(Experiment& e, TrialStatus s, int delta);
  // BestTrial by walking every trial of `e`.
  const Trial* WalkForBestTrial(const Experiment& e) const;
  static std::string RecordWithoutProgress(const Trial& t);

  std::map<std::string, Experiment> experiments_;
  std::unordered_map<TrialId, Trial> trials_;
  std::unordered_set<TrialId> dirty_trials_;
  std::unordered_set<std::string> dirty_experiments_;
  bool verify_records_ = false;
  std::unordered_set<TrialId> progressed_;  // NoteProgress since the last WriteDirty
  // VerifyRecords: each trial's record as last written or loaded, without its
  // progress.
  std::unordered_map<TrialId, std::string> written_;
  uint64_t next_seq_ = 1;
  uint64_t next_experiment_ = 1;
  int64_t num_pending_ = 0;  // trials in PENDING (Ray's max_pending_trials bound)
  int64_t num_running_ = 0;
};

}  // namespace ztune::head
