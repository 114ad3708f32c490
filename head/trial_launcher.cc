#include "head/trial_launcher.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/check.h"

namespace ztune::head {

void TrialLauncher::StartReadyTrials() {
  // FIFO across request shapes: among shapes with a cached actor or a ready
  // group, the one whose first waiting trial comes first. A shape without
  // either never blocks another (Ray's _on_pg_ready fallback, without its
  // deadlock). A cached actor is preferred over a fresh group (Ray).
  auto has_resources = [&](const std::string& key) {
    return p_.actors.HasCached(key) || p_.groups.HasReady(key);
  };
  while (true) {
    std::optional<TrialId> chosen = p_.scheduler.ChooseTrialToRun(has_resources);
    if (!chosen) return;
    Trial& t = p_.book.TrialRef(*chosen);
    const std::string& key = p_.book.ExperimentOf(t).request_key;
    if (std::optional<CachedActor> actor = p_.actors.TakeCached(key)) {
      StartOnCachedActor(t, *actor);
      continue;
    }
    std::optional<uint64_t> group = p_.groups.TakeReady(key, t.trial_id);
    CHECK(group.has_value());  // chosen for a shape with a cached actor or a ready group
    StartTrial(t, *group);
  }
}

void TrialLauncher::StartTrial(Trial& t, uint64_t group_id) {
  const auto* g = p_.groups.Find(group_id);
  Experiment& e = p_.book.ExperimentOf(t);
  if (!p_.lifecycle.SetPhase(t, TrialPhase::kStarting)) {
    p_.groups.ReturnInUse(group_id);
    return;
  }
  p_.lifecycle.Dequeue(t);
  t.attempt++;
  // The actor lives on the worker of bundle 0 (or of the first worker bundle
  // when the head bundle is empty: then the actor itself takes nothing).
  const BundlePlacement& host = g->placement.bundles.front();
  p_.actors.Hold(t, host.worker_id, group_id);
  t.placement = g->placement;
  std::map<std::string, double> bundle0;
  if (!g->request.head_bundle_empty) bundle0 = host.resources.ToDoubles();
  std::vector<int64_t> gpu_ids;
  for (const auto& b : g->placement.bundles) {
    if (b.worker_id == host.worker_id)
      gpu_ids.insert(gpu_ids.end(), b.gpu_ids.begin(), b.gpu_ids.end());
  }
  std::string checkpoint_bytes;
  std::string* checkpoint = CheckpointFor(t, checkpoint_bytes);
  if (t.start_time == 0) t.start_time = WallSeconds();
  p_.lifecycle.SetStatus(t, TrialStatus::kRunning);
  p_.executor.StartTrial(t, ActorCode{e.spec.trainable, e.spec.python_entry, e.spec.CodeHash()},
                         t.worker_id, bundle0, gpu_ids, checkpoint, p_.lifecycle.BufferFor(t),
                         p_.lifecycle.TimeoutsFor(t));
}

void TrialLauncher::StartOnCachedActor(Trial& t, const CachedActor& actor) {
  p_.actors.BeginReset(t.trial_id, actor);
  if (!p_.lifecycle.SetPhase(t, TrialPhase::kResetting)) {
    p_.actors.EndReset(t.trial_id);
    p_.executor.StopActorKey(actor.worker_id, actor.trial_id, actor.attempt, actor.group_id,
                             p_.actors.KillAfterMs(p_.book.ExperimentOf(t)));
    return;
  }
  p_.lifecycle.Dequeue(t);
  t.attempt++;
  p_.actors.Hold(t, actor.worker_id, actor.group_id);
  if (const auto* g = p_.groups.Find(actor.group_id)) t.placement = g->placement;
  p_.groups.AssignCached(actor.group_id, t.trial_id);
  if (t.start_time == 0) t.start_time = WallSeconds();
  p_.lifecycle.SetStatus(t, TrialStatus::kRunning);
  p_.executor.Reset(t, actor.trial_id, actor.attempt, p_.lifecycle.TimeoutsFor(t));
}

std::string* TrialLauncher::CheckpointFor(Trial& t, std::string& storage) {
  const Trial* source = t.restore_from.empty() ? nullptr : p_.book.FindTrial(t.restore_from);
  std::string* checkpoint = p_.checkpoints.ForStart(t, source, storage);
  if (checkpoint != nullptr) p_.book.MarkDirty(t);  // num_restores counted it
  return checkpoint;
}

void TrialLauncher::OnCreateReply(Trial& t, const protocol::Reply& reply) {
  if (reply.ok) return;
  // A setup that raised is a failure like any other, retried within
  // max_failures (Ray: it surfaces through the trial's first future and goes
  // through _process_trial_failure). A worker that does not host the
  // trainable is a configuration error no retry mends: ERROR at once.
  const WorkerInfo* w = p_.registry.Find(t.worker_id);
  const ExperimentSpec& spec = p_.book.ExperimentOf(t).spec;
  const std::string& trainable = spec.trainable;
  const bool hosted = w != nullptr && w->trainables.count(trainable) > 0;
  p_.lifecycle.FailTrial(t,
                         "failed to start: " + reply.error +
                             (hosted ? ""
                                     : " (worker " + t.worker_id + " does not host '" +
                                           spec.TrainableLabel() + "'; not retried)"),
                         hosted);
}

void TrialLauncher::OnRestoreReply(Trial& t, const protocol::Reply& reply) {
  if (reply.ok) return;
  // Ray (TUNE_RESTORE_RETRY_NUM = 0): the checkpoint is given up and the
  // retry starts from scratch; retrying from it again spent max_failures on
  // a damaged checkpoint (or looped forever at -1).
  p_.checkpoints.GiveUpCurrent(t);
  p_.lifecycle.FailTrial(
      t, "failed to restore from checkpoint: " + reply.error + " (the retry starts from scratch)",
      true);
}

void TrialLauncher::OnResetReply(Trial& t, const protocol::Reply& reply) {
  const CachedActor* resetting = p_.actors.ResetOf(t.trial_id);
  if (resetting == nullptr) return;
  const CachedActor old = *resetting;
  // `reset` comes from the worker: only a boolean counts.
  const Json* reset = reply.data.is_object() && reply.data.contains("reset")
                          ? &reply.data["reset"]
                          : nullptr;
  const bool well_formed = reset != nullptr && reset->is_boolean();
  if (reply.ok && well_formed && reset->get<bool>()) {
    if (!p_.lifecycle.SetPhase(t, TrialPhase::kStarting)) return;
    std::string bytes;
    std::string* checkpoint = CheckpointFor(t, bytes);
    p_.executor.ResumeOnActor(t, checkpoint, p_.lifecycle.BufferFor(t),
                              p_.lifecycle.TimeoutsFor(t));
    return;
  }
  // The actor kept its old key (or is gone): stop it under that key, which
  // frees its group when done.
  p_.executor.StopActorKey(old.worker_id, old.trial_id, old.attempt, old.group_id,
                           p_.actors.KillAfterMs(p_.book.ExperimentOf(t)));
  std::string why;
  if (!reply.ok) {
    why = "actor reuse failed: " + reply.error;
  } else if (!well_formed) {
    why = "actor reuse failed: the worker's RESET answer has no boolean \"reset\"";
  } else {
    why = "Trainable runner reuse requires reset_config() to be implemented and return True.";
  }
  p_.lifecycle.FailTrial(t, why, false, ActorEnd::kGone);
}

}  // namespace ztune::head
