// HeadServer, the part that decides who a message comes from: the worker a
// connection registered as (worker ids bound to their key, routed by the
// connection that registered last), the caller of a client request, and the
// allow-lists behind both (docs/security.md). Head loop thread only.
#include <algorithm>
#include <unordered_set>

#include <spdlog/spdlog.h>

#include "common/printable.h"
#include "common/protocol/codec.h"
#include "common/security/curve_keys.h"
#include "head/head_server.h"
#include "storage/keys.h"

namespace ztune::head {
namespace {
// Bounds the worker-id-to-key bindings kept for workers that are gone.
constexpr size_t kMaxRoutes = 100000;

std::string Printable(std::string_view routing_id) {
  std::string out;
  for (unsigned char c : routing_id) {
    if (c >= 0x21 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// " (key FINGERPRINT)" for a log line; nothing for a plain connection.
std::string KeyNote(const std::string& key) {
  return key.empty() ? std::string() : " (key " + security::KeyFingerprint(key) + ")";
}

}  // namespace

bool HeadServer::AcceptRegister(const std::string& routing_id, const std::string& key,
                                const protocol::Register& reg) {
  const WorkerId worker_id(reg.worker_id);
  if (worker_id.empty()) {
    WarnRateLimited("REGISTER without a worker_id from connection " + Printable(routing_id) +
                    "; dropped");
    return false;
  }
  if (const WorkerInfo* known = runner_.registry().FindAlive(worker_id);
      known != nullptr && reg.incarnation < known->incarnation && reg.pid == known->pid &&
      reg.host == known->host) {
    // An earlier incarnation of the same process, read late from its old
    // connection: the ROUTER takes turns between connections, so REGISTERs
    // the old one queued while the head was busy can arrive after the new
    // one's. Followed, it would take the route back to a closed connection
    // and replay the worker's requests there. (A restarted process with the
    // same id and pid starts at 1 again and waits one liveness window.)
    spdlog::debug(
        "REGISTER of worker {} incarnation {} from an old connection ignored: "
        "incarnation {} is registered",
        EscapeControl(worker_id.str()), reg.incarnation, known->incarnation);
    return false;
  }
  if (auto bound = connections_.find(routing_id);
      bound != connections_.end() && bound->second != worker_id) {
    WarnRateLimited("REGISTER as '" + worker_id + "' from the connection of worker '" +
                    bound->second + "' refused: one connection is one worker");
    return false;
  }
  auto route = routes_.find(worker_id);
  if (route != routes_.end() && route->second.key != key) {
    ++stats_.unauthorized;
    WarnRateLimited("REGISTER as '" + worker_id + "' with key " + security::KeyFingerprint(key) +
                    " refused: that worker id belongs to key " + security::KeyFingerprint(route->second.key));
    return false;
  }
  if (route == routes_.end()) {
    if (routes_.size() >= kMaxRoutes) {
      for (auto it = routes_.begin(); it != routes_.end();) {
        if (runner_.registry().FindAlive(it->first) == nullptr) {
          connections_.erase(it->second.routing_id);
          it = routes_.erase(it);
        } else {
          ++it;
        }
      }
    }
    route = routes_.emplace(worker_id, WorkerRoute{routing_id, key}).first;
    if (!key.empty()) new_bindings_.emplace_back(worker_id, key);
  } else if (route->second.routing_id != routing_id) {
    // The worker's new connection (authenticated with the same key) replaces
    // its old one only now.
    connections_.erase(route->second.routing_id);
    route->second.routing_id = routing_id;
  }
  route->second.one_frame = std::find(reg.features.begin(), reg.features.end(),
                                      protocol::kFeatureOneFrame) != reg.features.end();
  connections_[routing_id] = worker_id;
  return true;
}

Status HeadServer::LoadWorkerKeyBindings(storage::WriteBatch& batch) {
  std::unordered_set<WorkerId> hosting;
  for (const auto& [id, trial] : runner_.book().trials()) {
    if (!trial.actor_worker.empty()) hosting.insert(trial.actor_worker);
  }
  size_t kept = 0;
  size_t dropped = 0;
  Status scanned = store_.Scan(storage::Family::kMeta, storage::kMetaWorkerKeyPrefix,
                               [&](std::string_view record_key, std::string_view value) {
                                 const WorkerId worker_id(std::string(record_key.substr(
                                     std::string_view(storage::kMetaWorkerKeyPrefix).size())));
                                 if (hosting.count(worker_id) == 0 ||
                                     !security::PublicKey::FromZ85(std::string(value)).ok()) {
                                   // Nothing of it is waited for (or the record is damaged: then
                                   // the id is open to any allowed key again, as before this
                                   // record).
                                   batch.Delete(storage::Family::kMeta, std::string(record_key));
                                   ++dropped;
                                 } else {
                                   routes_[worker_id] = WorkerRoute{"", std::string(value)};
                                   ++kept;
                                 }
                                 return true;
                               });
  RETURN_IF_ERROR(scanned);
  if (kept + dropped > 0) {
    spdlog::info(
        "worker keys: {} worker id(s) stay bound to their key, {} binding(s) of "
        "workers that host nothing dropped",
        kept, dropped);
  }
  return Status::Ok();
}

std::optional<WorkerId> HeadServer::SenderOf(const std::string& routing_id,
                                             const std::string& key) const {
  auto it = connections_.find(routing_id);
  if (it == connections_.end()) return std::nullopt;
  auto route = routes_.find(it->second);
  if (route == routes_.end() || route->second.routing_id != routing_id ||
      route->second.key != key) {
    return std::nullopt;
  }
  return it->second;
}

void HeadServer::TellToRegister(const std::string& routing_id, const protocol::Message& m) {
  ++stats_.unknown_senders;
  if (std::holds_alternative<protocol::Disconnect>(m.body)) return;
  TimeMs now = clock_.NowMs();
  auto [it, first] = disconnect_sent_.try_emplace(routing_id, now);
  if (!first && now - it->second < options_.runner.heartbeat_ms) return;
  it->second = now;
  if (disconnect_sent_.size() > 10000) disconnect_sent_.clear();  // bounded memory
  WarnRateLimited(std::string(protocol::CommandName(m.body)) +
                  " from a connection with no registered worker (" + Printable(routing_id) +
                  "): told to register");
  SendFramesToConnection(routing_id,
                         protocol::Encode(protocol::Message{
                             protocol::Disconnect{"unknown worker; register again"}, {}}));
}

void HeadServer::DetachOverLimit(const std::string& routing_id, const std::string& key) {
  auto it = connections_.find(routing_id);
  if (it == connections_.end()) {
    // Not (or no longer) a registered worker's: its messages just go unread.
    budget_warnings_.Warn(routing_id, "worker connection " + Printable(routing_id) + KeyNote(key) +
                                          " sends more than its budget (" +
                                          DescribeLimits(options_.worker_limits, "messages") +
                                          "); dropped");
    return;
  }
  const WorkerId worker_id = it->second;
  spdlog::warn(
      "worker '{}'{} sends more than a connection's budget ({}); what it sends is "
      "dropped and it must register again (it re-sends what was not acknowledged; if it "
      "keeps this up, it is judged dead by its heartbeats)",
      worker_id, KeyNote(key), DescribeLimits(options_.worker_limits, "messages"));
  connections_.erase(it);
  if (auto route = routes_.find(worker_id);
      route != routes_.end() && route->second.routing_id == routing_id) {
    route->second.routing_id.clear();  // the binding to its key stays
  }
  SendFramesToConnection(
      routing_id, protocol::Encode(protocol::Message{
                      protocol::Disconnect{"over the head's rate limit (" +
                                           DescribeLimits(options_.worker_limits, "messages") +
                                           "); register again"},
                      {}}));
}

void HeadServer::HandleWorkerFrames(const std::string& routing_id, const std::string& key,
                                    std::span<const std::string_view> frames) {
  if (access_ != nullptr && access_->FindWorker(key) == nullptr) {
    // Authenticated at its handshake, revoked since: it gets nothing more.
    ++stats_.unauthorized;
    WarnRateLimited("message from worker key " + security::KeyFingerprint(key) +
                    ", which is no longer allowed, dropped");
    return;
  }
  // A CHUNK's bytes go from the received frame to the checkpoint file; a
  // REPLY's payload (a small checkpoint, a log page) is copied, as it is kept.
  auto decoded = protocol::DecodeLeavingPayload(frames);
  const std::string_view payload = protocol::PayloadFrame(frames);
  if (!decoded.ok()) {
    ++stats_.malformed;
    WarnRateLimited("malformed message from worker connection " + Printable(routing_id) +
                    " dropped: " + decoded.status().message());
    return;
  }
  protocol::Message& m = *decoded;
  if (auto* reg = std::get_if<protocol::Register>(&m.body)) {
    if (!AcceptRegister(routing_id, key, *reg)) return;
    const WorkerId identity(reg->worker_id);
    // A new incarnation reset its transfers (docs/protocol.md); a repeated
    // REGISTER of the same one did not.
    const WorkerInfo* known = runner_.registry().Find(identity);
    if (known == nullptr || !known->alive || known->incarnation != reg->incarnation) {
      payloads_.DropWorker(identity);
    }
    runner_.HandleRegister(*reg);  // answers REGISTERED (after the commit)
    return;
  }
  const std::optional<WorkerId> sender = SenderOf(routing_id, key);
  if (!sender || !runner_.IsKnownWorker(*sender)) {
    TellToRegister(routing_id, m);
    return;
  }
  const WorkerId& identity = *sender;
  std::visit(
      [&](auto& body) {
        using T = std::decay_t<decltype(body)>;
        if constexpr (std::is_same_v<T, protocol::Heartbeat>) {
          runner_.HandleHeartbeat(identity);
        } else if constexpr (std::is_same_v<T, protocol::Reply>) {
          runner_.HandleHeartbeat(identity);
          m.payload.assign(payload);
          if (log_relay_.Owns(body.rid)) {
            if (auto answer = log_relay_.OnReply(identity, body, m.payload)) {
              DeliverLogReply(answer->client, std::move(answer->reply));
            }
            return;
          }
          payloads_.OnReply(identity, std::move(m));
        } else if constexpr (std::is_same_v<T, protocol::ResultBatch>) {
          ++stats_.result_batches;
          runner_.HandleResultBatch(identity, std::move(body));
        } else if constexpr (std::is_same_v<T, protocol::Results>) {
          stats_.result_batches += body.batches.size();
          for (protocol::ResultBatch& batch : body.batches) {
            runner_.HandleResultBatch(identity, std::move(batch));
          }
        } else if constexpr (std::is_same_v<T, protocol::Chunk>) {
          runner_.HandleHeartbeat(identity);
          payloads_.OnChunk(identity, body, payload);
        } else if constexpr (std::is_same_v<T, protocol::Credit>) {
          runner_.HandleHeartbeat(identity);
          if (Status s = payloads_.OnCredit(identity, body); !s.ok()) {
            ++stats_.malformed;
            WarnRateLimited("worker '" + identity + "': " + s.message());
          }
        } else if constexpr (std::is_same_v<T, protocol::FetchCode>) {
          runner_.HandleHeartbeat(identity);
          AnswerFetchCode(identity, body);
        } else if constexpr (std::is_same_v<T, protocol::Disconnect>) {
          runner_.HandleDisconnect(identity, body.reason);
        } else {
          WarnRateLimited(std::string("worker '") + identity + "' sent head-only command " +
                          protocol::CommandName(m.body) + "; dropped");
        }
      },
      m.body);
}

void HeadServer::AnswerFetchCode(const WorkerId& worker_id, const protocol::FetchCode& fetch) {
  protocol::CodePage page;
  page.code = fetch.code;
  page.offset = fetch.offset;
  std::string bytes;
  const WorkerInfo* w = runner_.registry().Find(worker_id);
  if (w == nullptr || w->trainables.count(protocol::kSubmittedPythonTrainable) == 0) {
    // Only a worker that runs submitted code reads it: a worker key is not
    // a licence to read every user's project.
    page.ok = false;
    page.error = "this worker was not started with --allow-submitted-code; it gets no code";
    WarnRateLimited("worker '" + worker_id + "' asked for code without --allow-submitted-code");
  } else if (Result<CodeStore::Page> read = runner_.code().ReadPage(fetch.code, fetch.offset);
             !read.ok()) {
    page.ok = false;
    page.error = read.status().message();
    if (read.status().code() == StatusCode::kCorruption) {
      spdlog::error("code page for worker '{}': {}", worker_id, read.status().ToString());
    }
  } else {
    page.size = read->size;
    bytes = std::move(read->bytes);
  }
  SendFramesToWorker(worker_id,
                     protocol::Encode(protocol::Message{std::move(page), std::move(bytes)}));
}

std::optional<ClientCaller> HeadServer::CallerOf(const std::string& key) const {
  if (access_ == nullptr) return ClientCaller::Anonymous();
  const AllowedKey* allowed = access_->FindClient(key);
  if (allowed == nullptr) return std::nullopt;
  return ClientCaller{allowed->key.z85(), allowed->name, allowed->role};
}

Status HeadServer::ReloadAccessLists() {
  if (!options_.security) return Status::FailedPrecondition("--insecure: there are no allow-lists");
  auto lists = AccessLists::Load(options_.security->workers_allow_file,
                                 options_.security->clients_allow_file);
  if (!lists.ok()) {
    spdlog::error("allow-lists not reloaded (the old ones stay in force): {}",
                  lists.status().ToString());
    return lists.status();
  }
  access_ = std::make_shared<const AccessLists>(std::move(lists).value());
  zap_.Publish(access_);
  spdlog::info("allow-lists reloaded: {} worker key(s), {} client key(s)", access_->num_workers(),
               access_->num_clients());
  // Workers whose key is gone: dropped as dead, their trials fail over, and
  // their connection hears why (it cannot come back: the handshake refuses it).
  std::vector<WorkerId> revoked;
  for (const auto& [worker_id, route] : routes_) {
    if (access_->FindWorker(route.key) == nullptr) revoked.push_back(worker_id);
  }
  for (const WorkerId& worker_id : revoked) {
    auto route = routes_.find(worker_id);
    const std::string why = "worker '" + worker_id + "' lost its access: key " +
                            security::KeyFingerprint(route->second.key) + " was revoked";
    if (runner_.registry().FindAlive(worker_id) != nullptr) spdlog::warn("{}", why);
    runner_.DropWorker(worker_id, why);
    payloads_.DropWorker(worker_id);
    SendFramesToConnection(route->second.routing_id,
                           protocol::Encode(protocol::Message{
                               protocol::Disconnect{"this worker's key was revoked"}, {}}));
    connections_.erase(route->second.routing_id);
    // The binding stays: the id still belongs to the revoked key.
    route->second.routing_id.clear();
  }
  return Status::Ok();
}

}  // namespace ztune::head
