#include "head/experiment_spec.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <set>

#include "common/printable.h"
#include "common/protocol/messages.h"
#include "common/sha256.h"
#include "head/search_space.h"
#include "head/spec_fields.h"

namespace ztune::head {
namespace {

void FlattenStop(const Json& j, const std::string& prefix,
                 std::vector<std::pair<std::string, double>>& out, Status& status) {
  for (auto it = j.begin(); it != j.end() && status.ok(); ++it) {
    std::string key = prefix.empty() ? it.key() : prefix + "/" + it.key();
    if (it.value().is_object()) {
      FlattenStop(it.value(), key, out, status);
    } else if (it.value().is_number() && std::isfinite(it.value().get<double>())) {
      out.emplace_back(key, it.value().get<double>());
    } else if (it.value().is_boolean()) {
      out.emplace_back(key, it.value().get<bool>() ? 1.0 : 0.0);
    } else {
      status = BadSpecField("stop." + key, "must be a number (stop when result[key] >= value)");
    }
  }
}

constexpr char kWorkingDirPrefix[] = "sha256:";

// An ASCII Python identifier that is not a keyword (ztune.entry resolves it
// with getattr; a keyword would be refused there, at setup, not at submit).
bool IsIdentifier(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  static const std::set<std::string_view> kKeywords = {
      "False", "None",     "True",  "and",    "as",   "assert", "async",  "await",    "break",
      "class", "continue", "def",   "del",    "elif", "else",   "except", "finally",  "for",
      "from",  "global",   "if",    "import", "in",   "is",     "lambda", "nonlocal", "not",
      "or",    "pass",     "raise", "return", "try",  "while",  "with",   "yield"};
  return kKeywords.count(s) == 0;
}

// The trainable key: a hosted name, or {"python": "FILE:NAME"}.
Status ParseTrainable(const Json& j, ExperimentSpec& s) {
  if (j.is_string()) {
    s.trainable = j.get<std::string>();
    if (s.trainable.empty()) return BadSpecField("trainable", "must not be empty");
    if (s.trainable[0] == '@') {
      return BadSpecField("trainable",
                          "names starting with '@' are reserved; submitted code is "
                          "{\"python\": \"FILE:NAME\"}");
    }
    // The name defaults to the trainable and is stored explicitly, so the
    // trainable obeys the name's limit: a longer one was accepted at submit
    // and then refused when a restarted head read the stored spec back.
    if (s.trainable.size() > 200)
      return BadSpecField("trainable", "must be at most 200 characters");
    if (HasControl(s.trainable))
      return BadSpecField("trainable", "must not contain control characters");
    return Status::Ok();
  }
  if (j.is_object()) {
    RETURN_IF_ERROR(CheckSpecKeys(j, "trainable", {"python"}));
    if (!j.contains("python") || !j["python"].is_string()) {
      return BadSpecField("trainable.python", "required: \"FILE:NAME\" in the uploaded project");
    }
    s.python_entry = j["python"].get<std::string>();
    if (Status st = CheckPythonEntry(s.python_entry); !st.ok()) {
      return BadSpecField("trainable.python", st.message());
    }
    s.trainable = protocol::kSubmittedPythonTrainable;
    return Status::Ok();
  }
  return BadSpecField("trainable",
                      "required: the name of a trainable the workers host, or {\"python\": "
                      "\"FILE:NAME\"} for submitted code");
}

}  // namespace

Status CheckPythonEntry(const std::string& entry) {
  const std::string usage = " (\"FILE:NAME\", e.g. \"train.py:train\")";
  if (entry.size() > 1024) return Status::InvalidArgument("must be at most 1024 bytes");
  if (HasControl(entry)) return Status::InvalidArgument("must not contain control characters");
  const size_t colon = entry.rfind(':');
  if (colon == std::string::npos) return Status::InvalidArgument("has no ':'" + usage);
  const std::string file = entry.substr(0, colon);
  const std::string name = entry.substr(colon + 1);
  if (file.size() < 4 || file.compare(file.size() - 3, 3, ".py") != 0) {
    return Status::InvalidArgument("FILE must be a path ending in \".py\"" + usage);
  }
  if (file[0] == '/' || file.find('\\') != std::string::npos) {
    return Status::InvalidArgument("FILE must be relative to the project directory, with '/'");
  }
  size_t start = 0;
  while (start <= file.size()) {
    size_t slash = file.find('/', start);
    if (slash == std::string::npos) slash = file.size();
    const std::string part = file.substr(start, slash - start);
    if (part.empty() || part == "." || part == "..") {
      return Status::InvalidArgument("FILE must not have empty, \".\" or \"..\" parts");
    }
    start = slash + 1;
  }
  size_t from = 0;
  while (true) {
    const size_t dot = name.find('.', from);
    if (!IsIdentifier(
            std::string_view(name).substr(from, dot == std::string::npos ? dot : dot - from))) {
      return Status::InvalidArgument(
          "NAME must be an identifier (not a keyword) or a dotted path of them" + usage);
    }
    if (dot == std::string::npos) break;
    from = dot + 1;
  }
  return Status::Ok();
}

std::string ExperimentSpec::CodeHash() const {
  return working_dir.size() > sizeof(kWorkingDirPrefix) - 1
             ? working_dir.substr(sizeof(kWorkingDirPrefix) - 1)
             : std::string();
}

std::vector<std::string> ExperimentSpec::Warnings() const {
  std::vector<std::string> out;
  // ASHA and HyperBand end every trial at max_t; the others end none.
  const bool scheduler_ends_trials =
      scheduler.type == SchedulerType::kAsha || scheduler.type == SchedulerType::kHyperBand;
  if (stop.empty() && !scheduler_ends_trials) {
    out.push_back(
        "no stop condition: trials run until their trainable reports done or they are "
        "stopped (ztune stop); set \"stop\", e.g. {\"training_iteration\": 100}");
  }
  return out;
}

std::string ExperimentSpec::TrainableLabel() const {
  return IsSubmittedCode() ? "python:" + python_entry : trainable;
}

std::string ExperimentSpec::TrainableKey() const {
  return IsSubmittedCode() ? trainable + "\x1f" + python_entry + "\x1f" + working_dir : trainable;
}

const char* SearchAlgTypeName(SearchAlgType type) {
  switch (type) {
    case SearchAlgType::kBasicVariant: return "basic_variant";
    case SearchAlgType::kExternal: return "external";
  }
  return "basic_variant";
}

Result<SearchAlgSpec> SearchAlgSpec::Parse(const Json& j) {
  SearchAlgSpec s;
  if (j.is_null()) return s;
  if (!j.is_object()) return BadSpecField("search_alg", "must be an object");
  RETURN_IF_ERROR(CheckSpecKeys(j, "search_alg", {"type", "max_concurrent"}));
  if (j.contains("type")) {
    const Json& t = j["type"];
    if (t == "basic_variant") {
      s.type = SearchAlgType::kBasicVariant;
    } else if (t == "external") {
      s.type = SearchAlgType::kExternal;
    } else {
      return BadSpecField("search_alg.type",
                          "must be \"basic_variant\" (grid and random search over param_space) "
                          "or \"external\" (a client adds every config, e.g. "
                          "ztune.optuna_search)");
    }
  }
  if (j.contains("max_concurrent")) {
    ASSIGN_OR_RETURN(s.max_concurrent,
                     ReadSpecInt(j["max_concurrent"], "search_alg.max_concurrent", 0));
  }
  return s;
}

Json SearchAlgSpec::ToJson() const {
  return Json{{"type", SearchAlgTypeName(type)}, {"max_concurrent", max_concurrent}};
}

int64_t ExperimentSpec::ConcurrencyLimit() const {
  if (max_concurrent_trials == 0) return search_alg.max_concurrent;
  if (search_alg.max_concurrent == 0) return max_concurrent_trials;
  return std::min(max_concurrent_trials, search_alg.max_concurrent);
}

Result<ExperimentSpec> ExperimentSpec::Parse(const Json& j, uint64_t default_seed) {
  if (!j.is_object()) return Status::InvalidArgument("spec must be a JSON object");
  RETURN_IF_ERROR(CheckSpecKeys(j, "",
                                {"name",
                                 "trainable",
                                 "param_space",
                                 "num_samples",
                                 "metric",
                                 "mode",
                                 "stop",
                                 "resources",
                                 "checkpoint",
                                 "max_failures",
                                 "max_concurrent_trials",
                                 "seed",
                                 "fail_fast",
                                 "reuse_actors",
                                 "export_formats",
                                 "force_cleanup_s",
                                 "timeouts",
                                 "result_buffer_length",
                                 "result_buffer_min_time_s",
                                 "result_buffer_max_time_s",
                                 "working_dir",
                                 "scheduler",
                                 "search_alg"}));
  ExperimentSpec s;
  RETURN_IF_ERROR(ParseTrainable(j.contains("trainable") ? j["trainable"] : Json(), s));
  if (j.contains("working_dir") && !j["working_dir"].is_null()) {
    const Json& w = j["working_dir"];
    const size_t n = sizeof(kWorkingDirPrefix) - 1;
    if (!w.is_string() || w.get<std::string>().compare(0, n, kWorkingDirPrefix) != 0 ||
        !IsSha256Hex(std::string_view(w.get<std::string>()).substr(n))) {
      return BadSpecField("working_dir",
                          "must be \"sha256:<64 lowercase hex digits>\", the project uploaded by "
                          "`ztune submit --working-dir DIR`");
    }
    s.working_dir = w.get<std::string>();
  }
  if (s.IsSubmittedCode() && s.working_dir.empty()) {
    return BadSpecField(
        "working_dir",
        "required with trainable.python: submit with `ztune submit SPEC --working-dir "
        "DIR`, which uploads the project directory and sets it");
  }
  if (!s.IsSubmittedCode() && !s.working_dir.empty()) {
    return BadSpecField("working_dir",
                        "only submitted code ({\"python\": \"FILE:NAME\"}) uses one");
  }
  if (j.contains("name")) {
    if (!j["name"].is_string()) return BadSpecField("name", "must be a string");
    s.name = j["name"].get<std::string>();
    if (s.name.size() > 200) return BadSpecField("name", "must be at most 200 characters");
  }
  if (s.name.empty()) s.name = s.IsSubmittedCode() ? s.python_entry.substr(0, 200) : s.trainable;
  // Names reach terminals and log lines.
  if (HasControl(s.name)) {
    return BadSpecField("name", "must not contain control characters (newlines, escape sequences)");
  }
  if (j.contains("param_space")) {
    if (!j["param_space"].is_object()) return BadSpecField("param_space", "must be an object");
    s.param_space = j["param_space"];
    auto space = SearchSpace::Parse(s.param_space);
    if (!space.ok()) return space.status();
  }
  if (j.contains("num_samples")) {
    ASSIGN_OR_RETURN(s.num_samples, ReadSpecInt(j["num_samples"], "num_samples", 1));
  }
  if (j.contains("metric") && !j["metric"].is_null()) {
    if (!j["metric"].is_string() || j["metric"].get<std::string>().empty()) {
      return BadSpecField("metric", "must be a non-empty string");
    }
    s.metric = j["metric"].get<std::string>();
  }
  if (j.contains("mode") && !j["mode"].is_null()) {
    if (!j["mode"].is_string() ||
        (j["mode"].get<std::string>() != "min" && j["mode"].get<std::string>() != "max")) {
      return BadSpecField("mode", "must be \"min\" or \"max\"");
    }
    s.mode = j["mode"].get<std::string>();
  }
  if (!s.metric.empty() && s.mode.empty())
    return BadSpecField("mode", "required when metric is set");
  if (s.metric.empty() && !s.mode.empty())
    return BadSpecField("metric", "required when mode is set");
  if (j.contains("stop")) {
    if (!j["stop"].is_object()) return BadSpecField("stop", "must be an object of criteria");
    Status st;
    FlattenStop(j["stop"], "", s.stop, st);
    RETURN_IF_ERROR(st);
  }
  if (j.contains("resources")) {
    auto r = PlacementRequest::FromJson(j["resources"]);
    if (!r.ok()) return Status::InvalidArgument("spec." + r.status().message());
    s.resources = std::move(r).value();
  } else {
    s.resources = PlacementRequest::FromJson(Json()).value();
  }
  // The actor (bundle 0) goes only to a worker that hosts the trainable.
  s.resources.actor_trainable = s.trainable;
  if (j.contains("checkpoint")) {
    const Json& c = j["checkpoint"];
    if (!c.is_object()) return BadSpecField("checkpoint", "must be an object");
    RETURN_IF_ERROR(CheckSpecKeys(
        c, "checkpoint", {"frequency", "at_end", "num_to_keep", "score_attribute", "score_order"}));
    if (c.contains("frequency")) {
      ASSIGN_OR_RETURN(s.checkpoint.frequency,
                       ReadSpecInt(c["frequency"], "checkpoint.frequency", 0));
    }
    if (c.contains("at_end")) {
      if (!c["at_end"].is_boolean())
        return BadSpecField("checkpoint.at_end", "must be true or false");
      s.checkpoint.at_end = c["at_end"].get<bool>();
    }
    if (c.contains("num_to_keep") && !c["num_to_keep"].is_null()) {
      ASSIGN_OR_RETURN(s.checkpoint.num_to_keep,
                       ReadSpecInt(c["num_to_keep"], "checkpoint.num_to_keep", 1));
    }
    if (c.contains("score_attribute")) {
      if (!c["score_attribute"].is_string() || c["score_attribute"].get<std::string>().empty()) {
        return BadSpecField("checkpoint.score_attribute", "must be a non-empty string");
      }
      s.checkpoint.score_attribute = c["score_attribute"].get<std::string>();
    }
    if (c.contains("score_order")) {
      if (!c["score_order"].is_string() || (c["score_order"] != "max" && c["score_order"] != "min")) {
        return BadSpecField("checkpoint.score_order", "must be \"min\" or \"max\"");
      }
      s.checkpoint.score_max = c["score_order"] == "max";
    }
  }
  if (j.contains("max_failures")) {
    ASSIGN_OR_RETURN(s.max_failures, ReadSpecInt(j["max_failures"], "max_failures", -1));
  }
  if (j.contains("max_concurrent_trials")) {
    ASSIGN_OR_RETURN(s.max_concurrent_trials,
                     ReadSpecInt(j["max_concurrent_trials"], "max_concurrent_trials", 0));
  }
  if (j.contains("seed")) {
    if (!j["seed"].is_number_integer() || j["seed"].get<int64_t>() < 0) {
      return BadSpecField("seed", "must be a non-negative integer");
    }
    s.seed = j["seed"].get<uint64_t>();
  } else {
    s.seed = default_seed;
  }
  if (j.contains("fail_fast")) {
    if (!j["fail_fast"].is_boolean()) return BadSpecField("fail_fast", "must be true or false");
    s.fail_fast = j["fail_fast"].get<bool>();
    if (s.fail_fast && s.max_failures != 0) {
      return BadSpecField("fail_fast", "cannot be combined with max_failures != 0");
    }
  }
  if (j.contains("reuse_actors")) {
    if (!j["reuse_actors"].is_boolean())
      return BadSpecField("reuse_actors", "must be true or false");
    s.reuse_actors = j["reuse_actors"].get<bool>();
  }
  if (j.contains("export_formats")) {
    const Json& f = j["export_formats"];
    if (!f.is_array()) return BadSpecField("export_formats", "must be an array of format names");
    for (const auto& x : f) {
      if (!x.is_string() || x.get<std::string>().empty()) {
        return BadSpecField("export_formats", "must be an array of non-empty strings");
      }
      s.export_formats.push_back(x.get<std::string>());
    }
  }
  if (j.contains("force_cleanup_s")) {
    ASSIGN_OR_RETURN(s.force_cleanup_s,
                     ReadSpecNonNegative(j["force_cleanup_s"], "force_cleanup_s"));
  }
  if (j.contains("timeouts") && !j["timeouts"].is_null()) {
    const Json& t = j["timeouts"];
    if (!t.is_object()) return BadSpecField("timeouts", "must be an object");
    RETURN_IF_ERROR(CheckSpecKeys(t, "timeouts", {"setup_s", "step_s", "checkpoint_s"}));
    for (auto [key, slot] : {std::pair{"setup_s", &s.timeouts.setup_s},
                             std::pair{"step_s", &s.timeouts.step_s},
                             std::pair{"checkpoint_s", &s.timeouts.checkpoint_s}}) {
      if (!t.contains(key)) continue;
      const std::string name = std::string("timeouts.") + key;
      if (t[key].is_null()) {
        *slot = 0;
        continue;
      }
      ASSIGN_OR_RETURN(double v, ReadSpecNonNegative(t[key], name));
      if (v <= 0 || v > RequestTimeoutsSpec::kMaxSeconds) {
        return BadSpecField(
            name, "must be a number of seconds in (0, " +
                      std::to_string(static_cast<int64_t>(RequestTimeoutsSpec::kMaxSeconds)) +
                      "], or null for no limit");
      }
      *slot = v;
    }
  }
  if (j.contains("result_buffer_length")) {
    ASSIGN_OR_RETURN(s.result_buffer_length,
                     ReadSpecInt(j["result_buffer_length"], "result_buffer_length", 1));
  }
  if (j.contains("result_buffer_min_time_s")) {
    ASSIGN_OR_RETURN(s.result_buffer_min_time_s, ReadSpecNonNegative(j["result_buffer_min_time_s"],
                                                                     "result_buffer_min_time_s"));
  }
  if (j.contains("result_buffer_max_time_s")) {
    ASSIGN_OR_RETURN(s.result_buffer_max_time_s, ReadSpecNonNegative(j["result_buffer_max_time_s"],
                                                                     "result_buffer_max_time_s"));
  }
  if (s.result_buffer_min_time_s > s.result_buffer_max_time_s) {
    return BadSpecField("result_buffer_min_time_s", "must not exceed result_buffer_max_time_s");
  }
  ASSIGN_OR_RETURN(s.search_alg,
                   SearchAlgSpec::Parse(j.contains("search_alg") ? j["search_alg"] : Json()));
  // After metric, mode and seed: the scheduler may take them.
  ASSIGN_OR_RETURN(s.scheduler,
                   SchedulerSpec::Parse(j.contains("scheduler") ? j["scheduler"] : Json(), s.metric,
                                        s.mode, s.seed));
  if (s.scheduler.type == SchedulerType::kPbt) {
    RETURN_IF_ERROR(s.scheduler.pbt.CheckAgainst(s.param_space));
  }
  // A scheduler's own metric is the experiment's too (its best trial), when
  // the spec names none: one metric, set in either place.
  if (s.metric.empty() && !s.scheduler.Metric().empty()) {
    s.metric = s.scheduler.Metric();
    s.mode = s.scheduler.Maximize() ? "max" : "min";
  }
  return s;
}

Json ExperimentSpec::ToJson() const {
  Json stop_json = Json::object();
  for (const auto& [k, v] : stop) stop_json[k] = v;
  Json ckpt{{"frequency", checkpoint.frequency},
            {"at_end", checkpoint.at_end},
            {"num_to_keep", checkpoint.num_to_keep == 0 ? Json() : Json(checkpoint.num_to_keep)},
            {"score_attribute", checkpoint.score_attribute},
            {"score_order", checkpoint.score_max ? "max" : "min"}};
  Json j{{"name", name},
         {"trainable", IsSubmittedCode() ? Json{{"python", python_entry}} : Json(trainable)},
         {"param_space", param_space},
         {"num_samples", num_samples},
         {"metric", metric.empty() ? Json() : Json(metric)},
         {"mode", mode.empty() ? Json() : Json(mode)},
         {"stop", stop_json},
         {"resources", resources.ToJson()},
         {"checkpoint", ckpt},
         {"max_failures", max_failures},
         {"max_concurrent_trials", max_concurrent_trials},
         {"seed", seed},
         {"fail_fast", fail_fast},
         {"reuse_actors", reuse_actors},
         {"export_formats", export_formats},
         {"force_cleanup_s", force_cleanup_s},
         {"timeouts",
          {{"setup_s", timeouts.setup_s > 0 ? Json(timeouts.setup_s) : Json()},
           {"step_s", timeouts.step_s > 0 ? Json(timeouts.step_s) : Json()},
           {"checkpoint_s", timeouts.checkpoint_s > 0 ? Json(timeouts.checkpoint_s) : Json()}}},
         {"result_buffer_length", result_buffer_length},
         {"result_buffer_min_time_s", result_buffer_min_time_s},
         {"result_buffer_max_time_s", result_buffer_max_time_s},
         {"scheduler", scheduler.ToJson()},
         {"search_alg", search_alg.ToJson()}};
  if (IsSubmittedCode()) j["working_dir"] = working_dir;
  return j;
}

}  // namespace ztune::head
