#include "worker/worker_runtime.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <span>
#include <string_view>
#include <system_error>

#include <spdlog/spdlog.h>

#include "common/protocol/codec.h"
#include "common/security/curve_socket.h"
#include "common/zmq/socket_util.h"

namespace ztune::worker {
namespace {

// 128 random bits in hex: unguessable by other peers of the head.
std::string RandomRoutingId() {
  std::random_device rd;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id;
  for (int i = 0; i < 8; ++i) {
    const uint32_t r = rd();
    for (int j = 0; j < 4; ++j) id += kHex[(r >> (j * 4)) & 15];
  }
  return id;
}

constexpr int kMaxMessagesPerTurn = 1'000;
constexpr TimeMs kDropWarnIntervalMs = 10'000;
// RESTORE payloads come from the head, which stores what workers saved (at
// most its own limit per message); this bound only stops a runaway header.
constexpr uint64_t kMaxRestorePayloadBytes = 4ULL << 30;

}  // namespace

WorkerRuntime::WorkerRuntime(zmq::context_t& context, const TrainableRegistry& registry,
                             WorkerOptions options, const Clock& clock)
    : context_(context),
      registry_(registry),
      options_(std::move(options)),
      clock_(clock),
      events_(std::make_shared<EventQueue>()),
      restore_payloads_(kMaxRestorePayloadBytes),
      code_cache_(std::make_shared<CodeCache>(options_.work_dir + "/.ztune-code")) {
  if (options_.worker_id.empty()) options_.worker_id = MakeWorkerId(options_.name);
  host_.worker_id = options_.worker_id;
  host_.hostname = HostName();
  host_.pid = getpid();
  host_.work_dir = options_.work_dir;
}

WorkerRuntime::~WorkerRuntime() {
  shutting_down_ = true;
  while (!actors_.empty()) KillActor(actors_.begin()->first);
  // Killed actors' processes: SIGKILL after their grace, and wait (bounded by
  // CheckDyingActors' give-up) until they are gone, so that none outlives
  // the worker.
  while (!dying_.empty()) {
    zmq_pollitem_t item = {nullptr, events_->fd(), ZMQ_POLLIN, 0};
    zmq_poll(&item, 1, 20);
    events_->Drain();
    CheckDyingActors(clock_.NowMs());
  }
}

void WorkerRuntime::RequestShutdown() {
  shutdown_.store(true);
  if (events_->valid()) events_->Wake();
}

Status WorkerRuntime::Run() {
  Status s = Loop();
  Shutdown();
  return s;
}

// ---------------------------------------------------------------- loop

Status WorkerRuntime::Loop() {
  RETURN_IF_ERROR(ValidateOptions(options_));
  if (!events_->valid()) return Status::IOError("cannot create the wake-up eventfd");
  heartbeat_ms_ = options_.heartbeat_ms;
  liveness_ = options_.liveness;
  backoff_ms_ = std::min(heartbeat_ms_, options_.max_backoff_ms);
  reconnect_at_ = clock_.NowMs();
  link_ = Link::kDisconnected;
  std::string names;
  for (const auto& n : HostedTrainables()) names += (names.empty() ? "" : ", ") + n;
  std::string gpus;
  for (int64_t id : options_.gpu_ids) gpus += (gpus.empty() ? "" : ",") + std::to_string(id);
  spdlog::info("worker {} starting: head {}, trainables [{}], GPU devices [{}], work dir {}",
               options_.worker_id, options_.head_endpoint, names, gpus, options_.work_dir);
  while (!shutdown_.load()) {
    Poll(PollTimeoutMs(clock_.NowMs()));
    // Input before timers: a head message already waiting refreshes liveness,
    // and a STOP that finished just in time is not killed.
    // Each step's coalesced results go as soon as it is done: inline actors'
    // are made while reading, the others' from their events.
    ReadSocket();
    FlushResults();
    HandleRunnerEvents();
    FlushResults();
    // Turning events into answers can take long (a large result is encoded
    // here): what the head sent meanwhile counts before silence is judged.
    ReadSocket();
    FlushResults();
    if (shutdown_.load()) break;
    RETURN_IF_ERROR(OnTimers(clock_.NowMs()));
  }
  return Status::Ok();
}

Status WorkerRuntime::OnTimers(TimeMs now) {
  if (link_ == Link::kDisconnected) {
    if (now >= reconnect_at_) {
      RETURN_IF_ERROR(OpenSocket(now));
      BeginRegistration(now);
    }
  } else if (ConnectionWasCut()) {
    // A link that worked comes back at once (the head's liveness window runs
    // meanwhile); one cut before it was registered backs off, so that a head
    // that accepts connections and drops them is not hammered.
    const bool was_registered = link_ == Link::kRegistered;
    const TimeMs at = was_registered ? now : now + backoff_ms_;
    spdlog::warn("connection to the head was cut; registering again{}",
                 was_registered ? "" : " in " + std::to_string(backoff_ms_) + " ms");
    if (!was_registered) backoff_ms_ = std::min(backoff_ms_ * 2, options_.max_backoff_ms);
    DropLink(at);
  } else if (now - last_heard_ > heartbeat_ms_ * liveness_) {
    // Paranoid Pirate: the head is presumed gone. Recreate the socket after a
    // backoff; actors keep running and keep their outbox.
    spdlog::warn("head silent for {} ms (heartbeat {} ms x liveness {}); reconnecting in {} ms",
                 now - last_heard_, heartbeat_ms_, liveness_, backoff_ms_);
    DropLink(now + backoff_ms_);
    backoff_ms_ = std::min(backoff_ms_ * 2, options_.max_backoff_ms);
  } else if (link_ == Link::kRegistering && now >= next_register_at_) {
    SendRegister();
    next_register_at_ = now + heartbeat_ms_;
  } else if (link_ == Link::kRegistered && now - last_sent_ >= heartbeat_ms_) {
    Send(protocol::Message{protocol::Heartbeat{}, {}});
  }
  SendCodeRequests(now);
  CheckStopDeadlines(now);
  CheckDyingActors(now);
  if (now - last_orphan_sweep_ >= heartbeat_ms_) {
    last_orphan_sweep_ = now;
    ReapOrphans();
  }
  return Status::Ok();
}

void WorkerRuntime::ReapOrphans() {
  std::set<pid_t> managed;
  for (const auto& [key, slot] : actors_) {
    if (slot.group != nullptr && slot.group->pgid() > 0) managed.insert(slot.group->pgid());
  }
  for (const DyingActor& d : dying_) {
    if (d.group != nullptr && d.group->pgid() > 0) managed.insert(d.group->pgid());
  }
  if (const int n = ReapOrphanedDescendants(managed); n > 0) {
    spdlog::debug("reaped {} exited process(es) that had left their trial's process group", n);
  }
}

int64_t WorkerRuntime::PollTimeoutMs(TimeMs now) const {
  TimeMs next = now + heartbeat_ms_;
  switch (link_) {
    case Link::kDisconnected: next = std::min(next, reconnect_at_); break;
    case Link::kRegistering:
      next = std::min({next, next_register_at_, last_heard_ + heartbeat_ms_ * liveness_ + 1});
      break;
    case Link::kRegistered:
      next = std::min({next, last_sent_ + heartbeat_ms_, last_heard_ + heartbeat_ms_ * liveness_ + 1});
      break;
  }
  for (const auto& [key, slot] : actors_) {
    if (slot.stop_deadline) next = std::min(next, *slot.stop_deadline);
    if (slot.stop_deadline && slot.group != nullptr && !slot.sigterm_sent) {
      next = std::min(next, *slot.stop_deadline - slot.group->grace_ms());
    }
  }
  // A dying group empties without an event: look again soon.
  if (!dying_.empty()) next = std::min(next, now + 20);
  return std::max<int64_t>(0, next - now);
}

void WorkerRuntime::Poll(int64_t timeout_ms) {
  // The loop reads every source after this returns: it only has to wait until
  // one may have something. A step's TRAIN usually comes while the last one's
  // result is sent, so this returns without blocking in poll(2) (zmq_poll
  // always did, after its own check of each socket: its poll was 13% of the
  // worker's CPU and libzmq's getpid 7%).
  void* const sockets[2] = {dealer_ != nullptr ? dealer_->handle() : nullptr,
                            monitor_ != nullptr ? monitor_->handle() : nullptr};
  Result<zmqutil::SocketWait> waited =
      zmqutil::WaitReadable(sockets, events_->fd(), static_cast<long>(timeout_ms));
  monitor_may_have_input_ = !waited.ok() || waited->interrupted || (waited->readable & 2u) != 0;
  if (!waited.ok()) {
    // ETERM cannot happen while we own the context's socket; anything else is
    // transient. Avoid a busy loop either way.
    spdlog::warn("{}", waited.status().ToString());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// ---------------------------------------------------------------- link

Status WorkerRuntime::OpenSocket(TimeMs now) {
  try {
    dealer_ = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::dealer);
  } catch (const zmq::error_t& e) {
    return Status::IOError(std::string("cannot create the DEALER socket: ") + e.what());
  }
  // A fresh random routing id per connection: the head routes by it, so it
  // must not collide with this worker's previous connection (which the head
  // may not have noticed closing) nor be guessable by another peer.
  RETURN_IF_ERROR(zmqutil::SetBytesOption(*dealer_, ZMQ_ROUTING_ID, RandomRoutingId()));
  RETURN_IF_ERROR(zmqutil::SetIntOption(*dealer_, ZMQ_LINGER, 0));
  RETURN_IF_ERROR(zmqutil::SetInt64Option(*dealer_, ZMQ_MAXMSGSIZE, protocol::kMaxFrameBytes));
  if (options_.curve) RETURN_IF_ERROR(security::ApplyCurveClient(*dealer_, *options_.curve));
  // Before connecting, so that no disconnection goes unseen.
  ASSIGN_OR_RETURN(monitor_, zmqutil::ConnectionMonitor::Start(context_, *dealer_));
  monitor_may_have_input_ = true;
  RETURN_IF_ERROR(zmqutil::Connect(*dealer_, options_.head_endpoint));
  last_heard_ = now;
  last_sent_ = now;
  return Status::Ok();
}

void WorkerRuntime::CloseSocket(int linger_ms) {
  if (dealer_ == nullptr) return;
  monitor_.reset();  // stops the monitor
  zmqutil::SetIntOption(*dealer_, ZMQ_LINGER, linger_ms).IgnoreError();
  dealer_.reset();  // closes; unsent messages are dropped after `linger_ms`
}

void WorkerRuntime::DropLink(TimeMs reconnect_at) {
  CloseSocket(0);
  link_ = Link::kDisconnected;
  results_.Clear();  // the outbox replays them after REGISTERED
  ResetTransfers("the connection to the head was reset");
  reconnect_at_ = reconnect_at;
}

bool WorkerRuntime::ConnectionWasCut() {
  if (monitor_ == nullptr || !monitor_may_have_input_) return false;
  monitor_may_have_input_ = false;
  const zmqutil::ConnectionEvents events = monitor_->Drain();
  if (events.connected) refusal_logged_ = false;
  if ((events.auth_failed || events.handshake_failed) && !refusal_logged_) {
    refusal_logged_ = true;
    if (events.auth_failed) {
      spdlog::error(
          "the head at {} refused this worker's key {} (status {}): it is not in the "
          "head's workers allow-list, or it was revoked. Add it there (the public key "
          "is in the .pub file next to --key) and send the head SIGHUP; retrying",
          options_.head_endpoint,
          options_.curve ? options_.curve->own.public_key.Fingerprint() : "(none)",
          events.auth_status);
    } else {
      spdlog::error("cannot connect to the head at {}: {}{}; retrying", options_.head_endpoint,
                    events.handshake_error,
                    events.closed_in_handshake
                        ? ": " + zmqutil::ClosedInHandshakeHint(options_.curve.has_value())
                        : std::string());
    }
  }
  return events.disconnected || events.auth_failed || events.handshake_failed;
}

void WorkerRuntime::BeginRegistration(TimeMs now) {
  ++incarnation_;
  link_ = Link::kRegistering;
  head_takes_one_frame_ = false;
  results_.Clear();  // the outbox replays them after REGISTERED
  SendRegister();
  next_register_at_ = now + heartbeat_ms_;
}

void WorkerRuntime::SendRegister() {
  protocol::Register r;
  r.worker_id = options_.worker_id;
  r.incarnation = incarnation_;
  r.name = options_.name;
  r.host = host_.hostname;
  r.pid = host_.pid;
  r.resources = options_.resources;
  r.gpu_ids = options_.gpu_ids;
  r.trainables = HostedTrainables();
  for (const auto& [name, formats] : registry_.ExportFormats()) {
    r.export_formats.push_back(protocol::TrainableExports{name, formats});
  }
  const auto rids = recent_.ByActor();
  // In key order: the same actors, the same message.
  for (const auto* entry : InKeyOrder(actors_)) {
    const auto& [key, slot] = *entry;
    protocol::LiveActor a;
    a.trial_id = key.trial_id;
    a.attempt = key.attempt;
    auto it = acked_seq_.find(key);
    a.acked_seq = it == acked_seq_.end() ? 0 : it->second;
    a.iteration = slot.iteration;
    for (const auto& c : slot.pending) a.training = a.training || c.kind == CommandKind::kTrain;
    if (auto rit = rids.find(key); rit != rids.end()) a.rids = rit->second;
    r.live_actors.push_back(std::move(a));
  }
  // A killed actor whose processes are still ending is live until they are
  // gone: its STOP stays owed, so the head keeps its resources booked.
  for (const auto& d : dying_) {
    protocol::LiveActor a;
    a.trial_id = d.key.trial_id;
    a.attempt = d.key.attempt;
    a.iteration = d.iteration;
    if (auto rit = rids.find(d.key); rit != rids.end()) a.rids = rit->second;
    r.live_actors.push_back(std::move(a));
  }
  r.features = {protocol::kFeatureTrains, protocol::kFeatureAckTrains, protocol::kFeatureOneFrame};
  // The first REGISTER of an incarnation at info; the resends at debug.
  spdlog::log(r.incarnation != last_logged_incarnation_ ? spdlog::level::info
                                                        : spdlog::level::debug,
              "REGISTER worker {} incarnation {} with {} live actor(s) to {}", r.worker_id,
              r.incarnation, r.live_actors.size(), options_.head_endpoint);
  last_logged_incarnation_ = r.incarnation;
  Send(protocol::Message{std::move(r), {}});
}

void WorkerRuntime::WarnDropped(const std::string& what) {
  ++dropped_since_warn_;
  TimeMs now = clock_.NowMs();
  if (now - last_drop_warn_ < kDropWarnIntervalMs) return;
  spdlog::warn("dropped {} bad message(s) from the head; latest: {}", dropped_since_warn_, what);
  dropped_since_warn_ = 0;
  last_drop_warn_ = now;
}

void WorkerRuntime::ReadSocket() {
  for (int i = 0; i < kMaxMessagesPerTurn && dealer_ != nullptr; ++i) {
    auto parts = zmqutil::RecvMultipart(*dealer_);
    if (!parts.ok()) {
      spdlog::warn("receive from the head failed: {}", parts.status().ToString());
      return;
    }
    if (parts->empty()) return;
    last_heard_ = clock_.NowMs();
    std::vector<std::string_view> frames;
    frames.reserve(parts->size());
    for (const auto& p : *parts) frames.emplace_back(static_cast<const char*>(p.data()), p.size());
    auto message = protocol::Decode(std::span<const std::string_view>(frames));
    if (!message.ok()) {
      WarnDropped(message.status().message());
      continue;
    }
    HandleMessage(std::move(message).value());
  }
}

// ---------------------------------------------------------------- head messages

void WorkerRuntime::HandleMessage(protocol::Message message) {
  spdlog::debug("<- {}", protocol::CommandName(message.body));
  std::visit(
      [&](auto& body) {
        using T = std::decay_t<decltype(body)>;
        if constexpr (std::is_same_v<T, protocol::Registered>) {
          HandleRegistered(body);
        } else if constexpr (std::is_same_v<T, protocol::Heartbeat>) {
          // Liveness only (last_heard_ is already updated).
        } else if constexpr (std::is_same_v<T, protocol::Disconnect>) {
          HandleDisconnect(body);
        } else if constexpr (std::is_same_v<T, protocol::CreateActor>) {
          HandleCreateActor(body);
        } else if constexpr (std::is_same_v<T, protocol::Ack>) {
          HandleAck(body);
          // TRAINs that waited for the commit this ACK reports (kFeatureAckTrains).
          for (protocol::Train& train : body.trains) {
            RouteActorCommand(protocol::Message{std::move(train), {}});
          }
        } else if constexpr (std::is_same_v<T, protocol::Trains>) {
          for (protocol::Train& train : body.trains) {
            RouteActorCommand(protocol::Message{std::move(train), {}});
          }
        } else if constexpr (std::is_same_v<T, protocol::Chunk>) {
          HandleChunk(body, message.payload);
        } else if constexpr (std::is_same_v<T, protocol::Credit>) {
          HandleCredit(body);
        } else if constexpr (std::is_same_v<T, protocol::ReadLog>) {
          HandleReadLog(body);
        } else if constexpr (std::is_same_v<T, protocol::CodePage>) {
          if (auto next = code_cache_->OnPage(body, message.payload, clock_.NowMs())) {
            Send(protocol::Message{std::move(*next), {}});
          }
        } else if constexpr (protocol::kIsActorCommand<T>) {
          RouteActorCommand(std::move(message));
        } else {
          WarnDropped(std::string("unexpected ") + protocol::CommandName(message.body) +
                      " from the head");
        }
      },
      message.body);
}

void WorkerRuntime::HandleRegistered(const protocol::Registered& m) {
  if (m.worker_id != options_.worker_id) {
    WarnDropped("REGISTERED for worker '" + m.worker_id + "'");
    return;
  }
  if (m.heartbeat_ms > 0) heartbeat_ms_ = m.heartbeat_ms;
  if (m.liveness > 0) liveness_ = m.liveness;
  if (link_ == Link::kRegistered) return;  // the answer to a repeated REGISTER
  link_ = Link::kRegistered;
  head_takes_results_ = std::find(m.features.begin(), m.features.end(),
                                  protocol::kFeatureResults) != m.features.end();
  head_takes_one_frame_ = std::find(m.features.begin(), m.features.end(),
                                    protocol::kFeatureOneFrame) != m.features.end();
  backoff_ms_ = std::min(heartbeat_ms_, options_.max_backoff_ms);
  spdlog::info("registered with head (epoch {}) as {} incarnation {}; heartbeat {} ms x {}",
               m.head_epoch, options_.worker_id, incarnation_, heartbeat_ms_, liveness_);
  if (head_epoch_ != 0 && m.head_epoch != head_epoch_) {
    // A new head never asked for what the old one was sent: a checkpoint of
    // a gigabyte would cross the network for nothing, and hold its memory.
    std::erase_if(held_, [&](const HeldReply& r) {
      if (r.large_payload == nullptr) return false;
      spdlog::info("the head restarted (epoch {} -> {}): dropped the {}-byte payload of request {}",
                   head_epoch_, m.head_epoch, r.large_payload->size(),
                   protocol::HeaderRid(r.message.body));
      return true;
    });
  }
  head_epoch_ = m.head_epoch;
  // Replies made while unregistered, then every unacknowledged result.
  std::deque<HeldReply> held;
  held.swap(held_);
  for (auto& reply : held) SendOrHold(std::move(reply));
  ResendOutbox();
  // What was asked of the head before is lost with the old link.
  code_cache_->ResendAll();
  SendCodeRequests(clock_.NowMs());
}

std::vector<std::string> WorkerRuntime::HostedTrainables() const {
  std::vector<std::string> names = registry_.Names();
  if (options_.allow_submitted_code) names.push_back(protocol::kSubmittedPythonTrainable);
  return names;
}

void WorkerRuntime::SendCodeRequests(TimeMs now) {
  if (link_ != Link::kRegistered) return;
  // A lost request or page is asked for again after a few heartbeats of
  // silence (a page is at most 1 MiB: it takes far less on any link).
  const TimeMs resend_ms = std::max<TimeMs>(2000, 3 * heartbeat_ms_ * liveness_);
  for (auto& fetch : code_cache_->DueRequests(now, resend_ms)) {
    Send(protocol::Message{std::move(fetch), {}});
  }
}

void WorkerRuntime::HandleDisconnect(const protocol::Disconnect& m) {
  spdlog::info("head sent DISCONNECT ({}); registering again",
               m.reason.empty() ? "no reason" : m.reason);
  if (dealer_ == nullptr) return;
  ResetTransfers("the head asked this worker to register again");
  BeginRegistration(clock_.NowMs());
}

// ---------------------------------------------------------------- shutdown

void WorkerRuntime::Shutdown() {
  if (dealer_ != nullptr && link_ != Link::kDisconnected) {
    Send(protocol::Message{protocol::Disconnect{"worker shutting down"}, {}});
  }
  shutting_down_ = true;
  const TimeMs deadline = clock_.NowMs() + options_.shutdown_grace_ms;
  std::vector<std::shared_ptr<ActorRunner>> inline_runners;
  for (auto& [key, slot] : actors_) {
    if (slot.stop_deadline) {
      slot.stop_deadline = std::min(*slot.stop_deadline, deadline);
      continue;
    }
    protocol::Stop stop;
    stop.trial_id = key.trial_id;
    stop.attempt = key.attempt;
    stop.kill_after_ms = options_.shutdown_grace_ms;
    slot.kill_after_ms = options_.shutdown_grace_ms;
    slot.stop_deadline = deadline;
    slot.pending.push_back({0, CommandKind::kStop, key});
    slot.runner->Enqueue(protocol::Message{stop, {}});
    if (slot.runner->runs_inline()) inline_runners.push_back(slot.runner);
  }
  // After the loop: running them ends their actors, which erases slots.
  for (const auto& runner : inline_runners) RunInline(runner);
  while (!actors_.empty() && events_->valid()) {
    TimeMs now = clock_.NowMs();
    if (now >= deadline) break;
    zmq_pollitem_t item = {nullptr, events_->fd(), ZMQ_POLLIN, 0};
    zmq_poll(&item, 1, static_cast<long>(std::min<TimeMs>(deadline - now, 50)));
    HandleRunnerEvents();
  }
  while (!actors_.empty()) KillActor(actors_.begin()->first);
  // Killed actors' processes: SIGKILL after their grace, and wait (bounded by
  // CheckDyingActors' give-up) until they are gone, so that none outlives
  // the worker.
  while (!dying_.empty()) {
    zmq_pollitem_t item = {nullptr, events_->fd(), ZMQ_POLLIN, 0};
    zmq_poll(&item, 1, 20);
    events_->Drain();
    CheckDyingActors(clock_.NowMs());
  }
  // Give the DISCONNECT a moment to leave.
  CloseSocket(200);
  link_ = Link::kDisconnected;
  spdlog::info("worker {} stopped", options_.worker_id);
}

}  // namespace ztune::worker
