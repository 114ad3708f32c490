#include "head/client_service.h"

#include <algorithm>

#include "common/base64.h"
#include "head/checkpoint_files.h"
#include "head/client_args.h"
#include "head/client_reply.h"
#include "head/stored_result.h"
#include "head/trial_doc_text.h"
#include "storage/keys.h"

namespace ztune::head {
namespace {

// Reads are answered on the head's loop, between commits and heartbeats: one
// reply walks at most this many trials or results (a client pages on).
constexpr uint64_t kMaxTrialsPerPage = 500;
constexpr uint64_t kMaxResultsPerPage = 1000;
// Checkpoint bytes per reply (base64 makes the JSON a third larger). A page
// is held about six times on its way out (read, base64, the JSON text, the
// socket's copies): with 8 MiB pages a download of a 256 MiB checkpoint
// raised the head's peak RSS by 63 MiB (LargeCheckpointE2ETest), with
// 4 MiB by half that.
constexpr uint64_t kMaxCheckpointBytesPerPage = 4ull << 20;

// `offset` and `limit` of a paged read (docs/client-protocol.md, "Paging").
struct Page {
  uint64_t offset = 0;
  uint64_t limit = 0;
};

Result<Page> PageArgs(const Json& request, uint64_t max_limit) {
  Page page{0, max_limit};
  for (const char* key : {"offset", "limit"}) {
    auto it = request.find(key);
    if (it == request.end() || it->is_null()) continue;
    if (!it->is_number_unsigned() && !(it->is_number_integer() && it->get<int64_t>() >= 0)) {
      return ztune::Status::InvalidArgument(std::string("argument '") + key +
                                            "' must be an integer >= 0");
    }
    (std::string(key) == "offset" ? page.offset : page.limit) = it->get<uint64_t>();
  }
  if (page.limit == 0 || page.limit > max_limit) page.limit = max_limit;
  return page;
}

// The paging fields of a reply that listed items [offset, offset + n) of `total`.
void AddPaging(Json& reply, uint64_t offset, uint64_t n, uint64_t total) {
  reply["offset"] = offset;
  reply["total"] = total;
  reply["next_offset"] = offset + n < total ? Json(offset + n) : Json();
}

}  // namespace

bool ClientService::IsMutation(const std::string& op) {
  return op == "submit" || op == "add_trial" || op == "stop" || op == "pause" || op == "resume" ||
         op == "put_code";
}

const Experiment* ClientService::TargetOf(const std::string& op, const Json& request) const {
  const char* field = op == "add_trial"        ? "experiment_id"
                      : request.contains("id") ? "id"
                                               : "trial_id";
  auto it = request.find(field);
  if (it == request.end() || !it->is_string()) return nullptr;
  const std::string id = it->get<std::string>();
  if (const Experiment* e = runner_.FindExperiment(id)) return e;
  const Trial* t = runner_.FindTrial(TrialId(id));
  return t == nullptr ? nullptr : runner_.FindExperiment(t->experiment_id);
}

ztune::Status ClientService::Authorize(const std::string& op, const Json& request,
                                       const ClientCaller& caller) const {
  if (!IsMutation(op) || caller.role == ClientRole::kAdmin) return ztune::Status::Ok();
  const std::string who = "client '" + caller.name + "' (role " + ClientRoleName(caller.role) + ")";
  if (caller.role < ClientRole::kSubmit) {
    return ztune::Status::PermissionDenied(who + " may not " + op +
                                           ": that needs role submit or admin");
  }
  // An upload belongs to no experiment (and equal code is stored once for all).
  if (op == "submit" || op == "put_code") return ztune::Status::Ok();
  // A trial added with restore_from starts from that trial's checkpoint: it
  // must be the caller's too, or a submit key could read another user's
  // model through its own experiment.
  if (op == "add_trial") {
    auto from = request.find("restore_from");
    if (from != request.end() && from->is_string()) {
      const Trial* t = runner_.FindTrial(TrialId(from->get<std::string>()));
      const Experiment* source = t == nullptr ? nullptr : runner_.FindExperiment(t->experiment_id);
      if (source != nullptr && source->owner.key != caller.key) {
        return ztune::Status::PermissionDenied(who + " may not restore from trial " + t->trial_id +
                                               " of experiment " + source->experiment_id +
                                               ", which is not its own");
      }
    }
  }
  const Experiment* e = TargetOf(op, request);
  if (e == nullptr || e->owner.key == caller.key) return ztune::Status::Ok();
  return ztune::Status::PermissionDenied(
      who + " may not " + op + " in experiment " + e->experiment_id + ", which belongs to " +
      (e->owner.key.empty() ? std::string("no client key (submitted without one)")
                            : "'" + e->owner.name + "'") +
      ": role submit changes only its own experiments (admin changes any)");
}

Json ClientService::Handle(const Json& request, const ClientCaller& caller) {
  Json reply;
  if (request.is_object() && request.contains("rid")) reply["rid"] = request["rid"];
  if (!request.is_object() || !request.contains("op") || !request["op"].is_string()) {
    reply["ok"] = false;
    reply["error"] = {{"code", "InvalidArgument"},
                      {"message", "a request is a JSON object with a string \"op\""}};
    return reply;
  }
  // The seam for nlohmann's exceptions: a wrong type anywhere in a request is
  // the client's error, never the head's crash.
  Result<Json> result = ztune::Status::Internal("not handled");
  try {
    const std::string op = request["op"].get<std::string>();
    if (ztune::Status allowed = Authorize(op, request, caller); !allowed.ok()) {
      result = allowed;
    } else {
      result = Dispatch(op, request, caller);
    }
  } catch (const Json::exception& e) {
    result = ztune::Status::InvalidArgument(std::string("bad request: ") + e.what());
  }
  if (!result.ok())
    return ClientErrorReply(reply.contains("rid") ? reply["rid"] : Json(), result.status());
  // Moved, not copied: a page of trial documents is most of a reply.
  Json out = std::move(result).value();
  for (auto it = out.begin(); it != out.end(); ++it) reply[it.key()] = std::move(it.value());
  reply["ok"] = true;
  return reply;
}

Result<Json> ClientService::Dispatch(const std::string& op, const Json& request,
                                     const ClientCaller& caller) {
  if (op == "submit") {
    if (!request.contains("spec")) return ztune::Status::InvalidArgument("missing argument 'spec'");
    ASSIGN_OR_RETURN(Json reply,
                     runner_.Submit(request["spec"], ExperimentOwner{caller.key, caller.name}));
    const Experiment* e = runner_.FindExperiment(reply.value("experiment_id", std::string()));
    if (e != nullptr) reply["warnings"] = e->spec.Warnings();
    return reply;
  }
  if (op == "put_code") {
    ASSIGN_OR_RETURN(std::string code, StringArg(request, "code"));
    ASSIGN_OR_RETURN(uint64_t size, UIntArg(request, "size"));
    ASSIGN_OR_RETURN(uint64_t offset, UIntArg(request, "offset"));
    std::string data;
    if (auto it = request.find("data"); it != request.end() && !it->is_null()) {
      if (!it->is_string()) return ztune::Status::InvalidArgument("argument 'data' must be base64");
      Result<std::string> decoded = Base64Decode(it->get<std::string>());
      if (!decoded.ok()) {
        return ztune::Status::InvalidArgument("argument 'data': " + decoded.status().message());
      }
      data = std::move(decoded).value();
    }
    return runner_.code().Put(code, size, offset, data);
  }
  if (op == "add_trial") return AddTrial(request);
  if (op == "wait_trials") return WaitTrials(request);
  if (op == "stop") {
    ASSIGN_OR_RETURN(std::string id, StringArg(request, "id"));
    ASSIGN_OR_RETURN(auto stopped, runner_.Stop(id));
    return Json{{"stopped", stopped}};
  }
  if (op == "resume" && request.contains("id") && request["id"].is_string() &&
      runner_.FindExperiment(request["id"].get<std::string>()) != nullptr) {
    std::string errored;
    if (request.contains("errored") && !request["errored"].is_null()) {
      ASSIGN_OR_RETURN(errored, StringArg(request, "errored"));
    }
    bool unfinished = true;
    if (request.contains("unfinished")) {
      if (!request["unfinished"].is_boolean()) {
        return ztune::Status::InvalidArgument("'unfinished' must be true or false");
      }
      unfinished = request["unfinished"].get<bool>();
    }
    return runner_.ResumeExperiment(request["id"].get<std::string>(), errored, unfinished);
  }
  if (op == "pause" || op == "resume") {
    ASSIGN_OR_RETURN(TrialId id, TrialIdArg(request, request.contains("id") ? "id" : "trial_id"));
    // Name what the id is, or looks like (an experiment id has no '_'):
    // `resume e0099` is an unknown experiment, not an unknown trial.
    if (runner_.FindTrial(id) == nullptr) {
      if (runner_.FindExperiment(id) != nullptr) {
        return ztune::Status::InvalidArgument("'" + id + "' is an experiment; " + op +
                                              " takes a trial id");
      }
      if (id.str().find('_') == std::string::npos) {
        return ztune::Status::NotFound("unknown experiment '" + id + "'");
      }
    }
    RETURN_IF_ERROR(op == "pause" ? runner_.PauseTrial(id, /*hold=*/true) : runner_.Resume(id));
    return Json{{"trial_id", id}, {"status", TrialStatusName(runner_.FindTrial(id)->status)}};
  }
  if (op == "experiments") {
    Json list = Json::array();
    for (const auto& [id, e] : runner_.experiments()) list.push_back(ExperimentDoc(e));
    return Json{{"experiments", std::move(list)}};
  }
  if (op == "experiment") {
    ASSIGN_OR_RETURN(std::string id, StringArg(request, "experiment_id"));
    const Experiment* e = runner_.FindExperiment(id);
    if (e == nullptr) return ztune::Status::NotFound("unknown experiment '" + id + "'");
    return Json{{"experiment", ExperimentDoc(*e)}};
  }
  if (op == "status") return Status(request);
  if (op == "trials") {
    ASSIGN_OR_RETURN(TrialSelection sel, SelectTrials(request));
    Json list = Json::array();
    for (const Trial* t : sel.trials) list.push_back(TrialDoc(*t));
    Json reply{{"trials", std::move(list)}};
    AddPaging(reply, sel.offset, sel.trials.size(), sel.total);
    return reply;
  }
  if (op == "trial") {
    ASSIGN_OR_RETURN(TrialId id, TrialIdArg(request, "trial_id"));
    const Trial* t = runner_.FindTrial(id);
    if (t == nullptr) return ztune::Status::NotFound("unknown trial '" + id + "'");
    return Json{{"trial", TrialDoc(*t)}};
  }
  if (op == "results") {
    ASSIGN_OR_RETURN(TrialId id, TrialIdArg(request, "trial_id"));
    ASSIGN_OR_RETURN(Page page, PageArgs(request, kMaxResultsPerPage));
    return Results(id, page.offset, page.limit);
  }
  if (op == "workers") return Workers();
  if (op == "checkpoint") {
    ASSIGN_OR_RETURN(TrialId id, TrialIdArg(request, "trial_id"));
    ASSIGN_OR_RETURN(Page page, PageArgs(request, kMaxCheckpointBytesPerPage));
    std::optional<int64_t> iteration;
    if (auto it = request.find("iteration"); it != request.end() && !it->is_null()) {
      if (!it->is_number_integer()) {
        return ztune::Status::InvalidArgument("argument 'iteration' must be an integer");
      }
      iteration = it->get<int64_t>();
    }
    return Checkpoint(id, iteration, page.offset, page.limit);
  }
  if (op == "logs") {
    // HeadServer relays these to workers (PlanLogRead, LogRelay); a `logs`
    // request never reaches Dispatch there.
    return ztune::Status::Internal("op 'logs' is relayed by the head server, not handled here");
  }
  if (op == "dashboard_login" || op == "head_stats") {
    return ztune::Status::Internal("op '" + op + "' is answered by the head server");
  }
  return ztune::Status::InvalidArgument(
      "unknown op '" + op +
      "' (known: submit, add_trial, wait_trials, experiments, experiment, status, trials, trial, "
      "results, checkpoint, logs, workers, stop, pause, resume, put_code, dashboard_login, "
      "head_stats)");
}

Result<LogRead> ClientService::PlanLogRead(const Json& request) const {
  // The seam for nlohmann's exceptions, as in Handle.
  try {
    ASSIGN_OR_RETURN(TrialId id, TrialIdArg(request, "trial_id"));
    ASSIGN_OR_RETURN(Page page, PageArgs(request, protocol::kMaxReadLogBytes));
    LogRead read;
    read.trial_id = id;
    read.offset = page.offset;
    read.limit = page.limit;
    read.stream = "stdout";
    if (auto it = request.find("stream"); it != request.end() && !it->is_null()) {
      if (!it->is_string() || (*it != "stdout" && *it != "stderr")) {
        return ztune::Status::InvalidArgument("argument 'stream' must be \"stdout\" or \"stderr\"");
      }
      read.stream = it->get<std::string>();
    }
    std::optional<uint64_t> attempt;
    if (auto it = request.find("attempt"); it != request.end() && !it->is_null()) {
      if (!it->is_number_unsigned() || it->get<uint64_t>() == 0) {
        return ztune::Status::InvalidArgument("argument 'attempt' must be an integer >= 1");
      }
      attempt = it->get<uint64_t>();
    }
    const Trial* t = runner_.FindTrial(id);
    if (t == nullptr) return ztune::Status::NotFound("unknown trial '" + id + "'");
    Json attempts = Json::array();
    for (const AttemptHost& h : t->attempt_hosts) attempts.push_back(h.attempt);
    const AttemptHost* host = nullptr;
    if (attempt.has_value()) {
      host = t->HostOf(*attempt);
      if (host == nullptr) {
        return ztune::Status::NotFound(
            "trial " + id + " has no output of attempt " + std::to_string(*attempt) +
            " (attempts with output: " + (attempts.empty() ? "none" : attempts.dump()) + ")");
      }
    } else if (!t->attempt_hosts.empty()) {
      host = &t->attempt_hosts.back();
    }
    if (host != nullptr) {
      read.attempt = host->attempt;
      read.worker_id = host->worker_id;
    }
    // An attempt without an actor yet (a trial still PENDING) reads as empty.
    read.may_grow =
        !IsFinished(t->status) &&
        (host == nullptr || (t->status == TrialStatus::kRunning && host->attempt == t->attempt));
    const WorkerInfo* w = host != nullptr ? runner_.registry().Find(host->worker_id) : nullptr;
    read.doc = Json{{"trial_id", id},
                    {"attempt", read.attempt},
                    {"attempts", std::move(attempts)},
                    {"stream", read.stream},
                    {"trial_status", TrialStatusName(t->status)},
                    {"worker", w != nullptr ? Json(w->name) : NullIfEmpty(read.worker_id.str())}};
    return read;
  } catch (const Json::exception& e) {
    return ztune::Status::InvalidArgument(std::string("bad request: ") + e.what());
  }
}

Result<ClientService::TrialSelection> ClientService::SelectTrials(const Json& request) const {
  ASSIGN_OR_RETURN(std::string id, StringArg(request, "experiment_id"));
  ASSIGN_OR_RETURN(Page page, PageArgs(request, kMaxTrialsPerPage));
  const Experiment* e = runner_.FindExperiment(id);
  if (e == nullptr) return ztune::Status::NotFound("unknown experiment '" + id + "'");
  TrialSelection sel;
  sel.offset = page.offset;
  sel.total = e->trial_ids.size();
  for (uint64_t i = page.offset; i < sel.total && i - page.offset < page.limit; ++i) {
    sel.trials.push_back(runner_.FindTrial(e->trial_ids[i]));
  }
  return sel;
}

Result<ClientService::TrialSelection> ClientService::SelectStatus(const Json& request) const {
  ASSIGN_OR_RETURN(Page page, PageArgs(request, kMaxTrialsPerPage));
  TrialSelection sel;
  sel.offset = page.offset;
  // The experiments' summaries in full; their trials, in experiment order,
  // one page at a time.
  auto add = [&](const Experiment& e) {
    sel.experiments.push_back(&e);
    const uint64_t n = e.trial_ids.size();
    const uint64_t first = std::max(sel.total, page.offset);
    for (uint64_t i = first - sel.total; i < n && sel.trials.size() < page.limit; ++i) {
      sel.trials.push_back(runner_.FindTrial(e.trial_ids[i]));
    }
    sel.total += n;
  };
  if (request.contains("experiment_id") && !request["experiment_id"].is_null()) {
    ASSIGN_OR_RETURN(std::string id, StringArg(request, "experiment_id"));
    const Experiment* e = runner_.FindExperiment(id);
    if (e == nullptr) return ztune::Status::NotFound("unknown experiment '" + id + "'");
    add(*e);
  } else {
    for (const auto& [id, e] : runner_.experiments()) add(e);
  }
  return sel;
}

Json ClientService::StatusRest(const TrialSelection& sel) const {
  Json exps = Json::array();
  for (const Experiment* e : sel.experiments) exps.push_back(ExperimentDoc(*e));
  Json reply{{"experiments", std::move(exps)},
             {"resources", ResourcesDoc()},
             {"workers_alive", runner_.registry().NumAlive()}};
  AddPaging(reply, sel.offset, sel.trials.size(), sel.total);
  return reply;
}

Result<Json> ClientService::Status(const Json& request) {
  ASSIGN_OR_RETURN(TrialSelection sel, SelectStatus(request));
  Json trials = Json::array();
  for (const Trial* t : sel.trials) trials.push_back(TrialDoc(*t));
  Json reply = StatusRest(sel);
  reply["trials"] = std::move(trials);
  return reply;
}

std::string ClientService::HandleText(const Json& request, const ClientCaller& caller) {
  const bool page_read = request.is_object() && request.contains("op") &&
                         (request["op"] == "trials" || request["op"] == "status");
  if (page_read) {
    try {
      const std::string op = request["op"].get<std::string>();
      Result<TrialSelection> sel = ztune::Status::PermissionDenied("");
      if (Authorize(op, request, caller).ok()) {
        sel = op == "trials" ? SelectTrials(request) : SelectStatus(request);
      }
      if (sel.ok()) {
        Json rest = op == "trials" ? Json::object() : StatusRest(*sel);
        if (op == "trials") AddPaging(rest, sel->offset, sel->trials.size(), sel->total);
        if (request.contains("rid")) rest["rid"] = request["rid"];
        rest["ok"] = true;
        // {"trials":[...], then the rest's members: clients read an object,
        // not its key order.
        std::string out = "{\"trials\":[";
        TrialDocText docs(runner_, out);
        for (size_t i = 0; i < sel->trials.size(); ++i) {
          if (i > 0) out += ',';
          docs.Append(*sel->trials[i]);
        }
        out += "],";
        const std::string rest_text = rest.dump(-1, ' ', false, Json::error_handler_t::replace);
        out.append(rest_text, 1);  // without its '{'
        return out;
      }
    } catch (const Json::exception&) {
      // Handle answers it (and says why).
    }
  }
  return Handle(request, caller).dump(-1, ' ', false, Json::error_handler_t::replace);
}

Result<Json> ClientService::Results(const TrialId& trial_id, uint64_t offset,
                                    uint64_t limit) {
  if (runner_.FindTrial(trial_id) == nullptr) {
    return ztune::Status::NotFound("unknown trial '" + trial_id + "'");
  }
  Json list = Json::array();
  ztune::Status parse_error;
  uint64_t seen = 0;
  RETURN_IF_ERROR(runner_.store().Scan(
      storage::Family::kResults, storage::TrialPrefix(trial_id),
      [&](std::string_view, std::string_view v) {
        if (seen++ < offset) return true;
        if (list.size() >= limit) return false;
        Result<Json> r = ParseStoredResult(v);
        if (!r.ok()) {
          parse_error = ztune::Status::Corruption("stored result of " + trial_id + " " +
                                                  r.status().message());
          return false;
        }
        list.push_back(std::move(r).value());
        return true;
      }));
  RETURN_IF_ERROR(parse_error);
  Json reply{{"trial_id", trial_id}, {"results", list}};
  const bool more = list.size() >= limit && seen > offset + list.size();
  reply["offset"] = offset;
  reply["next_offset"] = more ? Json(offset + list.size()) : Json();
  return reply;
}

Result<Json> ClientService::Checkpoint(const TrialId& trial_id, std::optional<int64_t> iteration,
                                       uint64_t offset, uint64_t limit) {
  const Trial* t = runner_.FindTrial(trial_id);
  if (t == nullptr) return ztune::Status::NotFound("unknown trial '" + trial_id + "'");
  const CheckpointRecord* chosen = nullptr;
  std::string kept;
  for (const auto& c : t->checkpoints) {
    kept += (kept.empty() ? "" : ", ") + std::to_string(c.iteration);
    if (iteration.has_value() ? c.iteration == *iteration
                              : chosen == nullptr || c.id > chosen->id) {
      chosen = &c;
    }
  }
  if (chosen == nullptr) {
    if (!iteration.has_value()) {
      return ztune::Status::NotFound("trial " + trial_id + " has no persistent checkpoint");
    }
    return ztune::Status::NotFound("trial " + trial_id + " has no checkpoint at iteration " +
                                   std::to_string(*iteration) +
                                   " (kept: " + (kept.empty() ? std::string("none") : kept) + ")");
  }
  if (cached_checkpoint_.trial_id != trial_id || cached_checkpoint_.id != chosen->id) {
    // One checkpoint is read once and served page by page; a client reads
    // its pages in a row, so one entry is enough.
    cached_checkpoint_ = {};
    ASSIGN_OR_RETURN(std::optional<std::string> bytes,
                     runner_.ReadCheckpoint(trial_id, chosen->id));
    if (!bytes.has_value()) {
      return ztune::Status::NotFound("checkpoint " + std::to_string(chosen->id) + " of trial " +
                                     trial_id + " is missing from the store");
    }
    ASSIGN_OR_RETURN(auto ref, DecodeCheckpointFileRef(*bytes));
    std::unique_ptr<protocol::PayloadSource> source;
    if (ref.has_value()) {
      // Served page by page from the file: never whole in memory.
      CheckpointFiles* files = runner_.checkpoint_files();
      if (files == nullptr) {
        return ztune::Status::FailedPrecondition("checkpoint " + std::to_string(chosen->id) +
                                                 " of trial " + trial_id +
                                                 " is a file and this head keeps none");
      }
      ASSIGN_OR_RETURN(source, files->Open(*ref));
    } else {
      source = std::make_unique<protocol::StringPayloadSource>(std::move(*bytes));
    }
    cached_checkpoint_ = {trial_id, chosen->id, std::move(source)};
  }
  protocol::PayloadSource& bytes = *cached_checkpoint_.bytes;
  const uint64_t size = bytes.size();
  const uint64_t from = std::min<uint64_t>(offset, size);
  const uint64_t n = std::min<uint64_t>(limit, size - from);
  std::string page;
  if (ztune::Status s = bytes.ReadAt(from, n, page); !s.ok()) {
    cached_checkpoint_ = {};
    return s;
  }
  Json reply{{"trial_id", trial_id},
             {"iteration", chosen->iteration},
             {"checkpoint_id", chosen->id},
             {"size", size},
             {"offset", from},
             {"data", Base64Encode(page)}};
  reply["next_offset"] = from + n < size ? Json(from + n) : Json();
  // The last page was served: a whole checkpoint (up to the largest a worker
  // may send) must not stay in the head's memory until the next read.
  if (from + n >= size) cached_checkpoint_ = {};
  return reply;
}

}  // namespace ztune::head
