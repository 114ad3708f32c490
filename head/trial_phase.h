// TrialPhase: what the current attempt of a trial is doing, one value per
// trial (docs/architecture.md, "Phases"). The persisted TrialStatus says where
// a trial is in its life (PENDING, RUNNING, PAUSED, TERMINATED, ERROR); the
// phase says which request of its actor is in flight, or which recovery wait
// it is in. RUNNING is exactly the phases other than kIdle.
//
// The phase is runtime state (never stored): a restarted head rebuilds it
// (kAwaitingReattach for a trial that was RUNNING on a worker, kIdle
// otherwise). TrialLifecycle::SetPhase is the only writer and checks every
// change against IsLegalTransition. Pure functions; no thread affinity.
#pragma once

#include <cstdint>

namespace ztune::head {

// Where a trial is in its life; stored with the trial.
enum class TrialStatus { kPending, kRunning, kPaused, kTerminated, kError };

enum class TrialPhase : uint8_t {
  kIdle,              // no actor: PENDING, PAUSED, TERMINATED or ERROR
  kStarting,          // CREATE_ACTOR sent (then RESTORE, TRAIN, pipelined)
  kResetting,         // RESET sent to a cached actor; nothing else until it answers
  kTraining,          // a TRAIN in flight
  kSaving,            // a persistent SAVE in flight (checkpoint due or at the end)
  kPausing,           // a memory SAVE in flight; then the actor goes and the trial is PAUSED
  kAwaitingReattach,  // RUNNING at a head restart; its worker has not reported the actor yet
  kAwaitingReplay,    // re-attached; the results its actor made meanwhile are not all in
                      // (entered at every adoption, left at once when none are due)
};
inline constexpr int kNumTrialPhases = 8;

const char* TrialPhaseName(TrialPhase p);

// Whether the trial holds an actor (worker, group, requests) in phase `p`.
// kAwaitingReattach does not: its actor may exist on a worker the head has
// not heard from, and is adopted only when that worker reports it.
bool PhaseHoldsActor(TrialPhase p);

// The legal changes (a phase to itself only for kIdle and kTraining, which
// mean "nothing in flight" and "the next TRAIN"):
//   kIdle             -> kStarting, kResetting, kAwaitingReattach
//   kResetting        -> kStarting (reset accepted), kIdle
//   kStarting, kTraining, kSaving, kAwaitingReplay
//                     -> kTraining, kSaving, kPausing, kIdle
//   kAwaitingReattach -> kAwaitingReplay (the actor adopted), kIdle
//   kPausing          -> kIdle
// (kStarting and kAwaitingReplay are not re-entered: a later TRAIN is kTraining.)
bool IsLegalTransition(TrialPhase from, TrialPhase to);

// The legal changes of the persisted status (a status to itself is no
// change, always legal):
//   PENDING    -> RUNNING (started), PAUSED (a user's pause), TERMINATED (stopped)
//   RUNNING    -> PENDING (a retry, a lost start, a re-attach given up),
//                 PAUSED (paused, or a held pause outliving its lost actor),
//                 TERMINATED, ERROR
//   PAUSED     -> RUNNING (resumed from its memory checkpoint), TERMINATED
//   ERROR      -> PENDING (resume with errored "retry")
//   TERMINATED -> nothing
// An attempt fails only while it is RUNNING: ERROR is never entered from the
// queue.
bool IsLegalStatusChange(TrialStatus from, TrialStatus to);

}  // namespace ztune::head
