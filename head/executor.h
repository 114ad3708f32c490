// Executor: Ray's RayTrialExecutor over the worker protocol. Sends actor
// commands through the CommandSink and tracks each outstanding request as a
// future keyed by request id, indexed by trial as well (no scans: Ray's
// _find_future is a scan, ours is a map lookup). Knows nothing about
// experiments, scheduling or the store. Lives on the head loop thread.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/ids.h"
#include "common/clock.h"
#include "common/json.h"
#include "head/command_sink.h"
#include "head/trial.h"

namespace ztune::head {

enum class FutureType { kCreate, kRestore, kTrain, kSave, kStop, kExport, kReset };
const char* FutureTypeName(FutureType t);

// Where a SAVE's checkpoint goes: kept by the head for a pause (memory, Ray's
// MEMORY checkpoint) or stored with the trial (persistent).
enum class CheckpointStorage { kMemory, kPersistent };
// The wire name of the SAVE's `storage` field: "memory" | "persistent".
const char* CheckpointStorageName(CheckpointStorage s);

struct Future {
  FutureType type = FutureType::kTrain;
  TrialId trial_id;
  uint64_t attempt = 0;
  WorkerId worker_id;
  uint64_t group_id = 0;    // kStop: the group released when the stop completes
  CheckpointStorage storage = CheckpointStorage::kPersistent;  // kSave only
  // kStop: release the group by then regardless. A driver request: answer by
  // then or the attempt fails; set when the request becomes the oldest of its
  // trial (the worker runs a trial's commands in order, so a pipelined TRAIN's
  // clock starts when the CREATE before it is answered); 0 while not armed.
  TimeMs deadline = 0;
  TimeMs budget_ms = 0;     // a driver request's time to answer once armed; 0 = none
  // A driver request: when it became the oldest of its trial (the worker
  // could start on it), with or without a budget; nullopt before.
  std::optional<TimeMs> started_ms;
  // kReset: the actor's key before the reset; a refusal answers under it.
  TrialId old_trial_id;
  uint64_t old_attempt = 0;
  // The command as sent (without its payload), for a resend with the same rid
  // after the worker reconnected: workers answer a rid at most once.
  protocol::Body request;
};

// Who answered a request: a RESULT batch answers a TRAIN, a REPLY any other
// command; both repeat the actor key they were addressed to (RESET: the new
// key).
struct Answer {
  bool is_result_batch = false;
  TrialId trial_id;
  uint64_t attempt = 0;
  WorkerId worker_id;
};

struct TrainBuffer {
  int64_t length = 1;
  double time_s = 0;
};

// How long a worker may take to answer a driver request (docs/spec.md,
// "timeouts"); 0 = no limit.
struct RequestTimeouts {
  TimeMs setup_ms = 0;       // CREATE_ACTOR, RESTORE, RESET
  TimeMs step_ms = 0;        // one training step; a TRAIN gets this x its buffer length
  TimeMs checkpoint_ms = 0;  // SAVE
};

// What an actor runs: a trainable its worker hosts by name, or submitted
// code (trainable protocol::kSubmittedPythonTrainable with its entry and the
// sha256 of its project archive).
struct ActorCode {
  std::string trainable;
  std::string entry;
  std::string code;
};

class Executor {
 public:
  Executor(CommandSink& sink, const Clock& clock) : sink_(sink), clock_(clock) {}

  // Creates the actor of `trial`'s current attempt on `worker_id` and, when
  // `checkpoint` is non-null, restores it (moved from: checkpoints are
  // megabytes); then starts training. The caller has bumped the attempt and
  // assigned the group. Pipelined: the worker runs an actor's commands in
  // order, so no round trip is waited for.
  void StartTrial(const Trial& trial, const ActorCode& code, const WorkerId& worker_id,
                  const std::map<std::string, double>& bundle0, const std::vector<int64_t>& gpu_ids,
                  std::string* checkpoint, const TrainBuffer& buffer,
                  const RequestTimeouts& timeouts);
  void ContinueTraining(const Trial& trial, const TrainBuffer& buffer,
                        const RequestTimeouts& timeouts, SendTiming timing = SendTiming::kNow);
  // Actor reuse: the actor of (old_trial_id, old_attempt) on the trial's worker
  // becomes the actor of `trial`'s current attempt. The reply says whether the
  // trainable accepted the new config; nothing else is sent until it comes.
  void Reset(const Trial& trial, const TrialId& old_trial_id, uint64_t old_attempt,
             const RequestTimeouts& timeouts);
  // After a successful RESET: restore (when `checkpoint` is set; moved from)
  // and train.
  void ResumeOnActor(const Trial& trial, std::string* checkpoint, const TrainBuffer& buffer,
                     const RequestTimeouts& timeouts);
  // Asks the actor to export its model; survives the STOP that follows.
  void Export(const Trial& trial, const std::vector<std::string>& formats);
  void Save(const Trial& trial, CheckpointStorage storage, const RequestTimeouts& timeouts,
            SendTiming timing = SendTiming::kNow);
  // Forgets the trial's outstanding futures (their replies are dropped) and
  // stops its actor; the group is released when the stop completes or at
  // now + kill_after_ms + grace.
  void StopActor(const Trial& trial, int64_t kill_after_ms);
  // Stops the actor of (trial_id, attempt) on `worker_id` (a cached actor, or
  // one a RESET left under its old key); `group_id` is released afterwards.
  void StopActorKey(const WorkerId& worker_id, const TrialId& trial_id, uint64_t attempt,
                    uint64_t group_id, int64_t kill_after_ms);

  // Drops the trial's driver futures (their replies will be ignored).
  void ForgetTrial(const TrialId& trial_id) { DropTrialFutures(trial_id); }
  // Request ids carry the head epoch in their top bits, so that an answer held
  // by a worker across a head restart never names a request of this head.
  // Call once, before the first request. Epochs wrap at 2^24.
  void SetEpoch(uint64_t epoch);
  // A rid of this epoch that no request of the executor uses (for requests
  // tracked elsewhere, e.g. log reads).
  uint64_t ReserveRid() { return next_rid_++; }
  // Removes and returns the future of `rid` if `answer` matches it (kind,
  // trial, attempt and worker); nullopt for an unknown or dropped rid. A
  // mismatch leaves the future in place and says why in `*mismatch`.
  std::optional<Future> Take(uint64_t rid, const Answer& answer, std::string* mismatch = nullptr);
  const Future* Find(uint64_t rid) const;
  // Rids of the futures that drive `trial_id` (create, restore, train, save,
  // reset), in send order.
  std::vector<uint64_t> DriverRidsOf(const TrialId& trial_id) const;
  // Rids of the STOPs sent to `worker_id` that are not answered yet.
  std::vector<uint64_t> StopRidsOn(const WorkerId& worker_id) const;
  // Sends the request of `rid` again, same rid, after the commit (so that it
  // follows REGISTERED). A RESTORE goes without its checkpoint: only resend
  // one the worker has accepted (it answers from what it has). An armed
  // deadline starts again: the request may only now reach the worker.
  void Resend(uint64_t rid);

  // Driver requests past their deadline (removed, with the trial's later
  // requests left in place): their attempts must fail.
  std::vector<Future> TakeExpiredRequests();

  // Stop futures past their deadline (removed); their groups must be released.
  std::vector<Future> TakeExpiredStops();
  // Stop futures addressed to `worker_id` (removed): the worker is gone.
  std::vector<Future> TakeStopsOnWorker(const WorkerId& worker_id);

  size_t NumFutures() const { return futures_.size(); }
  // Deadline index entries (requests and stops): one per armed future.
  size_t NumDeadlines() const { return request_deadlines_.size() + stop_deadlines_.size(); }
  // Ray's buffer time: max(min, min(max, outstanding futures // 10)).
  double BufferTime(double min_s, double max_s) const;

 private:
  uint64_t Send(const WorkerId& worker_id, Future f, protocol::Body body, std::string payload,
                SendTiming timing);
  void DropTrialFutures(const TrialId& trial_id);
  // Starts the deadline of the oldest request of `trial_id` if it has one.
  void ArmOldest(const TrialId& trial_id);
  // Drops the deadline index entry of a future that is answered, dropped or
  // re-armed (left in place, an answered SAVE's entry lived for its whole
  // hour: 2.4 KB per trial of 50 checkpoints).
  void Unindex(uint64_t rid, const Future& f);

  CommandSink& sink_;
  const Clock& clock_;
  static constexpr int kEpochShift = 40;
  uint64_t next_rid_ = 1;
  std::unordered_map<uint64_t, Future> futures_;
  // Futures that drive a trial (create, restore, train, save, reset); STOP and
  // EXPORT outlive the trial's actor and are not indexed here.
  std::unordered_map<TrialId, std::set<uint64_t>> by_trial_;
  std::multimap<TimeMs, uint64_t> stop_deadlines_;
  // Armed driver deadlines. Invariant: exactly the armed futures have an
  // entry (Unindex keeps it so).
  std::multimap<TimeMs, uint64_t> request_deadlines_;
};

}  // namespace ztune::head
