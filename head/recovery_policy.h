// The decisions of recovery (docs/recovery.md), as pure functions of what the
// store and the workers report, so that each rule is tested on its own: what a
// restarted head does with each stored trial, how long it waits for a worker
// to re-attach a live actor, how far a re-attached actor's replayed results
// must come before the trial is driven, and what a worker that reconnected
// still has of each trial's requests. The TrialRunner applies them.
//
// Pure functions; no state, no thread affinity.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/ids.h"
#include "common/clock.h"
#include "common/protocol/messages.h"
#include "head/executor.h"
#include "head/trial.h"

namespace ztune::head {

// What a restarted head does with a stored trial.
enum class RestartDisposition {
  kKeep,           // finished, or held PAUSED by a user: as stored
  kAwaitReattach,  // RUNNING with a recorded worker: its actor may still live there
  // Queued again, from its newest persistent checkpoint: PENDING, or still
  // PAUSED when a scheduler paused it (its place behind the PENDING trials).
  kRequeue,
};
// Ray's resume of RUNNING trials, plus re-attach: a RUNNING trial whose worker
// is recorded waits for it; any other RUNNING trial's actor went with the old
// head, and a scheduler-PAUSED trial's memory checkpoint too.
RestartDisposition DispositionAfterRestart(const Trial& t);

// Two liveness windows: how long a re-attached trial awaits its replayed
// results, and the default re-attach grace (a worker that reconnects at once
// is in well before).
TimeMs TwoLivenessWindowsMs(TimeMs heartbeat_ms, int64_t liveness);
// How long a trial awaits its worker's re-attach: `configured`, or two
// liveness windows.
TimeMs ReattachGraceMs(TimeMs configured, TimeMs heartbeat_ms, int64_t liveness);

// The iteration whose replayed result lets a re-attached trial be driven: the
// actor is ahead of the store (its unacknowledged results come back from its
// outbox) or mid-TRAIN (its batch follows). nullopt: nothing to wait for.
std::optional<int64_t> ReplayTarget(int64_t stored_iteration, const protocol::LiveActor& live);

// A worker reconnected (a new incarnation while the head thought it alive):
// what it reports of one trial's actor against the requests the head has in
// flight for it.
struct ReconnectPlan {
  enum class Action {
    kRequeueLostStart,  // the start never arrived: back to the queue, no failure counted
    kFail,              // the actor is gone: a failure of the attempt
    kContinue,          // the actor lives: answer `created`, send `resend` again
  };
  Action action = Action::kContinue;
  std::string why;                // kRequeueLostStart, kFail
  std::vector<uint64_t> created;  // CREATE_ACTORs answered by the actor's existence
  std::vector<uint64_t> resend;   // sent again under the same rid (answered from what it has)
};
// `live`: the worker's report of the attempt's actor (under its old key while
// a RESET is in flight), nullptr when it reports none. `requests`: the rid and
// type of each request of the trial in flight, in rid order.
ReconnectPlan PlanAfterReconnect(const protocol::LiveActor* live,
                                 const std::vector<std::pair<uint64_t, FutureType>>& requests,
                                 const WorkerId& worker_id, uint64_t attempt);

}  // namespace ztune::head
