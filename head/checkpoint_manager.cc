#include "head/checkpoint_manager.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include <spdlog/spdlog.h>

#include "head/trial_records.h"
#include "storage/keys.h"

namespace ztune::head {
namespace {

// Score of a checkpoint for retention: (valid, signed score, id), higher is better.
bool BetterCheckpoint(const CheckpointRecord& a, const CheckpointRecord& b) {
  if (a.score_valid != b.score_valid) return a.score_valid;
  if (a.score_valid && a.score != b.score) return a.score > b.score;
  return a.id > b.id;  // ties go to the newer
}

}  // namespace

bool CheckpointManager::Due(const Trial& t, const CheckpointPolicy& policy) {
  if (t.last_result.is_null() || t.iteration == 0) return false;
  const CheckpointRecord* c = t.NewestCheckpoint();
  if (c != nullptr && c->iteration >= t.iteration) return false;  // already taken
  // Trial::FromJson and the result checks guarantee these are booleans.
  const bool done = t.last_result.Get().value("done", false);
  return (policy.frequency > 0 && t.iteration % policy.frequency == 0) || (done && policy.at_end) ||
         t.last_result.Get().value("should_checkpoint", false) || t.checkpoint_requested;
}

void CheckpointManager::Add(Trial& t, const CheckpointPolicy& policy, std::string bytes,
                            int64_t iteration) {
  t.checkpoint_requested = false;  // a scheduler's request is met by any checkpoint
  CheckpointRecord c;
  c.id = t.next_checkpoint_id++;
  c.iteration = iteration;
  if (std::optional<std::string> file = FileOf(bytes)) {
    c.file = std::move(*file);
    Adopt(bytes);
  }
  const Json* v =
      t.last_result.is_null() ? nullptr : FindFlatKey(t.last_result.Get(), policy.score_attribute);
  if (v != nullptr && v->is_number() && !std::isnan(v->get<double>())) {
    c.score_valid = true;
    c.score = (policy.score_max ? 1.0 : -1.0) * v->get<double>();
  } else if (v == nullptr) {
    spdlog::error("trial {}: checkpoint score attribute '{}' missing from the result",
                  t.trial_id, policy.score_attribute);
  }
  batch_.Put(storage::Family::kCheckpoints, storage::CheckpointKey(t.trial_id, c.id),
             std::move(bytes));
  PutCheckpointRecord(batch_, t.trial_id, c);
  t.checkpoints.push_back(c);
  if (policy.num_to_keep <= 0 || static_cast<int64_t>(t.checkpoints.size()) <= policy.num_to_keep) {
    return;
  }
  // Keep the best num_to_keep by score, and always the newest.
  std::vector<CheckpointRecord> sorted = t.checkpoints;
  std::sort(sorted.begin(), sorted.end(), BetterCheckpoint);
  std::set<uint64_t> keep;
  for (int64_t i = 0; i < policy.num_to_keep; ++i) keep.insert(sorted[i].id);
  keep.insert(c.id);
  std::vector<CheckpointRecord> kept;
  for (const auto& r : t.checkpoints) {
    if (keep.count(r.id)) {
      kept.push_back(r);
    } else {
      batch_.Delete(storage::Family::kCheckpoints, storage::CheckpointKey(t.trial_id, r.id));
      DeleteCheckpointRecord(batch_, t.trial_id, r.id);
      if (!r.file.empty() && files_ != nullptr) files_->RemoveAfterCommit(r.file);
    }
  }
  t.checkpoints = std::move(kept);
}

Result<std::optional<std::string>> CheckpointManager::Read(const TrialId& owner, uint64_t id) {
  const std::string key = storage::CheckpointKey(owner, id);
  if (const auto* pending = batch_.NewestWrite(storage::Family::kCheckpoints, key)) {
    // Saved in this turn, not committed yet (a failure right after its SAVE,
    // retried at once): the store does not have it yet.
    if (pending->is_delete) return std::optional<std::string>();
    return std::optional<std::string>(pending->value);
  }
  Result<std::optional<std::string>> bytes = Status::Internal("not read");
  // Megabytes from disk: off the loop thread, heartbeats keep going.
  long_ops_.RunLongStoreOperation(
      [&] { bytes = store_.Get(storage::Family::kCheckpoints, key); });
  return bytes;
}

std::string* CheckpointManager::ForStart(Trial& t, const Trial* source, std::string& storage) {
  std::string* checkpoint = nullptr;
  auto read = [&](const TrialId& owner, const CheckpointRecord& c) {
    Result<std::optional<std::string>> bytes = Read(owner, c.id);
    if (bytes.ok() && bytes->has_value()) {
      storage = std::move(**bytes);
      checkpoint = &storage;
    } else {
      spdlog::error("trial {}: checkpoint {} of {} unreadable ({}); starting from scratch",
                    t.trial_id, c.id, owner, bytes.ok() ? "missing" : bytes.status().ToString());
    }
  };
  int64_t resume_iteration = 0;
  const CheckpointRecord* own = t.NewestCheckpoint();
  if (!t.memory_checkpoint.empty()) {
    storage = std::move(t.memory_checkpoint);
    t.memory_checkpoint.clear();
    // A file goes after the commit: the RESTORE that streams it has opened
    // it by then (sends come before RemovePending), and reads on.
    if (std::optional<std::string> file = FileOf(storage)) files_->RemoveAfterCommit(*file);
    checkpoint = &storage;
    resume_iteration = t.iteration;  // a pause saves right after the last stored result
  } else if (own != nullptr && own->id > t.checkpoints_given_up_through) {
    read(t.trial_id, *own);
    resume_iteration = own->iteration;
  } else if (own == nullptr && source != nullptr && source->NewestCheckpoint() != nullptr) {
    read(source->trial_id, *source->NewestCheckpoint());
    resume_iteration = source->NewestCheckpoint()->iteration;
  }
  t.resume_iteration = checkpoint != nullptr ? resume_iteration : 0;
  if (checkpoint != nullptr) {
    t.num_restores++;
  } else if (t.iteration > 0) {
    // From scratch: iterations are recomputed; stored ones are not rewritten.
    spdlog::info("trial {} restarts from scratch (no checkpoint)", t.trial_id);
  }
  return checkpoint;
}

void CheckpointManager::GiveUpCurrent(Trial& t) {
  t.checkpoints_given_up_through = t.next_checkpoint_id - 1;
  t.restore_from.clear();
  DropMemoryCheckpoint(t);
}

std::optional<std::string> CheckpointManager::FileOf(std::string_view bytes) const {
  if (files_ == nullptr) return std::nullopt;
  auto ref = DecodeCheckpointFileRef(bytes);
  if (!ref.ok() || !ref->has_value()) return std::nullopt;
  return std::move((*ref)->name);
}

void CheckpointManager::Adopt(std::string_view bytes) {
  if (std::optional<std::string> file = FileOf(bytes)) files_->Adopt(*file);
}

std::string CheckpointManager::CopyForAnotherTrial(std::string bytes) {
  auto ref = DecodeCheckpointFileRef(bytes);
  if (!ref.ok() || !ref->has_value() || files_ == nullptr) return bytes;
  Result<CheckpointFileRef> copy = files_->Clone(**ref);
  if (!copy.ok()) {
    spdlog::error("cannot copy checkpoint file {}: {}", (*ref)->name, copy.status().ToString());
    return {};
  }
  return EncodeCheckpointFileRef(*copy);
}

void CheckpointManager::DropMemoryCheckpoint(Trial& t) {
  if (std::optional<std::string> file = FileOf(t.memory_checkpoint)) {
    files_->RemoveAfterCommit(*file);
  }
  t.memory_checkpoint.clear();
}

void CheckpointManager::CollectFiles(const Trial& t, std::set<std::string>& names) {
  for (const auto& c : t.checkpoints) {
    if (!c.file.empty()) names.insert(c.file);
  }
}

}  // namespace ztune::head
