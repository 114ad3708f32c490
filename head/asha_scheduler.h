// AshaScheduler: Ray Tune 2.2's AsyncHyperBandScheduler (ASHA), the stopping
// decisions of one experiment. Brackets of rungs at grace_period * rf^(k+s);
// a trial that reaches a rung it has not been recorded at is stopped when its
// metric is worse than the (1 - 1/rf) quantile (np.nanpercentile) of the
// values recorded there before it, and its value is recorded. At most one
// rung is judged per result (the highest reached and not yet recorded);
// `time_attr >= max_t` stops (stop_last_trials) without recording, and the
// trial's last result is recorded when it completes. Never pauses.
//
// Restart: the state of a trial (its bracket and the values recorded for it)
// is a small JSON document the runner stores in the trial's record, in the
// same batch as the result that changed it (StateOf / RestoreTrial). The
// decisions after a restart depend only on the recorded values, not on the
// order they were recorded in, so rebuilding from every trial's state gives
// the decisions the uninterrupted run would make. The bracket a trial joins
// is drawn from its index and the experiment's seed, not from a shared
// generator, for the same reason.
//
// Lives on the head loop thread; not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/ids.h"
#include "common/json.h"
#include "common/status.h"
#include "head/experiment_scheduler.h"
#include "head/scheduler_spec.h"

namespace ztune::head {

class AshaScheduler final : public ExperimentScheduler {
 public:
  // `options` must have passed Validate() (CHECKed).
  explicit AshaScheduler(AshaOptions options);

  // ExperimentScheduler: the calls below on the trial's id and index, with
  // its state (StateOf) kept in Trial::scheduler_state.
  Status AddTrial(Trial& t, const StoredResultsReader& stored_results) override;
  SchedulerDecision OnTrialResult(Trial& t, const Json& result,
                                  const ExperimentView& experiment) override;
  void OnTrialComplete(Trial& t) override;

  // `trial` joins a bracket, drawn with Ray's probabilities (proportional to
  // e^(its rungs - the most rungs)) from `trial_index` and the seed. A trial
  // already known keeps its bracket.
  void AddTrial(const TrialId& trial, uint64_t trial_index);
  // A result of a running trial: kStop or kContinue. A result without
  // time_attr or without a numeric metric continues (as Ray's does).
  SchedulerDecision OnResult(const TrialId& trial, const Json& result);
  // The trial ended (TERMINATED): its last result is recorded at the highest
  // rung it reached and was not recorded at. Its recorded values stay.
  void OnComplete(const TrialId& trial, const Json& last_result);

  // The trial's state to store with it: {"bracket": b, "rungs": [[milestone,
  // value], ...]} (values signed by mode; NaN and infinities as the strings
  // "nan", "inf", "-inf", which JSON numbers cannot hold).
  Json StateOf(const TrialId& trial) const;
  // Rebuilds a trial from StateOf, read back from the store (untrusted):
  // Corruption naming the problem, and nothing changes, when a field has the
  // wrong type, the bracket does not exist or a milestone is not one of its
  // rungs.
  Status RestoreTrial(const TrialId& trial, const Json& state);

  // Inspection (tests, `ztune status`): the milestones of a bracket, highest
  // first, and the cutoff a trial reaching that rung would be judged by now
  // (nullopt when nothing is recorded there; NaN when NumPy's would be).
  std::vector<double> Milestones(size_t bracket) const;
  std::optional<double> Cutoff(size_t bracket, double milestone) const;
  std::optional<size_t> BracketOf(const TrialId& trial) const;
  size_t num_brackets() const { return brackets_.size(); }
  uint64_t num_stopped() const { return num_stopped_; }

 private:
  struct Rung {
    double milestone = 0;
    std::map<TrialId, double> recorded;  // signed values; NaN kept (ignored by the cutoff)
  };
  struct Bracket {
    std::vector<Rung> rungs;  // highest milestone first (Ray's order)
  };

  // How many rungs hold a value of `trial` (its state changes with it).
  size_t NumRecorded(const TrialId& trial) const;
  std::optional<double> SignedMetric(const Json& result) const;
  // Ray's _Bracket.on_result.
  SchedulerDecision JudgeAtRung(const TrialId& trial, double time, double value);
  std::optional<double> CutoffOf(const Rung& rung) const;
  size_t DrawBracket(uint64_t trial_index) const;

  AshaOptions options_;
  std::vector<Bracket> brackets_;
  std::unordered_map<TrialId, size_t> bracket_of_;
  uint64_t num_stopped_ = 0;
};

}  // namespace ztune::head
