#include "head/head_server.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include <spdlog/spdlog.h>

#include "common/check.h"
#include "common/protocol/codec.h"
#include "common/security/curve_socket.h"
#include "common/zmq/socket_util.h"
#include "storage/keys.h"

namespace ztune::head {
namespace {
// Bounds one turn's intake so that a flood cannot starve commits and timers.
constexpr int kMaxMessagesPerTurn = 4096;
// Bounds a turn's drain of the worker socket in time as well: the results
// read first in a turn wait for the whole drain before the commit that ACKs
// them. A burst of results from 1,000 simulated workers filled drains of
// 4,096 messages that took 45-180 ms (docs/benchmarks.md, fleet, head_stats).
constexpr int64_t kMaxWorkerDrainUs = 10'000;
// A turn that handled more result batches than this commits on the loop
// thread instead of handing its commit to pipeline_. Handing over pays when
// the loop would otherwise idle through the fsync (one trial: its next step
// overlaps the commit of the last); with a backlog the loop had nothing to
// wait for, and the hand-off's thread wake-ups and the smaller turns cost
// more than they saved (docs/benchmarks.md, "commits behind the loop").
constexpr uint64_t kMaxResultsToHandOver = 8;

// Whether a turn's commit goes behind the loop (pipeline_) rather than on it.
// Only a turn that sent work ahead of its commit (a TRAIN) has answers coming
// that the next turn may read without waiting for the disk; one that did not
// gains nothing by handing over and pays the commit thread's wake-ups (many
// short trials: docs/benchmarks.md, "bookkeeping"), unless a commit is still
// outstanding, which a commit on the loop would first wait for.
bool HandsOverItsCommit(bool sent_ahead, bool outstanding, uint64_t results, bool waited_for) {
  return (sent_ahead || outstanding) && results <= kMaxResultsToHandOver && !waited_for;
}
// Client frames up to this size are read (and answered "too large" above the
// request limit); larger ones close the connection.
constexpr int64_t kClientSocketCapBytes = 256LL << 20;
// Messages queued per worker connection before ZeroMQ stops reading it.
constexpr int kWorkerPipeMessages = 10000;
// Connections waiting to be accepted on each socket (the kernel caps it).
constexpr int kListenBacklog = 4096;
}  // namespace

HeadServer::HeadServer(zmq::context_t& context, storage::Store& store, HeadServerOptions options)
    : context_(context),
      store_(store),
      options_(std::move(options)),
      pipeline_(store, &heartbeat_keeper_),
      runner_(pipeline_, *this, clock_, options_.runner),
      clients_(runner_),
      zap_(context_),
      workers_(context_, zmq::socket_type::router),
      client_socket_(context_, zmq::socket_type::router),
      worker_budgets_(clock_, options_.worker_limits),
      client_budgets_(clock_, options_.client_limits),
      payloads_(
          static_cast<uint64_t>(options_.checkpoint_dir.empty() ? options_.max_worker_message_bytes
                                                                : options_.max_checkpoint_bytes),
          [this](const WorkerId& worker_id, const protocol::Message& m) {
            SendFramesToWorker(worker_id, protocol::Encode(m));
          },
          [this](const WorkerId& worker_id, const protocol::Reply& reply, std::string payload) {
            runner_.HandleReply(worker_id, reply, std::move(payload));
          }),
      // A page is one small file read on the worker's control thread: a worker
      // that does not answer within its liveness window is not answering.
      log_relay_(clock_,
                 std::max<TimeMs>(1000, options_.runner.heartbeat_ms * options_.runner.liveness)),
      heartbeat_keeper_(options_.runner.heartbeat_ms / 4, [this] { SendHeartbeats(); }) {}

Status HeadServer::Start() {
  payloads_.set_payload_filter([this](const WorkerId& worker_id, uint64_t rid) {
    return runner_.AwaitsSave(worker_id, rid);
  });
  if (!options_.checkpoint_dir.empty()) {
    checkpoint_files_ = std::make_unique<CheckpointFiles>(options_.checkpoint_dir);
    RETURN_IF_ERROR(checkpoint_files_->Open());
    runner_.set_checkpoint_files(checkpoint_files_.get());
    payloads_.set_files(checkpoint_files_.get(), [this](const std::function<Status()>& job) {
      return RunOffLoop(job, "checkpoint file sync", 0);
    });
  }
  if (!options_.results_dir.empty()) {
    results_dir_ = std::make_unique<ResultsDir>(options_.results_dir);
    runner_.set_results_dir(results_dir_.get());
  }
  RETURN_IF_ERROR(runner_.Load());
  if (checkpoint_files_ != nullptr) {
    // Files of commits that never happened, and the pause checkpoints of the
    // previous head (memory checkpoints do not survive a restart).
    ASSIGN_OR_RETURN(size_t removed,
                     checkpoint_files_->RemoveUnreferenced(runner_.CheckpointFilesInUse()));
    if (removed > 0) spdlog::info("removed {} unreferenced checkpoint files", removed);
  }
  // A failed load must not leave half a turn behind: flush what Load marked
  // (the new head epoch, trials sent back to the queue) in one commit.
  storage::WriteBatch batch;
  runner_.FlushTo(batch);
  if (options_.security) RETURN_IF_ERROR(LoadWorkerKeyBindings(batch));
  if (!batch.empty()) RETURN_IF_ERROR(store_.Commit(batch));
  // No worker is connected yet: what Load addressed to one cannot be sent.
  before_commit_.clear();
  after_commit_.clear();
  held_trials_.clear();
  held_this_turn_.clear();

  if (options_.security) {
    if (!security::CurveAvailable()) {
      return Status::FailedPrecondition(
          "this libzmq has no CURVE support; install one that has, or run with --insecure");
    }
    auto lists = AccessLists::Load(options_.security->workers_allow_file,
                                   options_.security->clients_allow_file);
    if (!lists.ok()) return lists.status();
    access_ = std::make_shared<const AccessLists>(std::move(lists).value());
    // Before the sockets bind: libzmq lets every key in while no handler is bound.
    RETURN_IF_ERROR(zap_.Start(access_));
    RETURN_IF_ERROR(
        security::ApplyCurveServer(workers_, options_.security->key_pair, kWorkersZapDomain));
    RETURN_IF_ERROR(
        security::ApplyCurveServer(client_socket_, options_.security->key_pair, kClientsZapDomain));
    spdlog::info("CURVE on: head key {}; {} worker key(s) in {}, {} client key(s) in {}",
                 options_.security->key_pair.public_key.z85(), access_->num_workers(),
                 options_.security->workers_allow_file, access_->num_clients(),
                 options_.security->clients_allow_file);
    if (access_->num_workers() == 0) {
      spdlog::warn("no worker key is allowed yet: add lines to {} and send SIGHUP",
                   options_.security->workers_allow_file);
    }
  } else {
    spdlog::warn(
        "--insecure: plain TCP, no authentication, no encryption; anyone who can reach "
        "the endpoints controls this head");
  }
  RETURN_IF_ERROR(zmqutil::SetIntOption(workers_, ZMQ_ROUTER_MANDATORY, 1));
  // A restarted head is reconnected by every worker at once: with ZeroMQ's
  // listen backlog of 100, a thousand simultaneous connects overflowed it,
  // the kernel dropped the SYNs, and their retransmits (1 s, then 2 s) spread
  // the re-registrations over 3 s (bench/fleet_bench.py restart). The kernel
  // caps the backlog at net.core.somaxconn (4096 by default).
  RETURN_IF_ERROR(zmqutil::SetIntOption(workers_, ZMQ_BACKLOG, kListenBacklog));
  RETURN_IF_ERROR(zmqutil::SetIntOption(client_socket_, ZMQ_BACKLOG, kListenBacklog));
  // No handover: a connection naming a routing id that is in use is refused
  // instead of taking over its messages. Workers pick a fresh random routing
  // id per connection, so a reconnecting worker never collides with itself.
  RETURN_IF_ERROR(zmqutil::SetIntOption(workers_, ZMQ_ROUTER_HANDOVER, 0));
  RETURN_IF_ERROR(zmqutil::SetIntOption(workers_, ZMQ_LINGER, 0));
  RETURN_IF_ERROR(zmqutil::SetInt64Option(workers_, ZMQ_MAXMSGSIZE, protocol::kMaxFrameBytes));
  RETURN_IF_ERROR(zmqutil::SetIntOption(workers_, ZMQ_SNDHWM, 0));
  // Bounded per connection: while the loop is busy (a long commit, a full
  // disk), a flooding peer's messages stop at this many and TCP pushes back
  // on it alone; a legitimate worker sends about one message per command plus
  // its heartbeats, far below it.
  RETURN_IF_ERROR(zmqutil::SetIntOption(workers_, ZMQ_RCVHWM, kWorkerPipeMessages));
  RETURN_IF_ERROR(zmqutil::SetIntOption(client_socket_, ZMQ_LINGER, 0));
  // Requests above max_client_request_bytes are read and answered "too
  // large"; only frames above this socket cap make ZeroMQ drop the connection
  // unanswered (the CLI never sends one: it checks the limit first).
  RETURN_IF_ERROR(zmqutil::SetInt64Option(
      client_socket_, ZMQ_MAXMSGSIZE,
      std::max<int64_t>(options_.max_client_request_bytes * 4, kClientSocketCapBytes)));
  RETURN_IF_ERROR(zmqutil::Bind(workers_, options_.worker_endpoint));
  RETURN_IF_ERROR(zmqutil::Bind(client_socket_, options_.client_endpoint));
  ASSIGN_OR_RETURN(bound_worker_endpoint_, zmqutil::LastEndpoint(workers_));
  ASSIGN_OR_RETURN(bound_client_endpoint_, zmqutil::LastEndpoint(client_socket_));
  try {
    worker_fd_ = workers_.get(zmq::sockopt::fd);
    client_fd_ = client_socket_.get(zmq::sockopt::fd);
  } catch (const zmq::error_t& e) {
    return Status::IOError(std::string("the sockets' descriptors: ") + e.what());
  }
  if (!options_.endpoints_file.empty()) {
    std::string tmp = options_.endpoints_file + ".tmp";
    {
      std::ofstream out(tmp, std::ios::trunc);
      Json doc{{"worker_endpoint", bound_worker_endpoint_},
               {"client_endpoint", bound_client_endpoint_}};
      if (options_.security) doc["head_public_key"] = options_.security->key_pair.public_key.z85();
      if (!options_.http_url.empty()) doc["http_endpoint"] = options_.http_url;
      out << doc.dump() << "\n";
      if (!out) return Status::IOError("cannot write " + tmp);
    }
    if (std::rename(tmp.c_str(), options_.endpoints_file.c_str()) != 0) {
      return Status::IOError("cannot rename " + tmp + " to " + options_.endpoints_file);
    }
  }
  spdlog::info("head listening: workers on {}, clients on {}", bound_worker_endpoint_,
               bound_client_endpoint_);
  return Status::Ok();
}

void HeadServer::SendToWorker(const WorkerId& worker_id, protocol::Message message,
                              SendTiming timing) {
  Outgoing out;
  out.worker_id = worker_id;
  auto* train = std::get_if<protocol::Train>(&message.body);
  auto* ack = std::get_if<protocol::Ack>(&message.body);
  const WorkerInfo* w =
      train != nullptr || ack != nullptr ? runner_.registry().FindAlive(worker_id) : nullptr;
  // Both features: a TRAIN kept back may also go in a TRAINS (SendKept).
  const bool takes_ack_trains = w != nullptr && w->takes_trains && w->takes_ack_trains;
  if (timing == SendTiming::kWithAck) {
    if (takes_ack_trains) {
      timing = SendTiming::kAfterCommit;
      ++held_trials_[train->trial_id];
      held_this_turn_.push_back(train->trial_id);
    } else {
      timing = SendTiming::kNow;
    }
  } else if (timing == SendTiming::kNow && !held_trials_.empty() && ForHeldActor(message.body)) {
    timing = SendTiming::kAfterCommit;
  }
  std::vector<Outgoing>& queue = timing == SendTiming::kNow ? before_commit_ : after_commit_;
  if (train != nullptr && w != nullptr && w->takes_trains) {
    out.train = std::move(*train);
    queue.push_back(std::move(out));
    return;
  }
  if (ack != nullptr && takes_ack_trains) {
    out.ack = std::move(*ack);
    queue.push_back(std::move(out));
    return;
  }
  out.streamed_payload = payloads_.SplitLargeRestore(message);
  if (out.streamed_payload != nullptr) out.streamed_rid = protocol::HeaderRid(message.body);
  out.frames = protocol::Encode(message);
  queue.push_back(std::move(out));
}

bool HeadServer::ForHeldActor(const protocol::Body& body) const {
  return std::visit(
      [this](const auto& b) {
        using T = std::decay_t<decltype(b)>;
        if constexpr (protocol::kIsActorCommand<T>) {
          return held_trials_.contains(b.trial_id);
        } else {
          return false;
        }
      },
      body);
}

void HeadServer::ReleaseHeld(std::vector<std::string>& trials) {
  for (const std::string& id : trials) {
    auto it = held_trials_.find(id);
    CHECK(it != held_trials_.end() && it->second > 0);  // counted when held
    if (--it->second == 0) held_trials_.erase(it);
  }
  trials.clear();
}

void HeadServer::SendQueued(std::vector<Outgoing>& queue) {
  std::vector<Outgoing> sending;
  sending.swap(queue);
  // Per worker, what is kept back to go together: its TRAINs, and its ACK
  // when it takes TRAINs inside one.
  struct Kept {
    std::optional<protocol::Ack> ack;
    std::vector<protocol::Train> trains;
  };
  std::unordered_map<WorkerId, Kept> kept;
  for (auto& out : sending) {
    if (out.train) {
      kept[out.worker_id].trains.push_back(std::move(*out.train));
      continue;
    }
    if (out.ack) {
      std::optional<protocol::Ack>& slot = kept[out.worker_id].ack;
      if (!slot) {
        slot = std::move(*out.ack);
      } else {
        // Two ACKs in one queue (not made by one turn): one message.
        protocol::ForEachAck(*out.ack,
                             [&](const protocol::AckEntry& e) { slot->more.push_back(e); });
      }
      continue;
    }
    if (!kept.empty()) {
      if (auto it = kept.find(out.worker_id); it != kept.end()) {
        SendKept(out.worker_id, it->second.ack, it->second.trains);
        kept.erase(it);
      }
    }
    SendOutgoing(out);
  }
  for (auto& [worker, k] : kept) SendKept(worker, k.ack, k.trains);
}

void HeadServer::SendKept(const WorkerId& worker_id, std::optional<protocol::Ack>& ack,
                          std::vector<protocol::Train>& trains) {
  if (ack) {
    const size_t inside = std::min(trains.size(), protocol::kMaxCoalesced);
    ack->trains.assign(std::make_move_iterator(trains.begin()),
                       std::make_move_iterator(trains.begin() + inside));
    trains.erase(trains.begin(), trains.begin() + inside);
    stats_.trains_in_acks += inside;
    SendFramesToWorker(worker_id, protocol::Encode(protocol::Message{std::move(*ack), {}}));
    ack.reset();
  }
  if (!trains.empty()) SendTrains(worker_id, trains);
}

void HeadServer::SendTrains(const WorkerId& worker_id, std::vector<protocol::Train>& trains) {
  if (trains.size() == 1) {
    SendFramesToWorker(worker_id,
                       protocol::Encode(protocol::Message{std::move(trains.front()), {}}));
    trains.clear();
    return;
  }
  for (size_t begin = 0; begin < trains.size(); begin += protocol::kMaxCoalesced) {
    const size_t end = std::min(trains.size(), begin + protocol::kMaxCoalesced);
    protocol::Trains message;
    message.trains.assign(std::make_move_iterator(trains.begin() + begin),
                          std::make_move_iterator(trains.begin() + end));
    SendFramesToWorker(worker_id, protocol::Encode(protocol::Message{std::move(message), {}}));
  }
  trains.clear();
}

void HeadServer::SendOutgoing(Outgoing& out) {
  SendFramesToWorker(out.worker_id, out.frames);
  if (out.streamed_payload == nullptr) return;
  payloads_.StartRestore(out.worker_id, out.streamed_rid, std::move(out.streamed_payload));
}

void HeadServer::DropStreamsOfDeadWorkers() {
  for (const auto& id : payloads_.Workers()) {
    if (runner_.registry().FindAlive(id) == nullptr) payloads_.DropWorker(id);
  }
}

bool HeadServer::SendFramesToWorker(const WorkerId& worker_id,
                                    const std::vector<std::string>& frames) {
  auto route = routes_.find(worker_id);
  if (route == routes_.end() || route->second.routing_id.empty()) {
    ++stats_.worker_sends_dropped;
    WarnRateLimited("send to worker '" + worker_id + "' dropped: it has no connection");
    return false;
  }
  Status s;
  if (route->second.one_frame) {
    const protocol::OneFrameMessage joined(frames);
    s = zmqutil::SendFrames(workers_, joined.frames(), route->second.routing_id);
  } else {
    s = zmqutil::SendFrames(workers_, frames, route->second.routing_id);
  }
  if (!s.ok()) {
    // Between two connections of a reconnecting worker. Not a death: liveness
    // is judged by heartbeats, and what was lost is reconciled when it
    // registers again (TrialRunner::ReconcileAfterReconnect).
    ++stats_.worker_sends_dropped;
    WarnRateLimited("send to worker '" + worker_id + "' failed (" + s.message() +
                    "); it is judged by its heartbeats");
    return false;
  }
  route->second.last_sent_ms = clock_.NowMs();
  return true;
}

void HeadServer::SendFramesToConnection(const std::string& routing_id,
                                        const std::vector<std::string>& frames) {
  zmqutil::SendFrames(workers_, frames, routing_id).IgnoreError();  // a courtesy
}

void HeadServer::WarnRateLimited(const std::string& what) { peer_warnings_.Warn(what); }

HeadServer::Drained HeadServer::DrainSocket(
    zmq::socket_t& socket, const char* name,
    const std::function<void(std::vector<zmq::message_t>&)>& handle, int64_t max_us) {
  const TurnTimes::Micros deadline = max_us > 0 ? TurnTimes::SteadyNow() + max_us : 0;
  Drained drained;
  while (drained.read < kMaxMessagesPerTurn) {
    if (deadline > 0 && drained.read > 0 && TurnTimes::SteadyNow() >= deadline) return drained;
    auto parts = zmqutil::RecvMultipart(socket);
    if (!parts.ok()) {
      spdlog::error("{} socket: {}", name, parts.status().ToString());
      drained.emptied = true;  // nothing more to read this turn
      return drained;
    }
    if (parts->empty()) {
      drained.emptied = true;
      return drained;
    }
    ++drained.read;
    ++stats_.messages_in;
    handle(*parts);
  }
  return drained;
}

void HeadServer::DrainWorkers() {
  auto handle = [this](std::vector<zmq::message_t>& parts) {
    std::vector<std::string_view> views;
    views.reserve(parts.size());
    for (const auto& p : parts) views.emplace_back(static_cast<const char*>(p.data()), p.size());
    std::string routing_id(views[0]);
    std::string key;
    if (parts.size() > 1) {
      if (auto user = security::AuthenticatedUserId(parts[1])) key = std::string(*user);
    }
    uint64_t bytes = 0;
    for (size_t i = 1; i < views.size(); ++i) bytes += views[i].size();
    if (!worker_budgets_.Admit(routing_id, bytes)) {
      // Dropped unread: a flood costs the loop a receive, not a decode.
      ++stats_.rate_limited;
      DetachOverLimit(routing_id, key);
      return;
    }
    HandleWorkerFrames(routing_id, key, std::span<const std::string_view>(views).subspan(1));
  };
  const Drained drained = DrainSocket(workers_, "worker", handle, kMaxWorkerDrainUs);
  turn_times_.WorkersDrained(TurnTimes::SteadyNow(), static_cast<uint64_t>(drained.read),
                             drained.emptied);
}

TimeMs HeadServer::NextPollMs() {
  TimeMs next = std::min<TimeMs>(runner_.NextTimerMs(), 100);
  if (client_waits_.size() > 0) {
    const TimeMs now = clock_.NowMs();
    // A slot freed or a trial finished by this turn: release at the next.
    if (client_waits_.AnyDue(now, [this](const Json& r) { return clients_.Waits(r).has_value(); }))
      return 0;
    next = std::min(next, client_waits_.NextDeadline() - now);
  }
  return next;
}

void HeadServer::SendHeartbeats() {
  const TimeMs now = clock_.NowMs();
  if (now - last_heartbeat_round_ < HeartbeatRoundMs()) return;
  last_heartbeat_round_ = now;
  // Rounds a quarter interval apart: a worker last sent something at t is
  // sent a HEARTBEAT by the first round at or after t + 7/8 interval, at the
  // latest t + 9/8 (one per interval to an idle worker, as when every round
  // went to all). The head's liveness promise is every heartbeat_ms x liveness.
  const TimeMs quiet_ms = options_.runner.heartbeat_ms - options_.runner.heartbeat_ms / 8;
  std::vector<std::string> frames;
  for (const auto& [id, w] : runner_.registry().workers()) {
    if (!w.alive) continue;
    auto route = routes_.find(id);
    if (route != routes_.end() && now - route->second.last_sent_ms < quiet_ms) continue;
    if (frames.empty()) frames = protocol::Encode(protocol::Message{protocol::Heartbeat{}, {}});
    if (SendFramesToWorker(id, frames)) ++stats_.heartbeats_sent;
  }
}

Status HeadServer::Run(const std::atomic<bool>& stop) {
  const int wake_fd = loop_reads_ != nullptr ? loop_reads_->wake_fd() : -1;
  // The dashboard reads as a caller of the read role: it can change nothing.
  const ClientCaller dashboard{"", "dashboard", ClientRole::kRead};
  while (!stop.load()) {
    long timeout = static_cast<long>(std::max<TimeMs>(0, NextPollMs()));
    // Without its eventfd, an ended commit is looked for every millisecond.
    if (pipeline_.outstanding() && pipeline_.ended_fd() < 0) timeout = std::min(timeout, 1L);
    Result<Input> waited = WaitForInput(timeout, wake_fd, pipeline_.ended_fd());
    if (!waited.ok()) return waited.status();
    const Input input = *waited;
    if (input.terminated) break;
    if (input.interrupted) continue;
    turn_times_.PollReturned(TurnTimes::SteadyNow());
    const uint64_t result_batches_before = stats_.result_batches;
    ++stats_.turns;
    RETURN_IF_ERROR(FinishEndedCommits(stop));
    if (reload_requested_.exchange(false)) ReloadAccessLists().IgnoreError();  // logged
    if (input.clients) {
      // Clients see only what is committed: the reads answered now, and the
      // requests of this turn, whose replies wait for its commit.
      RETURN_IF_ERROR(DrainCommits(stop));
      AnswerReadsBeforeTheTurn();
    }
    if (input.workers) DrainWorkers();
    // Held requests first: an add_trial that waited takes a free slot before
    // one that has just arrived.
    ReleaseClientWaits();
    QueueKeptClientRequests();
    // A request that comes after the check is read by the next turn, which
    // then does not block.
    if (input.clients) DrainClients();
    AnswerLogReads(log_relay_.TakeUnanswerable(runner_.registry()));
    runner_.Tick();
    DropStreamsOfDeadWorkers();
    storage::WriteBatch batch;
    runner_.FlushTo(batch);
    for (auto& [worker_id, key] : new_bindings_) {
      batch.Put(storage::Family::kMeta, storage::kMetaWorkerKeyPrefix + worker_id.str(),
                std::move(key));
    }
    new_bindings_.clear();
    turn_times_.Prepared(TurnTimes::SteadyNow());
    const bool sent_ahead = !before_commit_.empty();
    SendQueued(before_commit_);
    const uint64_t results = stats_.result_batches - result_batches_before;
    if (HandsOverItsCommit(sent_ahead, pipeline_.outstanding(), results, TurnWaitsForItsCommit())) {
      // Nobody waits for this turn but the workers, whose ACKs go when its
      // commit ends: the next turn need not wait for the disk.
      HandOverTurn(std::move(batch), results);
      SendHeartbeats();
      turn_times_.TurnEnded(TurnTimes::SteadyNow());
      continue;
    }
    // Replies show what is committed, all turns' in order.
    RETURN_IF_ERROR(DrainCommits(stop));
    if (!batch.empty()) {
      Status s = CommitTurn(batch);
      if (s.code() == StatusCode::kResourceExhausted) {
        s = WaitForSpace([&] { return store_.Commit(batch); }, batch.bytes(), std::move(s), stop);
      }
      if (!s.ok()) {
        spdlog::critical("commit failed: {}; the head stops (restart it on the same data dir)",
                         s.ToString());
        return s;
      }
      ++stats_.commits;
      // The turn's results are durable: now they may appear in the copy.
      if (results_dir_ != nullptr) results_dir_->Flush();
    }
    SendQueued(after_commit_);
    ReleaseHeld(held_this_turn_);
    // What those sends queued that need not wait (a failed worker's trials
    // retried elsewhere) goes now, not a poll timeout later.
    SendQueued(before_commit_);
    turn_times_.Answered(TurnTimes::SteadyNow(), results);
    // After the commit that dropped their records, and after the RESTOREs
    // that stream them have opened them.
    if (checkpoint_files_ != nullptr) checkpoint_files_->RemovePending();
    SendClientReplies();
    if (loop_reads_ != nullptr) {
      loop_reads_->AnswerAllDeferred([&](const Json& r, LoopReads::Respond respond) {
        // A trial's output is read from its worker: answered when it replies.
        if (r.is_object() && r.contains("op") && r["op"] == "logs") {
          StartLogRead(r, LogRelay::Client{"", r.value("rid", Json()), false, std::move(respond)});
        } else {
          respond(clients_.Handle(r, dashboard));
        }
      });
    }
    SendHeartbeats();
    turn_times_.TurnEnded(TurnTimes::SteadyNow());
  }
  // A stop: what was handed over is committed, and what waited for it sent,
  // before the loop ends.
  return DrainCommits(stop);
}

Result<HeadServer::Input> HeadServer::WaitForInput(long timeout_ms, int wake_fd, int ended_fd) {
  Input in;
  try {
    in.workers = (workers_.get(zmq::sockopt::events) & ZMQ_POLLIN) != 0;
    in.clients = (client_socket_.get(zmq::sockopt::events) & ZMQ_POLLIN) != 0;
  } catch (const zmq::error_t& e) {
    // A signal (SIGHUP's reload, SIGTERM) can land in libzmq's mailbox check.
    in.interrupted = e.num() == EINTR;
    in.terminated = e.num() == ETERM;
    if (in.interrupted || in.terminated) return in;
    return Status::IOError(std::string("poll: ") + e.what());
  }
  turn_times_.PollEntered(in.workers);
  if (in.workers || in.clients || timeout_ms == 0) return in;
  // A negative fd is ignored by poll(2).
  pollfd fds[4] = {{worker_fd_, POLLIN, 0},
                   {client_fd_, POLLIN, 0},
                   {wake_fd, POLLIN, 0},
                   {ended_fd, POLLIN, 0}};
  const int n = ::poll(fds, 4, static_cast<int>(timeout_ms));
  if (n < 0) {
    if (errno == EINTR) {
      in.interrupted = true;
      return in;
    }
    return Status::IOError(std::string("poll: ") + std::strerror(errno));
  }
  // A signal is a command for the socket: a message, or only a change of
  // one of its pipes (the drain then reads nothing).
  in.workers = fds[0].revents != 0;
  in.clients = fds[1].revents != 0;
  return in;
}

}  // namespace ztune::head
