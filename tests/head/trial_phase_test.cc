// The phase table of trial_phase.h, pair by pair.
#include "head/trial.h"
#include "head/trial_phase.h"

#include <set>
#include <string>
#include <utility>

#include <gtest/gtest.h>

namespace ztune::head {
namespace {

using P = TrialPhase;

TrialPhase PhaseAt(int i) { return static_cast<TrialPhase>(i); }

TEST(TrialPhaseTest, OnlyTheDocumentedChangesAreLegal) {
  const std::set<std::pair<P, P>> legal = {
      {P::kIdle, P::kIdle},
      {P::kIdle, P::kStarting},
      {P::kIdle, P::kResetting},
      {P::kIdle, P::kAwaitingReattach},
      {P::kResetting, P::kStarting},
      {P::kResetting, P::kIdle},
      {P::kStarting, P::kTraining},
      {P::kStarting, P::kSaving},
      {P::kStarting, P::kPausing},
      {P::kStarting, P::kIdle},
      {P::kTraining, P::kTraining},
      {P::kTraining, P::kSaving},
      {P::kTraining, P::kPausing},
      {P::kTraining, P::kIdle},
      {P::kSaving, P::kTraining},
      {P::kSaving, P::kPausing},
      {P::kSaving, P::kIdle},
      {P::kAwaitingReplay, P::kTraining},
      {P::kAwaitingReplay, P::kSaving},
      {P::kAwaitingReplay, P::kPausing},
      {P::kAwaitingReplay, P::kIdle},
      {P::kAwaitingReattach, P::kAwaitingReplay},
      {P::kAwaitingReattach, P::kIdle},
      {P::kPausing, P::kIdle},
  };
  for (int from = 0; from < kNumTrialPhases; ++from) {
    for (int to = 0; to < kNumTrialPhases; ++to) {
      EXPECT_EQ(IsLegalTransition(PhaseAt(from), PhaseAt(to)),
                legal.count({PhaseAt(from), PhaseAt(to)}) > 0)
          << TrialPhaseName(PhaseAt(from)) << " -> " << TrialPhaseName(PhaseAt(to));
    }
  }
}

TEST(TrialPhaseTest, EveryPhaseCanBeLeftForIdle) {
  // The single exit path (TrialLifecycle::EndAttempt) needs this from anywhere.
  for (int from = 0; from < kNumTrialPhases; ++from) {
    EXPECT_TRUE(IsLegalTransition(PhaseAt(from), P::kIdle)) << TrialPhaseName(PhaseAt(from));
  }
}

TEST(TrialPhaseTest, OnlyIdleAndAwaitingReattachHoldNoActor) {
  std::set<std::string> without;
  for (int p = 0; p < kNumTrialPhases; ++p) {
    if (!PhaseHoldsActor(PhaseAt(p))) without.insert(TrialPhaseName(PhaseAt(p)));
  }
  EXPECT_EQ(without, (std::set<std::string>{"idle", "awaiting_reattach"}));
}

// The status table, whole: finished is final except ERROR's retry, an
// attempt fails only while RUNNING, and a queued trial starts, is held or
// is stopped.
TEST(TrialPhaseTest, StatusChangesFollowTheTable) {
  using S = TrialStatus;
  const S all[] = {S::kPending, S::kRunning, S::kPaused, S::kTerminated, S::kError};
  const std::set<std::pair<S, S>> legal = {
      {S::kPending, S::kRunning}, {S::kPending, S::kPaused},   {S::kPending, S::kTerminated},
      {S::kRunning, S::kPending}, {S::kRunning, S::kPaused},   {S::kRunning, S::kTerminated},
      {S::kRunning, S::kError},   {S::kPaused, S::kRunning},   {S::kPaused, S::kTerminated},
      {S::kError, S::kPending}};
  for (S from : all) {
    for (S to : all) {
      EXPECT_EQ(IsLegalStatusChange(from, to), from == to || legal.count({from, to}) > 0)
          << TrialStatusName(from) << " -> " << TrialStatusName(to);
    }
  }
}

TEST(TrialPhaseTest, NamesAreDistinct) {
  std::set<std::string> names;
  for (int p = 0; p < kNumTrialPhases; ++p) names.insert(TrialPhaseName(PhaseAt(p)));
  EXPECT_EQ(names.size(), static_cast<size_t>(kNumTrialPhases));
  EXPECT_EQ(names.count("unknown"), 0u);
}

}  // namespace
}  // namespace ztune::head
