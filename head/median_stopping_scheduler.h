// MedianStoppingScheduler: Ray Tune 2.2's MedianStoppingRule (the Vizier
// paper's median stopping rule) for one experiment. After `grace_period`, a
// trial whose best metric so far is worse than the median of the running
// means (over results in [grace_period, t]) of the other trials that reached
// time t is stopped, or paused with hard_stop false (and from then on runs
// FIFO). With fewer than `min_samples_required` such trials it yields: it
// pauses when other trials of the experiment wait to start and it ran
// `min_time_slice` since its last pause, else continues.
//
// As in Ray: a NaN median or best never compares equal, so it stops; the
// result a trial completes with is counted again when the scheduler had seen
// it already (a trial the rule stopped has its last result twice). Running
// means are plain sums (NumPy's pairwise summation can differ in the last
// bit on long series).
//
// Restart: the results are the trial's stored results, read again at load
// (the scheduler keeps no copy in the store); what is not in them (where
// the rule stopped the trial, its last pause, which result its completion
// counted and whether it was counted before) is the trial's state (StateOf),
// stored with the result that changed it.
//
// Lives on the head loop thread; not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/ids.h"
#include "common/json.h"
#include "common/status.h"
#include "head/experiment_scheduler.h"
#include "head/scheduler_spec.h"

namespace ztune::head {

class MedianStoppingScheduler final : public ExperimentScheduler {
 public:
  // `options` must have passed Validate() (CHECKed).
  explicit MedianStoppingScheduler(MedianStoppingOptions options);

  Status AddTrial(Trial& t, const StoredResultsReader& stored_results) override;
  SchedulerDecision OnTrialResult(Trial& t, const Json& result,
                                  const ExperimentView& experiment) override;
  void OnTrialComplete(Trial& t) override;

  // Inspection (tests): the median of the other trials' running means at
  // `time` as the rule computes it, and how many trials it stopped.
  std::optional<double> MedianAt(const TrialId& except, double time) const;
  uint64_t num_stopped() const { return num_stopped_; }

 private:
  struct Sample {
    int64_t iteration = 0;
    double time = 0;
    double value = 0;
  };
  struct Record {
    std::vector<Sample> results;  // what the rule counts, in order
    // The iteration the rule stopped (or paused) the trial at; from then on
    // it is FIFO's and its results are not counted.
    std::optional<int64_t> stopped_at;
    std::optional<double> last_pause;  // time of its last yield
    // The iteration of the result its completion counted, and whether the
    // rule had counted that result already (then it counts twice).
    std::optional<int64_t> completed_at;
    bool completed_seen = false;
  };

  // The result's (time, metric) when both are numbers.
  std::optional<std::pair<double, double>> Read(const Json& result) const;
  // The running means at `time` of the trials other than `except` whose
  // latest counted result is at `time` or later (Ray's _trials_beyond_time).
  std::vector<double> MeansOfOthers(const TrialId& except, double time) const;
  double RunningMean(const Record& r, double time) const;
  double BestOf(const Record& r) const;
  Json StateOf(const Record& r) const;

  MedianStoppingOptions options_;
  std::unordered_map<TrialId, Record> trials_;
  uint64_t num_stopped_ = 0;
};

}  // namespace ztune::head
