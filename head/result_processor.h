// ResultProcessor: Ray's result handling for one RESULT batch of a trial,
// without side effects: each result is validated (an integer
// training_iteration that follows the last stored one, boolean done and
// should_checkpoint), stamped with the trial id and its final `done` (Ray's
// _should_stop: done, else a stopping criterion reached; a criterion's key
// missing from a result that is not done is an error), and the decision is
// taken once for the batch (Ray: a checkpoint trigger mid-batch keeps the
// results after it; only a stop ignores the rest).
//
// Pure; thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/ids.h"
#include "common/json.h"
#include "common/protocol/messages.h"
#include "head/experiment_spec.h"

namespace ztune::head {

// A result to store: its bytes, what the runner acts on, and the value the
// store keeps (StoredValue; the runner rewrites it if a scheduler's STOP
// makes the result `done`).
struct AcceptedResult {
  int64_t iteration = 0;
  protocol::RawResult raw;
  bool done = false;
  std::string stored;
  // The experiment's metric in this result when it is a number (the result
  // is judged without a DOM; LastResult::SetStored keeps it).
  std::optional<double> metric;
};

struct BatchOutcome {
  // The results to store, in order (replayed or re-run iterations already
  // stored are left out). Empty when `error` is set: a batch with one
  // invalid result is stored not at all.
  std::vector<AcceptedResult> accepted;
  bool stop = false;        // a result is done: the trial terminates after it
  bool checkpoint = false;  // a persistent checkpoint is due after the batch
  std::string error;        // an invalid result: the trial fails, not retried
};

class ResultProcessor {
 public:
  // `last_iteration`: the trial's last stored iteration; `resume_iteration`:
  // where its current attempt resumed (the next result follows the larger).
  // `results` are moved into the outcome, not copied; no JSON DOM is built
  // (one is only for an error message).
  static BatchOutcome Process(const TrialId& trial_id, int64_t last_iteration,
                              int64_t resume_iteration, const ExperimentSpec& spec,
                              std::vector<protocol::ResultRecord> results);
  // The value stored for `r` of trial `trial_id` (head/stored_result.h): the
  // result's msgpack with its trial_id and final done (Ray's auto-filled
  // fields), usually the worker's bytes as they came.
  static std::string StoredValue(const TrialId& trial_id, const AcceptedResult& r);
  // The same as a DOM, for a scheduler that judges results.
  static Json StoredJson(const TrialId& trial_id, const AcceptedResult& r);
};

}  // namespace ztune::head
