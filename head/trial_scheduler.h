// TrialScheduler: Ray's TrialScheduler interface, the seam where FIFO, ASHA,
// HyperBand, median stopping and PBT plug into the runner. The runner tells
// the scheduler what happens to trials (added to the queue, a result, done,
// failed, removed) and asks it which waiting trial to start next and what a
// result means for its trial (continue, pause, stop).
//
// A scheduler owns the queue of trials waiting to start (PENDING, and PAUSED
// ones a scheduler paused); the runner owns resources and asks per request
// shape (PlacementRequest::Key) how many trials wait, to stage groups.
//
// Lives on the head loop thread; not thread-safe.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/json.h"
#include "common/resources.h"
#include "common/status.h"
#include "head/trial.h"

namespace ztune::head {

// What the scheduler decides for a trial after one of its results (Ray's
// TrialScheduler.CONTINUE / PAUSE / STOP, and what PBT asks of the executor).
enum class SchedulerDecision {
  kContinue,
  kPause,
  kStop,
  // PBT's top quantile: a persistent checkpoint at this result (another
  // trial may clone it), then on, or then PAUSE.
  kCheckpointContinue,
  kCheckpointPause,
  // PBT's bottom quantile: the trial restarts from another trial's
  // checkpoint with a new config (TakeExploit says which).
  kExploit,
};

// A kExploit: restart the trial from `donor`'s checkpoint at
// `donor_iteration` with `new_config` (Ray's PBT _exploit).
struct Exploit {
  TrialId donor;
  int64_t donor_iteration = 0;
  Json old_config;
  Json new_config;
};

// A decision a scheduler makes about a trial other than the one it was called
// for (synchronous HyperBand: a halving stops the worst trials of a bracket
// and lets the best paused ones run again). The runner applies it before the
// turn's commit, storing `state` as the trial's scheduler state in the same
// batch as the change that caused it.
struct SchedulerAction {
  enum class Kind {
    kStop,     // TERMINATE the trial (paused, or pausing at its milestone)
    kRelease,  // it may start again (MayStart now holds): queue it if it waits
    kExploit,  // a PAUSED trial restarts from the clone TakeExploit gives (synchronous PBT)
  };
  TrialId trial_id;
  Kind kind = Kind::kRelease;
  Json state;  // the trial's new Trial::scheduler_state
};

// Reads a loaded trial's stored results, in iteration order; Corruption or
// a store error when they cannot be read. A new trial's returns none.
using StoredResultsReader = std::function<Result<std::vector<Json>>()>;

class TrialScheduler {
 public:
  virtual ~TrialScheduler() = default;

  // An experiment was submitted, or loaded by a restarted head, before any
  // of its trials: a scheduler with decisions of its own per experiment
  // (ExperimentScheduler) sets them up from the experiment's spec.
  virtual void OnExperimentAdd(const Experiment&) {}
  // `t` was created, or loaded (every stored trial, finished or not, once
  // per head run, before anything else of it; `stored_results` reads its
  // stored results). A scheduler may set `t.scheduler_state`; a loaded one
  // is untrusted: Corruption, naming the trial, when it is damaged.
  virtual Status OnTrialCreate(Trial&, const StoredResultsReader& /*stored_results*/) {
    return Status::Ok();
  }
  // `t` waits to start (PENDING, or PAUSED by a scheduler); `request_key` and
  // `request` are its experiment's placement request.
  virtual void OnTrialAdd(const Trial& t, const std::string& request_key,
                          const PlacementRequest& request) = 0;
  // `t` no longer waits (it started, or it ended while waiting).
  virtual void OnTrialRemove(const Trial& t) = 0;
  // A result of a running trial, accepted but not yet written: `t` still
  // shows the previous result. A STOP or PAUSE ends the batch here (later
  // results in it are not stored) and is applied after any checkpoint due.
  // Not called for a result that stops the trial by itself (done, or a
  // stopping criterion: Ray's _process_trial_result). May change
  // `t.scheduler_state` (committed with the result), nothing else of `t`.
  virtual SchedulerDecision OnTrialResult(Trial& t, const Json& result) = 0;
  // Whether OnTrialResult may decide anything for `t`; false lets the runner
  // skip building the result's DOM (FIFO: every result continues).
  virtual bool JudgesResults(const Trial&) const { return true; }
  // `t` ended: TERMINATED (complete) or ERROR. Either may change
  // `t.scheduler_state`, nothing else.
  virtual void OnTrialComplete(Trial& t) = 0;
  virtual void OnTrialError(Trial& t) = 0;
  // `t`'s pause completed: it is PAUSED, without an actor (before it is
  // queued again).
  virtual void OnTrialPaused(Trial&) {}
  // Whether a waiting trial may join the queue now (TrialLifecycle::Enqueue
  // leaves it out otherwise, until a SchedulerAction releases it).
  virtual bool MayQueue(const Trial&) const { return true; }
  // Decisions about other trials than the one a call was for, in order
  // (SchedulerAction); the runner applies them before the turn's commit.
  virtual std::vector<SchedulerAction> TakeActions() { return {}; }
  // The exploit behind the kExploit just returned for `t`.
  virtual std::optional<Exploit> TakeExploit(const Trial&) { return std::nullopt; }
  // How a scheduler learns whether a trial has a stored persistent
  // checkpoint at an iteration (PBT clones only existing ones); the runner
  // sets it once.
  virtual void set_checkpoint_lookup(std::function<bool(const TrialId&, int64_t)>) {}
  // A waiting trial's place among its queue's PAUSED trials: lower first,
  // then FIFO (PBT: the least trained first, Ray's choose_trial_to_run).
  virtual double QueuePriority(const Trial&) const { return 0; }

  // The waiting trial to start next among request shapes for which
  // `has_resources(key)` holds now; nullopt if none. Does not remove it (the
  // runner calls OnTrialRemove when it starts).
  virtual std::optional<TrialId> ChooseTrialToRun(
      const std::function<bool(const std::string& key)>& has_resources) const = 0;
  // Every request shape that had waiting trials: (key, request, how many
  // wait now, possibly 0, so that the runner unstages what no trial needs).
  virtual void ForEachWaitingRequest(
      const std::function<void(const std::string& key, const PlacementRequest& request,
                               size_t waiting)>& fn) const = 0;
  virtual size_t NumWaiting(const std::string& request_key) const = 0;
  // The runner has nothing of `request_key` staged, ready or cached any more:
  // its queue goes if no trial waits in it, so that the shapes of finished
  // experiments cost neither memory nor time in the calls above.
  virtual void ForgetRequest(const std::string& request_key) = 0;
};

}  // namespace ztune::head
