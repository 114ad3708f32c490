// SimWorker: one simulated ztune-worker, speaking the head <-> worker protocol
// of docs/protocol.md and nothing else (no head internals): registration and
// re-registration with live actors, heartbeats and the head's liveness,
// actors whose steps take simulated time, result batches kept in an outbox
// until acknowledged and replayed after every new registration, request ids
// answered at most once, checkpoints of a chosen size (chunked with credits
// above the inline limit), RESTORE, RESET, STOP, the coalesced TRAINS and
// RESULTS (unless told not to). The fleet (fleet_main.cc)
// runs a thousand of them over real DEALER sockets in one thread.
//
// Pure state: no sockets, no clock of its own. The caller passes the time,
// hands it every decoded message from the head, calls OnTimer when
// NextTimerMs() is due, and sends what it appends to `out` in order. Its
// LinkAction tells the caller when to close the connection (the head fell
// silent) and when to open a new one. Not thread-safe: one owner thread.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/protocol/chunked_transfer.h"
#include "common/protocol/messages.h"

namespace ztune::fleet {

// The trainable every simulated worker hosts unless told otherwise.
inline constexpr char kSimTrainable[] = "sim";

struct SimWorkerOptions {
  std::string name = "sim";  // the worker id is "<name>-<8 hex digits>"
  // The 8 hex digits (their low 32 bits); 0: drawn from the seed. A fleet
  // passes random ones, so that two fleets never name a worker alike.
  uint64_t id_bits = 0;
  std::string host = "fleet";  // REGISTER's host (distinct per worker: see fleet_main.cc)
  int64_t pid = 0;             // REGISTER's pid
  std::map<std::string, double> resources = {{"CPU", 10}};
  std::vector<std::string> trainables = {kSimTrainable};
  // A step takes step_ms, varied uniformly by +-step_jitter of it.
  int64_t step_ms = 1000;
  double step_jitter = 0.1;
  // Probability that a step fails (a RESULT batch with failed=true).
  double step_failure_rate = 0;
  // The bytes of the trainable's Save() data in every checkpoint.
  uint64_t checkpoint_bytes = 1024;
  // Answer RESET with reset=false (an actor that cannot be reused).
  bool refuse_reset = false;
  // As ztune-worker: announce TRAINS, and send the result batches one call
  // produces as one RESULTS to a head that takes them (docs/protocol.md
  // §4.12). false: one message per TRAIN and per batch, as an older worker.
  bool coalesce = true;
  // With `coalesce`, as ztune-worker: announce that TRAINs may come inside an
  // ACK (the head lets those of long steps wait for its commit:
  // docs/protocol.md §4.11).
  bool ack_trains = true;
  // As ztune-worker: announce the one-frame layout (kFeatureOneFrame), and
  // send in it to a head that announced it too.
  bool one_frame = true;
  // Until REGISTERED says otherwise.
  int64_t heartbeat_ms = 1000;
  int64_t liveness = 3;
  int64_t max_backoff_ms = 2000;
};

// What one simulated worker counts; the fleet sums them.
struct SimStats {
  uint64_t connections = 0;                  // connections opened (first and reconnects)
  uint64_t registrations = 0;                // incarnations that got REGISTERED
  uint64_t silence_reconnects = 0;           // the head was silent for heartbeat x liveness
  uint64_t connection_cuts = 0;              // the connection ended under a worker
  uint64_t disconnects_received = 0;         // DISCONNECT from the head
  uint64_t epoch_changes = 0;                // REGISTERED named another head epoch
  // By command name; "TRAIN" counts every TRAIN, those inside a TRAINS too.
  std::map<std::string, uint64_t> commands;
  uint64_t coalesced_trains = 0;             // TRAINs that came inside a TRAINS
  uint64_t trains_in_acks = 0;               // TRAINs that came inside an ACK
  uint64_t results_sent = 0;                 // first sends
  uint64_t results_replayed = 0;             // resent after a new registration
  uint64_t results_acked = 0;
  uint64_t result_messages = 0;  // RESULT and RESULTS messages sent
  uint64_t step_failures = 0;
  uint64_t refusals = 0;  // commands answered with an error
  uint64_t checkpoint_bytes_saved = 0;
  uint64_t restores = 0;
  int64_t max_head_silence_ms = 0;  // longest gap between messages while registered
  // Milliseconds from a batch's first send to the ACK of its last result, one
  // sample per result (appended; the fleet computes percentiles).
  std::vector<float> ack_latency_ms;

  // Sums the counters, merges the commands and samples, keeps the longest silence.
  void Add(const SimStats& other);
};

class SimWorker {
 public:
  // `seed` drives step times, failures and the worker id.
  SimWorker(SimWorkerOptions options, uint64_t seed);

  enum class LinkAction {
    kNone,
    kClose,  // close the connection: the head has been silent too long
    kOpen,   // open a new connection, then call OnConnected
  };

  // A new connection is open (the first, or after kClose/kOpen): REGISTER
  // with the next incarnation.
  void OnConnected(TimeMs now, std::vector<protocol::Message>& out);
  // One decoded message from the head.
  void OnMessage(protocol::Message message, TimeMs now, std::vector<protocol::Message>& out);
  // The connection was cut (the socket monitor saw it end). A registered
  // worker registers again at once on a new connection (what was in flight
  // is lost; only a new registration reconciles it, docs/protocol.md §3);
  // one that was still registering waits its backoff. kClose, or kNone when
  // it is not connected anyway.
  LinkAction OnConnectionCut(TimeMs now);
  // Steps, heartbeats, register resends, the head's silence, reconnect time.
  LinkAction OnTimer(TimeMs now, std::vector<protocol::Message>& out);
  // When OnTimer next has something to do.
  TimeMs NextTimerMs() const;
  // The worker leaves (SIGTERM): DISCONNECT to the head.
  void Leave(std::vector<protocol::Message>& out);

  const std::string& worker_id() const { return worker_id_; }
  bool registered() const { return link_ == Link::kRegistered; }
  // What it sends goes in the one-frame layout (the head announced it at the
  // REGISTERED of this registration).
  bool sends_one_frame() const { return head_takes_one_frame_; }
  uint64_t incarnation() const { return incarnation_; }
  size_t actor_count() const { return actors_.size(); }
  // Sum of the iterations every hosted actor completed.
  int64_t live_iterations() const;
  // Starts a new measurement window: ack latency samples and the longest
  // head silence are kept from now on only (counters keep counting).
  void ResetWindow() {
    stats_.ack_latency_ms.clear();
    stats_.max_head_silence_ms = 0;
  }
  SimStats& stats() { return stats_; }
  const SimStats& stats() const { return stats_; }

 private:
  using ActorKey = std::pair<std::string, uint64_t>;  // (trial_id, attempt)

  struct Actor {
    std::string trainable;
    Json config;
    int64_t iteration = 0;
    double time_total_s = 0;
    int64_t iterations_since_restore = 0;
    double time_since_restore = 0;
    uint64_t next_seq = 1;
    uint64_t acked_seq = 0;
    // Commands in arrival order; the front one runs. A TRAIN runs for its
    // steps; a RESTORE waits until its chunked payload is complete
    // (payload_bytes > 0 until then).
    std::deque<protocol::Message> queue;
    // The running TRAIN (the queue's front).
    std::optional<TimeMs> step_due;
    TimeMs train_started = 0;
    std::vector<protocol::ResultRecord> batch;
    bool stopping = false;      // a STOP is queued: later commands are refused
    std::deque<uint64_t> rids;  // accepted lately, oldest first (REGISTER's live_actors)
    // From the config, at the first result (the config does not change).
    std::optional<double> base_score;
    std::optional<double> iterations_cap;  // config "iterations", when a number
  };
  struct OutboxEntry {
    protocol::ResultBatch batch;
    uint64_t watermark = 0;  // the last seq it holds (or the last before it)
    std::optional<TimeMs> first_sent;
  };
  // A request id this worker accepted, and its answer once sent (kept unless
  // it carried a checkpoint or was a TRAIN, whose batch is in the outbox).
  struct Accepted {
    bool answered = false;
    // Boxed: a node per accepted rid, made and dropped for every TRAIN, was
    // 4% of the fleet's CPU at the size of an inline Message.
    std::unique_ptr<protocol::Message> answer;
  };
  enum class Link { kDisconnected, kRegistering, kRegistered };

  void HandleMessage(protocol::Message message, TimeMs now, std::vector<protocol::Message>& out);
  LinkAction Timers(TimeMs now, std::vector<protocol::Message>& out);
  void SendRegister(TimeMs now, std::vector<protocol::Message>& out);
  void HandleRegistered(const protocol::Registered& m, TimeMs now,
                        std::vector<protocol::Message>& out);
  // Sends, or holds until REGISTERED (docs/protocol.md §4.3). A REPLY whose
  // payload exceeds the inline limit goes as a header plus CHUNKs.
  void Emit(protocol::Message message, std::vector<protocol::Message>& out);
  void EmitNow(protocol::Message message, std::vector<protocol::Message>& out);
  void PumpChunks(std::vector<protocol::Message>& out);
  void SendBatch(OutboxEntry& entry, TimeMs now, bool replay, std::vector<protocol::Message>& out);
  // Folds each run of consecutive RESULT batches in out[from..] into one
  // RESULTS (order kept), if the head takes them; counts the result
  // messages sent.
  void Coalesce(std::vector<protocol::Message>& out, size_t from);

  // Records `rid` for `key`; false (after resending a kept answer) when it
  // was accepted before and so must not run again.
  bool AcceptOnce(uint64_t rid, const ActorKey& key, bool is_train,
                  std::vector<protocol::Message>& out);
  // `rid` was answered; `kept` (if given) is sent again for a resend.
  void Answered(uint64_t rid, const protocol::Message* kept);
  std::string NoActorError(const ActorKey& key) const;
  std::string ExistsError(const ActorKey& key) const;
  // The next connection waits the backoff, which doubles up to the cap.
  void BackOff(TimeMs now);
  void Reply(uint64_t rid, const ActorKey& key, bool ok, std::string error, Json data,
             std::string payload, bool keep, std::vector<protocol::Message>& out);
  void Refuse(bool is_train, uint64_t rid, const ActorKey& key, std::string error,
              std::vector<protocol::Message>& out);

  void HandleCreate(const protocol::CreateActor& m, std::vector<protocol::Message>& out);
  void HandleActorCommand(protocol::Message message, TimeMs now,
                          std::vector<protocol::Message>& out);
  void HandleChunk(const protocol::Chunk& m, std::string bytes, TimeMs now,
                   std::vector<protocol::Message>& out);
  void HandleAck(const protocol::AckEntry& m, TimeMs now);
  // Runs `key`'s queued commands until one has to wait (a TRAIN stepping, a
  // RESTORE's payload arriving) or the queue is empty.
  static bool WaitsForPayload(const protocol::Message& m);
  static void EraseQueuedRestore(Actor& a, uint64_t rid);
  // The answer to a queued command that will not run.
  void RefuseQueued(const protocol::Message& m, const ActorKey& key, const std::string& error,
                    std::vector<protocol::Message>& out);
  void Drain(const ActorKey& key, TimeMs now, std::vector<protocol::Message>& out);
  // One step of `key`'s running TRAIN is due: a result (or a failure), and
  // the batch goes out when the TRAIN is over.
  void Step(const ActorKey& key, TimeMs now, std::vector<protocol::Message>& out);
  TimeMs StepDuration();
  // The result of a.iteration, packed; `done` says whether it is the last.
  protocol::RawResult MakeResult(const ActorKey& key, Actor& a, double step_s, bool& done) const;
  // The earliest step_due of all actors (kNoStep if none), cached: NextTimerMs
  // runs after every message and timer, and walking the actors' map for it
  // was 5% of the fleet's CPU. Every change of an actor's step_due and every
  // actor added or removed calls StepsChanged().
  TimeMs NextStepMs() const;
  void StepsChanged() { next_step_stale_ = true; }

  SimWorkerOptions options_;
  std::mt19937_64 rng_;
  std::string worker_id_;
  Link link_ = Link::kDisconnected;
  uint64_t incarnation_ = 0;
  uint64_t head_epoch_ = 0;
  bool have_epoch_ = false;
  bool head_takes_results_ = false;  // the last REGISTERED announced kFeatureResults
  bool head_takes_one_frame_ = false;  // ... and kFeatureOneFrame (this registration)
  TimeMs last_heard_ = 0;
  TimeMs last_sent_ = 0;
  TimeMs last_register_ = 0;
  TimeMs reconnect_at_ = 0;
  int64_t backoff_ms_ = 0;
  int64_t heartbeat_ms_;
  int64_t liveness_;

  std::map<ActorKey, Actor> actors_;
  mutable TimeMs next_step_ = 0;
  mutable bool next_step_stale_ = true;
  std::map<ActorKey, std::deque<OutboxEntry>> outbox_;
  std::unordered_map<uint64_t, Accepted> accepted_;
  std::deque<uint64_t> accepted_order_;  // bounded memory: the oldest are forgotten
  std::deque<protocol::Message> held_;   // replies made while unregistered
  protocol::ChunkSender chunks_out_;
  // The headers of SAVE replies streaming in chunks, by rid (to start over
  // after a reconnect), and the replies a reconnect cut off, with their
  // bytes read back from the sender, re-sent after REGISTERED.
  std::map<uint64_t, protocol::Message> large_headers_;
  std::vector<protocol::Message> interrupted_;
  protocol::ChunkAssembler chunks_in_;
  SimStats stats_;
};

}  // namespace ztune::fleet
