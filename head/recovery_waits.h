// RecoveryWaits: the trials a restarted head holds back for recovery, each
// with its deadline: while its worker may still re-attach its live actor
// (TrialPhase::kAwaitingReattach, until the re-attach grace ends or that
// worker registers without it), and while
// the results a re-attached actor made meanwhile are replayed
// (kAwaitingReplay, until they reach an iteration or the deadline passes).
// The runner's SetPhase takes a trial out when it leaves either phase, and
// its invariant check holds a trial here exactly while it is in one of them.
//
// Lives on the head loop thread; not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/ids.h"
#include "common/clock.h"

namespace ztune::head {

class RecoveryWaits {
 public:
  // The trial awaits the re-attach of its actor on `worker` until `deadline`.
  void AwaitReattach(const TrialId& trial_id, const WorkerId& worker, TimeMs deadline);
  // The re-attached trial awaits its replayed results up to iteration
  // `until`, or `deadline`. Replaces a re-attach wait of the trial.
  void AwaitReplay(const TrialId& trial_id, int64_t until, TimeMs deadline);
  // The trial waits for neither (unknown ids are ignored).
  void Leave(const TrialId& trial_id);

  bool AwaitingReattach(const TrialId& trial_id) const {
    return reattach_.count(trial_id) > 0;
  }
  bool AwaitingReplay(const TrialId& trial_id) const { return replay_.count(trial_id) > 0; }
  // The deadline of the trial's wait, if it waits.
  std::optional<TimeMs> Deadline(const TrialId& trial_id) const;
  // Whether the replay the trial awaits has reached `iteration` (false when
  // it awaits none).
  bool ReplayReached(const TrialId& trial_id, int64_t iteration) const;
  // The trials whose wait ended at `now`, in id order (a copy: the caller
  // makes them leave their phase while going through it).
  std::vector<TrialId> ExpiredReattaches(TimeMs now) const;
  std::vector<TrialId> ExpiredReplays(TimeMs now) const;
  // The trials awaiting the re-attach of an actor on `worker`, in id order (a
  // copy, as above).
  std::vector<TrialId> ReattachesOn(const WorkerId& worker) const;

  bool empty() const { return reattach_.empty() && replay_.empty(); }
  size_t size() const { return reattach_.size() + replay_.size(); }

 private:
  struct Wait {
    TimeMs deadline = 0;
    int64_t until = 0;  // replays only
    WorkerId worker;    // re-attaches only
  };
  static std::vector<TrialId> Expired(const std::map<TrialId, Wait>& waits, TimeMs now);

  // Disjoint: a trial is in one phase at a time.
  std::map<TrialId, Wait> reattach_;
  std::map<TrialId, Wait> replay_;
  // reattach_'s trials by worker: a registering worker's are looked up, not
  // searched for (a restarted head may await thousands, on a thousand workers).
  std::map<WorkerId, std::set<TrialId>> reattach_on_;
};

}  // namespace ztune::head
