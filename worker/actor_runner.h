// An actor: one trial's Trainable plus Ray's per-actor counters, driven by its
// own runner thread (docs/protocol.md "Actors").
//
// Thread affinity: the control thread (WorkerRuntime) calls Enqueue, Abandon
// and CurrentLog; everything else runs on the runner thread inside Run(), which
// executes the queued commands one at a time in FIFO order and reports each
// outcome as a RunnerEvent on the shared EventQueue. The runner never touches a
// socket. The counters, the trainable and the current key are owned by the
// runner thread alone. An inline actor (Trainable::RunsInline) has no thread:
// the control thread itself is its runner thread, executing each command as
// it is enqueued with RunQueuedInline and handling the events it returns
// directly, so a step costs no thread wake-up either way.
//
// Why a locked queue and an eventfd rather than an inproc PAIR per runner (the
// house default): a runner whose step hangs is abandoned, not joined, and a
// socket left open on an abandoned thread would block zmq_ctx_term forever.
// Runner threads therefore own no ZeroMQ socket at all.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <ctime>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/json.h"
#include "common/protocol/chunked_transfer.h"
#include "common/protocol/messages.h"
#include "common/protocol/payload_source.h"
#include "worker/trainable.h"
#include "worker/trial_log.h"

namespace ztune::worker {

// Actors are addressed by (trial_id, attempt); the head fences on it.
struct ActorKey {
  std::string trial_id;
  uint64_t attempt = 0;
  auto operator<=>(const ActorKey&) const = default;
  // "trial T attempt A"
  std::string ToString() const;
};

// The control thread looks actors up by key several times per message: hash
// tables, not trees (trial ids share long prefixes, so a tree's string
// comparisons were ~7% of a worker's control thread at one result per TRAIN).
struct ActorKeyHash {
  size_t operator()(const ActorKey& k) const noexcept {
    return std::hash<std::string>{}(k.trial_id) ^ (k.attempt * 0x9e3779b97f4a7c15ULL);
  }
};
template <class V>
using ActorKeyMap = std::unordered_map<ActorKey, V, ActorKeyHash>;

// The entries of `map` in key order, for what goes out in a stable order
// (registration, resends) whatever the table's.
template <class V>
std::vector<const typename ActorKeyMap<V>::value_type*> InKeyOrder(const ActorKeyMap<V>& map) {
  std::vector<const typename ActorKeyMap<V>::value_type*> entries;
  entries.reserve(map.size());
  for (const auto& entry : map) entries.push_back(&entry);
  std::sort(entries.begin(), entries.end(),
            [](const auto* a, const auto* b) { return a->first < b->first; });
  return entries;
}

enum class CommandKind { kSetup, kTrain, kSave, kRestore, kReset, kStop, kExport };

// The outcome of one command, posted by a runner thread to the control thread.
struct RunnerEvent {
  uint64_t actor_serial = 0;  // which actor (serials are never reused)
  CommandKind kind = CommandKind::kSetup;
  uint64_t rid = 0;
  ActorKey key;         // the key the command addressed
  bool ok = true;       // TRAIN: false = a step failed (ResultBatch.failed)
  std::string error;
  Json data;            // Reply.data
  std::string payload;  // SAVE: the checkpoint envelope, if it goes inline
  // SAVE: an envelope too large to go inline, in pieces (never concatenated:
  // a gigabyte checkpoint is not copied once more).
  std::unique_ptr<protocol::PayloadSource> large_payload;
  // TRAIN: results with the auto-filled fields, in order.
  std::vector<protocol::RawResult> results;
  int64_t iteration = 0;      // the actor's iteration after the command
  std::optional<ActorKey> new_key;  // RESET that took effect: the actor's new key
  bool exited = false;  // the runner thread ends after this event (STOP, failed setup)
};

// Runner threads -> control thread. Push is thread-safe; Drain and fd belong to
// the control thread, which polls fd() (an eventfd, readable while events are
// queued or after Wake()).
class EventQueue {
 public:
  EventQueue();
  ~EventQueue();
  EventQueue(const EventQueue&) = delete;
  EventQueue& operator=(const EventQueue&) = delete;

  // False if the eventfd could not be created (errno is logged).
  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }

  void Push(RunnerEvent event);
  // Takes every queued event and clears the wake-up.
  std::deque<RunnerEvent> Drain();
  // Makes fd() readable without an event. Async-signal-safe (one write(2)).
  void Wake() const;

 private:
  int fd_ = -1;
  std::mutex mu_;
  std::deque<RunnerEvent> events_;  // GUARDED_BY(mu_)
};

// Identity of the hosting worker, stamped into results and errors.
struct HostInfo {
  std::string worker_id;
  std::string hostname;
  int64_t pid = 0;
  std::string work_dir;
};

class ActorRunner {
 public:
  // `create` is the CREATE_ACTOR that made the actor; its Setup is the first
  // command Run() executes. `trainable` comes from the registry.
  ActorRunner(uint64_t serial, const protocol::CreateActor& create,
              std::unique_ptr<Trainable> trainable, HostInfo host,
              std::shared_ptr<EventQueue> events);
  ~ActorRunner();

  // Control thread. Queues a command (a head message with its payload). A STOP
  // also cuts a running buffered TRAIN short after its current step.
  void Enqueue(protocol::Message command);

  // Control thread. The worker gives up on this actor: nothing it produces is
  // posted any more, TrialContext::StopRequested() turns true, and Run() returns
  // (after Cleanup) as soon as the current trainable call does.
  void Abandon();

  // The log of the trial the actor currently serves. Any thread.
  std::shared_ptr<TrialLog> CurrentLog() const;

  // The runner thread's body; returns after STOP, a failed setup, or Abandon.
  void Run();

  // Control thread, for an inline actor (never also Run()): executes every
  // queued command now and returns their events in order, the last of them
  // possibly `exited`. Nothing after an exit, and nothing once abandoned.
  std::vector<RunnerEvent> RunQueuedInline();

  // Whether this actor's trainable may run on the control thread with the
  // config it was created with (Trainable::RunsInline). Control thread,
  // before the first command runs.
  bool runs_inline() const { return runs_inline_; }

  // Runner threads currently inside Run(), process-wide (abandoned ones included).
  static int RunningThreads();

 private:
  // Runner-thread helpers; each returns the event to post.
  // An event about this actor (its current key) answering request `rid`.
  RunnerEvent NewEvent(CommandKind kind, uint64_t rid) const;
  RunnerEvent DoSetup(uint64_t rid);
  RunnerEvent DoTrain(const protocol::Train& cmd);
  RunnerEvent DoSave(const protocol::Save& cmd);
  RunnerEvent DoRestore(const protocol::Restore& cmd, const std::string& payload);
  RunnerEvent DoReset(const protocol::Reset& cmd);
  RunnerEvent DoStop(const protocol::Stop& cmd);
  RunnerEvent DoExport(const protocol::Export& cmd);
  // Dispatches one command; event.exited means the thread ends after posting it.
  RunnerEvent Execute(protocol::Message& command);
  // Cleanup and destruction of an abandoned actor's trainable, quietly (if
  // set up): on its runner thread, or for an inline actor on the control
  // thread at Abandon.
  void ReleaseAbandonedTrainable();
  // Execute, then what every executed command needs: an exit destroys the
  // trainable on this thread, and the event names this actor.
  RunnerEvent ExecuteAndStamp(protocol::Message& command);
  // A reply for a command whose key is not this actor's (fencing).
  RunnerEvent NoActor(CommandKind kind, uint64_t rid, const ActorKey& key) const;
  TrialContext MakeContext() const;
  // The current trial's context, kept between steps (making one copies its
  // resources, GPU ids and paths): rebuilt after a RESET, its iteration and
  // `restored` refreshed on each call.
  const TrialContext& Context();
  void Post(RunnerEvent event);
  // Updates the counters and packs `result` with the auto-filled fields.
  // Precondition: result.is_object().
  protocol::RawResult FillResult(const Json& result, double measured_s);

  const uint64_t serial_;
  const HostInfo host_;
  const std::string trainable_name_;
  const std::shared_ptr<EventQueue> events_;

  // Command queue (control thread -> runner thread).
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<protocol::Message> queue_;  // GUARDED_BY(mu_)
  std::atomic<int> stops_queued_{0};  // STOPs in queue_: cut buffered TRAINs short
  std::atomic<bool> abandoned_{false};

  // The current trial's log; swapped by a RESET on the runner thread, read by
  // the control thread.
  mutable std::mutex log_mu_;
  std::shared_ptr<TrialLog> log_;  // GUARDED_BY(log_mu_)

  // ---- runner thread only ----
  ActorKey key_;
  Json config_;
  std::vector<int64_t> gpu_ids_;
  std::map<std::string, double> resources_;
  std::unique_ptr<Trainable> trainable_;
  // Set once, from config_ and trainable_ (declared before it); read by the
  // control thread too, before the first command runs.
  const bool runs_inline_;
  bool setup_done_ = false;
  // An executed command ended the actor: nothing runs after it.
  bool exited_ = false;
  TrialContext context_;  // see Context()
  bool context_valid_ = false;
  // `date_` is `date_of_` formatted (FillResult formats once a second).
  std::time_t date_of_ = 0;
  std::string date_;
  // Ray's counters (trainable.py).
  int64_t iteration_ = 0;
  double time_total_s_ = 0;
  std::optional<double> timesteps_total_;
  int64_t iterations_since_restore_ = 0;
  double time_since_restore_ = 0;
  bool restored_ = false;
};

}  // namespace ztune::worker
