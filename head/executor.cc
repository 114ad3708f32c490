#include "head/executor.h"

#include <algorithm>

#include "common/check.h"

namespace ztune::head {
namespace {
// Time a worker gets beyond the kill deadline to report that it killed the actor.
constexpr TimeMs kStopReplyGraceMs = 1000;
// A TRAIN's time: a step's budget for each result it asks for, plus the
// buffer's time; saturates (a buffer length is any int64).
TimeMs TrainBudgetMs(const RequestTimeouts& t, const TrainBuffer& buffer) {
  if (t.step_ms <= 0) return 0;
  const double ms = static_cast<double>(t.step_ms) * static_cast<double>(buffer.length) +
                    buffer.time_s * 1000.0;
  return ms >= 1e15 ? TimeMs{1'000'000'000'000'000} : static_cast<TimeMs>(ms);
}

// A future about `trial`'s current attempt.
Future FutureFor(FutureType type, const Trial& trial, TimeMs budget_ms,
                 CheckpointStorage storage = CheckpointStorage::kPersistent,
                 TrialId old_trial_id = {},
                 uint64_t old_attempt = 0) {
  Future f;
  f.type = type;
  f.budget_ms = budget_ms;
  f.trial_id = trial.trial_id;
  f.attempt = trial.attempt;
  f.storage = storage;
  f.old_trial_id = std::move(old_trial_id);
  f.old_attempt = old_attempt;
  return f;
}
}  // namespace

const char* CheckpointStorageName(CheckpointStorage s) {
  return s == CheckpointStorage::kMemory ? "memory" : "persistent";
}

const char* FutureTypeName(FutureType t) {
  switch (t) {
    case FutureType::kCreate: return "CREATE_ACTOR";
    case FutureType::kRestore: return "RESTORE";
    case FutureType::kTrain: return "TRAIN";
    case FutureType::kSave: return "SAVE";
    case FutureType::kStop: return "STOP";
    case FutureType::kExport: return "EXPORT";
    case FutureType::kReset: return "RESET";
  }
  return "?";
}

uint64_t Executor::Send(const WorkerId& worker_id, Future f, protocol::Body body,
                        std::string payload, SendTiming timing) {
  uint64_t rid = next_rid_++;
  std::visit(
      [rid](auto& b) {
        if constexpr (requires { b.rid; }) b.rid = rid;
      },
      body);
  f.worker_id = worker_id;
  f.request = body;
  const TrialId trial_id = f.trial_id;
  const bool driver = f.type != FutureType::kStop && f.type != FutureType::kExport;
  if (f.type == FutureType::kStop) stop_deadlines_.emplace(f.deadline, rid);
  if (driver) f.deadline = 0;  // armed when it is the oldest
  futures_.emplace(rid, std::move(f));
  if (driver) {
    by_trial_[trial_id].insert(rid);
    ArmOldest(trial_id);
  }
  sink_.SendToWorker(worker_id, protocol::Message{std::move(body), std::move(payload)}, timing);
  return rid;
}

void Executor::StartTrial(const Trial& trial, const ActorCode& code, const WorkerId& worker_id,
                          const std::map<std::string, double>& bundle0,
                          const std::vector<int64_t>& gpu_ids, std::string* checkpoint,
                          const TrainBuffer& buffer, const RequestTimeouts& timeouts) {
  protocol::CreateActor create;
  create.trial_id = trial.trial_id;
  create.attempt = trial.attempt;
  create.trainable = code.trainable;
  create.entry = code.entry;
  create.code = code.code;
  create.config = trial.config;
  create.resources = bundle0;
  create.gpu_ids = gpu_ids;
  // After the commit that stores the attempt: no worker ever hosts an
  // attempt the store does not know, so a restarted head never names one twice.
  Send(worker_id, FutureFor(FutureType::kCreate, trial, timeouts.setup_ms), create, {},
       SendTiming::kAfterCommit);
  if (checkpoint != nullptr) {
    protocol::Restore restore;
    restore.trial_id = trial.trial_id;
    restore.attempt = trial.attempt;
    Send(worker_id, FutureFor(FutureType::kRestore, trial, timeouts.setup_ms), restore,
         std::move(*checkpoint), SendTiming::kAfterCommit);
  }
  protocol::Train train;
  train.trial_id = trial.trial_id;
  train.attempt = trial.attempt;
  train.buffer_length = buffer.length;
  train.buffer_time_s = buffer.time_s;
  Send(worker_id, FutureFor(FutureType::kTrain, trial, TrainBudgetMs(timeouts, buffer)), train,
       {}, SendTiming::kAfterCommit);
}

void Executor::ContinueTraining(const Trial& trial, const TrainBuffer& buffer,
                                const RequestTimeouts& timeouts, SendTiming timing) {
  protocol::Train train;
  train.trial_id = trial.trial_id;
  train.attempt = trial.attempt;
  train.buffer_length = buffer.length;
  train.buffer_time_s = buffer.time_s;
  Send(trial.worker_id, FutureFor(FutureType::kTrain, trial, TrainBudgetMs(timeouts, buffer)),
       train, {}, timing);
}

void Executor::Reset(const Trial& trial, const TrialId& old_trial_id, uint64_t old_attempt,
                     const RequestTimeouts& timeouts) {
  protocol::Reset reset;
  reset.trial_id = old_trial_id;
  reset.attempt = old_attempt;
  reset.new_trial_id = trial.trial_id;
  reset.new_attempt = trial.attempt;
  reset.config = trial.config;
  // After the commit, as CREATE_ACTOR (see there).
  Send(trial.worker_id,
       FutureFor(FutureType::kReset, trial, timeouts.setup_ms, CheckpointStorage::kPersistent,
                 old_trial_id, old_attempt),
       reset, {}, SendTiming::kAfterCommit);
}

void Executor::ResumeOnActor(const Trial& trial, std::string* checkpoint,
                             const TrainBuffer& buffer, const RequestTimeouts& timeouts) {
  if (checkpoint != nullptr) {
    protocol::Restore restore;
    restore.trial_id = trial.trial_id;
    restore.attempt = trial.attempt;
    Send(trial.worker_id,
         FutureFor(FutureType::kRestore, trial, timeouts.setup_ms), restore,
         std::move(*checkpoint), SendTiming::kNow);
  }
  ContinueTraining(trial, buffer, timeouts);
}

void Executor::Export(const Trial& trial, const std::vector<std::string>& formats) {
  protocol::Export e;
  e.trial_id = trial.trial_id;
  e.attempt = trial.attempt;
  e.formats = formats;
  Send(trial.worker_id,
       FutureFor(FutureType::kExport, trial, 0), e, {},
       SendTiming::kNow);
}

void Executor::Save(const Trial& trial, CheckpointStorage storage,
                    const RequestTimeouts& timeouts, SendTiming timing) {
  protocol::Save save;
  save.trial_id = trial.trial_id;
  save.attempt = trial.attempt;
  save.storage = CheckpointStorageName(storage);
  Send(trial.worker_id,
       FutureFor(FutureType::kSave, trial, timeouts.checkpoint_ms, storage), save, {},
       timing);
}

void Executor::StopActor(const Trial& trial, int64_t kill_after_ms) {
  DropTrialFutures(trial.trial_id);
  StopActorKey(trial.worker_id, trial.trial_id, trial.attempt, trial.group_id, kill_after_ms);
}

void Executor::StopActorKey(const WorkerId& worker_id, const TrialId& trial_id,
                            uint64_t attempt, uint64_t group_id, int64_t kill_after_ms) {
  protocol::Stop stop;
  stop.trial_id = trial_id;
  stop.attempt = attempt;
  stop.kill_after_ms = kill_after_ms;
  Future f;
  f.type = FutureType::kStop;
  f.trial_id = trial_id;
  f.attempt = attempt;
  f.group_id = group_id;
  f.deadline = clock_.NowMs() + kill_after_ms + kStopReplyGraceMs;
  Send(worker_id, f, stop, {}, SendTiming::kAfterCommit);
}

void Executor::SetEpoch(uint64_t epoch) {
  CHECK(futures_.empty());
  next_rid_ = ((epoch & ((uint64_t{1} << (64 - kEpochShift)) - 1)) << kEpochShift) | 1;
}

std::optional<Future> Executor::Take(uint64_t rid, const Answer& answer, std::string* mismatch) {
  auto it = futures_.find(rid);
  if (it == futures_.end()) return std::nullopt;
  const Future& known = it->second;
  std::string why;
  if ((known.type == FutureType::kTrain) != answer.is_result_batch) {
    why = std::string("a ") + (answer.is_result_batch ? "RESULT" : "REPLY") + " cannot answer " +
          FutureTypeName(known.type);
  } else if (known.worker_id != answer.worker_id) {
    why = "sent to worker " + known.worker_id;
  } else if ((known.trial_id != answer.trial_id || known.attempt != answer.attempt) &&
             (known.type != FutureType::kReset || known.old_trial_id != answer.trial_id ||
              known.old_attempt != answer.attempt)) {
    why = "sent for trial " + known.trial_id + " attempt " + std::to_string(known.attempt);
  }
  if (!why.empty()) {
    if (mismatch != nullptr) {
      *mismatch = "answer to request " + std::to_string(rid) + " (" + FutureTypeName(known.type) +
                  ") from worker " + answer.worker_id + " for trial " + answer.trial_id +
                  " attempt " + std::to_string(answer.attempt) + " does not match it: " + why;
    }
    return std::nullopt;
  }
  Future f = std::move(it->second);
  futures_.erase(it);
  Unindex(rid, f);
  if (f.type != FutureType::kStop) {
    auto bt = by_trial_.find(f.trial_id);
    if (bt != by_trial_.end()) {
      bt->second.erase(rid);
      if (bt->second.empty()) {
        by_trial_.erase(bt);
      } else {
        ArmOldest(f.trial_id);  // the worker starts on the next one now
      }
    }
  }
  return f;
}

void Executor::Unindex(uint64_t rid, const Future& f) {
  if (f.deadline == 0) return;
  auto& index = f.type == FutureType::kStop ? stop_deadlines_ : request_deadlines_;
  auto [lo, hi] = index.equal_range(f.deadline);
  for (auto it = lo; it != hi; ++it) {
    if (it->second == rid) {
      index.erase(it);
      return;
    }
  }
}

void Executor::ArmOldest(const TrialId& trial_id) {
  auto bt = by_trial_.find(trial_id);
  if (bt == by_trial_.end() || bt->second.empty()) return;
  const uint64_t rid = *bt->second.begin();
  auto it = futures_.find(rid);
  CHECK(it != futures_.end());  // by_trial_ indexes futures_
  Future& f = it->second;
  if (f.started_ms) return;
  f.started_ms = clock_.NowMs();
  if (f.budget_ms <= 0) return;
  f.deadline = *f.started_ms + f.budget_ms;
  request_deadlines_.emplace(f.deadline, rid);
}

std::vector<Future> Executor::TakeExpiredRequests() {
  std::vector<Future> out;
  const TimeMs now = clock_.NowMs();
  while (!request_deadlines_.empty() && request_deadlines_.begin()->first <= now) {
    const auto [deadline, rid] = *request_deadlines_.begin();
    request_deadlines_.erase(request_deadlines_.begin());
    auto it = futures_.find(rid);
    CHECK(it != futures_.end() && it->second.deadline == deadline);  // Unindex keeps it exact
    Future f = std::move(it->second);
    futures_.erase(it);
    auto bt = by_trial_.find(f.trial_id);
    if (bt != by_trial_.end()) {
      bt->second.erase(rid);
      if (bt->second.empty()) by_trial_.erase(bt);
    }
    out.push_back(std::move(f));
  }
  return out;
}

const Future* Executor::Find(uint64_t rid) const {
  auto it = futures_.find(rid);
  return it == futures_.end() ? nullptr : &it->second;
}

std::vector<uint64_t> Executor::DriverRidsOf(const TrialId& trial_id) const {
  auto bt = by_trial_.find(trial_id);
  if (bt == by_trial_.end()) return {};
  return std::vector<uint64_t>(bt->second.begin(), bt->second.end());  // rids grow: send order
}

std::vector<uint64_t> Executor::StopRidsOn(const WorkerId& worker_id) const {
  std::vector<uint64_t> out;
  for (const auto& [deadline, rid] : stop_deadlines_) {
    auto f = futures_.find(rid);
    if (f != futures_.end() && f->second.worker_id == worker_id) out.push_back(rid);
  }
  return out;
}

void Executor::Resend(uint64_t rid) {
  auto it = futures_.find(rid);
  CHECK(it != futures_.end());
  if (Future& f = it->second; f.type != FutureType::kStop && f.started_ms) {
    f.started_ms = clock_.NowMs();
    if (f.deadline != 0) {
      Unindex(rid, f);
      f.deadline = *f.started_ms + f.budget_ms;
      request_deadlines_.emplace(f.deadline, rid);
    }
  }
  sink_.SendToWorker(it->second.worker_id, protocol::Message{it->second.request, {}},
                     SendTiming::kAfterCommit);
}

std::vector<Future> Executor::TakeExpiredStops() {
  std::vector<Future> out;
  TimeMs now = clock_.NowMs();
  while (!stop_deadlines_.empty() && stop_deadlines_.begin()->first <= now) {
    uint64_t rid = stop_deadlines_.begin()->second;
    stop_deadlines_.erase(stop_deadlines_.begin());
    auto it = futures_.find(rid);
    CHECK(it != futures_.end());  // Unindex keeps the index exact
    out.push_back(std::move(it->second));
    futures_.erase(it);
  }
  return out;
}

std::vector<Future> Executor::TakeStopsOnWorker(const WorkerId& worker_id) {
  std::vector<Future> out;
  for (auto it = stop_deadlines_.begin(); it != stop_deadlines_.end();) {
    auto f = futures_.find(it->second);
    if (f != futures_.end() && f->second.worker_id == worker_id) {
      out.push_back(std::move(f->second));
      futures_.erase(f);
      it = stop_deadlines_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

void Executor::DropTrialFutures(const TrialId& trial_id) {
  auto bt = by_trial_.find(trial_id);
  if (bt == by_trial_.end()) return;
  for (uint64_t rid : bt->second) {
    auto it = futures_.find(rid);
    if (it == futures_.end()) continue;
    Unindex(rid, it->second);
    futures_.erase(it);
  }
  by_trial_.erase(bt);
}

double Executor::BufferTime(double min_s, double max_s) const {
  double by_load = static_cast<double>(futures_.size() / 10);
  return std::max(min_s, std::min(max_s, by_load));
}

}  // namespace ztune::head
