// TrialRunner, actor reuse and pausing: starting a trial on a cached actor
// (RESET), releasing or caching actors when trials end, and pause/resume with
// memory checkpoints.
#include "head/trial_runner.h"

#include <algorithm>
#include <string>

#include <spdlog/spdlog.h>

#include "storage/keys.h"

namespace ztune::head {

void TrialRunner::StartTrialOnCachedActor(Trial& t, const CachedActor& actor) {
  resetting_[t.trial_id] = actor;
  if (!SetPhase(t, TrialPhase::kResetting)) {
    resetting_.erase(t.trial_id);
    executor_.StopActorKey(actor.worker_id, actor.trial_id, actor.attempt, actor.group_id,
                           KillAfterMs(book_.ExperimentOf(t)));
    return;
  }
  Dequeue(t);
  t.attempt++;
  t.group_id = actor.group_id;
  t.worker_id = actor.worker_id;
  t.actor_worker = actor.worker_id;
  if (const auto* g = groups_.Find(actor.group_id)) t.placement = g->placement;
  actors_by_worker_[t.worker_id].insert(t.trial_id);
  groups_.AssignCached(actor.group_id, t.trial_id);
  if (t.start_time == 0) t.start_time = WallSeconds();
  book_.SetStatus(t, TrialStatus::kRunning);
  executor_.Reset(t, actor.trial_id, actor.attempt, TimeoutsFor(t));
}

void TrialRunner::OnResetReply(Trial& t, const protocol::Reply& reply) {
  auto it = resetting_.find(t.trial_id);
  if (it == resetting_.end()) return;
  const CachedActor old = it->second;
  bool accepted = reply.ok && reply.data.is_object() && reply.data.value("reset", false);
  if (accepted) {
    if (!SetPhase(t, TrialPhase::kStarting)) return;
    std::string bytes;
    std::string* checkpoint = CheckpointFor(t, bytes);
    executor_.ResumeOnActor(t, checkpoint, BufferFor(t), TimeoutsFor(t));
    return;
  }
  // The actor kept its old key (or is gone): stop it under that key, which
  // frees its group when done.
  executor_.StopActorKey(old.worker_id, old.trial_id, old.attempt, old.group_id,
                         KillAfterMs(book_.ExperimentOf(t)));
  std::string why = reply.ok ? std::string("Trainable runner reuse requires reset_config() to be "
                                           "implemented and return True.")
                             : "actor reuse failed: " + reply.error;
  FailTrial(t, why, false, ActorEnd::kGone);
}

void TrialRunner::ReleaseActor(Trial& t, bool reusable) {
  if (t.worker_id.empty()) return;
  const int64_t kill = KillAfterMs(book_.ExperimentOf(t));
  if (!(reusable && TryCacheActor(t))) executor_.StopActor(t, kill);
  if (auto r = resetting_.find(t.trial_id); r != resetting_.end()) {
    // Whichever key the actor has when the RESET settles, one STOP finds it.
    executor_.StopActorKey(r->second.worker_id, r->second.trial_id, r->second.attempt, 0, kill);
    resetting_.erase(r);
  }
  ClearActor(t);
}

void TrialRunner::ClearActor(Trial& t) {
  auto it = actors_by_worker_.find(t.worker_id);
  if (it != actors_by_worker_.end()) it->second.erase(t.trial_id);
  t.worker_id.clear();
  t.group_id = 0;
  t.actor_worker.clear();
  t.placement = Placement{};
  book_.MarkDirty(t);
}

bool TrialRunner::TryCacheActor(Trial& t) {
  if (t.phase == TrialPhase::kResetting) return false;
  const std::string& key = RequestKeyOf(t);
  const size_t demand = scheduler_->NumWaiting(key);
  // Ray caches only with pending demand for the same request, and at most
  // max_pending_trials actors.
  if (cache_.Count(key) >= demand || static_cast<int64_t>(cache_.size()) >= max_pending_) {
    return false;
  }
  executor_.ForgetTrial(t.trial_id);
  groups_.MarkCached(t.group_id);
  cache_.Put(key, CachedActor{t.worker_id, t.trial_id, t.attempt, t.group_id});
  return true;
}

void TrialRunner::ReconcileCachedActors() {
  const auto unwanted =
      cache_.TrimTo([&](const std::string& key) { return scheduler_->NumWaiting(key); });
  for (const CachedActor& a : unwanted) {
    const Trial* owner = FindTrial(a.trial_id);
    int64_t kill = owner == nullptr ? options_.force_cleanup_ms
                                    : KillAfterMs(book_.ExperimentOf(*owner));
    executor_.StopActorKey(a.worker_id, a.trial_id, a.attempt, a.group_id, kill);
  }
}

Status TrialRunner::PauseTrial(const TrialId& trial_id, bool hold) {
  Trial* t = book_.FindTrial(trial_id);
  if (t == nullptr) return Status::NotFound("unknown trial '" + trial_id + "'");
  switch (t->status) {
    case TrialStatus::kTerminated:
    case TrialStatus::kError:
      return Status::FailedPrecondition("trial " + trial_id + " is " + TrialStatusName(t->status));
    case TrialStatus::kRunning:
      t->pause_requested = true;
      t->held = hold;
      book_.MarkDirty(*t);
      return Status::Ok();
    case TrialStatus::kPending:
    case TrialStatus::kPaused:
      if (!hold) return Status::Ok();
      Dequeue(*t);
      book_.SetStatus(*t, TrialStatus::kPaused);
      t->held = true;
      book_.MarkDirty(*t);
      return Status::Ok();
  }
  return Status::Ok();
}

Status TrialRunner::Resume(const TrialId& trial_id) {
  Trial* t = book_.FindTrial(trial_id);
  if (t == nullptr) return Status::NotFound("unknown trial '" + trial_id + "'");
  if (t->status == TrialStatus::kRunning && t->pause_requested) {
    t->pause_requested = false;  // not paused yet: carry on
    t->held = false;
    book_.MarkDirty(*t);  // `held` is stored: a restart would bring the pause back
    return Status::Ok();
  }
  if (t->status != TrialStatus::kPaused) {
    return Status::FailedPrecondition("trial " + trial_id + " is " + TrialStatusName(t->status) +
                                      ", not PAUSED");
  }
  if (t->held) {
    t->held = false;
    book_.MarkDirty(*t);
    Enqueue(*t);
  }
  return Status::Ok();
}

void TrialRunner::StartPause(Trial& t, SendTiming timing) {
  if (!SetPhase(t, TrialPhase::kPausing)) return;
  t.pause_requested = false;
  executor_.Save(t, CheckpointStorage::kMemory, TimeoutsFor(t), timing);
}

void TrialRunner::OnPauseSaved(Trial& t, const std::string& payload) {
  const Experiment& e = book_.ExperimentOf(t);
  EndAttempt(t, e.spec.reuse_actors ? ActorEnd::kReuseOrStop : ActorEnd::kStop);
  t.memory_checkpoint = payload;
  book_.SetStatus(t, TrialStatus::kPaused);
  if (!t.held) Enqueue(t);
}

}  // namespace ztune::head
