// TrialRunner, worker input: registrations' liveness, replies to the head's
// requests (create, restore, save, reset, stop) and RESULT batches, turned
// into trial transitions. The rest of the runner: trial_runner.cc.
#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/printable.h"
#include "head/trial_runner.h"
#include "storage/keys.h"

namespace ztune::head {

// ---------------------------------------------------------------- workers

void TrialRunner::HandleRegister(const protocol::Register& reg) {
  // Refused registrations change nothing; the worker keeps asking (every
  // heartbeat interval) and the warning says why.
  Result<ResourceSet> offered = WorkerRegistry::CheckOffer(reg);
  if (!offered.ok()) {
    peer_warnings_.Warn("REGISTER of worker '" + reg.worker_id +
                        "' refused: " + offered.status().message());
    return;
  }
  const WorkerId worker(reg.worker_id);  // the seam: CheckOffer and HeadServer checked it
  const WorkerInfo* before = registry_.Find(worker);
  const bool reconnected =
      before != nullptr && before->alive && before->incarnation != reg.incarnation;
  bool fresh = registry_.Register(reg);
  protocol::Registered registered;
  registered.worker_id = worker.str();
  registered.heartbeat_ms = options_.heartbeat_ms;
  registered.liveness = options_.liveness;
  registered.head_epoch = recovery_.epoch();
  registered.features = {protocol::kFeatureResults, protocol::kFeatureOneFrame};
  // Sent before anything below (re-attach TRAINs, STOPs): the worker holds
  // its replies and replays its outbox once it has this.
  sink_.SendToWorker(worker, protocol::Message{registered, {}}, SendTiming::kAfterCommit);
  if (fresh) {
    ledger_.AddWorker(worker, *offered, reg.gpu_ids,
                      std::set<std::string>(reg.trainables.begin(), reg.trainables.end()));
    groups_.NotifyCapacityChanged();
    RecomputeMaxPending();
    spdlog::info("worker {} registered ({} on {}, pid {}): {}, {} live actors",
                 EscapeControl(worker.str()), EscapeControl(reg.name), EscapeControl(reg.host),
                 reg.pid, offered->ToString(), reg.live_actors.size());
  }
  recovery_.OnRegistered(reg, reconnected);
}

bool TrialRunner::IsKnownWorker(const WorkerId& worker_id) const {
  return registry_.FindAlive(worker_id) != nullptr;
}

void TrialRunner::HandleHeartbeat(const WorkerId& worker_id) { registry_.Touch(worker_id); }

void TrialRunner::HandleDisconnect(const WorkerId& worker_id, const std::string& reason) {
  DropWorker(worker_id, "worker disconnected" + (reason.empty() ? "" : ": " + reason));
}

void TrialRunner::DropWorker(const WorkerId& worker_id, const std::string& why) {
  if (registry_.FindAlive(worker_id) == nullptr) return;
  registry_.MarkDead(worker_id);
  OnWorkerDead(worker_id, why);
}

Trial* TrialRunner::CurrentTrial(const TrialId& trial_id, uint64_t attempt) {
  Trial* t = book_.FindTrial(trial_id);
  if (t == nullptr || t->attempt != attempt || !PhaseHoldsActor(t->phase)) return nullptr;
  return t;
}

void TrialRunner::HandleReply(const WorkerId& worker_id, const protocol::Reply& reply,
                              std::string payload) {
  registry_.Touch(worker_id);
  std::string mismatch;
  auto f = executor_.Take(reply.rid, Answer{false, TrialId(reply.trial_id), reply.attempt, worker_id},
                          &mismatch);
  if (!f) {
    if (!mismatch.empty()) {
      peer_warnings_.Warn(mismatch + "; dropped");
    } else {
      spdlog::debug("reply to unknown or dropped request {} from {}", reply.rid, worker_id);
    }
    return;
  }
  if (f->type == FutureType::kStop) {
    if (!reply.ok) spdlog::warn("stop of trial {}: {}", f->trial_id, reply.error);
    actors_.OnStopDone(*f);
    return;
  }
  if (f->type == FutureType::kExport) {
    Trial* owner = book_.FindTrial(f->trial_id);
    if (owner == nullptr) return;
    if (!reply.ok) {
      spdlog::warn("export of trial {} failed: {}", f->trial_id, reply.error);
      owner->exports = Json{{"error", reply.error}};
    } else {
      owner->exports = reply.data.is_object() && reply.data.contains("exports")
                           ? reply.data["exports"]
                           : Json::object();
    }
    book_.MarkDirty(*owner);
    return;
  }
  Trial* t = CurrentTrial(f->trial_id, f->attempt);
  if (t == nullptr) return;  // stale attempt: fenced
  switch (f->type) {
    case FutureType::kCreate: launcher_.OnCreateReply(*t, reply); break;
    case FutureType::kRestore: launcher_.OnRestoreReply(*t, reply); break;
    case FutureType::kReset: launcher_.OnResetReply(*t, reply); break;
    case FutureType::kSave:
      if (f->storage == CheckpointStorage::kMemory) {
        if (t->phase != TrialPhase::kPausing) {
          lifecycle_.IllegalState("trial " + t->trial_id + ": a pause SAVE answered in phase " +
                                  TrialPhaseName(t->phase));
        } else if (!reply.ok || payload.empty()) {
          lifecycle_.FailTrial(*t, "pause checkpoint failed: " + reply.error, true);
        } else {
          checkpoints_.Adopt(payload);
          lifecycle_.FinishPause(*t, std::move(payload));
        }
      } else {
        OnSaveReply(*t, reply, std::move(payload));
      }
      break;
    default: break;  // TRAIN is answered by a RESULT batch (Executor::Take checked)
  }
}

// ---------------------------------------------------------------- results

void TrialRunner::HandleResultBatch(const WorkerId& worker_id, protocol::ResultBatch batch) {
  registry_.Touch(worker_id);
  uint64_t max_seq = 0;
  for (const auto& r : batch.results) max_seq = std::max(max_seq, r.seq);
  const TrialId trial_id(batch.trial_id);  // as the worker sent it
  Trial* t = CurrentTrial(trial_id, batch.attempt);
  if (t == nullptr || t->worker_id != worker_id) {
    // A stale attempt (fenced) or a replay for a finished trial: nothing is
    // stored; ACK so the worker's outbox does not replay it forever.
    if (max_seq > 0) acks_[{worker_id, trial_id, batch.attempt}] = max_seq;
    const Trial* known = FindTrial(trial_id);
    bool stale_actor = known != nullptr && !actors_.IsCached(worker_id, trial_id, batch.attempt) &&
                       (known->attempt != batch.attempt ||
                        (PhaseHoldsActor(known->phase) && known->worker_id != worker_id));
    if (stale_actor) {
      // An actor of an attempt the head gave up on (its worker was declared
      // dead, then woke up): it must not keep running.
      spdlog::warn("dropped results of {} attempt {} from {} (current attempt {}); stopping "
                   "that stale actor", batch.trial_id, batch.attempt, worker_id, known->attempt);
      protocol::Stop stop;  // rid 0: no reply wanted
      stop.trial_id = batch.trial_id;
      stop.attempt = batch.attempt;
      stop.kill_after_ms = options_.force_cleanup_ms;
      sink_.SendToWorker(worker_id, protocol::Message{stop, {}}, SendTiming::kAfterCommit);
    }
    return;
  }
  // Replays after a reconnect or a restart have no future.
  std::string mismatch;
  auto f = executor_.Take(batch.rid, Answer{true, trial_id, batch.attempt, worker_id},
                          &mismatch);
  if (!mismatch.empty()) peer_warnings_.Warn(mismatch + "; its results are kept as a replay");
  if (f && f->started_ms) t->train_round_trip_ms = clock_.NowMs() - *f->started_ms;
  Experiment& e = book_.ExperimentOf(*t);
  BatchOutcome outcome = ResultProcessor::Process(t->trial_id, t->iteration, t->resume_iteration,
                                                  e.spec, std::move(batch.results));
  bool stop = outcome.stop;
  bool checkpoint = outcome.checkpoint;
  const std::string& error = outcome.error;
  std::vector<AcceptedResult>& accepted = outcome.accepted;
  // The scheduler sees each result in order that does not stop the trial by
  // itself (Ray's _process_trial_result: done or a stopping criterion is a
  // STOP without asking it); its first STOP or PAUSE ends the batch there.
  bool pause = false;
  std::optional<Exploit> exploit;
  // What of the trial's record the scheduler may change with a result; the
  // record is rewritten only if it did (the results are stored by themselves).
  const Json scheduler_state_before = t->scheduler_state;
  const bool checkpoint_requested_before = t->checkpoint_requested;
  const bool pause_requested_before = t->pause_requested;
  // FIFO judges no result: no DOM is built for it.
  const bool judged = scheduler_->JudgesResults(*t);
  for (size_t i = 0; i < accepted.size() && judged; ++i) {
    if (accepted[i].done) break;
    const SchedulerDecision d =
        scheduler_->OnTrialResult(*t, ResultProcessor::StoredJson(t->trial_id, accepted[i]));
    if (d == SchedulerDecision::kContinue) continue;
    switch (d) {
      case SchedulerDecision::kContinue: break;
      case SchedulerDecision::kStop: stop = true; break;
      case SchedulerDecision::kPause: pause = true; break;
      case SchedulerDecision::kCheckpointContinue:
      case SchedulerDecision::kCheckpointPause:
        // Stored with the result, so a re-attach after a head crash still
        // takes it (CheckpointManager::Due).
        checkpoint = true;
        t->checkpoint_requested = true;
        pause = d == SchedulerDecision::kCheckpointPause;
        break;
      case SchedulerDecision::kExploit:
        exploit = scheduler_->TakeExploit(*t);
        if (!exploit) lifecycle_.IllegalState("trial " + t->trial_id + ": kExploit without one");
        break;
    }
    accepted.resize(i + 1);
    if (stop) {
      // Ray: a scheduler's STOP makes the result done, so that it is stored
      // as the last (a head restarted before the STOP went out finishes the
      // trial from it, DriveAfterReattach) and checkpoint_at_end applies.
      accepted[i].done = true;
      accepted[i].stored = ResultProcessor::StoredValue(t->trial_id, accepted[i]);
      checkpoint = checkpoint || e.spec.checkpoint.at_end;
    }
    break;
  }
  if (pause) t->pause_requested = true;  // a scheduler's pause: queued again, not held
  if (t->pause_requested != pause_requested_before ||
      t->checkpoint_requested != checkpoint_requested_before ||
      t->scheduler_state != scheduler_state_before) {
    book_.MarkDirty(*t);
  }
  if (error.empty() && !accepted.empty()) {
    for (const AcceptedResult& r : accepted) {
      batch_.Put(storage::Family::kResults, storage::ResultKey(t->trial_id, r.iteration), r.stored);
      if (results_dir_ != nullptr) {
        results_dir_->Add(e.experiment_id, e.spec.name, e.spec.TrainableLabel(), t->trial_id.str(),
                          t->config, r.stored);
      }
    }
    t->iteration = accepted.back().iteration;
    t->last_result.SetStored(std::move(accepted.back().stored), e.spec.metric,
                             accepted.back().metric);
    book_.NoteLastResult(e, *t);
    book_.NoteProgress(*t);
  }
  if (max_seq > 0) acks_[{worker_id, t->trial_id, t->attempt}] = max_seq;
  if (!error.empty()) {
    lifecycle_.FailTrial(*t, error, false);
    return;
  }
  if (batch.failed) {
    lifecycle_.FailTrial(*t, batch.error.empty() ? "step failed" : batch.error, true);
    return;
  }
  if (exploit) {
    ApplyExploit(*t, *exploit);
    return;
  }
  if (!f) {
    if (t->phase == TrialPhase::kAwaitingReplay && waits_.ReplayReached(t->trial_id, t->iteration)) {
      // The outbox replay of a re-attached actor is in: drive it from here.
      recovery_.OnReplayReached(*t);
      return;
    }
    // A replay (after a reconnect or a head restart): the live TRAIN's own
    // batch drives the trial, but a replayed stop ends it here, so that no
    // iteration past the stop is ever stored.
    if (stop) lifecycle_.FinishTrial(*t, TrialStatus::kTerminated);
    return;
  }
  if (checkpoint) {
    if (!lifecycle_.SetPhase(*t, TrialPhase::kSaving)) return;
    t->stop_after_save = stop;
    executor_.Save(*t, CheckpointStorage::kPersistent, lifecycle_.TimeoutsFor(*t));
    return;
  }
  if (stop) {
    lifecycle_.FinishTrial(*t, TrialStatus::kTerminated);
  } else {
    const bool long_steps =
        options_.train_with_ack_ms > 0 && t->train_round_trip_ms >= options_.train_with_ack_ms;
    lifecycle_.ContinueOrPause(*t, long_steps ? SendTiming::kWithAck : SendTiming::kNow);
  }
}

void TrialRunner::OnSaveReply(Trial& t, const protocol::Reply& reply, std::string payload) {
  if (t.phase != TrialPhase::kSaving) {
    lifecycle_.IllegalState("trial " + t.trial_id + ": a persistent SAVE answered in phase " +
                            TrialPhaseName(t.phase));
    return;
  }
  const bool stop = t.stop_after_save;
  if (!reply.ok) {
    lifecycle_.FailTrial(t, "checkpoint save failed: " + reply.error, true);
    return;
  }
  if (payload.empty()) {
    lifecycle_.FailTrial(t, "checkpoint save returned no bytes", true);
    return;
  }
  int64_t iteration = t.iteration;
  // The worker's own figure (a SAVE after a restore before any new result is
  // at the restored iteration), but never past what the head knows of.
  if (reply.data.is_object() && reply.data.contains("iteration") &&
      reply.data["iteration"].is_number_integer()) {
    iteration = std::clamp<int64_t>(reply.data["iteration"].get<int64_t>(), 0,
                                    std::max(t.iteration, t.resume_iteration));
  }
  AddCheckpoint(t, std::move(payload), iteration);
  if (stop) {
    lifecycle_.FinishTrial(t, TrialStatus::kTerminated);
  } else {
    lifecycle_.ContinueOrPause(t);
  }
}

void TrialRunner::AddCheckpoint(Trial& t, std::string bytes, int64_t iteration) {
  checkpoints_.Add(t, book_.ExperimentOf(t).spec.checkpoint, std::move(bytes), iteration);
  book_.MarkDirty(t);
}

}  // namespace ztune::head
