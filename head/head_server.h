// HeadServer: the head's event loop. Owns the worker ROUTER and the client
// ROUTER, decodes and validates every input, feeds the TrialRunner, commits
// the turn's WriteBatch (one fsync) and only then sends what depends on it
// (group commit). A turn that answers no client hands its commit to a thread
// (PipelinedStore) and goes on with the next turn; what depends on that
// commit is sent when it ends. Implements CommandSink for the runner.
//
// One thread: Run() is called on the thread that constructed the server and
// everything here, including the sockets, stays on it.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <zmq.hpp>

#include "common/ids.h"
#include "common/clock.h"
#include "common/rate_limited_warning.h"
#include "common/status.h"
#include "common/security/curve_keys.h"
#include "head/access_lists.h"
#include "head/client_service.h"
#include "head/client_waits.h"
#include "head/log_relay.h"
#include "head/dashboard_logins.h"
#include "head/loop_reads.h"
#include "head/results_dir.h"
#include "head/command_sink.h"
#include "head/heartbeat_keeper.h"
#include "head/checkpoint_files.h"
#include "head/payload_streams.h"
#include "head/peer_rate_limiter.h"
#include "head/pipelined_store.h"
#include "head/store_thread.h"
#include "head/trial_runner.h"
#include "head/turn_times.h"
#include "head/zap_handler.h"
#include "storage/store.h"

namespace ztune::head {

// CURVE on both endpoints (docs/security.md).
struct HeadSecurity {
  security::KeyPair key_pair;  // the head's own
  std::string workers_allow_file;
  std::string clients_allow_file;
};

struct HeadServerOptions {
  std::string worker_endpoint = "tcp://127.0.0.1:7501";
  std::string client_endpoint = "tcp://127.0.0.1:7500";
  std::string endpoints_file;  // if set, the bound endpoints are written there as JSON
  // Also write every stored result in Ray Tune's layout under this directory
  // (head/results_dir.h); empty = not at all.
  std::string results_dir;
  // The dashboard's URL (head/dashboard_server.h), written to the endpoints
  // file as "http_endpoint" when set.
  std::string http_url;
  int64_t max_worker_message_bytes = 512LL << 20;
  int64_t max_client_request_bytes = 16LL << 20;
  // Budgets per connection (docs/security.md, "Limits per connection"). A
  // worker connection over its budget loses what it sends until it has
  // registered again (nothing is lost: workers re-send what was not
  // acknowledged); a client request over budget is refused with a retry hint.
  // A legitimate worker sends about one message per command the head sends
  // it, so its rate is bounded by the head's own (about 15,000/s here).
  // ztune-head's flags set these; bursts are twice the rates.
  PeerLimits worker_limits{{20000, 40000}, {1024.0 * (1 << 20), 2048.0 * (1 << 20)}};
  PeerLimits client_limits{{500, 1000}, {64.0 * (1 << 20), 128.0 * (1 << 20)}};
  RunnerOptions runner;
  // Where checkpoints that arrive in chunks are kept as files (ztune-head:
  // <data-dir>/checkpoint-files). Empty: they are assembled in memory and
  // stored inline, up to max_worker_message_bytes (unit tests).
  std::string checkpoint_dir;
  // The largest checkpoint accepted as a file.
  int64_t max_checkpoint_bytes = 16LL << 30;
  // nullopt: plain TCP, no authentication (ztune-head --insecure); every
  // client is then an anonymous admin.
  std::optional<HeadSecurity> security;
};

// Counters for logs and benchmarks.
struct HeadStats {
  uint64_t turns = 0;
  uint64_t commits = 0;
  uint64_t commits_behind_loop = 0;  // of `commits`, those run by the commit thread
  uint64_t messages_in = 0;          // on both sockets
  uint64_t malformed = 0;
  uint64_t unknown_senders = 0;
  uint64_t slow_store_operations = 0;  // longer than one heartbeat interval
  uint64_t unauthorized = 0;           // messages from keys not (or no longer) allowed
  uint64_t rate_limited = 0;           // messages and requests over their connection's budget
  uint64_t result_batches = 0;         // RESULT messages and batches inside RESULTS
  // TRAINs sent inside an ACK: those held for the commit (SendTiming::kWithAck)
  // and those that waited for it anyway (a new actor's first).
  uint64_t trains_in_acks = 0;
  // HEARTBEATs sent: only to workers sent nothing else lately (SendHeartbeats).
  uint64_t heartbeats_sent = 0;
  // Messages to workers dropped: the worker had no connection (detached, or
  // between two of its connections) or the socket refused the send. Not
  // counted in the figures above.
  uint64_t worker_sends_dropped = 0;
};

class HeadServer final : public CommandSink {
 public:
  HeadServer(zmq::context_t& context, storage::Store& store, HeadServerOptions options);

  // Loads the store and binds both sockets. Startup errors are returned.
  Status Start();
  // Reads queued by other threads (the dashboard), answered once per turn
  // after the commit, as a read-only caller. Set before Run(); `reads` must
  // outlive Run().
  void SetLoopReads(LoopReads* reads) { loop_reads_ = reads; }
  // Where `dashboard_login` requests get their links: set when the dashboard
  // serves with logins (head/dashboard_logins.h), before Run(); `logins`
  // must outlive Run(). Unset, `dashboard_login` answers the open
  // dashboard's URL (or that there is none).
  void SetDashboardLogins(DashboardLogins* logins) { dashboard_logins_ = logins; }
  // Whether the client key `z85` is in clients.allow now. Any thread (the
  // dashboard's HTTP threads check their sessions' keys with it).
  bool ClientKeyAllowed(const std::string& z85);
  // Runs until `stop` becomes true. Returns an error only for a failed commit
  // (the store is unusable: the process must exit and be restarted).
  Status Run(const std::atomic<bool>& stop);

  void SendToWorker(const WorkerId& worker_id, protocol::Message message,
                    SendTiming timing) override;
  void RunLongStoreOperation(const std::function<void()>& op) override;

  // Reads the allow-lists again (SIGHUP). New handshakes are judged by them at
  // once; connections of keys no longer listed get nothing more, and workers
  // among them are dropped (their trials fail over). A list that does not
  // parse changes nothing: the error is returned and logged.
  Status ReloadAccessLists();
  // Asks the loop to ReloadAccessLists at its next turn. Async-signal-safe
  // (a SIGHUP handler calls it); any thread.
  void RequestReload() { reload_requested_.store(true); }

  const std::string& worker_endpoint() const { return bound_worker_endpoint_; }
  const std::string& client_endpoint() const { return bound_client_endpoint_; }
  const HeadStats& stats() const { return stats_; }

 private:
  struct Outgoing {
    WorkerId worker_id;
    std::vector<std::string> frames;
    // A TRAIN for a worker that takes TRAINS, not yet encoded (`frames`
    // empty): SendQueued sends a worker's TRAINs together.
    std::optional<protocol::Train> train;
    // An ACK for a worker that takes TRAINs inside ACKs, not yet encoded:
    // SendQueued puts the worker's TRAINs queued with it inside.
    std::optional<protocol::Ack> ack;
    // A RESTORE whose payload is streamed after the header in `frames`.
    uint64_t streamed_rid = 0;
    std::unique_ptr<protocol::PayloadSource> streamed_payload;
  };
  struct PendingClientReply {
    std::string identity;
    Json request;  // for deferred reads
    Json reply;    // for mutations (already handled)
    bool is_read = false;
    bool delimited = false;  // a REQ client: replies start with an empty frame
    ClientCaller caller;
  };

  // The connection a registered worker speaks through now: its routing id
  // (random, chosen by the worker per connection) and the key it
  // authenticated with ("" on a plain connection). The binding of a worker
  // id to its key outlives the connection: no other key can take the id.
  struct WorkerRoute {
    std::string routing_id;
    std::string key;
    // When the last message to this connection was handed to ZeroMQ (clock_):
    // any message is a sign of life, so a worker that got one lately needs no
    // HEARTBEAT (SendHeartbeats).
    TimeMs last_sent_ms = 0;
    // Its last REGISTER announced protocol::kFeatureOneFrame: what the head
    // sends it goes in the one-frame layout.
    bool one_frame = false;
  };

  // What a drain of a socket read, and whether it stopped on an empty socket
  // (not on a bound).
  struct Drained {
    int read = 0;
    bool emptied = false;
  };
  // Receives up to a turn's bound of messages waiting on `socket` (named
  // `name` in errors), for at most `max_us` microseconds when positive (at
  // least one message), and hands each, all frames with the routing id
  // first, to `handle`.
  Drained DrainSocket(zmq::socket_t& socket, const char* name,
                      const std::function<void(std::vector<zmq::message_t>&)>& handle,
                      int64_t max_us = 0);
  void DrainWorkers();
  void DrainClients();
  // What a turn has to read.
  struct Input {
    bool workers = false;      // a worker message may be waiting
    bool clients = false;      // a client message may be waiting
    bool interrupted = false;  // poll(2) was interrupted: nothing is known
    bool terminated = false;   // the ZeroMQ context is shutting down
  };
  // Waits, for up to `timeout_ms`, until a socket has a message or
  // `wake_fd` (the loop reads' eventfd, -1 without) or `ended_fd` (the
  // pipeline's, -1 without) is readable. As
  // zmq_poll does, but with fewer system calls, each a microsecond on a
  // VM (libzmq polls a socket's command mailbox, and calls getpid, on every
  // check that finds it empty; zmq_poll checks each socket twice or four
  // times, and blocks in between): ZMQ_EVENTS of each socket once, which
  // processes the commands the turn's sends left (ZMQ_FD only signals what
  // comes after that), and poll(2) on the two ZMQ_FDs and `wake_fd` only
  // when neither socket has a message. A socket whose descriptor did not
  // signal got nothing since its check: the turn does not read it.
  Result<Input> WaitForInput(long timeout_ms, int wake_fd, int ended_fd);
  // At the start of a turn, when nothing changed since the last commit:
  // drains the client socket answering reads at once (they see what that
  // commit holds) instead of after this turn's drain of up to
  // kMaxMessagesPerTurn worker messages and its commit, which is what a read
  // waited for under load. The first mutation, and every request behind it,
  // is kept for the turn's usual place (after the held requests released).
  void AnswerReadsBeforeTheTurn();
  // One client message: checked (caller, frames, version, size, budget,
  // JSON) and refused with a reply, or held, relayed or queued.
  void HandleClientMessage(std::vector<zmq::message_t>& parts);
  // A checked request: refused (no disk space for a mutation), relayed
  // (logs), held (it waits), or queued; inside AnswerReadsBeforeTheTurn a
  // mutation, and every request behind it, is kept instead.
  void RouteClientRequest(const std::string& identity, Json request, bool delimited,
                          const ClientCaller& caller);
  // Answers a request over its connection's budget (unparsed) with a retry hint.
  void RefuseOverBudget(const std::string& identity, const std::string& key, uint64_t bytes,
                        bool delimited);
  // `key`: the connection's authenticated key (Z85), "" when plain.
  void HandleWorkerFrames(const std::string& routing_id, const std::string& key,
                          std::span<const std::string_view> frames);
  // REGISTER: binds the worker id to this connection and key, or refuses.
  bool AcceptRegister(const std::string& routing_id, const std::string& key,
                      const protocol::Register& reg);
  // The worker a non-REGISTER message comes from: only the connection that
  // registered it last, with the key it registered with.
  std::optional<WorkerId> SenderOf(const std::string& routing_id, const std::string& key) const;
  // Loads the stored worker-id-to-key bindings of workers that hold a
  // trial's actor (those expected to re-attach); deletes the others in
  // `batch`. With CURVE only.
  Status LoadWorkerKeyBindings(storage::WriteBatch& batch);
  void TellToRegister(const std::string& routing_id, const protocol::Message& m);
  // A worker connection went over its budget: if it is a registered worker's,
  // it is detached and told to register again (what it sent meanwhile is
  // dropped; it re-sends every unacknowledged result after registering).
  void DetachOverLimit(const std::string& routing_id, const std::string& key);
  // Answers a worker's FETCH_CODE with a CODE page (or its refusal), now:
  // between commits, so the store read is the loop's only.
  void AnswerFetchCode(const WorkerId& worker_id, const protocol::FetchCode& fetch);
  // The caller of a client request; nullopt (answered with an error) when
  // its key is no longer allowed.
  std::optional<ClientCaller> CallerOf(const std::string& key) const;
  // Whether the frames went to the worker's connection (dropped, counted and
  // warned about, when it has none or the socket refuses them).
  bool SendFramesToWorker(const WorkerId& worker_id, const std::vector<std::string>& frames);
  void SendFramesToConnection(const std::string& routing_id,
                              const std::vector<std::string>& frames);
  // Sends an Outgoing: its frames, then starts streaming its payload if any.
  void SendOutgoing(Outgoing& out);
  // Sends and empties `queue` (sending can fail a worker and queue more:
  // those wait for the next call). The TRAINs to one worker go as one
  // TRAINS, sent before the next other message to that worker or after the
  // rest of the queue: what one worker gets keeps its order.
  void SendQueued(std::vector<Outgoing>& queue);
  // `trains` (not empty) to `worker_id`: a TRAIN when there is one, else
  // TRAINS of at most kMaxCoalesced each. Empties `trains`.
  void SendTrains(const WorkerId& worker_id, std::vector<protocol::Train>& trains);
  // What SendQueued has kept back for one worker: its ACK (when it takes
  // TRAINs inside ACKs) and its TRAINs. Sends them, the TRAINs inside the
  // ACK when there is one (those beyond kMaxCoalesced after it), and empties them.
  void SendKept(const WorkerId& worker_id, std::optional<protocol::Ack>& ack,
                std::vector<protocol::Train>& trains);
  // Whether `body` is a command for an actor whose TRAIN waits for a commit
  // (held_trials_): it must not overtake that TRAIN.
  bool ForHeldActor(const protocol::Body& body) const;
  // The TRAINs of `trials` that waited for a commit have been sent.
  void ReleaseHeld(std::vector<std::string>& trials);
  void DropStreamsOfDeadWorkers();
  // Runs `job` on the store thread, sending heartbeats while it runs; logs
  // it (as `what` of `bytes`) when it took longer than one heartbeat interval.
  Status RunOffLoop(const std::function<Status()>& job, const char* what, size_t bytes);
  // A round at most every HeartbeatRoundMs(): a HEARTBEAT to each live
  // worker that was sent nothing for the last 7/8 of a heartbeat interval,
  // so a silent worker hears from the head every interval (at most an eighth
  // later) and a busy one, whose ACKs and TRAINs are signs of life enough, is
  // sent none. Called at every turn's end; also while a store operation runs
  // off the loop, and on the heartbeat keeper's thread while the loop is
  // inside a commit (sending touches no runner state; the keeper holds the
  // socket then, and the loop touches nothing but the store and routes_ is
  // only read and stamped).
  void SendHeartbeats();
  TimeMs HeartbeatRoundMs() const { return std::max<TimeMs>(1, options_.runner.heartbeat_ms / 4); }
  // Commits the turn's batch on the loop thread, with the heartbeats lent to
  // heartbeat_keeper_ meanwhile; logs it when it took longer than one
  // heartbeat interval. CHECK: no commit is outstanding in pipeline_.
  Status CommitTurn(const storage::WriteBatch& batch);
  // What a turn whose commit runs behind the loop sends, or writes, once it
  // has ended; the turn's TurnTimes figures.
  struct CommitActions {
    PipelinedStore::Ticket ticket = 0;  // runs once every ticket up to it ended
    std::vector<Outgoing> after_commit;
    ResultsDir::Rows rows;
    uint64_t results = 0;  // result batches the turn handled
    TurnTimes::Micros oldest_unread = 0;
    std::vector<std::string> held;  // trials whose TRAIN waits in after_commit
  };
  // Whether this turn must see its commit end before it ends: it answers a
  // client (replies, the dashboard's reads), has checkpoint files to remove,
  // or waits for disk space.
  bool TurnWaitsForItsCommit();
  // Hands the turn's `batch` (possibly empty) to pipeline_ and keeps what
  // depends on it, with the turn's `results` count, for when it has ended
  // (at once when the batch is empty and nothing is outstanding).
  void HandOverTurn(storage::WriteBatch batch, uint64_t results);
  void RunCommitActions(CommitActions& actions);
  // Runs the actions of the commits pipeline_ reports ended; a refusal for
  // lack of space waits for it (WaitForSpace), any other failure is returned
  // (the head stops).
  Status FinishEndedCommits(const std::atomic<bool>& stop);
  // Waits until everything handed to pipeline_ has been committed, and runs
  // what waited for it.
  Status DrainCommits(const std::atomic<bool>& stop);
  void SendClientReply(const std::string& identity, const Json& reply, bool delimited);
  void SendClientReplyText(const std::string& identity, std::string reply, bool delimited);
  // Sends client_replies_ (a read answered now, from the state the turn
  // committed) and empties it.
  void SendClientReplies();
  // A `logs` request from `client`: answered now (an error, nothing to read)
  // or relayed to the worker that hosted the attempt (log_relay_).
  void StartLogRead(const Json& request, LogRelay::Client client);
  // Sends `reply` to the client socket, or hands it to an in-process reader.
  void DeliverLogReply(LogRelay::Client& client, Json reply);
  // The reply to a `dashboard_login` request (docs/client-protocol.md).
  Json DashboardLoginReply(const Json& rid, const ClientCaller& caller);
  // The reply to a `head_stats` request (docs/client-protocol.md).
  Json HeadStatsReply(const Json& rid) const;
  void AnswerLogReads(std::vector<LogRelay::Answer> answers);
  // Queues the handling of a client request (a mutation now, a read after
  // the turn's commit; inside AnswerReadsBeforeTheTurn, a read now).
  void QueueClientRequest(std::string identity, Json request, bool delimited,
                          const ClientCaller& caller);
  // Hands the held requests that need not wait any more, or waited long
  // enough, to QueueClientRequest.
  void ReleaseClientWaits();
  // Routes what AnswerReadsBeforeTheTurn kept, in order.
  void QueueKeptClientRequests();
  // The poll timeout of the next turn: runner timers, held requests.
  TimeMs NextPollMs();
  // A commit of `bytes` was refused for lack of disk space (`refused`):
  // tries it again with `retry` once per heartbeat interval until it
  // succeeds, meanwhile heartbeating, answering reads and refusing
  // mutations. Returns the commit's final status (`refused` if stopped
  // first).
  Status WaitForSpace(const std::function<Status()>& retry, size_t bytes, Status refused,
                      const std::atomic<bool>& stop);
  void WarnRateLimited(const std::string& what);

  zmq::context_t& context_;
  storage::Store& store_;
  HeadServerOptions options_;
  SteadyClock clock_;
  // The store the runner and the client service use: its reads wait for the
  // commits running behind the loop. (Its Drain lends heartbeat_keeper_,
  // constructed later: not used before Run.)
  PipelinedStore pipeline_;
  TrialRunner runner_;
  ClientService clients_;
  // Who may connect (null when insecure). Loop thread; the ZAP thread gets
  // its own reference through zap_.Publish.
  std::shared_ptr<const AccessLists> access_;
  // Declared before the sockets: it must outlive them (zap_handler.h).
  ZapHandler zap_;
  zmq::socket_t workers_;
  zmq::socket_t client_socket_;
  // Their ZMQ_FDs (WaitForInput), set by Start.
  int worker_fd_ = -1;
  int client_fd_ = -1;
  std::string bound_worker_endpoint_;
  std::string bound_client_endpoint_;

  // Messages that need not wait for the commit (TRAIN), sent together just
  // before it: a burst per turn lets ZeroMQ's I/O thread move them in fewer
  // wake-ups and writes than one send per handled result did (its sendto
  // calls fell by 62%, the head's CPU per result by 11%: docs/benchmarks.md).
  std::vector<Outgoing> before_commit_;
  std::vector<Outgoing> after_commit_;
  // Trials with a TRAIN that waits for a commit to go in its worker's ACK
  // (SendTiming::kWithAck), with how many such TRAINs are not sent yet: a
  // later command for the actor waits for a commit too, so that it does not
  // overtake the TRAIN. This turn's are also in held_this_turn_, one entry
  // per TRAIN; CommitActions::held takes them over.
  std::unordered_map<std::string, int> held_trials_;
  std::vector<std::string> held_this_turn_;
  // Turns whose commits run behind the loop, oldest first.
  std::deque<CommitActions> commit_actions_;
  // Non-empty while a commit waits for disk space (WaitForSpace): why.
  std::string out_of_space_;
  std::vector<PendingClientReply> client_replies_;
  // True only inside AnswerReadsBeforeTheTurn's drain.
  bool answering_reads_early_ = false;
  // Requests its drain kept for the turn's usual place, in arrival order.
  struct KeptClientRequest {
    std::string identity;
    Json request;
    bool delimited = false;
    ClientCaller caller;
  };
  std::vector<KeptClientRequest> kept_requests_;
  LoopReads* loop_reads_ = nullptr;
  DashboardLogins* dashboard_logins_ = nullptr;
  // Requests that wait on the head (add_trial for a slot, wait_trials).
  ClientWaits client_waits_;
  // The last heartbeat round (SendHeartbeats): at most one every quarter
  // heartbeat interval.
  TimeMs last_heartbeat_round_ = 0;
  // Unknown identity -> when it was last told to re-register: at most once
  // per heartbeat interval, so that a worker's queued messages after a head
  // restart do not each trigger a REGISTER of all its live actors.
  std::unordered_map<std::string, TimeMs> disconnect_sent_;
  std::unordered_map<WorkerId, WorkerRoute> routes_;
  std::unordered_map<std::string, WorkerId> connections_;  // routing id -> worker
  // Bindings made this turn, stored with its commit (before REGISTERED).
  std::vector<std::pair<WorkerId, std::string>> new_bindings_;
  RateLimitedWarning peer_warnings_{clock_};
  // Over-budget peers, each logged on its own.
  PerPeerRateLimitedWarning budget_warnings_{clock_};
  PeerRateLimiter worker_budgets_;
  PeerRateLimiter client_budgets_;
  HeadStats stats_;
  const TimeMs started_ms_ = clock_.NowMs();
  TurnTimes turn_times_{TurnTimes::SteadyNow()};
  std::atomic<bool> reload_requested_{false};
  std::unique_ptr<CheckpointFiles> checkpoint_files_;  // with options_.checkpoint_dir
  std::unique_ptr<ResultsDir> results_dir_;            // with options_.results_dir
  PayloadStreams payloads_;
  LogRelay log_relay_;
  StoreThread store_thread_;
  // Last: its thread calls SendHeartbeats, which reads the members above.
  HeartbeatKeeper heartbeat_keeper_;
};

}  // namespace ztune::head
