#include "head/trial.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>
#include <utility>

#include "common/check.h"
#include "head/checkpoint_files.h"

namespace ztune::head {
namespace {

// A stored integer. nlohmann converts a float to an integer type with a plain
// cast, undefined when it is out of range, so a corrupt record holding 1e30
// where an integer belongs was UB instead of Corruption (found by
// tests/fuzz/fuzz_store_records). Throws as at() does, for the same catch.
template <class T>
T StoredInt(const Json& j) {
  if (!j.is_number_integer()) {
    throw Json::type_error::create(
        302, std::string("type must be an integer, but is ") + j.type_name(), &j);
  }
  return j.get<T>();
}

std::vector<int64_t> StoredInts(const Json& j) {
  if (!j.is_array()) {
    throw Json::type_error::create(
        302, std::string("type must be an array, but is ") + j.type_name(), &j);
  }
  std::vector<int64_t> out;
  for (const auto& e : j) out.push_back(StoredInt<int64_t>(e));
  return out;
}

// [[attempt, worker_id], ...], oldest first.
Json AttemptHostsToJson(const std::vector<AttemptHost>& hosts) {
  Json out = Json::array();
  for (const AttemptHost& h : hosts) out.push_back(Json::array({h.attempt, h.worker_id.str()}));
  return out;
}

}  // namespace

std::string ExperimentIdFor(uint64_t n) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "e%04llu", static_cast<unsigned long long>(n));
  return buf;
}

TrialId TrialIdFor(const std::string& experiment_id, uint64_t index) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "_%05llu", static_cast<unsigned long long>(index));
  return TrialId(experiment_id + buf);
}

std::optional<uint64_t> TrialIndexOf(const std::string& experiment_id, const TrialId& id) {
  const std::string& trial_id = id.str();
  const std::string prefix = experiment_id + "_";
  if (!trial_id.starts_with(prefix)) return std::nullopt;
  uint64_t index = 0;
  const char* end = trial_id.data() + trial_id.size();
  // from_chars refuses an empty rest.
  auto [stop, ec] = std::from_chars(trial_id.data() + prefix.size(), end, index);
  if (ec != std::errc() || stop != end || TrialIdFor(experiment_id, index) != id) {
    return std::nullopt;
  }
  return index;
}

Status CheckTrialIdIssued(const Experiment& e, const TrialId& id) {
  const std::string& trial_id = id.str();
  const std::optional<uint64_t> found = TrialIndexOf(e.experiment_id, id);
  if (!found) {
    return Status::Corruption("trial id '" + trial_id + "' is not an id experiment " +
                              e.experiment_id + " issues");
  }
  const uint64_t index = *found;
  if (index >= e.next_trial_index) {
    return Status::Corruption("trial " + trial_id + " is at index " + std::to_string(index) +
                              ", but experiment " + e.experiment_id + " issues its next trial at " +
                              std::to_string(e.next_trial_index) + " (the id would repeat)");
  }
  return Status::Ok();
}

Json PlacementToJson(const Placement& p) {
  Json out = Json::array();
  for (const auto& b : p.bundles) {
    out.push_back(Json{{"worker_id", b.worker_id},
                       {"resources", b.resources.ToJson()},
                       {"gpu_ids", b.gpu_ids}});
  }
  return out;
}

Result<Placement> PlacementFromJson(const Json& j) {
  Placement p;
  if (!j.is_array()) return Status::Corruption("placement is not an array");
  for (const auto& b : j) {
    ASSIGN_OR_RETURN(ResourceSet rs, ResourceSet::FromJson(b.at("resources")));
    p.bundles.push_back(BundlePlacement{WorkerId(b.at("worker_id").get<std::string>()), std::move(rs),
                                        StoredInts(b.at("gpu_ids"))});
  }
  return p;
}

Result<std::vector<AttemptHost>> AttemptHostsFromJson(const Json& j) {
  if (!j.is_array()) return Status::Corruption("trial record: attempt_hosts is not an array");
  std::vector<AttemptHost> hosts;
  for (const Json& e : j) {
    if (!e.is_array() || e.size() != 2 || !e[1].is_string()) {
      return Status::Corruption("trial record: an attempt_hosts entry is not [attempt, worker]");
    }
    AttemptHost h{StoredInt<uint64_t>(e[0]), WorkerId(e[1].get<std::string>())};
    if (!hosts.empty() && h.attempt <= hosts.back().attempt) {
      return Status::Corruption("trial record: attempt_hosts attempts do not increase");
    }
    hosts.push_back(std::move(h));
  }
  if (hosts.size() > Trial::kMaxAttemptHosts) {
    hosts.erase(hosts.begin(), hosts.end() - Trial::kMaxAttemptHosts);
  }
  return hosts;
}

const char* TrialStatusName(TrialStatus s) {
  switch (s) {
    case TrialStatus::kPending: return "PENDING";
    case TrialStatus::kRunning: return "RUNNING";
    case TrialStatus::kPaused: return "PAUSED";
    case TrialStatus::kTerminated: return "TERMINATED";
    case TrialStatus::kError: return "ERROR";
  }
  return "PENDING";
}

Result<TrialStatus> ParseTrialStatus(const std::string& s) {
  if (s == "PENDING") return TrialStatus::kPending;
  if (s == "RUNNING") return TrialStatus::kRunning;
  if (s == "PAUSED") return TrialStatus::kPaused;
  if (s == "TERMINATED") return TrialStatus::kTerminated;
  if (s == "ERROR") return TrialStatus::kError;
  return Status::Corruption("unknown trial status '" + s + "'");
}

Json ExploitsToJson(const std::vector<ExploitRecord>& exploits) {
  Json lineage = Json::array();
  for (const ExploitRecord& x : exploits) {
    lineage.push_back(Json{{"iteration", x.iteration},
                           {"donor", x.donor},
                           {"donor_iteration", x.donor_iteration},
                           {"old_config", x.old_config},
                           {"new_config", x.new_config},
                           {"time", x.time}});
  }
  return lineage;
}

Json Trial::ToJson() const {
  Json j{{"trial_id", trial_id},
         {"experiment_id", experiment_id},
         {"seq", seq},
         {"config", config},
         {"status", TrialStatusName(status)},
         {"attempt", attempt},
         {"num_failures", num_failures},
         {"iteration", iteration},
         {"last_result", last_result.Get()},
         {"next_checkpoint_id", next_checkpoint_id},
         {"error", error},
         {"start_time", start_time},
         {"end_time", end_time},
         {"num_restores", num_restores},
         {"checkpoints_given_up_through", checkpoints_given_up_through},
         {"held", held},
         {"restore_from", restore_from},
         {"actor_worker", actor_worker},
         {"placement", PlacementToJson(placement)},
         {"attempt_hosts", AttemptHostsToJson(attempt_hosts)},
         {"exports", exports}};
  if (!scheduler_state.is_null()) j["scheduler"] = scheduler_state;
  if (!restarted_as.empty()) j["restarted_as"] = restarted_as;
  if (!exploits.empty()) j["exploits"] = ExploitsToJson(exploits);
  if (checkpoint_requested) j["checkpoint_requested"] = true;
  // A running trial's pause decided (or under way: its memory SAVE is
  // runtime only) but not done: a restarted head that re-attaches the actor
  // still pauses it.
  if (pause_requested || phase == TrialPhase::kPausing) j["pause_requested"] = true;
  return j;
}

namespace {

// Appends one JSON object member by member, each value dumped in place by
// one nlohmann serializer for the whole object: a `Json(x).dump()` per member
// allocated a string, a shared output adapter and an indent buffer each time,
// and the record is written at every state change (12% of the head's loop
// at 10,000 one-iteration trials, three records each). Strict UTF-8, as
// dump() is. Keys are ASCII constants (no escaping needed) and must come in
// the order nlohmann's object (a std::map) would put them, so that the text
// equals a DOM's dump().
class ObjectWriter {
 public:
  explicit ObjectWriter(std::string& out)
      : out_(out),
        serializer_(nlohmann::detail::output_adapter<char, std::string>(out), ' ',
                    Json::error_handler_t::strict) {
    out_ += '{';
  }
  ~ObjectWriter() { out_ += '}'; }
  ObjectWriter(const ObjectWriter&) = delete;
  ObjectWriter& operator=(const ObjectWriter&) = delete;
  void Field(std::string_view key, const Json& value) {
    Key(key);
    serializer_.dump(value, /*pretty_print=*/false, /*ensure_ascii=*/false, /*indent_step=*/0);
  }
  void FieldText(std::string_view key, const LastResult& value) {
    Key(key);
    value.AppendText(out_);
  }

 private:
  void Key(std::string_view key) {
    if (!first_) out_ += ',';
    first_ = false;
    out_ += '"';
    out_ += key;
    out_ += "\":";
  }

  std::string& out_;
  nlohmann::detail::serializer<Json> serializer_;
  bool first_ = true;
};

}  // namespace

std::string Trial::ToRecordText() const {
  std::string out;
  out.reserve(1024);
  {
    // The keys of ToJson(), sorted (tests/head/trial_records_test.cc holds
    // the two to the same bytes).
    ObjectWriter w(out);
    w.Field("actor_worker", Json(actor_worker));
    w.Field("attempt", Json(attempt));
    w.Field("attempt_hosts", AttemptHostsToJson(attempt_hosts));
    if (checkpoint_requested) w.Field("checkpoint_requested", Json(true));
    w.Field("checkpoints_given_up_through", Json(checkpoints_given_up_through));
    w.Field("config", config);
    w.Field("end_time", Json(end_time));
    w.Field("error", Json(error));
    w.Field("experiment_id", Json(experiment_id));
    if (!exploits.empty()) w.Field("exploits", ExploitsToJson(exploits));
    w.Field("exports", exports);
    w.Field("held", Json(held));
    w.Field("iteration", Json(iteration));
    w.FieldText("last_result", last_result);
    w.Field("next_checkpoint_id", Json(next_checkpoint_id));
    w.Field("num_failures", Json(num_failures));
    w.Field("num_restores", Json(num_restores));
    if (pause_requested || phase == TrialPhase::kPausing) w.Field("pause_requested", Json(true));
    w.Field("placement", PlacementToJson(placement));
    if (!restarted_as.empty()) w.Field("restarted_as", Json(restarted_as));
    w.Field("restore_from", Json(restore_from));
    if (!scheduler_state.is_null()) w.Field("scheduler", scheduler_state);
    w.Field("seq", Json(seq));
    w.Field("start_time", Json(start_time));
    w.Field("status", Json(TrialStatusName(status)));
    w.Field("trial_id", Json(trial_id));
  }
  return out;
}

Status CheckStoredLastResult(const Json& r, const std::string& what) {
  // The runner reads these flags of the last result with value<bool>(): a
  // damaged record holding anything else threw out of a head restart
  // (found by tests/fuzz/fuzz_store_records). Results are checked on the
  // way in, so only damage gets here.
  if (!r.is_object()) return Status::Corruption(what + " is not an object");
  for (const char* flag : {"done", "should_checkpoint"}) {
    if (r.contains(flag) && !r[flag].is_boolean()) {
      return Status::Corruption(what + "." + flag + " is not a boolean");
    }
  }
  return Status::Ok();
}

Result<Trial> Trial::FromJson(const Json& j) { return FromJson(Json(j)); }

Result<Trial> Trial::FromJson(Json&& j) {
  try {
    Trial t;
    t.trial_id = TrialId(j.at("trial_id").get<std::string>());
    t.experiment_id = j.at("experiment_id").get<std::string>();
    t.seq = StoredInt<uint64_t>(j.at("seq"));
    t.config = std::move(j.at("config"));
    ASSIGN_OR_RETURN(t.status, ParseTrialStatus(j.at("status").get<std::string>()));
    t.attempt = StoredInt<uint64_t>(j.at("attempt"));
    t.num_failures = StoredInt<int64_t>(j.at("num_failures"));
    t.iteration = StoredInt<int64_t>(j.at("iteration"));
    Json& last_result = j.at("last_result");
    if (!last_result.is_null()) {
      RETURN_IF_ERROR(CheckStoredLastResult(last_result, "trial record: last_result"));
    }
    t.last_result = std::move(last_result);
    if (j.contains("checkpoints")) {  // schema 1: inline
      for (const auto& c : j["checkpoints"]) {
        ASSIGN_OR_RETURN(CheckpointRecord record, CheckpointRecordFromJson(c));
        t.checkpoints.push_back(record);
      }
    }
    t.next_checkpoint_id = StoredInt<uint64_t>(j.at("next_checkpoint_id"));
    t.error = j.at("error").get<std::string>();
    if (j.contains("error_log")) {  // schema 1: inline
      t.error_log = j["error_log"].get<std::vector<std::string>>();
    }
    t.start_time = j.at("start_time").get<double>();
    t.end_time = j.at("end_time").get<double>();
    t.num_restores = j.contains("num_restores") ? StoredInt<int64_t>(j["num_restores"]) : 0;
    t.checkpoints_given_up_through =
        j.contains("checkpoints_given_up_through")
            ? StoredInt<uint64_t>(j["checkpoints_given_up_through"])
            : 0;
    t.held = j.value("held", false);
    t.restore_from = TrialId(j.value("restore_from", std::string()));
    if (j.contains("restarted_as")) {
      if (!j["restarted_as"].is_string() || j["restarted_as"].get<std::string>().empty()) {
        return Status::Corruption("trial record: restarted_as is not a trial id");
      }
      t.restarted_as = TrialId(j["restarted_as"].get<std::string>());
    }
    t.actor_worker = WorkerId(j.value("actor_worker", std::string()));
    if (j.contains("placement")) {
      ASSIGN_OR_RETURN(t.placement, PlacementFromJson(j["placement"]));
    }
    if (j.contains("attempt_hosts")) {
      ASSIGN_OR_RETURN(t.attempt_hosts, AttemptHostsFromJson(j["attempt_hosts"]));
      if (!t.attempt_hosts.empty() && t.attempt_hosts.back().attempt > t.attempt) {
        return Status::Corruption("trial record: attempt_hosts names an attempt after the trial's");
      }
    }
    if (j.contains("exports")) t.exports = std::move(j["exports"]);
    if (j.contains("pause_requested")) {
      if (!j["pause_requested"].is_boolean()) {
        return Status::Corruption("trial record: pause_requested is not a boolean");
      }
      t.pause_requested = j["pause_requested"].get<bool>();
    }
    if (j.contains("checkpoint_requested")) {
      if (!j["checkpoint_requested"].is_boolean()) {
        return Status::Corruption("trial record: checkpoint_requested is not a boolean");
      }
      t.checkpoint_requested = j["checkpoint_requested"].get<bool>();
    }
    if (j.contains("exploits")) {
      const Json& lineage = j["exploits"];
      if (!lineage.is_array() || lineage.size() > kMaxExploits) {
        return Status::Corruption("trial record: exploits is not a list of at most " +
                                  std::to_string(kMaxExploits));
      }
      for (const Json& x : lineage) {
        if (!x.is_object() || !x.contains("donor") || !x["donor"].is_string() ||
            !x.contains("iteration") || !x["iteration"].is_number_integer() ||
            !x.contains("donor_iteration") || !x["donor_iteration"].is_number_integer() ||
            !x.contains("time") || !x["time"].is_number()) {
          return Status::Corruption("trial record: an exploits entry lacks its fields");
        }
        ExploitRecord r;
        r.iteration = x["iteration"].get<int64_t>();
        r.donor = TrialId(x["donor"].get<std::string>());
        r.donor_iteration = x["donor_iteration"].get<int64_t>();
        r.old_config = x.value("old_config", Json());
        r.new_config = x.value("new_config", Json());
        r.time = x["time"].get<double>();
        t.exploits.push_back(std::move(r));
      }
    }
    if (j.contains("scheduler")) {
      // Its fields are checked by the experiment's scheduler when it takes
      // the trial in (ExperimentScheduler::AddTrial).
      if (!j["scheduler"].is_object()) {
        return Status::Corruption("trial record: scheduler is not an object");
      }
      t.scheduler_state = std::move(j["scheduler"]);
    }
    return t;
  } catch (const Json::exception& e) {
    return Status::Corruption(std::string("trial record: ") + e.what());
  }
}

void Trial::NoteAttemptHost(const WorkerId& worker_id) {
  if (!attempt_hosts.empty() && attempt_hosts.back().attempt == attempt) {
    attempt_hosts.back().worker_id = worker_id;  // re-attached after a head restart
    return;
  }
  CHECK(attempt_hosts.empty() || attempt_hosts.back().attempt < attempt);
  attempt_hosts.push_back(AttemptHost{attempt, worker_id});
  if (attempt_hosts.size() > kMaxAttemptHosts) attempt_hosts.erase(attempt_hosts.begin());
}

const AttemptHost* Trial::HostOf(uint64_t a) const {
  for (const AttemptHost& h : attempt_hosts) {
    if (h.attempt == a) return &h;
  }
  return nullptr;
}

Json CheckpointRecordToJson(const CheckpointRecord& c) {
  Json score = std::isinf(c.score) ? Json(c.score > 0 ? "inf" : "-inf") : Json(c.score);
  Json j{{"id", c.id},
         {"iteration", c.iteration},
         {"score_valid", c.score_valid},
         {"score", std::move(score)}};
  if (!c.file.empty()) j["file"] = c.file;
  return j;
}

Result<CheckpointRecord> CheckpointRecordFromJson(const Json& c) {
  try {
    CheckpointRecord r{StoredInt<uint64_t>(c.at("id")),
                       StoredInt<int64_t>(c.at("iteration")),
                       c.at("score_valid").get<bool>(),
                       0,
                       {}};
    if (c.contains("file")) {
      r.file = c["file"].get<std::string>();
      if (!IsCheckpointFileName(r.file)) {
        return Status::Corruption("checkpoint record names no checkpoint file");
      }
    }
    const Json& score = c.at("score");
    if (score.is_string() && (score == "inf" || score == "-inf")) {
      r.score = (score == "inf" ? 1 : -1) * std::numeric_limits<double>::infinity();
    } else if (score.is_null()) {
      // An infinite score written before it was spelled out (JSON has no
      // infinity: it was written as null, and such a record failed the
      // whole load). Its sign is lost: it ranks as no score.
      r.score_valid = false;
    } else {
      r.score = score.get<double>();
    }
    return r;
  } catch (const Json::exception& e) {
    return Status::Corruption(std::string("checkpoint record: ") + e.what());
  }
}

const CheckpointRecord* Trial::NewestCheckpoint() const {
  const CheckpointRecord* best = nullptr;
  for (const auto& c : checkpoints) {
    if (best == nullptr || c.id > best->id) best = &c;
  }
  return best;
}

std::string RequestKeyFor(const ExperimentSpec& spec) {
  std::string key = spec.resources.Key();
  if (spec.reuse_actors) key += "\x1f" + spec.TrainableKey();
  return key;
}

Json Experiment::ToJson() const {
  Json j{{"experiment_id", experiment_id},
         {"spec", spec.ToJson()},
         {"finished", finished},
         {"stopped", stopped},
         {"created_at", created_at},
         {"next_variant", next_variant},
         {"total_variants", total_variants},
         {"added_trials", added_trials},
         {"next_trial_index", next_trial_index}};
  if (!owner.key.empty()) j["owner"] = Json{{"key", owner.key}, {"name", owner.name}};
  return j;
}

Result<Experiment> Experiment::FromJson(const Json& j) {
  try {
    Experiment e;
    e.experiment_id = j.at("experiment_id").get<std::string>();
    auto spec = ExperimentSpec::Parse(j.at("spec"), 0);
    if (!spec.ok()) return Status::Corruption("experiment spec: " + spec.status().message());
    e.spec = std::move(spec).value();
    e.finished = j.at("finished").get<bool>();
    e.stopped = j.at("stopped").get<bool>();
    e.created_at = j.at("created_at").get<double>();
    e.next_variant = StoredInt<uint64_t>(j.at("next_variant"));
    e.total_variants = StoredInt<uint64_t>(j.at("total_variants"));
    e.next_trial_index = StoredInt<uint64_t>(j.at("next_trial_index"));
    // Absent in records of heads before it (their added trials moved the
    // search's cursor and count instead).
    if (j.contains("added_trials")) e.added_trials = StoredInt<uint64_t>(j.at("added_trials"));
    // Absent in records of heads without CURVE, and of experiments submitted
    // to one started with --insecure.
    if (j.contains("owner")) {
      e.owner.key = j.at("owner").at("key").get<std::string>();
      e.owner.name = j.at("owner").at("name").get<std::string>();
    }
    return e;
  } catch (const Json::exception& ex) {
    return Status::Corruption(std::string("experiment record: ") + ex.what());
  }
}

}  // namespace ztune::head
