// SchedulerSpec: the `scheduler` object of a spec (docs/spec.md), which picks
// an experiment's trial scheduler and its options, with Ray Tune 2.2's
// defaults. Parsing refuses unknown keys and invalid values naming the key,
// and resolves the metric and mode the scheduler judges by (its own, or the
// spec's top-level ones). Plain values; thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/json.h"
#include "common/status.h"

namespace ztune::head {

enum class SchedulerType { kFifo, kAsha, kHyperBand, kMedianStopping, kPbt };

// Ray's AsyncHyperBandScheduler options (ASHA).
struct AshaOptions {
  std::string time_attr = "training_iteration";
  std::string metric;    // required
  bool maximize = true;  // mode "max"; "min" compares negated values
  double max_t = 100;
  double grace_period = 1;
  double reduction_factor = 4;
  int64_t brackets = 1;
  bool stop_last_trials = true;
  uint64_t seed = 0;  // bracket draws (they only matter with brackets > 1)

  // InvalidArgument naming the field: max_t > 0, 0 < grace_period <= max_t,
  // reduction_factor > 1, 1 <= brackets <= 1000, at most 1000 rungs, finite
  // numbers, a metric and a time attribute.
  Status Validate() const;
};

// Ray's HyperBandScheduler options (synchronous HyperBand).
struct HyperBandOptions {
  std::string time_attr = "training_iteration";
  std::string metric;  // required
  bool maximize = true;
  double max_t = 81;
  double reduction_factor = 3;  // eta
  bool stop_last_trials = true;

  // InvalidArgument naming the field: 1 <= max_t <= 1e9, reduction_factor
  // > 1 and at most 64 brackets per band, finite numbers, a metric and a
  // time attribute.
  Status Validate() const;
};

// Ray's MedianStoppingRule options.
struct MedianStoppingOptions {
  std::string time_attr = "time_total_s";
  std::string metric;  // required
  bool maximize = true;
  double grace_period = 60;
  int64_t min_samples_required = 3;
  double min_time_slice = 0;
  bool hard_stop = true;  // false: PAUSE instead of STOP

  // InvalidArgument naming the field: finite grace_period and min_time_slice
  // >= 0, min_samples_required >= 1, a metric and a time attribute.
  Status Validate() const;
};

// Ray's PopulationBasedTraining options.
struct PbtOptions {
  std::string time_attr = "time_total_s";
  std::string metric;  // required
  bool maximize = true;
  double perturbation_interval = 60;
  double burn_in_period = 0;
  double quantile_fraction = 0.25;
  double resample_probability = 0.25;
  std::vector<double> perturbation_factors{1.2, 0.8};
  // Key -> a non-empty list (categorical: shifted to a neighbour or
  // resampled), a sampler object as in param_space (scaled by a factor or
  // resampled), or an object of these for a nested config. Validated.
  Json hyperparam_mutations = Json::object();
  uint64_t seed = 0;  // every random choice, with the trial's index
  // Synchronous PBT: every trial waits at each sync point until all have
  // reached it; then the population is ranked and exploited at once.
  bool synch = false;

  // InvalidArgument naming the field: perturbation_interval > 0,
  // burn_in_period >= 0, quantile_fraction in [0, 0.5], resample_probability
  // in [0, 1], factors finite and > 0, at least one mutation, each a
  // non-empty list, a sampler (not grid_search) or an object of these.
  Status Validate() const;
  // Every mutated key must name a key of the spec's param space (Ray would
  // add it; here a typo would mutate a key the trainable never reads).
  Status CheckAgainst(const Json& param_space) const;
};

struct SchedulerSpec {
  SchedulerType type = SchedulerType::kFifo;
  AshaOptions asha;                       // kAsha
  HyperBandOptions hyperband;             // kHyperBand
  PbtOptions pbt;                         // kPbt
  MedianStoppingOptions median_stopping;  // kMedianStopping

  // Parses `j` (null or absent: FIFO). `metric` and `mode` are the spec's
  // top-level ones ("" when unset): a scheduler that judges by a metric takes
  // them when it names none, and refuses ones that differ from its own.
  // `seed` is the experiment's.
  static Result<SchedulerSpec> Parse(const Json& j, const std::string& metric,
                                     const std::string& mode, uint64_t seed);
  // Every option explicit (the stored form; Parse reads it back unchanged).
  Json ToJson() const;
  // The metric and mode the scheduler judges by; "" when it has none (FIFO).
  std::string Metric() const;
  bool Maximize() const;
  // "fifo", "asha", "hyperband", "median_stopping", "pbt".
  const char* TypeName() const;
  // The keys every result must report for the scheduler to judge it (its
  // metric and time attribute); empty for FIFO. A result without one fails
  // its trial, naming the key (Ray: "Trial returned a result which did not
  // include the specified metric").
  std::vector<std::string> RequiredResultKeys() const;
  // Whether a trial may report several results per TRAIN (Ray's
  // supports_buffered_results): not under synchronous HyperBand, whose
  // milestones must be met exactly, nor under PBT, whose checkpoints and
  // exploits happen at a given result (Ray allows buffering there; a
  // checkpoint taken after a buffered batch would not be at the result that
  // asked for it). Their trials train one step at a time.
  bool SupportsBufferedResults() const {
    return type != SchedulerType::kHyperBand && type != SchedulerType::kPbt;
  }
};

}  // namespace ztune::head
