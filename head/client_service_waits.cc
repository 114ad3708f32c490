// The client ops an external searcher drives (ask/tell): add_trial into a
// free trial slot, and wait_trials. Both may wait on the head (HeadServer
// holds them in ClientWaits until Waits says they need not wait any more).
#include <string>

#include "head/client_args.h"
#include "head/client_service.h"

namespace ztune::head {

std::optional<TimeMs> ClientService::Waits(const Json& request) const {
  // Anything malformed is handled at once, and Handle says what is wrong.
  try {
    if (!request.is_object()) return std::nullopt;
    auto op = request.find("op");
    if (op == request.end() || !op->is_string()) return std::nullopt;
    Result<std::optional<uint64_t>> wait = OptionalUIntArg(request, "wait_ms", kMaxWaitMs);
    if (!wait.ok() || !wait->has_value() || **wait == 0) return std::nullopt;
    const TimeMs wait_ms = static_cast<TimeMs>(**wait);
    if (*op == "add_trial") {
      Result<std::string> id = StringArg(request, "experiment_id");
      if (!id.ok()) return std::nullopt;
      const Experiment* e = runner_.FindExperiment(*id);
      // What cannot be added now is refused now.
      if (e == nullptr || !e->AcceptsTrials() || runner_.HasTrialSlot(*e)) return std::nullopt;
      return wait_ms;
    }
    if (*op == "wait_trials") {
      Result<std::vector<TrialId>> ids = TrialIdsArg(request, "trial_ids", kMaxWaitTrialIds);
      if (!ids.ok()) return std::nullopt;
      for (const TrialId& id : *ids) {
        const Trial* t = runner_.FindTrial(id);
        if (t == nullptr || IsFinished(t->status)) return std::nullopt;
      }
      return wait_ms;
    }
  } catch (const Json::exception&) {
  }
  return std::nullopt;
}

Result<Json> ClientService::AddTrial(const Json& request) {
  ASSIGN_OR_RETURN(std::string exp, StringArg(request, "experiment_id"));
  if (!request.contains("config")) return ztune::Status::InvalidArgument("missing argument 'config'");
  TrialId restore_from;
  if (request.contains("restore_from") && !request["restore_from"].is_null()) {
    ASSIGN_OR_RETURN(restore_from, TrialIdArg(request, "restore_from"));
  }
  ASSIGN_OR_RETURN(std::optional<uint64_t> wait_ms,
                   OptionalUIntArg(request, "wait_ms", kMaxWaitMs));
  if (wait_ms.has_value()) {
    // Into a free slot only: the head held the request until one came free
    // or wait_ms passed (an experiment that cannot take the trial at all is
    // refused by AddTrial below, with its reason).
    const Experiment* e = runner_.FindExperiment(exp);
    if (e != nullptr && e->AcceptsTrials() && !runner_.HasTrialSlot(*e)) {
      const int64_t limit = e->spec.ConcurrencyLimit();
      return ztune::Status::Unavailable(
          "no trial slot of experiment " + exp + " came free within " +
          std::to_string(*wait_ms) + " ms (" + std::to_string(e->live_trials) + " trials live" +
          (limit > 0 ? " of at most " + std::to_string(limit) : std::string()) + ", " +
          std::to_string(runner_.book().num_pending()) +
          " PENDING in the head); nothing was added: add it again");
    }
  }
  ASSIGN_OR_RETURN(TrialId id, runner_.AddTrial(exp, request["config"], restore_from));
  return Json{{"trial_id", id}};
}

Result<Json> ClientService::WaitTrials(const Json& request) const {
  ASSIGN_OR_RETURN(std::vector<TrialId> ids, TrialIdsArg(request, "trial_ids", kMaxWaitTrialIds));
  RETURN_IF_ERROR(OptionalUIntArg(request, "wait_ms", kMaxWaitMs).status());
  Json finished = Json::array();
  Json unfinished = Json::array();
  for (const TrialId& id : ids) {
    const Trial* t = runner_.FindTrial(id);
    if (t == nullptr) return ztune::Status::NotFound("unknown trial '" + id + "'");
    if (IsFinished(t->status)) {
      finished.push_back(TrialDoc(*t));
    } else {
      unfinished.push_back(id);
    }
  }
  return Json{{"finished", std::move(finished)}, {"unfinished", std::move(unfinished)}};
}

}  // namespace ztune::head
