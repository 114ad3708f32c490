// TrialRunner, what clients ask: submit, add a trial, stop; and the reads
// behind status, trials and workers.
#include "head/trial_runner.h"

#include <algorithm>
#include <random>
#include <string>

#include <spdlog/spdlog.h>

#include "storage/keys.h"

namespace ztune::head {

// ---------------------------------------------------------------- client API

Result<Json> TrialRunner::Submit(const Json& spec_json) {
  std::random_device rd;
  uint64_t seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  auto spec = ExperimentSpec::Parse(spec_json, seed % 1'000'000'007ULL);
  if (!spec.ok()) return spec.status();
  auto space = SearchSpace::Parse(spec->param_space);
  if (!space.ok()) return space.status();
  if (registry_.NumAlive() > 0) {
    std::string offered;
    if (!registry_.AnyHosts(spec->trainable, &offered)) {
      return Status::InvalidArgument("spec.trainable: no registered worker hosts trainable '" +
                                     spec->trainable + "' (workers offer: " + offered + ")");
    }
    RETURN_IF_ERROR(ledger_.CheckFeasible(spec->resources));
  }
  // Trials are generated lazily (GenerateTrials), but each one ends as a
  // record and head memory: an experiment's size is bounded up front.
  const std::optional<uint64_t> total = space->NumVariants(spec->num_samples);
  if (!total || *total > options_.max_trials_per_experiment) {
    return Status::InvalidArgument(
        "spec: " + std::to_string(space->GridSize()) + " grid combinations x num_samples " +
        std::to_string(spec->num_samples) + " = " +
        (total ? std::to_string(*total) : std::string("more than 2^64")) +
        " trials, more than this head allows per experiment (" +
        std::to_string(options_.max_trials_per_experiment) +
        "; ztune-head --max-trials-per-experiment)");
  }
  Experiment e;
  e.experiment_id = book_.NextExperimentId();
  e.spec = std::move(spec).value();
  e.created_at = WallSeconds();
  e.total_variants = *total;
  std::string id = e.experiment_id;
  searcher_.Start(id, std::move(space).value());
  Experiment& stored = book_.AddExperiment(std::move(e));
  book_.MarkDirty(stored);
  batch_.Put(storage::Family::kMeta, storage::kMetaNextExperiment, std::to_string(book_.next_experiment()));
  spdlog::info("experiment {} ({}) submitted: trainable {}, {} trials, resources {}", id,
               stored.spec.name, stored.spec.trainable, stored.total_variants,
               stored.spec.resources.ToString());
  GenerateTrials();
  return Json{{"experiment_id", id}, {"total_trials", stored.total_variants}};
}

Result<TrialId> TrialRunner::AddTrial(const std::string& experiment_id, const Json& config,
                                      const TrialId& restore_from) {
  Experiment* found = book_.FindExperiment(experiment_id);
  if (found == nullptr) return Status::NotFound("unknown experiment '" + experiment_id + "'");
  if (!config.is_object()) return Status::InvalidArgument("config must be a JSON object");
  Experiment& e = *found;
  if (e.finished || e.stopped) {
    return Status::FailedPrecondition("experiment " + experiment_id + " is " +
                                      (e.stopped ? "stopped" : "finished"));
  }
  if (e.total_variants >= options_.max_trials_per_experiment) {
    return Status::FailedPrecondition(
        "experiment " + experiment_id + " has " + std::to_string(e.total_variants) +
        " trials, the most this head allows per experiment (ztune-head "
        "--max-trials-per-experiment)");
  }
  if (!restore_from.empty()) {
    const Trial* source = FindTrial(restore_from);
    if (source == nullptr) return Status::NotFound("restore_from: unknown trial '" + restore_from + "'");
    if (source->NewestCheckpoint() == nullptr) {
      return Status::FailedPrecondition("restore_from: trial " + restore_from +
                                        " has no persistent checkpoint");
    }
    if (book_.ExperimentOf(*source).spec.trainable != e.spec.trainable) {
      return Status::InvalidArgument("restore_from: trial " + restore_from + " runs trainable '" +
                                     book_.ExperimentOf(*source).spec.trainable +
                                     "', not '" + e.spec.trainable + "'");
    }
  }
  Trial& t = lifecycle_.NewTrial(e, config);
  t.restore_from = restore_from;
  e.total_variants++;
  e.next_variant++;  // an added trial counts as a variant the searcher produced
  book_.MarkDirty(e);
  return t.trial_id;
}

Result<std::vector<TrialId>> TrialRunner::Stop(const std::string& id) {
  std::vector<TrialId> stopped;
  if (Experiment* e = book_.FindExperiment(id)) {
    lifecycle_.StopExperiment(*e, &stopped);
    return stopped;
  }
  Trial* t = book_.FindTrial(TrialId(id));  // not an experiment: a trial, if anything
  if (t == nullptr) return Status::NotFound("no experiment or trial '" + id + "'");
  if (!IsFinished(t->status)) {
    lifecycle_.FinishTrial(*t, TrialStatus::kTerminated);
    stopped.push_back(t->trial_id);
  }
  return stopped;
}

// ---------------------------------------------------------------- reads

std::string TrialRunner::WorkerNameOf(const Trial& t) const {
  if (!PhaseHoldsActor(t.phase)) return {};
  const WorkerInfo* w = registry_.Find(t.worker_id);
  return w == nullptr ? t.worker_id : w->name;
}

int64_t TrialRunner::ActorsOn(const WorkerId& worker_id) const {
  return actors_.ActorsOn(worker_id);
}

bool TrialRunner::HasResourcesForTrial(const TrialId& trial_id) const {
  const Trial* t = FindTrial(trial_id);
  if (t == nullptr) return false;
  const std::string& key = RequestKeyOf(*t);
  if (actors_.HasCached(key)) return true;
  return groups_.HasReady(key) || groups_.NumStaging(key) > 0 || groups_.CanStage();
}

std::string TrialRunner::DebugString() const {
  ResourceSet used = groups_.OccupiedResources();
  ResourceSet total = ledger_.Total();
  auto fmt = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g", v);
    return std::string(buf);
  };
  return "Resources requested: " + fmt(used.Get("CPU")) + "/" + fmt(total.Get("CPU")) +
         " CPUs, " + fmt(used.Get("GPU")) + "/" + fmt(total.Get("GPU")) + " GPUs";
}

TimeMs TrialRunner::NextTimerMs() const { return options_.heartbeat_ms; }

}  // namespace ztune::head
