#include "head/store_loader.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <set>
#include <utility>

#include "common/json.h"
#include "head/trial_records.h"
#include "storage/keys.h"

namespace ztune::head {
namespace {

constexpr uint64_t kMaxReservedTrials = 1'000'000;

Result<uint64_t> NextEpoch(storage::Store& store) {
  ASSIGN_OR_RETURN(std::optional<std::string> stored,
                   store.Get(storage::Family::kMeta, storage::kMetaHeadEpoch));
  uint64_t previous = 0;
  if (stored.has_value()) {
    const std::string& text = *stored;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), previous);
    if (ec != std::errc() || end != text.data() + text.size()) {
      return Status::Corruption("meta record head_epoch is not a number: '" + text + "'");
    }
  }
  if (previous == UINT64_MAX) return Status::Corruption("meta record head_epoch is at its maximum");
  return previous + 1;
}

Status LoadExperiments(storage::Store& store, LoadedStore& out) {
  std::set<std::string> ids;
  Status inner;
  RETURN_IF_ERROR(store.Scan(storage::Family::kExperiments, "",
                             [&](std::string_view key, std::string_view v) {
    auto fail = [&](const std::string& why) {
      inner = Status::Corruption("experiments record '" + std::string(key) + "': " + why);
      return false;
    };
    Json j = Json::parse(v, nullptr, false);
    if (j.is_discarded()) return fail("record is not JSON");
    Result<Experiment> e = Experiment::FromJson(j);
    if (!e.ok()) return fail(e.status().message());
    // Keys are unique in a family; a record under another key naming the
    // same id is the damage this catches.
    if (!ids.insert(e->experiment_id).second) {
      return fail("experiment " + e->experiment_id + " is stored twice");
    }
    Result<SearchSpace> space = SearchSpace::Parse(e->spec.param_space);
    if (!space.ok()) return fail(space.status().message());
    if (!e->finished && !e->SearchFinished()) {
      out.searching.emplace(e->experiment_id, std::move(space).value());
    }
    out.experiments.push_back(std::move(e).value());
    return true;
  }));
  return inner;
}

Status LoadTrials(storage::Store& store, LoadedStore& out) {
  std::map<std::string, const Experiment*> experiments;
  // As many as the experiments issued ids (no Trial is moved as the vector
  // grows: 5% of a start on 100,000 trials); capped, since a damaged
  // experiment record may claim anything.
  uint64_t issued = 0;
  for (const Experiment& e : out.experiments) {
    experiments[e.experiment_id] = &e;
    issued += std::min<uint64_t>(e.next_trial_index, kMaxReservedTrials);
  }
  out.trials.reserve(std::min<uint64_t>(issued, kMaxReservedTrials));
  MetricKeys metric_keys;
  for (const Experiment& e : out.experiments) metric_keys[e.experiment_id] = e.spec.metric;
  Status damaged;
  RETURN_IF_ERROR(ScanTrials(
      store,
      [&](StoredTrial& stored) {
        if (!stored.trial.ok()) {
          damaged = Status::Corruption("trials record '" + stored.key +
                                       "': " + stored.trial.status().message());
          return false;
        }
        auto e = experiments.find(stored.trial->experiment_id);
        if (e == experiments.end()) {
          damaged =
              Status::Corruption("trial " + stored.trial->trial_id +
                                 " belongs to unknown experiment " + stored.trial->experiment_id);
          return false;
        }
        damaged = CheckTrialIdIssued(*e->second, stored.trial->trial_id);
        if (!damaged.ok()) return false;
        if (stored.inline_lists) out.inline_lists.insert(stored.trial->trial_id);
        out.trials.push_back(std::move(stored.trial).value());
        return true;
      },
      &metric_keys));
  RETURN_IF_ERROR(damaged);
  // A finished trial's record was written with its last result; a live one's
  // results may have gone on without it.
  for (Trial& t : out.trials) {
    if (!IsFinished(t.status)) RETURN_IF_ERROR(ReadStoredProgress(store, t));
  }
  std::sort(out.trials.begin(), out.trials.end(),
            [](const Trial& a, const Trial& b) { return a.seq < b.seq; });
  return Status::Ok();
}

}  // namespace

Result<LoadedStore> LoadStore(storage::Store& store) {
  LoadedStore out;
  ASSIGN_OR_RETURN(out.epoch, NextEpoch(store));
  RETURN_IF_ERROR(LoadExperiments(store, out));
  // RocksDbStore::Open refused a newer or unreadable schema.
  ASSIGN_OR_RETURN(std::optional<std::string> schema,
                   store.Get(storage::Family::kMeta, storage::kMetaSchema));
  if (schema.has_value() && *schema != std::to_string(storage::kSchemaVersion)) {
    out.schema_upgrade_from = *schema;
  }
  RETURN_IF_ERROR(LoadTrials(store, out));
  return out;
}

}  // namespace ztune::head
