// How a Trial is stored in the trials family (docs/storage.md, "Trials"): its
// record (Trial::ToJson: everything but the lists that grow) and one child
// record per retained checkpoint and per error_log entry. A state change
// rewrites the trial record only, whose size does not grow with the trial's
// life (rewriting both lists with every write made a trial with many retained
// checkpoints quadratic); results are written without it (ReadStoredProgress).
// Schema-1 records held the lists inline; they are still read, and ScanTrials
// says which trials need moving.
//
// Pure functions of a WriteBatch or a Store; no state, no thread affinity.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "common/status.h"
#include "head/trial.h"
#include "head/trial_record_scan.h"
#include "storage/store.h"

namespace ztune::head {

void PutTrialRecord(storage::WriteBatch& batch, const Trial& t);
void PutCheckpointRecord(storage::WriteBatch& batch, const TrialId& trial_id,
                         const CheckpointRecord& c);
void DeleteCheckpointRecord(storage::WriteBatch& batch, const TrialId& trial_id,
                            uint64_t checkpoint_id);
// error_log entry `n` (1-based: "Failure # n").
void PutErrorRecord(storage::WriteBatch& batch, const TrialId& trial_id, uint64_t n,
                    const std::string& entry);
// Every child record of `t`: moves a schema-1 trial, whose record held its
// lists inline, to the current layout (with PutTrialRecord in the same batch).
void PutChildRecords(storage::WriteBatch& batch, const Trial& t);

// A trial's progress as stored: a batch of results is committed without the
// trial record (which a state change writes), so a trial that is not finished
// may have results past the record's `iteration`. Sets `t.iteration` and
// `t.last_result` from its newest stored result when that is newer; leaves a
// trial without newer results as it is. Corruption naming the trial when the
// newest result is damaged (not an object, or not the iteration of its key).
Status ReadStoredProgress(storage::Store& store, Trial& t);

// A trial's stored results in iteration order (keys sort by big-endian
// iteration); Corruption naming the trial when one is not a JSON object.
Result<std::vector<Json>> ReadStoredResults(storage::Store& store, const TrialId& id);

struct StoredTrial {
  std::string key;  // the trial's key (its id, as stored)
  // The trial with its checkpoint records and error_log, or Corruption: a
  // damaged trial record, a damaged or out-of-order child, or children whose
  // trial record is missing (then `key` is the trial id they name).
  Result<Trial> trial = Status::Internal("not read");
  bool inline_lists = false;  // a schema-1 record: its lists are inline
};

// Scans the trials family in key order and calls `fn` once per trial, with
// its child records attached; stops when `fn` returns false. Store errors
// (Corruption, IOError) are returned; damaged records are given to `fn`.
// `fn` must not commit to `store`. A trial's last result is kept as the
// stored text (LastResult::SetStored), its value at the metric `metric_keys`
// gives for the trial's experiment read from that text (so that the best
// trial of an experiment parses none).
Status ScanTrials(storage::Store& store, const std::function<bool(StoredTrial&)>& fn,
                  const MetricKeys* metric_keys = nullptr);

}  // namespace ztune::head
