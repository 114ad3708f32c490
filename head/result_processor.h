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
#include <string>
#include <utility>
#include <vector>

#include "common/ids.h"
#include "common/json.h"
#include "common/protocol/messages.h"
#include "head/experiment_spec.h"

namespace ztune::head {

struct BatchOutcome {
  // The results to store, in order, keyed by iteration (replayed or re-run
  // iterations already stored are left out). Empty when `error` is set: a
  // batch with one invalid result is stored not at all.
  std::vector<std::pair<int64_t, Json>> accepted;
  bool stop = false;        // a result is done: the trial terminates after it
  bool checkpoint = false;  // a persistent checkpoint is due after the batch
  std::string error;        // an invalid result: the trial fails, not retried
};

class ResultProcessor {
 public:
  // `last_iteration`: the trial's last stored iteration; `resume_iteration`:
  // where its current attempt resumed (the next result follows the larger).
  // `results` are moved into the outcome, not copied (a JSON DOM per result).
  static BatchOutcome Process(const TrialId& trial_id, int64_t last_iteration,
                              int64_t resume_iteration, const ExperimentSpec& spec,
                              std::vector<protocol::ResultRecord> results);
};

}  // namespace ztune::head
