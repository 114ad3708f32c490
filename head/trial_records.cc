#include "head/trial_records.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "head/stored_result.h"
#include "head/trial_record_scan.h"
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

namespace {

// One trial's records as stored, before parsing.
struct RawTrial {
  std::string key;
  std::string value;    // the trial record
  bool orphan = false;  // child records whose trial record is missing
  std::vector<std::pair<std::string, std::string>> children;  // in key order
};

StoredTrial ParseTrial(RawTrial& raw, const MetricKeys* metric_keys) {
  StoredTrial out;
  out.key = std::move(raw.key);
  if (raw.orphan) {
    out.trial = Status::Corruption("child records without their trial record");
    return out;
  }
  if (std::optional<Trial> fast = ReadTrialRecordText(raw.value, metric_keys)) {
    out.trial = std::move(*fast);
  } else {
    Json j = Json::parse(raw.value, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      out.trial = Status::Corruption("record is not JSON");
      return out;
    }
    out.inline_lists = j.is_object() && (j.contains("checkpoints") || j.contains("error_log"));
    out.trial = Trial::FromJson(std::move(j));
  }
  if (out.trial.ok() && out.trial->trial_id != std::string_view(out.key)) {
    out.trial = Status::Corruption("the record names trial " + out.trial->trial_id);
  }
  for (const auto& [key, value] : raw.children) {
    if (!out.trial.ok()) break;  // already damaged: one error per trial
    if (Status st = AttachChild(*out.trial, key, value, out.inline_lists); !st.ok()) {
      out.trial = std::move(st);
    }
  }
  return out;
}

// One batch of trials being parsed: a helper thread starts on it at once,
// and the thread that made it helps when it asks for the result, so that the
// next batch is read from the store while this one is parsed (a head's start
// is CPU-bound in this parse: JSON, then Trial::FromJson, 60% of a start on
// 100,000 trials; reading the store is another 15%; docs/benchmarks.md).
// Records are claimed one at a time through `next_`; each is parsed by one
// thread into its own slot, so nothing else is shared.
class ParseJob {
 public:
  ParseJob(std::vector<RawTrial> raws, const MetricKeys* metric_keys)
      : raws_(std::move(raws)), metric_keys_(metric_keys), out_(raws_.size()) {
    if (std::thread::hardware_concurrency() > 1 && raws_.size() > 1) {
      try {
        helper_.emplace([this] { Help(); });
      } catch (const std::system_error&) {
        // No thread to be had: Finish() parses everything.
      }
    }
  }
  // An unfinished job (the scan failed or stopped): what is unclaimed stays
  // unparsed.
  ~ParseJob() {
    next_.store(raws_.size());
    if (helper_) helper_->join();
  }
  ParseJob(const ParseJob&) = delete;
  ParseJob& operator=(const ParseJob&) = delete;

  // Every trial of the batch, in order; this thread parses what is left.
  std::vector<StoredTrial>& Finish() {
    Help();
    if (helper_) {
      helper_->join();
      helper_.reset();
    }
    return out_;
  }

 private:
  void Help() {
    for (size_t i = next_.fetch_add(1); i < raws_.size(); i = next_.fetch_add(1)) {
      out_[i] = ParseTrial(raws_[i], metric_keys_);
    }
  }

  std::vector<RawTrial> raws_;
  const MetricKeys* metric_keys_;  // read on both threads, never written
  std::vector<StoredTrial> out_;
  std::atomic<size_t> next_{0};
  std::optional<std::thread> helper_;
};

// Trials parsed per batch: bounds the raw records held at once.
constexpr size_t kParseBatch = 4096;

}  // namespace

Status ScanTrials(storage::Store& store, const std::function<bool(StoredTrial&)>& fn,
                  const MetricKeys* metric_keys) {
  std::vector<RawTrial> raws;     // the batch being read
  std::unique_ptr<ParseJob> job;  // the batch before it, being parsed
  bool go_on = true;
  // Hands the parsed batch to `fn`, in key order, on this thread.
  auto deliver = [&] {
    if (!job) return go_on;
    for (StoredTrial& st : job->Finish()) {
      if (!fn(st)) {
        go_on = false;
        break;
      }
    }
    job.reset();
    return go_on;
  };
  // The batch read so far is complete (the next trial's record has begun, or
  // the scan ended): the previous one is delivered and this one parsed.
  auto hand_over = [&] {
    if (!deliver()) return false;
    job = std::make_unique<ParseJob>(std::move(raws), metric_keys);
    raws.clear();
    return true;
  };
  RETURN_IF_ERROR(store.Scan(storage::Family::kTrials, "", [&](std::string_view key,
                                                               std::string_view value) {
    if (!storage::IsTrialChildKey(key)) {
      if (raws.size() >= kParseBatch && !hand_over()) return false;
      raws.push_back(RawTrial{std::string(key), std::string(value), false, {}});
      return true;
    }
    const std::string_view owner = key.substr(0, key.find('\0'));
    if (raws.empty() || raws.back().key != owner) {
      if (raws.size() >= kParseBatch && !hand_over()) return false;
      raws.push_back(RawTrial{std::string(owner), {}, true, {}});
      return true;
    }
    if (!raws.back().orphan) raws.back().children.emplace_back(key, value);
    return true;
  }));
  if (go_on && hand_over()) deliver();
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
  Result<Json> r = ParseStoredResult(newest->value);
  if (!r.ok()) return Status::Corruption(what + " " + r.status().message());
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
        Result<Json> r = ParseStoredResult(value);
        if (!r.ok()) {
          bad = Status::Corruption("a stored result of trial " + id + " " + r.status().message());
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
