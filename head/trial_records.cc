#include "head/trial_records.h"

#include <cstdint>
#include <optional>
#include <utility>

#include "common/json_parse.h"
#include "storage/keys.h"

namespace ztune::head {
namespace {

// Attaches the child record at `key` to `t`. Children come in key order:
// checkpoints by id, then error_log entries by failure number.
Status AttachChild(Trial& t, std::string_view key, std::string_view value, bool inline_lists) {
  const std::optional<storage::TrialChildKeyParts> parts = storage::ParseTrialChildKey(key);
  if (!parts) return Status::Corruption("malformed child record key of trial " + t.trial_id);
  if (inline_lists) {
    return Status::Corruption("trial " + t.trial_id +
                              " has both inline lists (schema 1) and child records");
  }
  const std::string what = std::string(parts->kind == storage::kTrialCheckpointRecord
                                           ? "checkpoint record "
                                           : "error record ") +
                           std::to_string(parts->n) + " of trial " + t.trial_id;
  Json j = Json::parse(value, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::Corruption(what + " is not a JSON object");
  if (parts->kind == storage::kTrialCheckpointRecord) {
    Result<CheckpointRecord> c = CheckpointRecordFromJson(j);
    if (!c.ok()) return Status::Corruption(what + ": " + c.status().message());
    if (c->id != parts->n || c->id == 0 || c->id >= t.next_checkpoint_id) {
      return Status::Corruption(what + " names checkpoint " + std::to_string(c->id) +
                                " (the trial's next checkpoint id is " +
                                std::to_string(t.next_checkpoint_id) + ")");
    }
    t.checkpoints.push_back(*c);
    return Status::Ok();
  }
  auto entry = j.find("entry");
  if (entry == j.end() || !entry->is_string()) {
    return Status::Corruption(what + " has no string \"entry\"");
  }
  if (parts->n != t.error_log.size() + 1) {
    return Status::Corruption(what + " follows " + std::to_string(t.error_log.size()) +
                              " entries (an entry is missing)");
  }
  t.error_log.push_back(entry->get<std::string>());
  return Status::Ok();
}

}  // namespace

void PutTrialRecord(storage::WriteBatch& batch, const Trial& t) {
  batch.Put(storage::Family::kTrials, t.trial_id, t.ToRecordText());
}

void PutCheckpointRecord(storage::WriteBatch& batch, const TrialId& trial_id,
                         const CheckpointRecord& c) {
  batch.Put(storage::Family::kTrials,
            storage::TrialChildKey(trial_id, storage::kTrialCheckpointRecord, c.id),
            CheckpointRecordToJson(c).dump());
}

void DeleteCheckpointRecord(storage::WriteBatch& batch, const TrialId& trial_id,
                            uint64_t checkpoint_id) {
  batch.Delete(storage::Family::kTrials,
               storage::TrialChildKey(trial_id, storage::kTrialCheckpointRecord, checkpoint_id));
}

void PutErrorRecord(storage::WriteBatch& batch, const TrialId& trial_id, uint64_t n,
                    const std::string& entry) {
  batch.Put(storage::Family::kTrials,
            storage::TrialChildKey(trial_id, storage::kTrialErrorRecord, n),
            Json{{"entry", entry}}.dump());
}

void PutChildRecords(storage::WriteBatch& batch, const Trial& t) {
  for (const CheckpointRecord& c : t.checkpoints) PutCheckpointRecord(batch, t.trial_id, c);
  for (size_t i = 0; i < t.error_log.size(); ++i) {
    PutErrorRecord(batch, t.trial_id, i + 1, t.error_log[i]);
  }
}

Status ScanTrials(storage::Store& store, const std::function<bool(StoredTrial&)>& fn) {
  std::optional<StoredTrial> current;
  bool go_on = true;
  auto flush = [&] {
    if (current) go_on = fn(*current);
    current.reset();
    return go_on;
  };
  RETURN_IF_ERROR(store.Scan(storage::Family::kTrials, "", [&](std::string_view key,
                                                               std::string_view value) {
    if (!storage::IsTrialChildKey(key)) {
      if (!flush()) return false;
      current.emplace();
      current->key = std::string(key);
      Json j = Json::parse(value, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded()) {
        current->trial = Status::Corruption("record is not JSON");
        return true;
      }
      current->inline_lists = j.is_object() && (j.contains("checkpoints") || j.contains("error_log"));
      current->trial = Trial::FromJson(j);
      if (current->trial.ok() && current->trial->trial_id != key) {
        current->trial = Status::Corruption("the record names trial " + current->trial->trial_id);
      }
      return true;
    }
    const std::string_view owner = key.substr(0, key.find('\0'));
    if (!current || current->key != owner) {
      if (!flush()) return false;
      current.emplace();
      current->key = std::string(owner);
      current->trial = Status::Corruption("child records without their trial record");
      return true;
    }
    if (!current->trial.ok()) return true;  // already damaged: one error per trial
    if (Status s = AttachChild(*current->trial, key, value, current->inline_lists); !s.ok()) {
      current->trial = std::move(s);
    }
    return true;
  }));
  if (go_on) flush();
  return Status::Ok();
}

Status ReadStoredProgress(storage::Store& store, Trial& t) {
  ASSIGN_OR_RETURN(std::optional<storage::Store::Entry> newest,
                   store.Last(storage::Family::kResults, storage::TrialPrefix(t.trial_id)));
  if (!newest) return Status::Ok();
  const std::optional<uint64_t> iteration = storage::KeySuffixNumber(newest->key);
  if (!iteration || *iteration > static_cast<uint64_t>(INT64_MAX)) {
    return Status::Corruption("malformed result key of trial " + t.trial_id);
  }
  if (static_cast<int64_t>(*iteration) <= t.iteration) return Status::Ok();
  const std::string what = "result " + std::to_string(*iteration) + " of trial " + t.trial_id;
  Result<Json> r = ParseJson(newest->value);
  if (!r.ok()) return Status::Corruption(what + " is not JSON: " + r.status().message());
  RETURN_IF_ERROR(CheckStoredLastResult(*r, what));
  auto it = r->find("training_iteration");
  if (it == r->end() || !it->is_number_integer() ||
      it->get<int64_t>() != static_cast<int64_t>(*iteration)) {
    return Status::Corruption(what + " does not name its iteration (training_iteration)");
  }
  t.iteration = static_cast<int64_t>(*iteration);
  t.last_result = std::move(r).value();
  return Status::Ok();
}

Result<std::vector<Json>> ReadStoredResults(storage::Store& store, const TrialId& id) {
  std::vector<Json> out;
  Status bad;
  Status scanned = store.Scan(
      storage::Family::kResults, storage::TrialPrefix(id),
      [&](std::string_view, std::string_view value) {
        Result<Json> r = ParseJson(value);
        if (!r.ok() || !r->is_object()) {
          bad = Status::Corruption("a stored result of trial " + id + " is not a JSON object");
          return false;
        }
        out.push_back(std::move(r).value());
        return true;
      });
  RETURN_IF_ERROR(scanned);
  RETURN_IF_ERROR(bad);
  return out;
}

}  // namespace ztune::head
