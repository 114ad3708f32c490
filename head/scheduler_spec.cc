#include "head/scheduler_spec.h"

#include <cmath>
#include <functional>

#include "head/search_space.h"
#include "head/spec_fields.h"

namespace ztune::head {
namespace {

constexpr char kWhere[] = "scheduler";

std::string Field(const char* name) { return std::string(kWhere) + "." + name; }

// The metric and mode a scheduler judges by: its own, else the spec's.
Status ResolveMetric(const Json& j, const std::string& type, const std::string& top_metric,
                     const std::string& top_mode, std::string& metric, bool& maximize) {
  metric = top_metric;
  std::string mode = top_mode;
  if (j.contains("metric") && !j["metric"].is_null()) {
    ASSIGN_OR_RETURN(std::string own, ReadSpecName(j["metric"], Field("metric")));
    if (!top_metric.empty() && own != top_metric) {
      return BadSpecField(Field("metric"), "'" + own + "' differs from spec.metric '" + top_metric +
                                               "'; set it in one place");
    }
    metric = own;
  }
  if (j.contains("mode") && !j["mode"].is_null()) {
    const Json& m = j["mode"];
    if (!m.is_string() || (m.get<std::string>() != "min" && m.get<std::string>() != "max")) {
      return BadSpecField(Field("mode"), "must be \"min\" or \"max\"");
    }
    if (!top_mode.empty() && m.get<std::string>() != top_mode) {
      return BadSpecField(Field("mode"), "'" + m.get<std::string>() + "' differs from spec.mode '" +
                                             top_mode + "'; set it in one place");
    }
    mode = m.get<std::string>();
  }
  if (metric.empty()) {
    return BadSpecField(Field("metric"), "required by scheduler " + type +
                                             " (the result key it compares trials by; set it "
                                             "here or as spec.metric)");
  }
  if (mode.empty()) {
    return BadSpecField(Field("mode"), "required by scheduler " + type +
                                           ": \"min\" or \"max\" (here or as spec.mode)");
  }
  maximize = mode == "max";
  return Status::Ok();
}

Status ParseAsha(const Json& j, const std::string& top_metric, const std::string& top_mode,
                 uint64_t seed, AshaOptions& o) {
  RETURN_IF_ERROR(CheckSpecKeys(j, kWhere,
                                {"type", "time_attr", "metric", "mode", "max_t", "grace_period",
                                 "reduction_factor", "brackets", "stop_last_trials"}));
  RETURN_IF_ERROR(ResolveMetric(j, "asha", top_metric, top_mode, o.metric, o.maximize));
  if (j.contains("time_attr")) {
    ASSIGN_OR_RETURN(o.time_attr, ReadSpecName(j["time_attr"], Field("time_attr")));
  }
  if (j.contains("max_t")) {
    ASSIGN_OR_RETURN(o.max_t, ReadSpecNumber(j["max_t"], Field("max_t")));
  }
  if (j.contains("grace_period")) {
    ASSIGN_OR_RETURN(o.grace_period, ReadSpecNumber(j["grace_period"], Field("grace_period")));
  }
  if (j.contains("reduction_factor")) {
    ASSIGN_OR_RETURN(o.reduction_factor,
                     ReadSpecNumber(j["reduction_factor"], Field("reduction_factor")));
  }
  if (j.contains("brackets")) {
    ASSIGN_OR_RETURN(o.brackets, ReadSpecInt(j["brackets"], Field("brackets"), 1));
  }
  if (j.contains("stop_last_trials")) {
    ASSIGN_OR_RETURN(o.stop_last_trials,
                     ReadSpecBool(j["stop_last_trials"], Field("stop_last_trials")));
  }
  o.seed = seed;
  return o.Validate();
}

Status ParseHyperBand(const Json& j, const std::string& top_metric, const std::string& top_mode,
                      HyperBandOptions& o) {
  RETURN_IF_ERROR(CheckSpecKeys(
      j, kWhere,
      {"type", "time_attr", "metric", "mode", "max_t", "reduction_factor", "stop_last_trials"}));
  RETURN_IF_ERROR(ResolveMetric(j, "hyperband", top_metric, top_mode, o.metric, o.maximize));
  if (j.contains("time_attr")) {
    ASSIGN_OR_RETURN(o.time_attr, ReadSpecName(j["time_attr"], Field("time_attr")));
  }
  if (j.contains("max_t")) {
    ASSIGN_OR_RETURN(o.max_t, ReadSpecNumber(j["max_t"], Field("max_t")));
  }
  if (j.contains("reduction_factor")) {
    ASSIGN_OR_RETURN(o.reduction_factor,
                     ReadSpecNumber(j["reduction_factor"], Field("reduction_factor")));
  }
  if (j.contains("stop_last_trials")) {
    ASSIGN_OR_RETURN(o.stop_last_trials,
                     ReadSpecBool(j["stop_last_trials"], Field("stop_last_trials")));
  }
  return o.Validate();
}

// A mutation leaf or a nested object of them, at `path` (for messages).
Status ValidateMutation(const Json& m, const std::string& path, int depth) {
  if (depth > 32) return BadSpecField(path, "nested too deeply");
  if (m.is_array()) {
    if (m.empty()) return BadSpecField(path, "a list of values to choose from must not be empty");
    return Status::Ok();
  }
  if (!m.is_object() || m.empty()) {
    return BadSpecField(path,
                        "must be a list of values, a sampler such as {\"uniform\": [0, 1]}, "
                        "or an object of these");
  }
  if (m.size() == 1 && m.begin().key() == "grid_search") {
    return BadSpecField(path, "grid_search cannot be mutated; use a list of values");
  }
  if (m.size() == 1 && IsSamplerName(m.begin().key())) {
    auto parsed = SearchSpace::Parse(Json{{"v", m}});
    if (!parsed.ok()) {
      std::string what = parsed.status().message();
      const std::string prefix = "param_space.v: ";
      if (what.rfind(prefix, 0) == 0) what = what.substr(prefix.size());
      return BadSpecField(path, what);
    }
    return Status::Ok();
  }
  for (auto it = m.begin(); it != m.end(); ++it) {
    RETURN_IF_ERROR(ValidateMutation(it.value(), path + "." + it.key(), depth + 1));
  }
  return Status::Ok();
}

Status ParsePbt(const Json& j, const std::string& top_metric, const std::string& top_mode,
                uint64_t seed, PbtOptions& o) {
  RETURN_IF_ERROR(CheckSpecKeys(j, kWhere,
                                {"type", "time_attr", "metric", "mode", "perturbation_interval",
                                 "burn_in_period", "quantile_fraction", "resample_probability",
                                 "perturbation_factors", "hyperparam_mutations", "synch"}));
  RETURN_IF_ERROR(ResolveMetric(j, "pbt", top_metric, top_mode, o.metric, o.maximize));
  if (j.contains("time_attr")) {
    ASSIGN_OR_RETURN(o.time_attr, ReadSpecName(j["time_attr"], Field("time_attr")));
  }
  const std::pair<const char*, double*> numbers[] = {
      {"perturbation_interval", &o.perturbation_interval},
      {"burn_in_period", &o.burn_in_period},
      {"quantile_fraction", &o.quantile_fraction},
      {"resample_probability", &o.resample_probability}};
  for (const auto& [key, out] : numbers) {
    if (!j.contains(key)) continue;
    ASSIGN_OR_RETURN(*out, ReadSpecNumber(j[key], Field(key)));
  }
  if (j.contains("perturbation_factors")) {
    const Json& f = j["perturbation_factors"];
    if (!f.is_array())
      return BadSpecField(Field("perturbation_factors"), "must be a list of numbers");
    o.perturbation_factors.clear();
    for (const Json& x : f) {
      ASSIGN_OR_RETURN(double v, ReadSpecNumber(x, Field("perturbation_factors")));
      o.perturbation_factors.push_back(v);
    }
  }
  if (j.contains("hyperparam_mutations")) o.hyperparam_mutations = j["hyperparam_mutations"];
  if (j.contains("synch")) {
    ASSIGN_OR_RETURN(o.synch, ReadSpecBool(j["synch"], Field("synch")));
  }
  o.seed = seed;
  return o.Validate();
}

Status ParseMedianStopping(const Json& j, const std::string& top_metric,
                           const std::string& top_mode, MedianStoppingOptions& o) {
  RETURN_IF_ERROR(CheckSpecKeys(j, kWhere,
                                {"type", "time_attr", "metric", "mode", "grace_period",
                                 "min_samples_required", "min_time_slice", "hard_stop"}));
  RETURN_IF_ERROR(ResolveMetric(j, "median_stopping", top_metric, top_mode, o.metric, o.maximize));
  if (j.contains("time_attr")) {
    ASSIGN_OR_RETURN(o.time_attr, ReadSpecName(j["time_attr"], Field("time_attr")));
  }
  if (j.contains("grace_period")) {
    ASSIGN_OR_RETURN(o.grace_period, ReadSpecNonNegative(j["grace_period"], Field("grace_period")));
  }
  if (j.contains("min_samples_required")) {
    ASSIGN_OR_RETURN(o.min_samples_required,
                     ReadSpecInt(j["min_samples_required"], Field("min_samples_required"), 1));
  }
  if (j.contains("min_time_slice")) {
    ASSIGN_OR_RETURN(o.min_time_slice,
                     ReadSpecNonNegative(j["min_time_slice"], Field("min_time_slice")));
  }
  if (j.contains("hard_stop")) {
    ASSIGN_OR_RETURN(o.hard_stop, ReadSpecBool(j["hard_stop"], Field("hard_stop")));
  }
  return o.Validate();
}

}  // namespace

Status MedianStoppingOptions::Validate() const {
  if (metric.empty()) return BadSpecField(Field("metric"), "required by scheduler median_stopping");
  if (time_attr.empty()) return BadSpecField(Field("time_attr"), "must not be empty");
  if (!std::isfinite(grace_period) || grace_period < 0) {
    return BadSpecField(Field("grace_period"), "must be a finite number >= 0");
  }
  if (!std::isfinite(min_time_slice) || min_time_slice < 0) {
    return BadSpecField(Field("min_time_slice"), "must be a finite number >= 0");
  }
  if (min_samples_required < 1) return BadSpecField(Field("min_samples_required"), "must be >= 1");
  return Status::Ok();
}

Status PbtOptions::Validate() const {
  auto bad = [](const char* name, const std::string& what) {
    return BadSpecField(Field(name), what);
  };
  if (metric.empty()) return bad("metric", "required by scheduler pbt");
  if (time_attr.empty()) return bad("time_attr", "must not be empty");
  if (!std::isfinite(perturbation_interval) || perturbation_interval <= 0) {
    return bad("perturbation_interval", "must be a number above 0");
  }
  if (!std::isfinite(burn_in_period) || burn_in_period < 0) {
    return bad("burn_in_period", "must be a finite number >= 0");
  }
  if (!(quantile_fraction >= 0 && quantile_fraction <= 0.5)) {
    return bad("quantile_fraction", "must be from 0 to 0.5");
  }
  if (!(resample_probability >= 0 && resample_probability <= 1)) {
    return bad("resample_probability", "must be from 0 to 1");
  }
  if (perturbation_factors.empty()) return bad("perturbation_factors", "must not be empty");
  for (double f : perturbation_factors) {
    if (!std::isfinite(f) || f <= 0) return bad("perturbation_factors", "must be numbers above 0");
  }
  if (!hyperparam_mutations.is_object() || hyperparam_mutations.empty()) {
    return bad("hyperparam_mutations",
               "required: an object of the config keys PBT may change, e.g. "
               "{\"lr\": {\"loguniform\": [1e-4, 1e-1]}}");
  }
  for (auto it = hyperparam_mutations.begin(); it != hyperparam_mutations.end(); ++it) {
    RETURN_IF_ERROR(
        ValidateMutation(it.value(), Field("hyperparam_mutations") + "." + it.key(), 1));
  }
  return Status::Ok();
}

Status PbtOptions::CheckAgainst(const Json& param_space) const {
  // Walks the mutations beside the space: a nested mutation object needs a
  // nested object in the space.
  std::function<Status(const Json&, const Json*, const std::string&)> walk =
      [&](const Json& m, const Json* space, const std::string& path) -> Status {
    for (auto it = m.begin(); it != m.end(); ++it) {
      const std::string here = path + "." + it.key();
      if (space == nullptr || !space->is_object() || !space->contains(it.key())) {
        return BadSpecField(here, "mutates '" + it.key() +
                                      "', which param_space does not have (PBT changes keys "
                                      "the trainable reads; add it to param_space)");
      }
      const Json& v = it.value();
      const bool nested = v.is_object() && !(v.size() == 1 && IsSamplerName(v.begin().key()));
      if (nested) RETURN_IF_ERROR(walk(v, &(*space)[it.key()], here));
    }
    return Status::Ok();
  };
  return walk(hyperparam_mutations, &param_space, Field("hyperparam_mutations"));
}

Status HyperBandOptions::Validate() const {
  auto bad = [](const char* name, const std::string& what) {
    return BadSpecField(Field(name), what);
  };
  if (metric.empty()) return bad("metric", "required by scheduler hyperband");
  if (time_attr.empty()) return bad("time_attr", "must not be empty");
  // Milestones are whole time units (Ray: int(max_t * eta^-s)); below 1 no
  // bracket has any.
  if (!std::isfinite(max_t) || max_t < 1 || max_t > 1e9) {
    return bad("max_t", "must be a number from 1 to 1e9");
  }
  if (!std::isfinite(reduction_factor) || reduction_factor <= 1) {
    return bad("reduction_factor", "must be above 1");
  }
  // Ray: s_max_1 = round(log(max_t) / log(eta)) + 1 brackets per band, the
  // largest with eta^s trials: a factor a hair above 1 makes that unbounded.
  if (std::round(std::log(max_t) / std::log(reduction_factor)) + 1 > 64) {
    return bad("reduction_factor", "too close to 1 for max_t: more than 64 brackets per band");
  }
  return Status::Ok();
}

Status AshaOptions::Validate() const {
  auto bad = [](const char* name, const std::string& what) {
    return BadSpecField(Field(name), what);
  };
  if (metric.empty()) return bad("metric", "required by scheduler asha");
  if (time_attr.empty()) return bad("time_attr", "must not be empty");
  if (!std::isfinite(max_t) || max_t <= 0) return bad("max_t", "must be a number above 0");
  if (!std::isfinite(grace_period) || grace_period <= 0 || grace_period > max_t) {
    return bad("grace_period", "must be above 0 and at most max_t");
  }
  if (!std::isfinite(reduction_factor) || reduction_factor <= 1) {
    return bad("reduction_factor", "must be above 1");
  }
  // A reduction factor a hair above 1 would make millions of rungs.
  if (std::log(max_t / grace_period) / std::log(reduction_factor) + 1 > 1000) {
    return bad("reduction_factor", "too close to 1 for max_t / grace_period: more than 1000 rungs");
  }
  // More brackets than rungs only adds empty brackets; 1,000 bounds memory.
  if (brackets < 1 || brackets > 1000) return bad("brackets", "must be between 1 and 1000");
  return Status::Ok();
}

Result<SchedulerSpec> SchedulerSpec::Parse(const Json& j, const std::string& metric,
                                           const std::string& mode, uint64_t seed) {
  SchedulerSpec s;
  if (j.is_null()) return s;
  if (!j.is_object()) {
    return BadSpecField(kWhere, "must be an object such as {\"type\": \"asha\"}");
  }
  if (!j.contains("type") || !j["type"].is_string()) {
    return BadSpecField(Field("type"),
                        "required: \"fifo\", \"asha\", \"hyperband\", \"median_stopping\" or "
                        "\"pbt\"");
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "fifo") {
    RETURN_IF_ERROR(CheckSpecKeys(j, kWhere, {"type"}));
    return s;
  }
  if (type == "asha") {
    s.type = SchedulerType::kAsha;
    RETURN_IF_ERROR(ParseAsha(j, metric, mode, seed, s.asha));
    return s;
  }
  if (type == "hyperband") {
    s.type = SchedulerType::kHyperBand;
    RETURN_IF_ERROR(ParseHyperBand(j, metric, mode, s.hyperband));
    return s;
  }
  if (type == "pbt") {
    s.type = SchedulerType::kPbt;
    RETURN_IF_ERROR(ParsePbt(j, metric, mode, seed, s.pbt));
    return s;
  }
  if (type == "median_stopping") {
    s.type = SchedulerType::kMedianStopping;
    RETURN_IF_ERROR(ParseMedianStopping(j, metric, mode, s.median_stopping));
    return s;
  }
  return BadSpecField(Field("type"), "unknown scheduler '" + type +
                                         "' (known: fifo, asha, hyperband, median_stopping, pbt)");
}

Json SchedulerSpec::ToJson() const {
  switch (type) {
    case SchedulerType::kFifo: return Json{{"type", "fifo"}};
    case SchedulerType::kAsha:
      return Json{{"type", "asha"},
                  {"time_attr", asha.time_attr},
                  {"metric", asha.metric},
                  {"mode", asha.maximize ? "max" : "min"},
                  {"max_t", asha.max_t},
                  {"grace_period", asha.grace_period},
                  {"reduction_factor", asha.reduction_factor},
                  {"brackets", asha.brackets},
                  {"stop_last_trials", asha.stop_last_trials}};
    case SchedulerType::kHyperBand:
      return Json{{"type", "hyperband"},
                  {"time_attr", hyperband.time_attr},
                  {"metric", hyperband.metric},
                  {"mode", hyperband.maximize ? "max" : "min"},
                  {"max_t", hyperband.max_t},
                  {"reduction_factor", hyperband.reduction_factor},
                  {"stop_last_trials", hyperband.stop_last_trials}};
    case SchedulerType::kPbt:
      return Json{{"type", "pbt"},
                  {"time_attr", pbt.time_attr},
                  {"metric", pbt.metric},
                  {"mode", pbt.maximize ? "max" : "min"},
                  {"perturbation_interval", pbt.perturbation_interval},
                  {"burn_in_period", pbt.burn_in_period},
                  {"quantile_fraction", pbt.quantile_fraction},
                  {"resample_probability", pbt.resample_probability},
                  {"perturbation_factors", pbt.perturbation_factors},
                  {"hyperparam_mutations", pbt.hyperparam_mutations},
                  {"synch", pbt.synch}};
    case SchedulerType::kMedianStopping: {
      const MedianStoppingOptions& m = median_stopping;
      return Json{{"type", "median_stopping"},
                  {"time_attr", m.time_attr},
                  {"metric", m.metric},
                  {"mode", m.maximize ? "max" : "min"},
                  {"grace_period", m.grace_period},
                  {"min_samples_required", m.min_samples_required},
                  {"min_time_slice", m.min_time_slice},
                  {"hard_stop", m.hard_stop}};
    }
  }
  return Json();
}

const char* SchedulerSpec::TypeName() const {
  switch (type) {
    case SchedulerType::kFifo: return "fifo";
    case SchedulerType::kAsha: return "asha";
    case SchedulerType::kHyperBand: return "hyperband";
    case SchedulerType::kMedianStopping: return "median_stopping";
    case SchedulerType::kPbt: return "pbt";
  }
  return "?";
}

std::string SchedulerSpec::Metric() const {
  switch (type) {
    case SchedulerType::kFifo: return "";
    case SchedulerType::kAsha: return asha.metric;
    case SchedulerType::kHyperBand: return hyperband.metric;
    case SchedulerType::kMedianStopping: return median_stopping.metric;
    case SchedulerType::kPbt: return pbt.metric;
  }
  return "";
}

bool SchedulerSpec::Maximize() const {
  switch (type) {
    case SchedulerType::kFifo: return true;
    case SchedulerType::kAsha: return asha.maximize;
    case SchedulerType::kHyperBand: return hyperband.maximize;
    case SchedulerType::kMedianStopping: return median_stopping.maximize;
    case SchedulerType::kPbt: return pbt.maximize;
  }
  return true;
}

std::vector<std::string> SchedulerSpec::RequiredResultKeys() const {
  switch (type) {
    case SchedulerType::kFifo: return {};
    case SchedulerType::kAsha: return {asha.metric, asha.time_attr};
    case SchedulerType::kHyperBand: return {hyperband.metric, hyperband.time_attr};
    case SchedulerType::kMedianStopping: return {median_stopping.metric, median_stopping.time_attr};
    case SchedulerType::kPbt: return {pbt.metric, pbt.time_attr};
  }
  return {};
}

}  // namespace ztune::head
