// The worker's control plane: owns the DEALER socket to the head, registers
// and heartbeats (Paranoid Pirate, Majordomo worker half), reconnects with
// backoff, hosts actors (one ActorRunner thread each), routes head commands to
// them, and keeps every unacknowledged ResultBatch in an outbox that is
// re-sent after each re-registration. The contract is docs/protocol.md.
// Implemented in three files by job: worker_runtime.cc (loop, link to the
// head, shutdown), worker_runtime_actors.cc (actors, their commands, events
// and replies), worker_runtime_payloads.cc (chunked checkpoint payloads).
//
// Thread affinity: Run() is the control thread; everything but
// RequestShutdown() and worker_id() must be called on it (in practice only
// Run()). The socket is created, used and closed on that thread only. Runner
// threads report through an EventQueue whose eventfd the control loop polls
// next to the socket; the control thread never waits on a trainable (a STOP
// that outlives its deadline abandons the actor's thread).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "common/clock.h"
#include "common/protocol/chunked_transfer.h"
#include "common/protocol/codec.h"
#include "common/protocol/messages.h"
#include "common/status.h"
#include "common/zmq/connection_monitor.h"
#include "worker/actor_runner.h"
#include "worker/child_process.h"
#include "worker/code_cache.h"
#include "worker/recent_requests.h"
#include "worker/trainable_registry.h"
#include "worker/worker_options.h"

namespace ztune::worker {

class WorkerRuntime {
 public:
  // `context`, `registry` and `clock` must outlive the runtime. Generates the
  // worker id when options.worker_id is empty.
  WorkerRuntime(zmq::context_t& context, const TrainableRegistry& registry,
                WorkerOptions options, const Clock& clock);
  // Abandons (detaches) any actor still hosted; Run() normally leaves none.
  ~WorkerRuntime();
  WorkerRuntime(const WorkerRuntime&) = delete;
  WorkerRuntime& operator=(const WorkerRuntime&) = delete;

  // Runs the control loop on the calling thread until RequestShutdown(). On
  // shutdown it sends DISCONNECT, stops every actor (waiting up to
  // options.shutdown_grace_ms, then abandoning the rest) and closes the socket.
  // Returns InvalidArgument for bad options or an endpoint that cannot be
  // connected, IOError if the socket or eventfd cannot be created; Ok after a
  // requested shutdown. Blocks.
  Status Run();

  // Asks Run() to shut down. Any thread; async-signal-safe (atomic store plus
  // one write(2)).
  void RequestShutdown();

  // "<name>-<hex8>", fixed for the process lifetime. Any thread.
  const std::string& worker_id() const { return options_.worker_id; }

 private:
  enum class Link { kDisconnected, kRegistering, kRegistered };

  // A command handed to an actor and not yet answered.
  struct PendingCommand {
    uint64_t rid = 0;  // 0: internal (shutdown STOP), never answered
    CommandKind kind = CommandKind::kSetup;
    ActorKey key;
  };

  struct ActorSlot {
    uint64_t serial = 0;
    std::shared_ptr<ActorRunner> runner;
    std::thread thread;  // none for an inline actor (ActorRunner::runs_inline)
    std::string trainable;
    int64_t iteration = 0;  // mirror of the runner's counter, from its events
    uint64_t next_seq = 1;  // seq of the next result; restarts at 1 after a RESET
    std::deque<PendingCommand> pending;
    std::optional<TimeMs> stop_deadline;  // set once a STOP is queued
    int64_t kill_after_ms = 0;
    // The trainable's processes, if it runs any (process trainables).
    std::shared_ptr<ProcessGroup> group;
    bool sigterm_sent = false;  // one grace period before the STOP's deadline
  };

  // A killed actor whose processes are not all gone yet: its pending commands
  // are answered (and so its resources freed at the head) only once the group
  // is empty, or after kill_at + kGiveUpMs with an error in the log.
  struct DyingActor {
    ActorKey key;
    std::shared_ptr<ProcessGroup> group;
    std::deque<PendingCommand> pending;
    std::string error;
    int64_t iteration = 0;  // the actor's last, for REGISTER
    TimeMs kill_at = 0;  // SIGKILL then (SIGTERM was sent at the kill)
    bool killed = false;
  };

  // An unacknowledged ResultBatch; dropped once ACK.seq >= watermark (the last
  // seq it holds, or for a batch without results the last seq before it).
  struct OutboxEntry {
    protocol::ResultBatch batch;
    uint64_t watermark = 0;
  };

  Status Loop();
  void Shutdown();

  // ---- link ----
  Status OpenSocket(TimeMs now);
  void CloseSocket(int linger_ms);
  // Drops the link: the socket is closed (whatever it holds is gone), chunked
  // transfers restart, and a new incarnation registers at `reconnect_at`.
  void DropLink(TimeMs reconnect_at);
  // True when the monitor saw the DEALER's connection end. ZeroMQ would
  // reconnect by itself, but what was in flight in the old connection (a
  // TRAIN, a result batch, a REPLY) is lost without a trace; only a new
  // registration makes the head reconcile it (docs/protocol.md §3). A
  // handshake the head refused (our key, its key) counts as a cut, after
  // one error line saying which.
  bool ConnectionWasCut();
  void BeginRegistration(TimeMs now);
  void SendRegister();
  Status OnTimers(TimeMs now);
  int64_t PollTimeoutMs(TimeMs now) const;
  void Poll(int64_t timeout_ms);
  void ReadSocket();
  bool Send(const protocol::Message& message);
  // A RESULT batch, encoded where it is (the outbox keeps it).
  bool Send(const protocol::ResultBatch& batch);
  // Sends encoded frames, or, when one is over protocol::kMaxFrameBytes, the
  // failure that replaces `message()` (made only then).
  // `frames` to the head, in the layout it announced (head_takes_one_frame_).
  Status SendToHead(const std::vector<std::string>& frames);
  bool SendEncoded(const std::vector<std::string>& frames, const char* name,
                   const std::function<protocol::Message()>& message);
  // Sends now when registered, else holds the message until REGISTERED. A
  // payload above protocol::kInlinePayloadBytes goes in chunks.
  void SendOrHold(protocol::Message message);
  // A reply whose payload is too large to go inline travels with its payload
  // as a source (pieces in memory), never concatenated: sent in chunks, or
  // held as it is until the head is back.
  struct HeldReply {
    protocol::Message message;  // the payload is empty when `large_payload` is set
    std::unique_ptr<protocol::PayloadSource> large_payload;
  };
  void SendOrHold(HeldReply reply);
  // Announces `payload`'s size in `header` (a REPLY), sends it and streams
  // the payload after it. False, with `payload` untouched, if the header
  // could not be sent.
  bool SendChunked(protocol::Message header, std::unique_ptr<protocol::PayloadSource>& payload);
  // Sends every chunk the windows allow.
  void PumpChunks();
  // The link was reset (socket closed, or registering again): chunked replies
  // start over after the next REGISTERED; RESTOREs whose payload was arriving
  // fail, with the commands queued behind them.
  void ResetTransfers(const std::string& reason);
  void WarnDropped(const std::string& what);

  // ---- head messages (docs/protocol.md, "Commands") ----
  void HandleMessage(protocol::Message message);
  void HandleRegistered(const protocol::Registered& m);
  void HandleDisconnect(const protocol::Disconnect& m);
  // Whether a command with `rid` is to run: false for a resend of one this
  // worker accepted before (its answer is sent again, or follows).
  bool AcceptOnce(CommandKind kind, uint64_t rid, const ActorKey& key);
  void HandleCreateActor(const protocol::CreateActor& m);
  // Routes an actor command: a RESTORE with a chunked payload waits for it,
  // and later commands for that actor wait behind it (a STOP cancels it).
  void RouteActorCommand(protocol::Message message);
  void HandleActorCommand(protocol::Message message);
  void HandleChunk(const protocol::Chunk& chunk, const std::string& bytes);
  void HandleCredit(const protocol::Credit& credit);
  // Runs the commands at the front of `key`'s wait that are ready, up to the
  // next RESTORE whose payload is still arriving; ends the wait when empty.
  void DrainPayloadWait(const ActorKey& key);
  // Ends `key`'s wait: its RESTOREs (arriving or complete) and the commands
  // behind them fail with `error`; the head is told to stop their chunks.
  void FailPayloadWait(const ActorKey& key, const std::string& error);
  // Tells the head to stop sending the payload of `rid`.
  void CancelIncomingPayload(uint64_t rid);
  void HandleAck(const protocol::Ack& m);
  void HandleAckEntry(const protocol::AckEntry& m);
  // What REGISTER advertises: the registry's names, and
  // protocol::kSubmittedPythonTrainable with --allow-submitted-code.
  std::vector<std::string> HostedTrainables() const;
  // The trainable a CREATE_ACTOR asks for (a submitted-code one also starts
  // fetching its project); an error names why this worker cannot host it.
  Result<std::unique_ptr<Trainable>> MakeTrainable(const protocol::CreateActor& m);
  // Sends the FETCH_CODE requests that are due (registered only).
  void SendCodeRequests(TimeMs now);
  // Answers from the trial's output files (trial_output_index.h), on this
  // thread: at most protocol::kMaxReadLogBytes of one file, no actor needed.
  void HandleReadLog(const protocol::ReadLog& m);

  // ---- runner events ----
  void HandleRunnerEvents();
  void HandleRunnerEvent(RunnerEvent event);
  // An inline actor's queued commands, executed now and their events handled
  // (which may end the actor and erase its slot: `runner` is a copy, so it
  // stays alive and valid meanwhile).
  void RunInline(std::shared_ptr<ActorRunner> runner);
  // Both take the key by value: callers pass keys that live in actors_, whose
  // entry they erase.
  void FinishActor(ActorKey key, const RunnerEvent& last);
  void KillActor(ActorKey key);
  void CheckStopDeadlines(TimeMs now);
  // Escalates to SIGKILL and answers the pending commands of dying actors
  // whose groups emptied.
  void CheckDyingActors(TimeMs now);
  // ReapOrphanedDescendants with the groups of actors_ and dying_.
  void ReapOrphans();
  // Answers a killed actor's pending commands with `error`.
  void AnswerKilled(const ActorKey& key, const std::deque<PendingCommand>& pending,
                    const std::string& error);

  // ---- replies ----
  void SendReply(uint64_t rid, const ActorKey& key, bool ok, std::string error, Json data = {},
                 std::string payload = {});
  // A successful reply whose payload is too large to go inline (a SAVE's
  // envelope in pieces): streamed in chunks, or held whole while unregistered.
  void SendLargeReply(uint64_t rid, const ActorKey& key, Json data,
                      std::unique_ptr<protocol::PayloadSource> payload);
  // The answer to a command that cannot run: a failed ResultBatch for TRAIN, a
  // Reply with ok=false otherwise.
  void SendFailure(CommandKind kind, uint64_t rid, const ActorKey& key, std::string error);
  void SendBatch(const protocol::ResultBatch& batch);
  // A batch for the head now: added to results_ when the head takes RESULTS
  // (FlushResults sends them at the end of the loop's pass, or before any
  // other message, so that what the head gets keeps its order), else sent.
  void QueueBatch(const protocol::ResultBatch& batch);
  // Sends what results_ holds, as one message. While not registered it is
  // dropped: the outbox replays it after the next REGISTERED.
  void FlushResults();
  void ResendOutbox();
  std::string NoActorError(const ActorKey& key) const;

  zmq::context_t& context_;
  const TrainableRegistry& registry_;
  WorkerOptions options_;
  const Clock& clock_;
  HostInfo host_;
  const std::shared_ptr<EventQueue> events_;
  std::atomic<bool> shutdown_{false};
  bool shutting_down_ = false;  // in Shutdown(): nothing more is sent to the head

  // ---- link state ----
  std::unique_ptr<zmq::socket_t> dealer_;  // null while disconnected
  // The DEALER's connection events; with dealer_.
  std::unique_ptr<zmqutil::ConnectionMonitor> monitor_;
  // The monitor may hold events: the last Poll saw it readable, or could not
  // tell. Every Poll checks it (ZMQ_EVENTS), so an event that comes later is
  // seen by the next one; draining it on every pass cost a recv (and libzmq's
  // getpid) per loop.
  bool monitor_may_have_input_ = true;
  // The head refused our handshake since the last success: logged once.
  bool refusal_logged_ = false;
  Link link_ = Link::kDisconnected;
  uint64_t incarnation_ = 0;  // bumped at each (re)registration
  uint64_t head_epoch_ = 0;   // of the last REGISTERED; 0 before the first
  uint64_t last_logged_incarnation_ = 0;
  int64_t heartbeat_ms_ = 1000;
  int64_t liveness_ = 3;
  int64_t backoff_ms_ = 1000;
  TimeMs reconnect_at_ = 0;
  TimeMs next_register_at_ = 0;
  TimeMs last_heard_ = 0;  // last message from the head (any message counts)
  TimeMs last_sent_ = 0;
  TimeMs last_orphan_sweep_ = 0;  // ReapOrphans, once per heartbeat interval
  TimeMs last_drop_warn_ = -1'000'000;
  uint64_t dropped_since_warn_ = 0;
  std::deque<HeldReply> held_;  // replies made while not registered
  // The last REGISTERED announced protocol::kFeatureResults.
  bool head_takes_results_ = false;
  // ... and protocol::kFeatureOneFrame: messages go in the one-frame layout
  // (SendToHead) until the next registration begins (a REGISTER goes split,
  // which every head reads).
  bool head_takes_one_frame_ = false;
  // This pass's result batches, coalesced (QueueBatch), and when the first
  // of them was added.
  protocol::ResultsWriter results_;
  std::chrono::steady_clock::time_point results_since_;

  // ---- large payloads (chunked_transfer.h) ----
  protocol::ChunkSender chunk_sender_;          // SAVE replies to the head
  std::map<uint64_t, protocol::Message> sending_;  // rid -> header of a reply in chunks
  protocol::ChunkAssembler restore_payloads_;   // RESTORE payloads from the head
  // An actor with a RESTORE whose payload is arriving: its commands in
  // arrival order. A RESTORE still arriving has its rid and no message yet;
  // the front entry is always one (ready entries before it have run).
  struct WaitingCommand {
    uint64_t arriving_rid = 0;
    std::optional<protocol::Message> message;
  };
  ActorKeyMap<std::deque<WaitingCommand>> payload_waits_;

  RecentRequests recent_;  // rids accepted lately and their answers
  // Submitted projects: fetched here, awaited and unpacked by actor threads.
  const std::shared_ptr<CodeCache> code_cache_;

  // ---- actors ----
  uint64_t next_serial_ = 0;
  ActorKeyMap<ActorSlot> actors_;
  std::unordered_map<uint64_t, ActorKey> serial_keys_;  // live serial -> current key
  ActorKeyMap<uint64_t> acked_seq_;
  ActorKeyMap<std::deque<OutboxEntry>> outbox_;
  std::vector<DyingActor> dying_;
};

}  // namespace ztune::worker
