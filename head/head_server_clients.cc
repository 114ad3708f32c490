// HeadServer, the client side: reading requests off the client socket
// (frames, version, size, budget, parse), holding the ones that wait, queueing
// the rest for the turn (mutations before the commit, reads after it or, when
// nothing changed since the last commit, before the turn), relaying
// `logs` reads to workers, and sending replies. Head loop thread only.
#include <algorithm>

#include <spdlog/spdlog.h>

#include "common/check.h"
#include "common/json_parse.h"
#include "common/printable.h"
#include "common/protocol/codec.h"
#include "common/security/curve_keys.h"
#include "common/security/curve_socket.h"
#include "common/zmq/socket_util.h"
#include "head/client_reply.h"
#include "head/head_server.h"

namespace ztune::head {

void HeadServer::SendClientReply(const std::string& identity, const Json& reply, bool delimited) {
  SendClientReplyText(identity, reply.dump(-1, ' ', false, Json::error_handler_t::replace),
                      delimited);
}

void HeadServer::SendClientReplyText(const std::string& identity, std::string reply,
                                     bool delimited) {
  std::vector<std::string> frames;
  if (delimited) frames.emplace_back();
  frames.emplace_back(protocol::kVersion);
  frames.push_back(std::move(reply));
  Status s = zmqutil::SendFrames(client_socket_, frames, identity);
  if (!s.ok()) spdlog::debug("client reply not sent: {}", s.ToString());
}

void HeadServer::SendClientReplies() {
  for (auto& r : client_replies_) {
    if (r.is_read) {
      SendClientReplyText(r.identity, clients_.HandleText(r.request, r.caller), r.delimited);
    } else {
      SendClientReply(r.identity, r.reply, r.delimited);
    }
  }
  client_replies_.clear();
}

void HeadServer::DrainClients() {
  DrainSocket(client_socket_, "client",
              [this](std::vector<zmq::message_t>& parts) { HandleClientMessage(parts); });
}

void HeadServer::HandleClientMessage(std::vector<zmq::message_t>& parts) {
  const std::string identity(parts[0].to_string());
  // DEALER clients send [version][json]; REQ clients add an empty delimiter.
  const bool delimited = parts.size() == 4 && parts[1].size() == 0;
  const size_t first = delimited ? 2 : 1;
  std::string key;
  if (parts.size() > 1) {
    if (auto user = security::AuthenticatedUserId(parts[1])) key = std::string(*user);
  }
  std::optional<ClientCaller> caller = CallerOf(key);
  if (!caller) {
    // Authenticated at its handshake, revoked since.
    ++stats_.unauthorized;
    WarnRateLimited("request from client key " + security::KeyFingerprint(key) +
                    ", which is no longer allowed, refused");
    SendClientReply(
        identity,
        ClientErrorReply(
            Json(), Status::PermissionDenied("this client's key (" + security::KeyFingerprint(key) +
                                             ") is not allowed by the head")),
        delimited);
    return;
  }
  auto error = [&](const std::string& msg) {
    ++stats_.malformed;
    WarnRateLimited("bad client request: " + msg);
    SendClientReply(identity, ClientErrorReply(Json(), Status::InvalidArgument(msg)), delimited);
  };
  if (parts.size() - first != 2) {
    error("expected 2 frames [\"ZTUNE1\", JSON request], got " +
          std::to_string(parts.size() - first));
    return;
  }
  if (parts[first].to_string_view() != protocol::kVersion) {
    error(std::string("unsupported protocol version (want ") + protocol::kVersion + ")");
    return;
  }
  const auto& body = parts[first + 1];
  if (static_cast<int64_t>(body.size()) > options_.max_client_request_bytes) {
    error("request of " + std::to_string(body.size()) + " bytes exceeds the limit of " +
          std::to_string(options_.max_client_request_bytes) + " bytes");
    return;
  }
  // Budgeted here, before the work a request costs (parsing, answering);
  // what is refused above costs a receive and a short reply.
  if (!client_budgets_.Admit(identity, body.size())) {
    RefuseOverBudget(identity, key, body.size(), delimited);
    return;
  }
  Result<Json> parsed = ParseJson(body.to_string_view());
  if (!parsed.ok()) {
    error(parsed.status().message());
    return;
  }
  Json request = std::move(parsed).value();
  if (!request.is_object()) {
    error("request is not a JSON object");
    return;
  }
  RouteClientRequest(identity, std::move(request), delimited, *caller);
}

void HeadServer::RouteClientRequest(const std::string& identity, Json request, bool delimited,
                                    const ClientCaller& caller) {
  // A non-string op is answered by ClientService (a read: no state changes).
  auto op_it = request.find("op");
  const std::string op =
      op_it != request.end() && op_it->is_string() ? op_it->get<std::string>() : "";
  if (answering_reads_early_ && (ClientService::IsMutation(op) || !kept_requests_.empty())) {
    kept_requests_.push_back({identity, std::move(request), delimited, caller});
    return;
  }
  const Json rid = request.value("rid", Json());
  if (ClientService::IsMutation(op) && !out_of_space_.empty()) {
    // Nothing can be made durable: refuse new work, say why.
    SendClientReply(identity,
                    ClientErrorReply(rid, Status::ResourceExhausted(
                                              "the head's disk is full, so it takes no new "
                                              "work until space is freed (reads still work): " +
                                              out_of_space_)),
                    delimited);
  } else if (op == "logs") {
    StartLogRead(request, LogRelay::Client{identity, rid, delimited, nullptr});
  } else if (op == "dashboard_login") {
    SendClientReply(identity, DashboardLoginReply(rid, caller), delimited);
  } else if (op == "head_stats") {
    SendClientReply(identity, HeadStatsReply(rid), delimited);
  } else if (std::optional<TimeMs> wait = clients_.Waits(request)) {
    if (!client_waits_.Hold(
            {identity, std::move(request), delimited, caller, clock_.NowMs() + *wait})) {
      SendClientReply(
          identity,
          ClientErrorReply(rid, Status::ResourceExhausted(
                                    "the head holds " + std::to_string(ClientWaits::kMaxWaiting) +
                                    " waiting requests already; send it again without "
                                    "wait_ms, or later")),
          delimited);
    }
  } else {
    QueueClientRequest(identity, std::move(request), delimited, caller);
  }
}

bool HeadServer::ClientKeyAllowed(const std::string& z85) {
  std::shared_ptr<const AccessLists> lists = zap_.Published();
  return lists != nullptr && lists->FindClient(z85) != nullptr;
}

Json HeadServer::DashboardLoginReply(const Json& rid, const ClientCaller& caller) {
  if (options_.http_url.empty()) {
    return ClientErrorReply(
        rid, Status::FailedPrecondition("this head serves no dashboard (start ztune-head with "
                                        "--http-endpoint; docs/dashboard.md)"));
  }
  Json reply{{"ok", true}, {"login", dashboard_logins_ != nullptr}};
  SetReplyRid(reply, rid);
  if (dashboard_logins_ == nullptr) {
    reply["url"] = options_.http_url;
    return reply;
  }
  Result<std::string> token = dashboard_logins_->IssueToken({caller.key, caller.name});
  if (!token.ok()) return ClientErrorReply(rid, token.status());
  spdlog::info("dashboard: login link issued to client '{}'", EscapeForLog(caller.name));
  reply["url"] = options_.http_url + "login?token=" + *token;
  reply["expires_in_s"] = dashboard_logins_->options().token_ttl_ms / 1000;
  reply["user"] = caller.name;
  return reply;
}

Json HeadServer::HeadStatsReply(const Json& rid) const {
  Json head{{"uptime_s", static_cast<double>(clock_.NowMs() - started_ms_) / 1000.0},
            {"turns", stats_.turns},
            {"commits", stats_.commits},
            {"commits_behind_loop", stats_.commits_behind_loop},
            {"messages_in", stats_.messages_in},
            {"result_batches", stats_.result_batches},
            {"trains_in_acks", stats_.trains_in_acks},
            {"heartbeats_sent", stats_.heartbeats_sent},
            {"worker_sends_dropped", stats_.worker_sends_dropped},
            {"malformed", stats_.malformed},
            {"unknown_senders", stats_.unknown_senders},
            {"unauthorized", stats_.unauthorized},
            {"rate_limited", stats_.rate_limited},
            {"slow_store_operations", stats_.slow_store_operations},
            {"times", turn_times_.ToJson()}};
  Json reply{{"ok", true}, {"head", std::move(head)}};
  SetReplyRid(reply, rid);
  return reply;
}

void HeadServer::RefuseOverBudget(const std::string& identity, const std::string& key,
                                  uint64_t bytes, bool delimited) {
  // Refused unparsed (so without its rid: the client takes an error without
  // one as the answer to its request in flight). Nothing was done, so the
  // client may send the same request again.
  ++stats_.rate_limited;
  const TimeMs retry_ms = std::max<TimeMs>(1, client_budgets_.WaitMs(identity, bytes));
  const std::string limits = DescribeLimits(options_.client_limits, "requests");
  budget_warnings_.Warn(
      key.empty() ? identity : key,
      (key.empty() ? std::string("a client") : "client key " + security::KeyFingerprint(key)) +
          " sends more than its connection's budget (" + limits + "); requests refused");
  Json reply = ClientErrorReply(
      Json(), Status::ResourceExhausted(
                  "this connection sent more requests than the head allows (" + limits +
                  "); nothing was done; retry in " + std::to_string(retry_ms) + " ms"));
  reply["retry_after_ms"] = retry_ms;
  SendClientReply(identity, reply, delimited);
}

void HeadServer::AnswerReadsBeforeTheTurn() {
  if (runner_.HasUnflushedChanges() || !new_bindings_.empty()) return;
  answering_reads_early_ = true;
  DrainClients();
  answering_reads_early_ = false;
}

void HeadServer::QueueClientRequest(std::string identity, Json request, bool delimited,
                                    const ClientCaller& caller) {
  auto op = request.find("op");
  const bool mutation =
      op != request.end() && op->is_string() && ClientService::IsMutation(op->get<std::string>());
  if (answering_reads_early_) {
    // RouteClientRequest kept mutations and what came behind them.
    CHECK(!mutation && kept_requests_.empty());
    SendClientReplyText(identity, clients_.HandleText(request, caller), delimited);
    return;
  }
  if (mutation) {
    client_replies_.push_back(
        {std::move(identity), Json(), clients_.Handle(request, caller), false, delimited, caller});
  } else {
    client_replies_.push_back(
        {std::move(identity), std::move(request), Json(), true, delimited, caller});
  }
}

void HeadServer::QueueKeptClientRequests() {
  std::vector<KeptClientRequest> kept;
  kept.swap(kept_requests_);
  for (auto& k : kept) RouteClientRequest(k.identity, std::move(k.request), k.delimited, k.caller);
}

void HeadServer::ReleaseClientWaits() {
  client_waits_.Release(
      clock_.NowMs(), [this](const Json& r) { return clients_.Waits(r).has_value(); },
      [this](ClientWaits::Waiting&& w) {
        QueueClientRequest(std::move(w.identity), std::move(w.request), w.delimited, w.caller);
      });
}

void HeadServer::StartLogRead(const Json& request, LogRelay::Client client) {
  Result<LogRead> read = clients_.PlanLogRead(request);
  if (!read.ok()) {
    DeliverLogReply(client, ClientErrorReply(client.rid, read.status()));
    return;
  }
  if (read->attempt == 0) {
    DeliverLogReply(client, LogRelay::EmptyPage(*read, client.rid));
    return;
  }
  if (runner_.registry().FindAlive(read->worker_id) == nullptr) {
    DeliverLogReply(
        client, LogRelay::WorkerGone(*read, runner_.registry().Find(read->worker_id), client.rid));
    return;
  }
  const uint64_t worker_rid = runner_.ReserveRid();
  SendToWorker(read->worker_id, protocol::Message{LogRelay::RequestFor(*read, worker_rid), {}},
               SendTiming::kNow);
  log_relay_.Wait(worker_rid, std::move(client), std::move(*read));
}

void HeadServer::DeliverLogReply(LogRelay::Client& client, Json reply) {
  if (client.deliver) {
    client.deliver(std::move(reply));
  } else {
    SendClientReply(client.identity, reply, client.delimited);
  }
}

void HeadServer::AnswerLogReads(std::vector<LogRelay::Answer> answers) {
  for (LogRelay::Answer& a : answers) DeliverLogReply(a.client, std::move(a.reply));
}

}  // namespace ztune::head
