// How far an experiment is, for `status` and `wait` (docs/cli.md): trials
// finished of the total and, when every trial has a known iteration budget,
// iterations done of all of them; a text bar; and an ETA from the rate the
// fraction grew. Pure functions and one small stateful estimator;
// thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/json.h"

namespace ztune::client {

// The iterations each trial of `experiment` (an ExperimentDoc) runs at most:
// its spec's stop.training_iteration, else ASHA's or HyperBand's max_t when
// they measure training_iteration and stop trials there; nullopt otherwise.
std::optional<int64_t> IterationBudget(const Json& experiment);

struct Progress {
  int64_t trials_done = 0;  // TERMINATED or ERROR
  int64_t trials_total = 0;
  // Set when IterationBudget is known and the trials were given: a finished
  // trial counts its whole budget (it will run no more), a live one its
  // iterations so far, capped at the budget.
  std::optional<int64_t> iterations_done;
  int64_t iterations_total = 0;
  bool finished = false;

  // In [0, 1]: iterations when known, else trials; 1 once finished.
  double Fraction() const;
};

// `trials`: the experiment's TrialDocs, or nullptr when only the
// ExperimentDoc's counts are known.
Progress MeasureProgress(const Json& experiment, const std::vector<const Json*>* trials);

// "[#########-----------]" of `width` cells between the brackets.
std::string ProgressBar(double fraction, int width);

// "1m05s", "2h10m", "3d04h"; seconds rounded up.
std::string FormatDuration(double seconds);

// "[#####-----] 45% · 12/24 trials done · 340/2400 iterations · ETA 1m20s".
std::string ProgressText(const Progress& progress, std::optional<double> eta_s);

// Estimates the time left per experiment from how fast its fraction grew:
// over the span this estimator watched it, once the fraction moved; before
// that, since the experiment's creation (a resumed experiment's idle time
// makes that estimate long until the watch has seen progress).
class EtaEstimator {
 public:
  // Records `fraction` at `now_s` (Unix seconds) and returns the seconds
  // left, or nullopt when there is no rate yet or the experiment finished.
  std::optional<double> Observe(const std::string& experiment_id, double fraction,
                                double created_at_s, double now_s);

 private:
  struct First {
    double fraction;
    double at_s;
  };
  std::map<std::string, First> first_;
};

}  // namespace ztune::client
