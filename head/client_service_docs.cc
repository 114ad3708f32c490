// The documents ClientService answers with (docs/client-protocol.md): a
// worker, the cluster's resources, an experiment, a trial. Built from the
// runner's state on the head's loop thread.
#include <utility>

#include "head/client_reply.h"
#include "head/client_service.h"

namespace ztune::head {

namespace {

// Resources with CPU and GPU always present (0 when none), whatever else.
Json WithCpuAndGpu(Json resources) {
  for (const char* k : {"CPU", "GPU"}) {
    if (!resources.contains(k)) resources[k] = 0;
  }
  return resources;
}

}  // namespace

Json ClientService::Workers() const {
  Json list = Json::array();
  for (const auto& [id, w] : runner_.registry().workers()) {
    list.push_back(
        Json{{"worker_id", id},
             {"name", w.name},
             {"host", w.host},
             {"pid", w.pid},
             {"alive", w.alive},
             {"resources_total", WithCpuAndGpu(w.total.ToJson())},
             {"resources_available",
              WithCpuAndGpu(w.alive ? runner_.ledger().AvailableOf(id).ToJson() : Json::object())},
             {"gpu_ids", w.gpu_ids},
             {"trainables", w.trainables},
             {"actors", runner_.ActorsOn(id)},
             {"last_seen_ms_ago", SteadyClock().NowMs() - w.last_seen}});
  }
  return Json{{"workers", std::move(list)}};
}

Json ClientService::ResourcesDoc() const {
  ResourceSet total = runner_.ledger().Total();
  ResourceSet used = runner_.groups().OccupiedResources();
  Json t = WithCpuAndGpu(total.ToJson());
  Json u = WithCpuAndGpu(used.ToJson());
  for (auto it = t.begin(); it != t.end(); ++it) {
    if (!u.contains(it.key())) u[it.key()] = 0;
  }
  return Json{{"used", std::move(u)}, {"total", std::move(t)}};
}

Json ClientService::ExperimentDoc(const Experiment& e) const {
  Json counts = Json::object();
  for (auto s : {TrialStatus::kPending, TrialStatus::kRunning, TrialStatus::kPaused,
                 TrialStatus::kTerminated, TrialStatus::kError}) {
    auto it = e.counts.find(s);
    counts[TrialStatusName(s)] = it == e.counts.end() ? 0 : it->second;
  }
  Json best;
  if (const Trial* b = runner_.book().BestTrial(e)) {
    best = Json{{"trial_id", b->trial_id},
                {"metric", e.spec.metric},
                {"value", *FindFlatKey(b->last_result.Get(), e.spec.metric)},
                {"iteration", b->iteration},
                {"config", b->config}};
  }
  return Json{
      {"experiment_id", e.experiment_id},
      {"name", e.spec.name},
      {"trainable", e.spec.TrainableLabel()},
      {"status", e.finished ? "TERMINATED" : "RUNNING"},
      {"metric", NullIfEmpty(e.spec.metric)},
      {"mode", NullIfEmpty(e.spec.mode)},
      {"created_at", e.created_at},
      {"total_trials", e.TotalTrials()},
      {"trial_counts", std::move(counts)},
      {"finished", e.finished},
      {"stopped", e.stopped},
      {"best_trial", std::move(best)},
      {"warnings", e.spec.Warnings()},
      {"owner", e.owner.key.empty() ? Json() : Json{{"name", e.owner.name}, {"key", e.owner.key}}},
      {"spec", e.spec.ToJson()}};
}

Json ClientService::TrialDoc(const Trial& t) const {
  const Experiment* e = runner_.FindExperiment(t.experiment_id);
  Json cps = Json::array();
  for (const auto& c : t.checkpoints) {
    cps.push_back(Json{{"id", c.id}, {"iteration", c.iteration}, {"storage", "persistent"}});
  }
  return Json{{"trial_id", t.trial_id},
              {"experiment_id", t.experiment_id},
              {"status", TrialStatusName(t.status)},
              {"phase", TrialPhaseName(t.phase)},
              {"config", t.config},
              {"num_failures", t.num_failures},
              {"attempt", t.attempt},
              {"iteration", t.iteration},
              {"last_result", t.last_result.Copy()},
              {"worker", NullIfEmpty(runner_.WorkerNameOf(t))},
              {"error", NullIfEmpty(t.error)},
              {"error_log", t.error_log},
              {"resources", e == nullptr ? Json() : e->spec.resources.ToJson()},
              {"checkpoints", std::move(cps)},
              {"num_restores", t.num_restores},
              {"held", t.held},
              {"restore_from", NullIfEmpty(t.restore_from)},
              {"restarted_as", NullIfEmpty(t.restarted_as)},
              {"exports", t.exports},
              {"scheduler", t.scheduler_state},
              {"exploits", ExploitsToJson(t.exploits)},
              {"start_time", t.start_time == 0 ? Json() : Json(t.start_time)},
              {"end_time", t.end_time == 0 ? Json() : Json(t.end_time)}};
}

}  // namespace ztune::head
