#include "head/trial_phase.h"

namespace ztune::head {

const char* TrialPhaseName(TrialPhase p) {
  switch (p) {
    case TrialPhase::kIdle: return "idle";
    case TrialPhase::kStarting: return "starting";
    case TrialPhase::kResetting: return "resetting";
    case TrialPhase::kTraining: return "training";
    case TrialPhase::kSaving: return "saving";
    case TrialPhase::kPausing: return "pausing";
    case TrialPhase::kAwaitingReattach: return "awaiting_reattach";
    case TrialPhase::kAwaitingReplay: return "awaiting_replay";
  }
  return "unknown";
}

bool PhaseHoldsActor(TrialPhase p) {
  return p != TrialPhase::kIdle && p != TrialPhase::kAwaitingReattach;
}

bool IsLegalTransition(TrialPhase from, TrialPhase to) {
  using P = TrialPhase;
  switch (from) {
    case P::kIdle:
      return to == P::kIdle || to == P::kStarting || to == P::kResetting ||
             to == P::kAwaitingReattach;
    case P::kResetting:
      return to == P::kStarting || to == P::kIdle;
    case P::kAwaitingReattach:
      // Adopting the actor enters kAwaitingReplay (even with nothing to
      // replay): from here the trial holds no actor.
      return to == P::kAwaitingReplay || to == P::kIdle;
    case P::kStarting:
    case P::kTraining:
    case P::kSaving:
    case P::kAwaitingReplay:
      if (to == from) return from == P::kTraining;
      return to == P::kTraining || to == P::kSaving || to == P::kPausing || to == P::kIdle;
    case P::kPausing:
      return to == P::kIdle;
  }
  return false;
}

bool IsLegalStatusChange(TrialStatus from, TrialStatus to) {
  using S = TrialStatus;
  if (from == to) return true;
  switch (from) {
    case S::kPending: return to == S::kRunning || to == S::kPaused || to == S::kTerminated;
    case S::kRunning: return true;
    case S::kPaused: return to == S::kRunning || to == S::kTerminated;
    case S::kError: return to == S::kPending;
    case S::kTerminated: return false;
  }
  return false;
}

}  // namespace ztune::head
