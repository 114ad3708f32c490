#include "head/trial_control.h"

#include <optional>
#include <random>
#include <string>

#include <spdlog/spdlog.h>

#include "head/experiment_spec.h"
#include "head/search_space.h"
#include "storage/keys.h"

namespace ztune::head {

Result<Json> TrialControl::Submit(const Json& spec_json, const ExperimentOwner& owner) {
  std::random_device rd;
  uint64_t seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  auto spec = ExperimentSpec::Parse(spec_json, seed % 1'000'000'007ULL);
  if (!spec.ok()) return spec.status();
  auto space = SearchSpace::Parse(spec->param_space);
  if (!space.ok()) return space.status();
  if (spec->IsSubmittedCode()) {
    ASSIGN_OR_RETURN(bool uploaded, p_.code.Has(spec->CodeHash()));
    if (!uploaded) {
      return Status::FailedPrecondition(
          "spec.working_dir: " + spec->working_dir +
          " is not in the head's store; `ztune submit SPEC --working-dir DIR` uploads the "
          "project before it submits");
    }
  }
  if (p_.registry.NumAlive() > 0) {
    std::string offered;
    if (!p_.registry.AnyHosts(spec->trainable, &offered)) {
      if (spec->IsSubmittedCode()) {
        return Status::InvalidArgument(
            "spec.trainable: no registered worker runs submitted code (start workers with "
            "ztune-worker --allow-submitted-code; workers offer: " +
            offered + ")");
      }
      return Status::InvalidArgument("spec.trainable: no registered worker hosts trainable '" +
                                     spec->trainable + "' (workers offer: " + offered + ")");
    }
    RETURN_IF_ERROR(p_.registry.CheckExports(spec->trainable, spec->export_formats));
    RETURN_IF_ERROR(p_.ledger.CheckFeasible(spec->resources));
  }
  // Trials are generated lazily (GenerateTrials), but each one ends as a
  // record and head memory: an experiment's size is bounded up front.
  // An external search's budget is num_samples configs, whatever the space.
  const std::optional<uint64_t> total =
      spec->ExternalSearch() ? std::optional<uint64_t>(spec->num_samples)
                             : space->NumVariants(spec->num_samples);
  if (!total || *total > max_trials_per_experiment_) {
    return Status::InvalidArgument(
        "spec: " + std::to_string(space->GridSize()) + " grid combinations x num_samples " +
        std::to_string(spec->num_samples) + " = " +
        (total ? std::to_string(*total) : std::string("more than 2^64")) +
        " trials, more than this head allows per experiment (" +
        std::to_string(max_trials_per_experiment_) +
        "; ztune-head --max-trials-per-experiment)");
  }
  Experiment e;
  e.experiment_id = p_.book.NextExperimentId();
  e.owner = owner;
  e.spec = std::move(spec).value();
  e.created_at = WallSeconds();
  e.total_variants = *total;
  std::string id = e.experiment_id;
  p_.searcher.Start(id, e.spec.search_alg, std::move(space).value());
  Experiment& stored = p_.lifecycle.AddExperiment(std::move(e), /*loaded=*/false);
  p_.book.MarkDirty(stored);
  p_.batch.Put(storage::Family::kMeta, storage::kMetaNextExperiment,
               std::to_string(p_.book.next_experiment()));
  spdlog::info("experiment {} ({}) submitted{}: trainable {}, {} trials, resources {}", id,
               stored.spec.name, owner.name.empty() ? "" : " by '" + owner.name + "'",
               stored.spec.TrainableLabel(), stored.total_variants,
               stored.spec.resources.ToString());
  return Json{{"experiment_id", id}, {"total_trials", stored.total_variants}};
}

Result<TrialId> TrialControl::AddTrial(const std::string& experiment_id, const Json& config,
                                       const TrialId& restore_from) {
  Experiment* found = p_.book.FindExperiment(experiment_id);
  if (found == nullptr) return Status::NotFound("unknown experiment '" + experiment_id + "'");
  if (!config.is_object()) return Status::InvalidArgument("config must be a JSON object");
  Experiment& e = *found;
  if (e.finished || e.stopped) {
    return Status::FailedPrecondition("experiment " + experiment_id + " is " +
                                      (e.stopped ? "stopped" : "finished"));
  }
  // A config of an external search is one of its num_samples; once they
  // are all added the search is over, and the experiment ends with them.
  const bool suggested = e.spec.ExternalSearch();
  if (suggested && e.SearchFinished()) {
    return Status::FailedPrecondition(
        "experiment " + experiment_id + " has all " + std::to_string(e.total_variants) +
        " trials of its external search (num_samples); it ends when they have finished");
  }
  if (!suggested && e.TotalTrials() >= max_trials_per_experiment_) {
    return Status::FailedPrecondition(
        "experiment " + experiment_id + " has " + std::to_string(e.TotalTrials()) +
        " trials, the most this head allows per experiment (ztune-head "
        "--max-trials-per-experiment)");
  }
  if (!restore_from.empty()) {
    const Trial* source = p_.book.FindTrial(restore_from);
    if (source == nullptr) {
      return Status::NotFound("restore_from: unknown trial '" + restore_from + "'");
    }
    if (source->NewestCheckpoint() == nullptr) {
      return Status::FailedPrecondition("restore_from: trial " + restore_from +
                                        " has no persistent checkpoint");
    }
    if (p_.book.ExperimentOf(*source).spec.TrainableLabel() != e.spec.TrainableLabel()) {
      return Status::InvalidArgument("restore_from: trial " + restore_from + " runs trainable '" +
                                     p_.book.ExperimentOf(*source).spec.TrainableLabel() +
                                     "', not '" + e.spec.TrainableLabel() + "'");
    }
  }
  Trial& t = p_.lifecycle.NewTrial(e, config);
  t.restore_from = restore_from;
  (suggested ? e.next_variant : e.added_trials)++;
  p_.book.MarkDirty(e);
  return t.trial_id;
}

Result<std::vector<TrialId>> TrialControl::Stop(const std::string& id) {
  std::vector<TrialId> stopped;
  if (Experiment* e = p_.book.FindExperiment(id)) {
    // A finished experiment stays finished (not "stopped"): nothing to stop.
    if (!e->finished) p_.lifecycle.StopExperiment(*e, &stopped);
    return stopped;
  }
  Trial* t = p_.book.FindTrial(TrialId(id));  // not an experiment: a trial, if anything
  if (t == nullptr) return Status::NotFound("no experiment or trial '" + id + "'");
  if (!IsFinished(t->status)) {
    p_.lifecycle.FinishTrial(*t, TrialStatus::kTerminated);
    stopped.push_back(t->trial_id);
  }
  return stopped;
}

Status TrialControl::PauseTrial(const TrialId& trial_id, bool hold) {
  Trial* t = p_.book.FindTrial(trial_id);
  if (t == nullptr) return Status::NotFound("unknown trial '" + trial_id + "'");
  switch (t->status) {
    case TrialStatus::kTerminated:
    case TrialStatus::kError:
      return Status::FailedPrecondition("trial " + trial_id + " is " + TrialStatusName(t->status));
    case TrialStatus::kRunning:
      t->pause_requested = true;
      t->held = hold;
      p_.book.MarkDirty(*t);
      return Status::Ok();
    case TrialStatus::kPending:
    case TrialStatus::kPaused:
      if (!hold) return Status::Ok();
      p_.lifecycle.Dequeue(*t);
      p_.lifecycle.SetStatus(*t, TrialStatus::kPaused);
      t->held = true;
      p_.book.MarkDirty(*t);
      return Status::Ok();
  }
  return Status::Ok();
}

Status TrialControl::Resume(const TrialId& trial_id) {
  Trial* t = p_.book.FindTrial(trial_id);
  if (t == nullptr) return Status::NotFound("unknown trial '" + trial_id + "'");
  if (t->status == TrialStatus::kRunning && t->pause_requested) {
    t->pause_requested = false;  // not paused yet: carry on
    t->held = false;
    p_.book.MarkDirty(*t);  // `held` is stored: a restart would bring the pause back
    return Status::Ok();
  }
  if (t->status != TrialStatus::kPaused) {
    return Status::FailedPrecondition("trial " + trial_id + " is " + TrialStatusName(t->status) +
                                      ", not PAUSED");
  }
  if (t->held) {
    t->held = false;
    p_.book.MarkDirty(*t);
    p_.lifecycle.Enqueue(*t);
  }
  return Status::Ok();
}

}  // namespace ztune::head
