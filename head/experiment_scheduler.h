// ExperimentScheduler: the result decisions of one experiment's scheduler
// (Ray's on_trial_add / on_trial_result / on_trial_complete of ASHA and the
// like), beside the queue of waiting trials that SchedulerSet keeps for all
// experiments. FIFO has none: every result continues.
//
// What a scheduler must remember across a head restart lives in each trial's
// record (Trial::scheduler_state). The scheduler writes that field whenever
// it changes; the runner commits the trial in the same batch as the result
// that changed it, so the stored state always matches the stored results,
// and a restarted head that adds every stored trial again decides as the
// uninterrupted head would.
//
// Lives on the head loop thread; not thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "common/ids.h"
#include "common/json.h"
#include "common/status.h"
#include "head/scheduler_spec.h"
#include "head/trial.h"
#include "head/trial_scheduler.h"

namespace ztune::head {

// What a scheduler may know of its experiment beyond the trial at hand.
struct ExperimentView {
  // Trials of the experiment waiting to start: PENDING, or PAUSED by a
  // scheduler (not paused by a user).
  size_t num_waiting = 0;
  // Whether `trial` has a stored persistent checkpoint at `iteration` (PBT
  // clones only checkpoints that exist); unset: none has.
  std::function<bool(const TrialId& trial, int64_t iteration)> has_checkpoint;
};

class ExperimentScheduler {
 public:
  virtual ~ExperimentScheduler() = default;
  // `t` is new (null state: the scheduler sets its first state) or loaded
  // from the store with its stored state, which is untrusted: Corruption
  // naming the trial, and nothing changes, when it is damaged. Called once
  // per trial and head run, before any result of it. `stored_results` reads
  // the trial's stored results in order (none for a new trial), for a
  // scheduler that rebuilds from them rather than store a copy.
  virtual Status AddTrial(Trial& t, const StoredResultsReader& stored_results) = 0;
  // A result of a running trial that does not stop it by itself (see
  // TrialScheduler::OnTrialResult).
  virtual SchedulerDecision OnTrialResult(Trial& t, const Json& result,
                                          const ExperimentView& experiment) = 0;
  // `t` ended TERMINATED; `t.last_result` is its last stored result.
  virtual void OnTrialComplete(Trial& t) = 0;
  // `t` ended in ERROR (no retry left). May change `t.scheduler_state`.
  virtual void OnTrialError(Trial&) {}
  // `t`'s pause completed (TrialScheduler::OnTrialPaused).
  virtual void OnTrialPaused(Trial&) {}
  // How the scheduler learns whether a trial has a stored checkpoint at an
  // iteration outside a result (ExperimentView::has_checkpoint); set once.
  virtual void set_checkpoint_lookup(std::function<bool(const TrialId&, int64_t)>) {}
  // Whether `t`, waiting (PENDING, or PAUSED by a scheduler), may be queued
  // to start now. A scheduler that holds paused trials back (HyperBand, until
  // their bracket's halving) says no, and lets them go with a kRelease.
  virtual bool MayStart(const Trial&) const { return true; }
  // The actions decided since the last call, in order.
  virtual std::vector<SchedulerAction> TakeActions() { return {}; }
  // See TrialScheduler::TakeExploit and QueuePriority.
  virtual std::optional<Exploit> TakeExploit(const TrialId&) { return std::nullopt; }
  virtual double QueuePriority(const Trial&) const { return 0; }
};

// The index of `t` in its experiment. Trial ids are TrialIdFor(experiment,
// index), and the loader checks stored ones, so this never fails (CHECKed).
uint64_t IndexOfTrial(const Trial& t);

// The scheduler `spec` describes; nullptr for FIFO. `spec` was validated by
// SchedulerSpec::Parse (CHECKed).
std::unique_ptr<ExperimentScheduler> MakeExperimentScheduler(const SchedulerSpec& spec);

}  // namespace ztune::head
