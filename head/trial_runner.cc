#include "head/trial_runner.h"

#include "common/check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/printable.h"
#include "head/trial_records.h"
#include "storage/keys.h"

namespace ztune::head {

TrialRunner::TrialRunner(storage::Store& store, CommandSink& sink, const Clock& clock,
                         RunnerOptions options, std::unique_ptr<TrialScheduler> scheduler)
    : store_(store),
      sink_(sink),
      clock_(clock),
      options_(options),
      registry_(clock, options.heartbeat_ms * options.liveness),
      groups_(ledger_, clock, PlacementGroupOptions{16, options.pg_removal_delay_ms}),
      executor_(sink, clock),
      scheduler_(scheduler != nullptr ? std::move(scheduler) : std::make_unique<SchedulerSet>()),
      peer_warnings_(clock) {
  RecomputeMaxPending();
  if (options_.strict_invariants) book_.VerifyRecords();
  lifecycle_.set_exploit_applier([this](Trial& t, const Exploit& x) { ApplyExploit(t, x); });
  lifecycle_.set_memory_checkpoint_dropper(
      [this](Trial& t) { checkpoints_.DropMemoryCheckpoint(t); });
  scheduler_->set_checkpoint_lookup([this](const TrialId& id, int64_t iteration) {
    const Trial* t = book_.FindTrial(id);
    if (t == nullptr) return false;
    for (const CheckpointRecord& c : t->checkpoints) {
      if (c.iteration == iteration && c.id > t->checkpoints_given_up_through) return true;
    }
    return false;
  });
}

// ---------------------------------------------------------------- lifecycle

void TrialRunner::FailExpiredRequests() {
  for (const Future& f : executor_.TakeExpiredRequests()) {
    Trial* t = book_.FindTrial(f.trial_id);
    if (t == nullptr || !PhaseHoldsActor(t->phase) || t->attempt != f.attempt) continue;
    const char* key = f.type == FutureType::kTrain  ? "step_s"
                      : f.type == FutureType::kSave ? "checkpoint_s"
                                                    : "setup_s";
    char budget[32];
    std::snprintf(budget, sizeof(budget), "%g", static_cast<double>(f.budget_ms) / 1000.0);
    lifecycle_.FailTrial(*t,
                         std::string(FutureTypeName(f.type)) + " of attempt " +
                             std::to_string(f.attempt) + " got no answer from worker " +
                             f.worker_id + " within " + budget + " s (spec timeouts." + key +
                             "); its actor is stopped",
                         true);
  }
}

void TrialRunner::OnWorkerDead(const WorkerId& worker_id, const std::string& cause) {
  const WorkerInfo* w = registry_.Find(worker_id);
  std::string who = worker_id + (w != nullptr && !w->host.empty() ? " on " + w->host : "");
  spdlog::warn("worker {} is gone: {}", who, cause);
  // Stops sent there will never be answered: the actors are gone with the
  // worker, and so are their groups' resources there.
  for (const Future& f : executor_.TakeStopsOnWorker(worker_id)) actors_.OnStopDone(f);
  // Groups with a bundle there whose actors live on: every actor of such a
  // group ends, and its group is returned when it is gone; an actor on a
  // live worker keeps its resources booked until its STOP completes (they
  // were freed at once, under an actor still running).
  const std::vector<uint64_t> broken = groups_.OnWorkerRemoved(worker_id);
  ledger_.RemoveWorker(worker_id);
  RecomputeMaxPending();
  const std::set<uint64_t> broken_set(broken.begin(), broken.end());
  for (const TrialId& id : actors_.OnWorkerGone(worker_id, broken_set)) {
    Trial* t = book_.FindTrial(id);
    if (t == nullptr || !PhaseHoldsActor(t->phase)) continue;
    groups_.ReturnInUse(t->group_id);  // nothing to stop: the worker is gone
    lifecycle_.FailTrial(*t, "worker " + who + " died: " + cause, true, ActorEnd::kGone);
  }
  for (uint64_t gid : broken) {
    const auto* g = groups_.Find(gid);
    if (g == nullptr || g->state != PlacementGroupManager::State::kInUse) continue;
    Trial* t = book_.FindTrial(g->trial_id);
    // A group whose actor is already stopping is returned by its STOP.
    if (t == nullptr || !PhaseHoldsActor(t->phase) || t->group_id != gid) continue;
    lifecycle_.FailTrial(
        *t, "worker " + who + ", which held a bundle of its placement group, died: " + cause,
        true);  // stops its actor; the group returns when that is done
  }
}

// ---------------------------------------------------------------- turn

bool TrialRunner::HasTrialSlot(const Experiment& e) const {
  const int64_t limit = e.spec.ConcurrencyLimit();
  return book_.num_pending() < max_pending_ && (limit == 0 || e.live_trials < limit);
}

void TrialRunner::GenerateTrials() {
  for (const std::string& id : searcher_.SearchingNow()) {
    Experiment* found = book_.FindExperiment(id);
    CHECK(found != nullptr);  // the searcher knows only experiments of the book
    Experiment& e = *found;
    while (!e.SearchFinished() && HasTrialSlot(e)) {
      std::optional<Json> config = searcher_.Suggest(e);
      if (!config) break;  // an external search: its configs come through add_trial
      lifecycle_.NewTrial(e, std::move(*config));
    }
    if (e.SearchFinished()) {
      book_.MarkDirty(e);
      searcher_.End(e.experiment_id);
      lifecycle_.MaybeFinishExperiment(e);
    }
  }
}

void TrialRunner::StageAndReconcile() {
  std::vector<std::string> idle;  // shapes with nothing waiting, staged or cached
  scheduler_->ForEachWaitingRequest(
      [&](const std::string& key, const PlacementRequest& request, size_t waiting) {
        const int64_t cached = static_cast<int64_t>(actors_.NumCached(key));
        int64_t have = groups_.NumStaging(key) + groups_.NumReady(key) + cached;
        const int64_t want = static_cast<int64_t>(waiting);
        while (have < want && groups_.CanStage()) {
          groups_.Stage(request, key);
          ++have;
        }
        while (have > want && groups_.UnstageOne(key)) --have;  // cached actors: Reconcile
        if (want == 0 && have == 0) idle.push_back(key);
      });
  for (const std::string& key : idle) scheduler_->ForgetRequest(key);
}

void TrialRunner::Tick() {
  TimeMs now = clock_.NowMs();
  // The loop turns at least once per heartbeat (NextTimerMs), so an idle
  // turn comes a heartbeat and a little after the last; a stall is a turn
  // missed entirely. (At `> heartbeat_ms` every idle turn of a head with a
  // heartbeat up to its 100 ms poll cap counted as a stall, restarted the
  // silence clocks, and a dead worker was never declared dead.)
  if (last_tick_ != 0 && now - last_tick_ > 2 * options_.heartbeat_ms) {
    // The loop did not run (SIGSTOP, an overloaded machine, a long commit):
    // what workers sent meanwhile may not be read yet, and their silence is
    // the head's own. Liveness is judged from what arrives from now on.
    spdlog::info("head loop did not run for {} ms; worker liveness restarts from now",
                 now - last_tick_);
    registry_.RestartSilenceClocks();
  }
  last_tick_ = now;
  if (now - last_expiry_check_ >= options_.heartbeat_ms) {
    last_expiry_check_ = now;
    for (const auto& id : registry_.ExpireSilent()) {
      OnWorkerDead(id, "no heartbeat for " + std::to_string(registry_.expiry_ms()) + " ms");
    }
  }
  for (const Future& f : executor_.TakeExpiredStops()) {
    spdlog::warn("stop of trial {} on {} not confirmed within its deadline; releasing its "
                 "resources", f.trial_id, f.worker_id);
    actors_.OnStopDone(f);
  }
  FailExpiredRequests();
  recovery_.ExpireWaits();
  lifecycle_.ApplySchedulerActions();  // before starts: a release queues its trial
  GenerateTrials();
  StageAndReconcile();
  groups_.Update();
  launcher_.StartReadyTrials();
  actors_.TrimCache();
  CheckInsufficientResources();
}

void TrialRunner::CheckInsufficientResources() {
  if (!starvation_.Due(clock_.NowMs(), book_.num_running() > 0, book_.num_pending() > 0)) return;
  bool warned = false;
  scheduler_->ForEachWaitingRequest(
      [&](const std::string&, const PlacementRequest& request, size_t waiting) {
        if (warned || waiting == 0) return;
        warned = true;
        spdlog::warn("no trial has been running for {} s while {} trials wait: they ask for {} "
                     "but the largest worker has {} ({} workers alive). Add workers or reduce "
                     "the experiment's resources.",
                     starvation_.starved_ms() / 1000, waiting, request.ToString(),
                     ledger_.LargestWorkerString(), registry_.NumAlive());
      });
}

void TrialRunner::RecomputeMaxPending() {
  if (options_.max_pending_trials > 0) {
    max_pending_ = options_.max_pending_trials;
  } else {
    double cpus = ledger_.Total().Get("CPU");
    max_pending_ = std::max<int64_t>(16, static_cast<int64_t>(1.1 * cpus));
  }
  groups_.set_max_staging(max_pending_);
  lifecycle_.set_max_cached_actors(max_pending_);
}

void TrialRunner::FlushTo(storage::WriteBatch& batch) {
  // Decisions made since the turn's Tick (results, client requests) commit
  // with what caused them.
  lifecycle_.ApplySchedulerActions();
  if (options_.strict_invariants) {
    for (const auto& [id, e] : book_.experiments()) {
      for (const TrialId& tid : e.trial_ids) lifecycle_.CheckInvariants(book_.TrialRef(tid));
    }
  }
  book_.WriteDirty(batch_);
  if (batch.empty()) {
    batch = std::move(batch_);  // the usual case: no copy of result bytes
  } else {
    for (const auto& op : batch_.ops()) {
      if (op.is_delete) {
        batch.Delete(op.family, op.key);
      } else {
        batch.Put(op.family, op.key, op.value);
      }
    }
  }
  batch_.Clear();
  // One ACK per worker (acks_ is ordered by worker first).
  std::vector<std::pair<WorkerId, protocol::Ack>> per_worker;
  for (const auto& [k, seq] : acks_) {
    const auto& [worker, trial_id, attempt] = k;
    if (!per_worker.empty() && per_worker.back().first == worker) {
      per_worker.back().second.more.push_back(protocol::AckEntry{trial_id.str(), attempt, seq});
    } else {
      per_worker.emplace_back(worker, protocol::Ack{trial_id.str(), attempt, seq, {}, {}});
    }
  }
  for (auto& [worker, ack] : per_worker) {
    sink_.SendToWorker(worker, protocol::Message{std::move(ack), {}}, SendTiming::kAfterCommit);
  }
  acks_.clear();
}

// ---------------------------------------------------------------- client API

Result<Json> TrialRunner::Submit(const Json& spec, const ExperimentOwner& owner) {
  Result<Json> submitted = control_.Submit(spec, owner);
  if (submitted.ok()) GenerateTrials();
  return submitted;
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
