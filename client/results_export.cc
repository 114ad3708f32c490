#include "client/results_export.h"


#include "client/json_util.h"

namespace ztune::client {

const Json& ConfigAtIteration(const Json& trial, int64_t iteration) {
  const Json& exploits = ArrayField(trial, "exploits");
  const Json* config = nullptr;
  // Oldest first; an exploit truncates the results past its donor_iteration,
  // so a later exploit with a lower donor_iteration wins for the rows above it.
  for (const Json& x : exploits) {
    const Json* next = FindField(x, "new_config");
    if (next != nullptr && IntField(x, "donor_iteration", -1) < iteration) config = next;
  }
  if (config != nullptr) return *config;
  if (!exploits.empty()) {
    if (const Json* old = FindField(exploits.front(), "old_config")) return *old;
  }
  return ObjectField(trial, "config");
}

Json ExportRecord(const Json& trial, const Json* result) {
  Json record = Json::object();
  record["trial_id"] = FieldOrNull(trial, "trial_id");
  record["status"] = FieldOrNull(trial, "status");
  const int64_t iteration =
      result != nullptr ? IntField(*result, "training_iteration", 0) : IntField(trial, "iteration");
  const Json& config = ConfigAtIteration(trial, iteration);
  // An empty config would flatten to a "config" column holding {}.
  if (!config.is_object() || !config.empty()) record["config"] = config;
  if (result == nullptr || !result->is_object()) return record;
  for (const auto& [k, v] : result->items()) {
    if (k == "trial_id") continue;
    if (k == "status" || k == "config") {
      record["result/" + k] = v;
    } else {
      record[k] = v;
    }
  }
  return record;
}

std::vector<std::string> ExportColumns(const std::set<std::string>& keys) {
  std::vector<std::string> columns;
  auto take = [&](const std::string& k) {
    if (keys.count(k) != 0) columns.push_back(k);
  };
  take("trial_id");
  take("status");
  for (const std::string& k : keys) {
    if (k.rfind("config/", 0) == 0) columns.push_back(k);
  }
  take("training_iteration");
  for (const std::string& k : keys) {
    if (k == "trial_id" || k == "status" || k == "training_iteration" || k.rfind("config/", 0) == 0)
      continue;
    columns.push_back(k);
  }
  return columns;
}

}  // namespace ztune::client
