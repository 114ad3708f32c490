// PbtScheduler: Ray Tune's PopulationBasedTraining, the decisions of one
// experiment.
//
// A trial whose result is `perturbation_interval` of time_attr past its last
// perturbation (and past `burn_in_period`) records its score and is ranked
// among the unfinished trials that have one: the bottom and top
// ceil(n x quantile_fraction) (at most n/2; nobody with n <= 1). A top trial
// takes a persistent checkpoint there (kCheckpointContinue / Pause: Ray
// takes a memory one; ours is stored, so a head crash loses no donor); a
// bottom trial clones a random top trial that has one (kExploit): it
// restarts from that checkpoint with the donor's config explored (each
// mutated key resampled with resample_probability, else a list value moved
// to a neighbour, a sampled value scaled by a random perturbation factor,
// ints kept ints) and inherits the donor's last perturbation and train
// times. Otherwise the trial goes on, or PAUSEs when others of the
// experiment wait to start (time multiplexing); waiting trials start least
// trained first (QueuePriority: last train time).
//
// Synchronous (synch: true): a trial whose time_attr reaches the next sync
// point (max(perturbation_interval, burn_in_period) at first) records its
// score, takes a persistent checkpoint and PAUSEs, held out of the queue
// (MayStart). When every unfinished trial waits there, paused, the
// population is ranked as above; each bottom trial clones a random top one
// (a kExploit action on the PAUSED trial), the next sync point becomes
// max(this one + perturbation_interval, the latest train time), and every
// trial is released. A trial that ends meanwhile leaves the population.
// The sync point is stored in every trial's state ("sync"); a restarted
// head takes the largest. The last pause and the sync commit in one turn.
//
// Restart: a trial's state is {"score", "perturbed_at", "trained_at",
// "checkpoint", "exploits"} (its score at its last perturbation, signed by
// mode; the times; the iteration of its top-quantile checkpoint; how many
// times it was exploited). It changes only with the trial's own results, so
// it is committed with them, and every random choice is drawn from (seed,
// trial index, exploits so far): a rebuilt scheduler decides as the
// uninterrupted one for the same results.
//
// Lives on the head loop thread; not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/ids.h"
#include "common/json.h"
#include "common/status.h"
#include "head/experiment_scheduler.h"
#include "head/scheduler_spec.h"

namespace ztune::head {

class PbtScheduler final : public ExperimentScheduler {
 public:
  // `options` must have passed Validate() (CHECKed).
  explicit PbtScheduler(PbtOptions options);

  Status AddTrial(Trial& t, const StoredResultsReader& stored_results) override;
  SchedulerDecision OnTrialResult(Trial& t, const Json& result,
                                  const ExperimentView& experiment) override;
  void OnTrialComplete(Trial& t) override;
  void OnTrialError(Trial& t) override;
  void OnTrialPaused(Trial& t) override;
  bool MayStart(const Trial& t) const override;
  std::vector<SchedulerAction> TakeActions() override;
  void set_checkpoint_lookup(std::function<bool(const TrialId&, int64_t)> lookup) override {
    has_checkpoint_ = std::move(lookup);
  }
  std::optional<Exploit> TakeExploit(const TrialId& trial) override;
  double QueuePriority(const Trial& t) const override;

  // Ray's _explore of `config` with the stream of (seed, trial index,
  // exploits so far): the new config (tests).
  Json Explore(const Json& config, uint64_t trial_index, uint64_t exploits) const;
  // The (bottom, top) quantiles now, by trial index (tests).
  std::pair<std::vector<TrialId>, std::vector<TrialId>> Quantiles() const;
  uint64_t num_exploits() const { return num_exploits_; }
  uint64_t num_checkpoints() const { return num_checkpoints_; }
  double next_sync() const { return next_sync_; }

 private:
  struct Member {
    TrialId id;
    Json config;  // its config now (an exploit changes it)
    bool finished = false;
    std::optional<double> score;        // signed by mode, at its last perturbation
    double perturbed_at = 0;            // Ray's last_perturbation_time
    double trained_at = 0;              // Ray's last_train_time
    std::optional<int64_t> checkpoint;  // iteration of its top-quantile checkpoint
    uint64_t exploits = 0;
    bool paused = false;  // synch: its pause completed, it has not run since
  };

  Json StateOf(const Member& m) const;
  Status Restore(const Trial& t, uint64_t index);
  Member* Find(const TrialId& trial);
  const Member* Find(const TrialId& trial) const;
  Json ExploreValue(const Json& value, const Json& mutation, std::mt19937_64& rng,
                    uint64_t stream) const;
  // m (trial index `index`) clones `donor`: the exploit, m updated.
  Exploit MakeExploit(Member& m, uint64_t index, const Member& donor);
  // Whether `donor` has the checkpoint of its perturbation stored.
  bool Cloneable(const Member& donor,
                 const std::function<bool(const TrialId&, int64_t)>& has_checkpoint) const;
  // synch: when every unfinished trial waits at the sync point, ranks and
  // exploits them and releases them; `current` is the trial whose pause
  // completes now (queued by the runner, not released).
  void MaybeSync(Trial* current);
  std::mt19937_64 Stream(uint64_t trial_index, uint64_t exploits, uint64_t salt) const;

  PbtOptions options_;
  std::map<uint64_t, Member> members_;  // by trial index: Ray's insertion order
  std::unordered_map<TrialId, uint64_t> index_of_;
  std::unordered_map<TrialId, Exploit> exploits_;  // decided, until TakeExploit
  std::vector<SchedulerAction> actions_;           // synch: until TakeActions
  std::function<bool(const TrialId&, int64_t)> has_checkpoint_;
  double next_sync_ = 0;  // synch: Ray's _next_perturbation_sync
  uint64_t num_exploits_ = 0;
  uint64_t num_checkpoints_ = 0;
};

}  // namespace ztune::head
