// HyperBandScheduler: Ray Tune's synchronous HyperBandScheduler, the
// decisions of one experiment.
//
// Trials fill brackets in order: a band holds s_max_1 = round(log(max_t) /
// log(eta)) + 1 brackets, s = 0, 1, ..., bracket s takes n0(s) = ceil(s_max_1
// / (s + 1) * eta^s) trials and first runs them to r0(s) = int(max_t *
// eta^-s) (a bracket with r0 = 0 is skipped). A trial that reaches its
// bracket's milestone PAUSEs until every live trial of the bracket has
// reached it; the trial whose result completes the set triggers successive
// halving: the bracket keeps ceil(n / eta) trials by metric (counted from
// its capacity n, not from the trials alive; a stable sort, so on ties the
// later-added trial survives), STOPs the others, lets the paused survivors
// run again (they restart from their memory checkpoints) and raises the
// milestone to min(r * eta, max_t). When the last milestone is done the
// bracket stops its trials (stop_last_trials). A trial that ends or fails
// leaves its bracket, which may complete the set for the others; a trial
// retried after a failure joins the current bracket again, as in Ray.
//
// Deliberate differences from Ray 2.2: the next milestone is min(r * eta,
// max_t) (Ray 2.7's fix, PR #39157: 2.2 used min(r * eta, max_t - r), under
// which brackets never reach max_t and, with max_t 8 and eta 2, good trials
// stay paused forever), and a survivor that already passed the new milestone
// is stopped when the bracket is finished (also 2.7). Released trials wait
// in the experiment's FIFO queue rather than by bracket completion.
//
// Restart: a trial's state is {"band", "bracket", "halvings"}: where it is
// and how many halvings its bracket had done when the trial was last
// touched. Every halving rewrites the state of every trial it touches (the
// trigger with its result, the others through SchedulerActions committed in
// the same turn), so a bracket's halvings are the largest its trials hold;
// its live trials are its unfinished ones, with their last stored results.
//
// Lives on the head loop thread; not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/ids.h"
#include "common/json.h"
#include "common/status.h"
#include "head/experiment_scheduler.h"
#include "head/scheduler_spec.h"

namespace ztune::head {

class HyperBandScheduler final : public ExperimentScheduler {
 public:
  // `options` must have passed Validate() (CHECKed).
  explicit HyperBandScheduler(HyperBandOptions options);

  Status AddTrial(Trial& t, const StoredResultsReader& stored_results) override;
  SchedulerDecision OnTrialResult(Trial& t, const Json& result,
                                  const ExperimentView& experiment) override;
  void OnTrialComplete(Trial& t) override;
  void OnTrialError(Trial& t) override;
  bool MayStart(const Trial& t) const override;
  std::vector<SchedulerAction> TakeActions() override;

  // Ray's table: brackets per band (s_max_1), and bracket s's initial size
  // n0(s) and first milestone r0(s) (0: the bracket is skipped).
  int64_t BracketsPerBand() const { return s_max_1_; }
  int64_t InitialSize(int64_t s) const;
  int64_t InitialMilestone(int64_t s) const;

  // Inspection (tests, `ztune trial`).
  struct BracketView {
    int64_t band = 0;
    int64_t s = 0;
    int64_t halvings = 0;
    int64_t size = 0;           // n: the most live trials it keeps now
    int64_t milestone = 0;      // the time its live trials run to now
    std::vector<TrialId> live;  // in the order they joined
  };
  std::optional<BracketView> BracketOf(const TrialId& trial) const;
  // How many bands have a bracket (the last one possibly unfilled).
  int64_t num_bands() const { return current_ ? current_->first + 1 : 0; }
  uint64_t num_stopped() const { return num_stopped_; }

 private:
  using BracketKey = std::pair<int64_t, int64_t>;  // (band, s)
  struct Live {
    TrialId id;
    double time = 0;   // time_attr of its last result judged (0 before any)
    double value = 0;  // its metric there, signed by mode (NaN: worst)
  };
  struct Bracket {
    int64_t s = 0;
    int64_t halvings = 0;
    int64_t size = 0;               // Ray's _n
    int64_t milestone = 0;          // Ray's _cumul_r (= _r under the fixed rule)
    std::map<uint64_t, Live> live;  // by trial index: the order they joined
  };

  // Joins the current bracket, opening the next one when it is full (Ray's
  // on_trial_add).
  void Join(const TrialId& trial, uint64_t index);
  // Sets `b`'s size and milestone from its halvings.
  void SetHalvings(Bracket& b, int64_t halvings) const;
  bool IterationDone(const Bracket& b) const;
  bool Finished(const Bracket& b) const;
  bool MayContinue(const Bracket& b, const Live& l) const;
  // Ray's _process_bracket: the decision for `trigger` (a live trial that
  // just reported) or kPause when there is none; actions for the others.
  SchedulerDecision ProcessBracket(const BracketKey& key, const TrialId* trigger);
  // Takes `trial` out of its bracket, then processes the bracket (Ray's
  // on_trial_remove); its state gets the bracket's halvings.
  void Remove(Trial& t);
  void Decide(const TrialId& trial, SchedulerAction::Kind kind);
  Json StateOf(const TrialId& trial) const;
  Status RestoreTrial(const Trial& t);
  std::optional<double> SignedMetric(const Json& result) const;

  HyperBandOptions options_;
  int64_t s_max_1_ = 1;
  std::map<BracketKey, Bracket> brackets_;
  std::optional<BracketKey> current_;  // where new trials go
  struct Member {
    BracketKey bracket;
    uint64_t index = 0;
  };
  std::unordered_map<TrialId, Member> member_of_;
  // Trials a halving stopped: never started again (a stop is applied at the
  // end of the turn; a pause that completes before it must not queue them).
  std::set<TrialId> stopping_;
  std::vector<SchedulerAction> actions_;
  uint64_t num_stopped_ = 0;
};

}  // namespace ztune::head
