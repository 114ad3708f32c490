#include "client/client.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "client/json_util.h"
#include "common/check.h"
#include "common/clock.h"
#include "common/zmq/socket_util.h"

namespace ztune::client {
namespace {

// zmq_ctx_new fails only when the process is out of memory or file
// descriptors; there is nothing sensible to return at that point.
std::unique_ptr<zmq::context_t> MakeContext() {
  try {
    return std::make_unique<zmq::context_t>();
  } catch (const zmq::error_t& e) {
    spdlog::critical("cannot create a zmq context: {}", e.what());
    CHECK(false);
  }
  return nullptr;
}

std::string FrameString(const zmq::message_t& m) {
  return std::string(static_cast<const char*>(m.data()), m.size());
}

}  // namespace

HeadClient::HeadClient(zmq::context_t& context, HeadClientOptions options)
    : context_(context), options_(std::move(options)) {}

HeadClient::HeadClient(HeadClientOptions options)
    : owned_context_(MakeContext()), context_(*owned_context_), options_(std::move(options)) {}

HeadClient::~HeadClient() { CloseSocket(); }

bool HeadClient::IsRetrySafeOp(const std::string& op) {
  return op == "experiments" || op == "experiment" || op == "status" || op == "trials" ||
         op == "trial" || op == "results" || op == "workers" || op == "checkpoint" ||
         op == "logs" || op == "wait_trials" || op == "head_stats" || op == "put_code";
}

Status HeadClient::EnsureSocket() {
  if (socket_.has_value()) return Status::Ok();
  try {
    socket_.emplace(context_, zmq::socket_type::dealer);
  } catch (const zmq::error_t& e) {
    socket_.reset();
    return Status::Unavailable(std::string("cannot create a client socket: ") + e.what());
  }
  // LINGER 0: a request the head never took must not keep the process alive.
  Status s = zmqutil::SetIntOption(*socket_, ZMQ_LINGER, 0);
  if (s.ok() && options_.curve) s = security::ApplyCurveClient(*socket_, *options_.curve);
  if (s.ok()) {
    auto monitor = zmqutil::ConnectionMonitor::Start(context_, *socket_);
    if (monitor.ok()) {
      monitor_ = std::move(monitor).value();
    } else {
      s = monitor.status();
    }
  }
  if (s.ok()) s = zmqutil::Connect(*socket_, options_.endpoint);
  if (!s.ok()) {
    CloseSocket();
    return s;
  }
  return Status::Ok();
}

void HeadClient::CloseSocket() {
  monitor_.reset();  // before the socket it watches
  handshake_done_ = false;
  cut_ = false;
  refused_ = false;
  if (!socket_.has_value()) return;
  zmqutil::SetIntOption(*socket_, ZMQ_LINGER, 0).IgnoreError();
  socket_->close();
  socket_.reset();
}

Result<Json> HeadClient::Call(const std::string& op, Json args) {
  head_answered_ = false;
  if (args.is_null()) args = Json::object();
  if (!args.is_object()) return Status::InvalidArgument("request args must be a JSON object");
  if (args.contains("op") || args.contains("rid")) {
    return Status::InvalidArgument("request args must not contain \"op\" or \"rid\"");
  }
  if (options_.timeout_ms <= 0) return Status::InvalidArgument("timeout must be positive");

  const int attempts = 1 + (IsRetrySafeOp(op) ? std::max(0, options_.read_retries) : 0);
  SteadyClock clock;
  const TimeMs throttle_deadline = clock.NowMs() + options_.timeout_ms;
  for (int attempt = 1;; ++attempt) {
    const uint64_t rid = next_rid_++;
    Json request = std::move(args);
    request["op"] = op;
    request["rid"] = rid;
    std::string frame = DumpJson(request);
    if (frame.size() > kMaxRequestBytes) {
      return Status::InvalidArgument("request is " + std::to_string(frame.size()) +
                                     " bytes; the head accepts at most " +
                                     std::to_string(kMaxRequestBytes) + " bytes");
    }
    bool timed_out = false;
    retry_after_ms_ = 0;
    // A request that may wait on the head (wait_ms) gets that long more.
    TimeMs extra_ms = 0;
    if (auto w = request.find("wait_ms"); w != request.end() && w->is_number_unsigned()) {
      extra_ms = static_cast<TimeMs>(std::min<uint64_t>(w->get<uint64_t>(), 3'600'000));
    }
    Result<Json> r = Attempt(rid, frame, extra_ms, &timed_out);
    if (!timed_out && !r.ok() && retry_after_ms_ > 0 &&
        clock.NowMs() + retry_after_ms_ < throttle_deadline) {
      // Over the connection's rate limit: the head did nothing; wait as told.
      std::this_thread::sleep_for(std::chrono::milliseconds(retry_after_ms_));
      --attempt;  // not a lost attempt
      args = std::move(request);
      args.erase("op");
      args.erase("rid");
      continue;
    }
    if (!timed_out) return r;
    // Lazy Pirate: abandon the socket, so a late reply cannot reach a later call.
    CloseSocket();
    if (attempt >= attempts) {
      std::string msg;
      if (connect_refused_ms_ > 0) {
        msg = "cannot connect to the head at " + options_.endpoint + ": connection refused for " +
              std::to_string(connect_refused_ms_) + " ms";
        if (attempts > 1) msg += " (" + std::to_string(attempts) + " attempts)";
        msg += "; is ztune-head running at " + options_.endpoint + "?";
      } else {
        msg = "no reply from head at " + options_.endpoint + " within " +
              std::to_string(options_.timeout_ms) + " ms";
        if (attempts > 1) msg += " (" + std::to_string(attempts) + " attempts)";
        msg += timeout_hint_;
      }
      return Status::Unavailable(std::move(msg));
    }
    // Rebuild the args for the resend.
    args = std::move(request);
    args.erase("op");
    args.erase("rid");
  }
}

Result<Json> HeadClient::Attempt(uint64_t rid, const std::string& frame, TimeMs extra_ms,
                                 bool* timed_out) {
  *timed_out = false;
  RETURN_IF_ERROR(EnsureSocket());
  Status sent = zmqutil::SendFrames(*socket_, {kClientProtocolVersion, frame});
  if (!sent.ok()) {
    // A DEALER only refuses when its queue is full; treat like no reply.
    CloseSocket();
    return Status::Unavailable("cannot send to head at " + options_.endpoint + ": " +
                               sent.message());
  }
  SteadyClock clock;
  const TimeMs deadline = clock.NowMs() + options_.timeout_ms + extra_ms;
  // The connect check: a head that refused every connection for this long is
  // not there (a head still starting binds within it), so the user hears so
  // now, not at the end of --timeout-ms.
  const TimeMs connect_check_ms = std::min<TimeMs>(kConnectCheckMs, options_.timeout_ms);
  const TimeMs check_at = clock.NowMs() + connect_check_ms;
  timeout_hint_.clear();
  connect_refused_ms_ = 0;
  while (true) {
    const TimeMs now = clock.NowMs();
    if (!handshake_done_ && refused_ && now >= check_at) {
      CloseSocket();
      // Like a timeout, a read is sent again (--retries rides out a head
      // restart); the last attempt reports the refusal.
      connect_refused_ms_ = connect_check_ms;
      *timed_out = true;
      return Status::Unavailable("connection refused");
    }
    TimeMs remaining = deadline - now;
    if (remaining <= 0) {
      if (!handshake_done_ && cut_) {
        timeout_hint_ = options_.curve
                            ? ": the head closed every connection during the handshake (is "
                              "--head-key the key of the head at this endpoint?)"
                            : ": the head closed every connection during the handshake (it "
                              "requires CURVE keys: pass --key and --head-key)";
      } else if (!handshake_done_) {
        timeout_hint_ = "; is ztune-head running there?";
      }
      *timed_out = true;
      return Status::Unavailable("timed out");
    }
    zmq_pollitem_t items[2] = {{socket_->handle(), 0, ZMQ_POLLIN, 0},
                               {monitor_->handle(), 0, ZMQ_POLLIN, 0}};
    const TimeMs wait_ms =
        !handshake_done_ && now < check_at ? std::min(remaining, check_at - now) : remaining;
    const int rc = zmq_poll(items, 2, static_cast<long>(wait_ms));
    if (rc < 0) {
      if (zmq_errno() == EINTR) continue;
      const std::string err = zmq_strerror(zmq_errno());
      CloseSocket();
      return Status::IOError("poll on head socket: " + err);
    }
    if ((items[1].revents & ZMQ_POLLIN) != 0) {
      // A refused handshake is final for this request: say why now instead
      // of waiting out the timeout.
      const zmqutil::ConnectionEvents events = monitor_->Drain();
      handshake_done_ = handshake_done_ || events.connected;
      cut_ = cut_ || events.disconnected;
      refused_ = refused_ || events.connect_retried;
      if (events.auth_failed) {
        CloseSocket();
        return Status::PermissionDenied(
            "the head at " + options_.endpoint + " refused this client's key " +
            (options_.curve ? options_.curve->own.public_key.Fingerprint() : "(none)") +
            ": it is not in the head's clients allow-list, or it was revoked");
      }
      if (events.handshake_failed) {
        CloseSocket();
        return Status::Unavailable(
            "cannot talk to the head at " + options_.endpoint + ": " + events.handshake_error +
            (events.closed_in_handshake
                 ? ": " + zmqutil::ClosedInHandshakeHint(options_.curve.has_value())
                 : std::string()));
      }
    }
    if (rc == 0 || (items[0].revents & ZMQ_POLLIN) == 0) continue;
    // Drain everything ready; the reply may sit behind stale ones.
    while (true) {
      auto frames = zmqutil::RecvMultipart(*socket_);
      if (!frames.ok()) {
        CloseSocket();
        return frames.status();
      }
      if (frames->empty()) break;
      std::optional<Result<Json>> reply = MatchReply(*frames, rid);
      if (reply.has_value()) return std::move(*reply);
    }
  }
}

std::optional<Result<Json>> HeadClient::MatchReply(std::vector<zmq::message_t>& frames,
                                                   uint64_t rid) {
  size_t first = 0;
  // Tolerate a REQ-style empty delimiter in front of the version frame.
  if (frames.size() == 3 && frames[0].size() == 0) first = 1;
  if (frames.size() - first != 2) return std::nullopt;
  const std::string version = FrameString(frames[first]);
  Result<Json> parsed = ParseJson(FrameString(frames[first + 1]));
  if (!parsed.ok() || !parsed->is_object()) return std::nullopt;
  Json& reply = *parsed;
  const Json* rid_field = FindField(reply, "rid");
  if (rid_field == nullptr) {
    // The head answers a request it could not parse (bad frames, version,
    // size, JSON) with an error that has no rid. This socket carries one
    // request at a time and every earlier one got its reply, so such an error
    // is about this request.
    if (BoolField(reply, "ok", true)) return std::nullopt;
  } else if (!rid_field->is_number_unsigned() || rid_field->get<uint64_t>() != rid) {
    return std::nullopt;  // stale, or not addressed to this call
  }
  head_answered_ = true;
  retry_after_ms_ = 0;
  if (const Json* retry = FindField(reply, "retry_after_ms");
      retry != nullptr && retry->is_number_unsigned()) {
    // Bounded: a hostile or confused head cannot park the client for long.
    retry_after_ms_ = static_cast<int64_t>(std::min<uint64_t>(retry->get<uint64_t>(), 10'000));
  }
  if (version != kClientProtocolVersion) {
    return Result<Json>(Status::FailedPrecondition("head at " + options_.endpoint +
                                                   " speaks protocol \"" + version +
                                                   "\", this client " + kClientProtocolVersion));
  }
  const Json* ok = FindField(reply, "ok");
  if (ok == nullptr || !ok->is_boolean()) {
    return Result<Json>(Status::Internal("malformed reply from head: no boolean \"ok\""));
  }
  if (ok->get<bool>()) return Result<Json>(std::move(reply));
  const Json& error = ObjectField(reply, "error");
  const std::string code_name = StringField(error, "code", "Internal");
  std::string message = StringField(error, "message");
  std::optional<StatusCode> code = StatusCodeFromName(code_name);
  if (!code.has_value() || *code == StatusCode::kOk) {
    return Result<Json>(Status::Internal(code_name + ": " + message));
  }
  return Result<Json>(Status(*code, std::move(message)));
}

}  // namespace ztune::client
