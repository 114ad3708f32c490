#include "worker/worker_runtime.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <span>
#include <string_view>
#include <system_error>

#include <spdlog/spdlog.h>

#include "common/protocol/codec.h"
#include "common/zmq/socket_util.h"

namespace ztune::worker {
namespace {

constexpr size_t kMaxHeld = 10'000;
constexpr int kMaxMessagesPerTurn = 1'000;
constexpr TimeMs kDropWarnIntervalMs = 10'000;
// RESTORE payloads come from the head, which stores what workers saved (at
// most its own limit per message); this bound only stops a runaway header.
constexpr uint64_t kMaxRestorePayloadBytes = 4ULL << 30;

// What an actor command is about: its kind, request id and actor.
struct ActorCommandInfo {
  CommandKind kind = CommandKind::kSetup;
  uint64_t rid = 0;
  ActorKey key;
};

ActorCommandInfo DescribeActorCommand(const protocol::Message& message) {
  ActorCommandInfo info;
  std::visit(
      [&](const auto& body) {
        using T = std::decay_t<decltype(body)>;
        if constexpr (requires { body.rid; body.trial_id; body.attempt; }) {
          info.rid = body.rid;
          info.key = ActorKey{body.trial_id, body.attempt};
        }
        if constexpr (std::is_same_v<T, protocol::Train>) info.kind = CommandKind::kTrain;
        if constexpr (std::is_same_v<T, protocol::Save>) info.kind = CommandKind::kSave;
        if constexpr (std::is_same_v<T, protocol::Restore>) info.kind = CommandKind::kRestore;
        if constexpr (std::is_same_v<T, protocol::Reset>) info.kind = CommandKind::kReset;
        if constexpr (std::is_same_v<T, protocol::Stop>) info.kind = CommandKind::kStop;
        if constexpr (std::is_same_v<T, protocol::Export>) info.kind = CommandKind::kExport;
      },
      message.body);
  return info;
}

}  // namespace

WorkerRuntime::WorkerRuntime(zmq::context_t& context, const TrainableRegistry& registry,
                             WorkerOptions options, const Clock& clock)
    : context_(context),
      registry_(registry),
      options_(std::move(options)),
      clock_(clock),
      events_(std::make_shared<EventQueue>()),
      restore_payloads_(kMaxRestorePayloadBytes) {
  if (options_.worker_id.empty()) options_.worker_id = MakeWorkerId(options_.name);
  host_.worker_id = options_.worker_id;
  host_.hostname = HostName();
  host_.pid = getpid();
  host_.work_dir = options_.work_dir;
}

WorkerRuntime::~WorkerRuntime() {
  shutting_down_ = true;
  while (!actors_.empty()) KillActor(actors_.begin()->first);
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
  for (const auto& n : registry_.Names()) names += (names.empty() ? "" : ", ") + n;
  spdlog::info("worker {} starting: head {}, trainables [{}], work dir {}", options_.worker_id,
               options_.head_endpoint, names, options_.work_dir);
  while (!shutdown_.load()) {
    Poll(PollTimeoutMs(clock_.NowMs()));
    // Input before timers: a head message already waiting refreshes liveness,
    // and a STOP that finished just in time is not killed.
    ReadSocket();
    HandleRunnerEvents();
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
  } else if (now - last_heard_ > heartbeat_ms_ * liveness_) {
    // Paranoid Pirate: the head is presumed gone. Recreate the socket after a
    // backoff; actors keep running and keep their outbox.
    spdlog::warn("head silent for {} ms (heartbeat {} ms x liveness {}); reconnecting in {} ms",
                 now - last_heard_, heartbeat_ms_, liveness_, backoff_ms_);
    CloseSocket(0);
    link_ = Link::kDisconnected;
    ResetTransfers("the connection to the head was reset");
    reconnect_at_ = now + backoff_ms_;
    backoff_ms_ = std::min(backoff_ms_ * 2, options_.max_backoff_ms);
  } else if (link_ == Link::kRegistering && now >= next_register_at_) {
    SendRegister();
    next_register_at_ = now + heartbeat_ms_;
  } else if (link_ == Link::kRegistered && now - last_sent_ >= heartbeat_ms_) {
    Send(protocol::Message{protocol::Heartbeat{}, {}});
  }
  CheckStopDeadlines(now);
  return Status::Ok();
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
  }
  return std::max<int64_t>(0, next - now);
}

void WorkerRuntime::Poll(int64_t timeout_ms) {
  zmq_pollitem_t items[2];
  int n = 0;
  if (dealer_ != nullptr) items[n++] = {dealer_->handle(), 0, ZMQ_POLLIN, 0};
  items[n++] = {nullptr, events_->fd(), ZMQ_POLLIN, 0};
  if (zmq_poll(items, n, static_cast<long>(timeout_ms)) < 0 && errno != EINTR) {
    // ETERM cannot happen while we own the context's socket; anything else is
    // transient. Avoid a busy loop either way.
    spdlog::warn("zmq_poll: {}", zmq_strerror(errno));
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
  RETURN_IF_ERROR(zmqutil::SetBytesOption(*dealer_, ZMQ_ROUTING_ID, options_.worker_id));
  RETURN_IF_ERROR(zmqutil::SetIntOption(*dealer_, ZMQ_LINGER, 0));
  RETURN_IF_ERROR(zmqutil::Connect(*dealer_, options_.head_endpoint));
  last_heard_ = now;
  last_sent_ = now;
  return Status::Ok();
}

void WorkerRuntime::CloseSocket(int linger_ms) {
  if (dealer_ == nullptr) return;
  zmqutil::SetIntOption(*dealer_, ZMQ_LINGER, linger_ms).IgnoreError();
  dealer_.reset();  // closes; unsent messages are dropped after `linger_ms`
}

void WorkerRuntime::BeginRegistration(TimeMs now) {
  ++incarnation_;
  link_ = Link::kRegistering;
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
  r.trainables = registry_.Names();
  for (const auto& [key, slot] : actors_) {
    protocol::LiveActor a;
    a.trial_id = key.trial_id;
    a.attempt = key.attempt;
    auto it = acked_seq_.find(key);
    a.acked_seq = it == acked_seq_.end() ? 0 : it->second;
    a.iteration = slot.iteration;
    for (const auto& c : slot.pending) a.training = a.training || c.kind == CommandKind::kTrain;
    r.live_actors.push_back(std::move(a));
  }
  // The first REGISTER of an incarnation at info; the resends at debug.
  spdlog::log(r.incarnation != last_logged_incarnation_ ? spdlog::level::info
                                                        : spdlog::level::debug,
              "REGISTER worker {} incarnation {} with {} live actor(s) to {}", r.worker_id,
              r.incarnation, r.live_actors.size(), options_.head_endpoint);
  last_logged_incarnation_ = r.incarnation;
  Send(protocol::Message{std::move(r), {}});
}

bool WorkerRuntime::Send(const protocol::Message& message) {
  if (dealer_ == nullptr || shutting_down_) return false;
  Status s = zmqutil::SendFrames(*dealer_, protocol::Encode(message));
  if (!s.ok()) {
    spdlog::warn("cannot send {} to the head: {}", protocol::CommandName(message.body),
                 s.ToString());
    return false;
  }
  last_sent_ = clock_.NowMs();
  return true;
}

void WorkerRuntime::SendOrHold(protocol::Message message) {
  if (shutting_down_) return;
  if (link_ == Link::kRegistered) {
    if (message.payload.size() > protocol::kInlinePayloadBytes &&
        std::holds_alternative<protocol::Reply>(message.body)) {
      if (SendChunked(message)) return;
    } else if (Send(message)) {
      return;
    }
  }
  if (held_.size() >= kMaxHeld) {
    spdlog::warn("dropping a held {} (more than {} replies waiting for registration)",
                 protocol::CommandName(held_.front().body), kMaxHeld);
    held_.pop_front();
  }
  held_.push_back(std::move(message));
}

bool WorkerRuntime::SendChunked(protocol::Message& message) {
  protocol::Message header{message.body, {}};
  protocol::SetAnnouncedPayloadBytes(header.body, message.payload.size());
  if (!Send(header)) return false;
  const uint64_t rid = protocol::HeaderRid(header.body);
  if (chunk_sender_.Contains("", rid)) {
    // A second reply to one request cannot happen (the head's rids are
    // unique); refuse it rather than mix two payloads.
    spdlog::error("a second chunked reply to request {}; dropped", rid);
    return true;
  }
  spdlog::debug("sending {} bytes for request {} in chunks", message.payload.size(), rid);
  chunk_sender_.Start("", rid, std::move(message.payload));
  sending_[rid] = std::move(header);
  PumpChunks();
  return true;
}

void WorkerRuntime::PumpChunks() {
  if (chunk_sender_.empty() || link_ != Link::kRegistered) return;
  std::vector<protocol::ChunkSender::Outgoing> out;
  chunk_sender_.TakeSendable(out);
  // A chunk that cannot be queued (no connection) is not retried here: the
  // head-silence timer resets the link and ResetTransfers sends it all again.
  for (auto& o : out) Send(o.message);
}

void WorkerRuntime::ResetTransfers(const std::string& reason) {
  // Whole again, ahead of the other held messages, in request order.
  std::vector<protocol::Message> again;
  for (auto& [rid, payload] : chunk_sender_.TakePeer("")) {
    auto it = sending_.find(rid);
    if (it == sending_.end()) continue;
    protocol::Message m{std::move(it->second.body), std::move(payload)};
    protocol::SetAnnouncedPayloadBytes(m.body, 0);
    again.push_back(std::move(m));
  }
  sending_.clear();
  held_.insert(held_.begin(), std::make_move_iterator(again.begin()),
               std::make_move_iterator(again.end()));
  // Every wait holds a RESTORE still arriving: all of them fail.
  std::vector<ActorKey> waiting;
  for (const auto& [key, queue] : payload_waits_) waiting.push_back(key);
  for (const auto& key : waiting) FailPayloadWait(key, "RESTORE payload incomplete: " + reason);
  restore_payloads_.TakePeer("");
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
        } else if constexpr (std::is_same_v<T, protocol::Chunk>) {
          HandleChunk(body, message.payload);
        } else if constexpr (std::is_same_v<T, protocol::Credit>) {
          HandleCredit(body);
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
  backoff_ms_ = std::min(heartbeat_ms_, options_.max_backoff_ms);
  spdlog::info("registered with head (epoch {}) as {} incarnation {}; heartbeat {} ms x {}",
               m.head_epoch, options_.worker_id, incarnation_, heartbeat_ms_, liveness_);
  // Replies made while unregistered, then every unacknowledged result.
  std::deque<protocol::Message> held;
  held.swap(held_);
  for (auto& msg : held) SendOrHold(std::move(msg));
  ResendOutbox();
}

void WorkerRuntime::HandleDisconnect(const protocol::Disconnect& m) {
  spdlog::info("head sent DISCONNECT ({}); registering again",
               m.reason.empty() ? "no reason" : m.reason);
  if (dealer_ == nullptr) return;
  ResetTransfers("the head asked this worker to register again");
  BeginRegistration(clock_.NowMs());
}

void WorkerRuntime::HandleCreateActor(const protocol::CreateActor& m) {
  ActorKey key{m.trial_id, m.attempt};
  if (actors_.count(key) > 0) {
    SendReply(m.rid, key, false,
              "actor for " + key.ToString() + " already exists on worker " + options_.worker_id);
    return;
  }
  auto trainable = registry_.Create(m.trainable);
  if (!trainable.ok()) {
    SendReply(m.rid, key, false, trainable.status().message());
    return;
  }
  uint64_t serial = ++next_serial_;
  auto runner = std::make_shared<ActorRunner>(serial, m, std::move(trainable).value(), host_,
                                              events_);
  ActorSlot slot;
  slot.serial = serial;
  slot.runner = runner;
  slot.trainable = m.trainable;
  try {
    slot.thread = std::thread([runner] { runner->Run(); });
  } catch (const std::system_error& e) {
    SendReply(m.rid, key, false, std::string("cannot start the actor thread: ") + e.what());
    return;
  }
  slot.pending.push_back({m.rid, CommandKind::kSetup, key});
  serial_keys_[serial] = key;
  actors_.emplace(key, std::move(slot));
  spdlog::debug("created actor {} ({}) serial {}", key.ToString(), m.trainable, serial);
}

void WorkerRuntime::RouteActorCommand(protocol::Message message) {
  const auto [kind, rid, key] = DescribeActorCommand(message);
  const auto* restore = std::get_if<protocol::Restore>(&message.body);
  const bool chunked = restore != nullptr && restore->payload_bytes > 0;
  auto wait = payload_waits_.find(key);
  if (wait == payload_waits_.end() && !chunked) {
    HandleActorCommand(std::move(message));
    return;
  }
  if (wait != payload_waits_.end() && kind == CommandKind::kStop) {
    FailPayloadWait(key, "cancelled by a STOP while its checkpoint was arriving");
    HandleActorCommand(std::move(message));
    return;
  }
  if (!chunked) {
    wait->second.push_back({0, std::move(message)});
    return;
  }
  // A RESTORE whose chunks follow: registered at once, even behind another
  // one, so that every chunk is credited as it arrives.
  std::string refused;
  const uint64_t announced = restore->payload_bytes;
  if (wait == payload_waits_.end() && actors_.count(key) == 0) {
    refused = NoActorError(key);
  } else if (Status s = restore_payloads_.Expect("", std::move(message)); !s.ok()) {
    refused = s.message();
  }
  if (!refused.empty()) {
    CancelIncomingPayload(rid);
    SendFailure(CommandKind::kRestore, rid, key, refused);
    // Commands already waiting for an earlier RESTORE would otherwise run
    // past this failed one.
    if (wait != payload_waits_.end()) FailPayloadWait(key, "a later RESTORE failed: " + refused);
    return;
  }
  payload_waits_[key].push_back({rid, std::nullopt});
  spdlog::debug("receiving {} bytes for RESTORE {} of {} in chunks", announced, rid,
                key.ToString());
}

void WorkerRuntime::HandleChunk(const protocol::Chunk& chunk, const std::string& bytes) {
  auto outcome = restore_payloads_.OnChunk("", chunk, bytes);
  if (auto* refusal = std::get_if<protocol::ChunkAssembler::Refusal>(&outcome)) {
    if (!refusal->header) {
      // Cancelled (a STOP came first, or the RESTORE was refused) or never
      // announced; the head was told to stop when it was cancelled.
      spdlog::debug("dropped a chunk: {}", refusal->error.message());
      return;
    }
    CancelIncomingPayload(chunk.rid);
    const auto& restore = std::get<protocol::Restore>(refusal->header->body);
    const ActorKey key{restore.trial_id, restore.attempt};
    // FailPayloadWait answers every RESTORE still in the wait; this one has
    // left the assembler already, so it is answered here.
    auto wait = payload_waits_.find(key);
    if (wait != payload_waits_.end()) {
      for (auto& w : wait->second) {
        if (w.arriving_rid == chunk.rid) w.arriving_rid = 0;
      }
    }
    const std::string error = "RESTORE payload refused: " + refusal->error.message();
    SendFailure(CommandKind::kRestore, chunk.rid, key, error);
    FailPayloadWait(key, error);
    return;
  }
  auto& progress = std::get<protocol::ChunkAssembler::Progress>(outcome);
  Send(protocol::Message{progress.credit, {}});
  if (!progress.done) return;
  const auto& restore = std::get<protocol::Restore>(progress.done->body);
  const ActorKey key{restore.trial_id, restore.attempt};
  auto wait = payload_waits_.find(key);
  if (wait == payload_waits_.end()) return;  // cannot happen: the wait outlives its assemblies
  for (auto& w : wait->second) {
    if (w.arriving_rid == chunk.rid) {
      w.arriving_rid = 0;
      w.message = std::move(progress.done);
      break;
    }
  }
  DrainPayloadWait(key);
}

void WorkerRuntime::HandleCredit(const protocol::Credit& credit) {
  Status s = chunk_sender_.OnCredit("", credit);
  if (!s.ok()) {
    WarnDropped(s.message());
    return;
  }
  if (!chunk_sender_.Contains("", credit.rid)) {
    if (credit.cancel && sending_.count(credit.rid) > 0) {
      spdlog::warn("the head refused the checkpoint of request {}", credit.rid);
    }
    sending_.erase(credit.rid);
  }
  PumpChunks();
}

void WorkerRuntime::CancelIncomingPayload(uint64_t rid) {
  protocol::Credit cancel;
  cancel.rid = rid;
  cancel.cancel = true;
  Send(protocol::Message{cancel, {}});
}

void WorkerRuntime::DrainPayloadWait(const ActorKey& key) {
  auto wait = payload_waits_.find(key);
  if (wait == payload_waits_.end()) return;
  std::deque<WaitingCommand> ready;
  auto& queue = wait->second;
  while (!queue.empty() && queue.front().message) {
    ready.push_back(std::move(queue.front()));
    queue.pop_front();
  }
  if (queue.empty()) payload_waits_.erase(wait);
  // After the bookkeeping: HandleActorCommand does not touch the waits.
  for (auto& w : ready) HandleActorCommand(std::move(*w.message));
}

void WorkerRuntime::FailPayloadWait(const ActorKey& key, const std::string& error) {
  auto wait = payload_waits_.find(key);
  if (wait == payload_waits_.end()) return;
  std::deque<WaitingCommand> queue = std::move(wait->second);
  payload_waits_.erase(wait);
  for (auto& w : queue) {
    if (w.arriving_rid != 0) {
      restore_payloads_.Cancel("", w.arriving_rid);
      CancelIncomingPayload(w.arriving_rid);
      SendFailure(CommandKind::kRestore, w.arriving_rid, key, error);
    } else if (w.message) {
      const ActorCommandInfo info = DescribeActorCommand(*w.message);
      SendFailure(info.kind, info.rid, key, "after a failed RESTORE: " + error);
    }
  }
}

void WorkerRuntime::HandleActorCommand(protocol::Message message) {
  const auto [kind, rid, key] = DescribeActorCommand(message);
  auto it = actors_.find(key);
  if (it == actors_.end()) {
    SendFailure(kind, rid, key, NoActorError(key));
    return;
  }
  ActorSlot& slot = it->second;
  if (slot.stop_deadline && kind != CommandKind::kStop) {
    SendFailure(kind, rid, key, "actor for " + key.ToString() + " is stopping");
    return;
  }
  if (kind == CommandKind::kReset) {
    const auto& reset = std::get<protocol::Reset>(message.body);
    ActorKey new_key{reset.new_trial_id, reset.new_attempt};
    if (new_key != key && actors_.count(new_key) > 0) {
      SendFailure(kind, rid, key,
                  "cannot reset to " + new_key.ToString() + ": that actor already exists");
      return;
    }
  }
  if (kind == CommandKind::kStop && !slot.stop_deadline) {
    const auto& stop = std::get<protocol::Stop>(message.body);
    slot.kill_after_ms = std::max<int64_t>(0, stop.kill_after_ms);
    slot.stop_deadline = clock_.NowMs() + slot.kill_after_ms;
  }
  slot.pending.push_back({rid, kind, key});
  slot.runner->Enqueue(std::move(message));
}

void WorkerRuntime::HandleAck(const protocol::Ack& m) {
  ActorKey key{m.trial_id, m.attempt};
  uint64_t& acked = acked_seq_[key];
  acked = std::max(acked, m.seq);
  auto it = outbox_.find(key);
  if (it == outbox_.end()) return;
  auto& entries = it->second;
  while (!entries.empty() && entries.front().watermark <= acked) entries.pop_front();
  for (auto& entry : entries) {
    auto& results = entry.batch.results;
    results.erase(std::remove_if(results.begin(), results.end(),
                                 [&](const protocol::ResultRecord& r) { return r.seq <= acked; }),
                  results.end());
  }
  if (entries.empty()) outbox_.erase(it);
}

// ---------------------------------------------------------------- runner events

void WorkerRuntime::HandleRunnerEvents() {
  for (auto& event : events_->Drain()) HandleRunnerEvent(std::move(event));
}

void WorkerRuntime::HandleRunnerEvent(RunnerEvent event) {
  auto sk = serial_keys_.find(event.actor_serial);
  if (sk == serial_keys_.end()) return;  // an abandoned actor: its output is dropped
  ActorKey slot_key = sk->second;
  auto it = actors_.find(slot_key);
  if (it == actors_.end()) return;
  ActorSlot& slot = it->second;
  for (auto p = slot.pending.begin(); p != slot.pending.end(); ++p) {
    if (p->rid == event.rid && p->kind == event.kind) {
      slot.pending.erase(p);
      break;
    }
  }
  slot.iteration = event.iteration;
  const ActorKey& key = event.key;

  switch (event.kind) {
    case CommandKind::kTrain: {
      protocol::ResultBatch batch;
      batch.rid = event.rid;
      batch.trial_id = key.trial_id;
      batch.attempt = key.attempt;
      batch.failed = !event.ok;
      batch.error = event.error;
      // A fenced TRAIN (the actor was re-keyed) has no results and no seq.
      if (key == slot_key) {
        for (auto& r : event.results) batch.results.push_back({slot.next_seq++, std::move(r)});
        OutboxEntry entry{batch, slot.next_seq - 1};
        outbox_[key].push_back(std::move(entry));
      }
      SendBatch(batch);
      break;
    }
    case CommandKind::kReset: {
      if (event.new_key && key == slot_key) {
        ActorKey new_key = *event.new_key;
        if (new_key != slot_key && actors_.count(new_key) > 0) {
          // A CREATE_ACTOR for the new key raced the RESET: keep the created
          // actor, give up on this one (it is no longer the old trial's).
          std::string error = "reset to " + new_key.ToString() + " collided with a live actor";
          SendReply(event.rid, key, false, error);
          slot.kill_after_ms = 0;
          KillActor(slot_key);
          return;
        }
        auto node = actors_.extract(it);
        node.key() = new_key;
        node.mapped().next_seq = 1;
        node.mapped().iteration = 0;
        // A STOP queued for the old key behind this RESET is fenced by the
        // runner ("no actor"); it must not kill the actor under its new key.
        bool stop_for_new_key = false;
        for (const auto& p : node.mapped().pending) {
          if (p.kind == CommandKind::kStop && p.key == new_key) stop_for_new_key = true;
        }
        if (!stop_for_new_key) node.mapped().stop_deadline.reset();
        actors_.insert(std::move(node));
        serial_keys_[event.actor_serial] = new_key;
        outbox_.erase(new_key);
        acked_seq_.erase(new_key);
        SendReply(event.rid, new_key, true, "", event.data);
        return;
      }
      SendReply(event.rid, key, event.ok, event.error, event.data);
      break;
    }
    case CommandKind::kStop:
      // A STOP that ended the actor is answered by FinishActor below; one
      // that did not was fenced (queued for a key the actor gave up in a RESET).
      if (!event.exited) SendReply(event.rid, key, event.ok, event.error);
      break;
    default:
      SendReply(event.rid, key, event.ok, event.error, event.data, std::move(event.payload));
      break;
  }
  if (event.exited) FinishActor(slot_key, event);
}

void WorkerRuntime::FinishActor(const ActorKey& key, const RunnerEvent& last) {
  auto it = actors_.find(key);
  if (it == actors_.end()) return;
  ActorSlot slot = std::move(it->second);
  actors_.erase(it);
  serial_keys_.erase(slot.serial);
  // The runner posted its last event and is returning: this join is short.
  if (slot.thread.joinable()) slot.thread.join();
  const bool stopped = last.kind == CommandKind::kStop;
  if (stopped) SendReply(last.rid, key, true, "", Json::object());
  for (const auto& p : slot.pending) {
    if (stopped && p.kind == CommandKind::kStop) {
      SendReply(p.rid, key, true, "", Json::object());
    } else {
      SendFailure(p.kind, p.rid, key,
                  "actor for " + key.ToString() + " is gone: " +
                      (stopped ? std::string("it was stopped") : last.error));
    }
  }
  if (stopped) {
    // The head is done with this actor: unacknowledged results will never be.
    outbox_.erase(key);
    acked_seq_.erase(key);
  }
  spdlog::debug("actor {} ended ({})", key.ToString(), stopped ? "stopped" : last.error);
}

void WorkerRuntime::KillActor(const ActorKey& key) {
  auto it = actors_.find(key);
  if (it == actors_.end()) return;
  ActorSlot slot = std::move(it->second);
  actors_.erase(it);
  serial_keys_.erase(slot.serial);
  std::string error = "actor did not stop within " + std::to_string(slot.kill_after_ms) +
                      " ms; killed";
  spdlog::warn("{}: {}", key.ToString(), error);
  slot.runner->CurrentLog()->Write("Failure: " + error);
  slot.runner->Abandon();
  if (slot.thread.joinable()) slot.thread.detach();
  for (const auto& p : slot.pending) {
    if (p.kind == CommandKind::kStop) {
      SendReply(p.rid, key, false, error);
    } else {
      SendFailure(p.kind, p.rid, key, "actor for " + key.ToString() + " was killed: " + error);
    }
  }
  outbox_.erase(key);
  acked_seq_.erase(key);
}

void WorkerRuntime::CheckStopDeadlines(TimeMs now) {
  std::vector<ActorKey> expired;
  for (const auto& [key, slot] : actors_) {
    if (slot.stop_deadline && now >= *slot.stop_deadline) expired.push_back(key);
  }
  for (const auto& key : expired) KillActor(key);
}

// ---------------------------------------------------------------- replies

std::string WorkerRuntime::NoActorError(const ActorKey& key) const {
  return "no actor for " + key.ToString() + " on worker " + options_.worker_id;
}

void WorkerRuntime::SendReply(uint64_t rid, const ActorKey& key, bool ok, std::string error,
                              Json data, std::string payload) {
  if (rid == 0) return;  // internal command (shutdown)
  protocol::Reply r;
  r.rid = rid;
  r.trial_id = key.trial_id;
  r.attempt = key.attempt;
  r.ok = ok;
  r.error = std::move(error);
  r.data = data.is_null() ? Json::object() : std::move(data);
  SendOrHold(protocol::Message{std::move(r), std::move(payload)});
}

void WorkerRuntime::SendFailure(CommandKind kind, uint64_t rid, const ActorKey& key,
                                std::string error) {
  if (rid == 0) return;
  if (kind != CommandKind::kTrain) {
    SendReply(rid, key, false, std::move(error));
    return;
  }
  protocol::ResultBatch b;
  b.rid = rid;
  b.trial_id = key.trial_id;
  b.attempt = key.attempt;
  b.failed = true;
  b.error = std::move(error);
  SendOrHold(protocol::Message{std::move(b), {}});
}

void WorkerRuntime::SendBatch(const protocol::ResultBatch& batch) {
  // Batches with results live in the outbox until ACKed and are re-sent after
  // registration; only send now when the link is up.
  if (shutting_down_) return;
  if (link_ == Link::kRegistered) Send(protocol::Message{batch, {}});
}

void WorkerRuntime::ResendOutbox() {
  size_t n = 0;
  for (const auto& [key, entries] : outbox_) {
    for (const auto& entry : entries) {
      Send(protocol::Message{entry.batch, {}});
      ++n;
    }
  }
  if (n > 0) spdlog::info("re-sent {} unacknowledged result batch(es)", n);
}

// ---------------------------------------------------------------- shutdown

void WorkerRuntime::Shutdown() {
  if (dealer_ != nullptr && link_ != Link::kDisconnected) {
    Send(protocol::Message{protocol::Disconnect{"worker shutting down"}, {}});
  }
  shutting_down_ = true;
  const TimeMs deadline = clock_.NowMs() + options_.shutdown_grace_ms;
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
  }
  while (!actors_.empty() && events_->valid()) {
    TimeMs now = clock_.NowMs();
    if (now >= deadline) break;
    zmq_pollitem_t item = {nullptr, events_->fd(), ZMQ_POLLIN, 0};
    zmq_poll(&item, 1, static_cast<long>(std::min<TimeMs>(deadline - now, 50)));
    HandleRunnerEvents();
  }
  while (!actors_.empty()) KillActor(actors_.begin()->first);
  // Give the DISCONNECT a moment to leave.
  CloseSocket(200);
  link_ = Link::kDisconnected;
  spdlog::info("worker {} stopped", options_.worker_id);
}

}  // namespace ztune::worker
