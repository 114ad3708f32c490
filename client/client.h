// HeadClient: the client side of the head's client API (docs/client-protocol.md).
//
// Request-reply over a DEALER socket, Lazy Pirate style (zguide ch. 4): each
// Call sends one request and polls for the reply with the same rid until the
// deadline; replies with another rid (stale) are dropped. When no reply comes
// in time the socket is closed with LINGER 0 and the next attempt (a retry, or
// the next Call) opens a fresh one, so a late reply can never be taken for the
// answer to a later request.
//
// A reply without a rid is taken only if it is an error (ok:false): the head
// sends those for requests it could not parse, before it knows the rid.
//
// Thread affinity: a HeadClient and its socket belong to the thread that calls
// it. Not thread-safe; use one HeadClient per thread (they may share a context).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <zmq.hpp>

#include "common/clock.h"
#include "common/json.h"
#include "common/security/curve_socket.h"
#include "common/status.h"
#include "common/zmq/connection_monitor.h"

namespace ztune::client {

// First frame of every request and reply.
inline constexpr char kClientProtocolVersion[] = "ZTUNE1";
// Largest request JSON frame the head accepts.
inline constexpr size_t kMaxRequestBytes = 16u << 20;
// How long a client waits on a refused connection before it says that no
// head listens at the endpoint (at most --timeout-ms).
inline constexpr int64_t kConnectCheckMs = 1000;
inline constexpr char kDefaultHeadEndpoint[] = "tcp://127.0.0.1:7500";
inline constexpr int kDefaultTimeoutMs = 10000;

struct HeadClientOptions {
  std::string endpoint = kDefaultHeadEndpoint;
  // How long one attempt waits for its reply.
  int timeout_ms = kDefaultTimeoutMs;
  // Extra attempts after a timeout, for read-only ops only (experiments,
  // experiment, status, trials, trial, results, workers). Mutating ops (submit,
  // add_trial, stop) are never resent: the head may have applied the first copy.
  int read_retries = 0;
  // The head's public key and this client's key pair; nullopt: plain TCP (a
  // head started with --insecure).
  std::optional<security::CurveClientKeys> curve;
};

class HeadClient {
 public:
  // Uses `context`, which must outlive the client.
  HeadClient(zmq::context_t& context, HeadClientOptions options);
  // Owns a private context.
  explicit HeadClient(HeadClientOptions options);
  ~HeadClient();

  HeadClient(const HeadClient&) = delete;
  HeadClient& operator=(const HeadClient&) = delete;

  // Sends {"op": op, "rid": <fresh>, ...args} and blocks until the matching
  // reply or the deadline. `args` must be an object (or null for none) and must
  // not hold "op" or "rid".
  //
  // Returns the whole reply object (including "rid" and "ok") when the head
  // answered ok:true. Otherwise:
  //  - the head's error: the Status code named by error.code (an unknown name
  //    becomes Internal with the name kept in the message) and error.message;
  //  - Unavailable "no reply from head at ENDPOINT within N ms" on timeout;
  //  - PermissionDenied when the head refused this client's key at the
  //    handshake; Unavailable naming the cause when the handshake failed
  //    otherwise (a wrong head key, CURVE on one side only);
  //  - Unavailable / IOError when the socket cannot be made or used;
  //  - InvalidArgument for a bad endpoint, bad args or a request over
  //    kMaxRequestBytes (nothing is sent);
  //  - FailedPrecondition when the head replies with another protocol version.
  // A request the head refused because this connection went over its rate
  // limit (ResourceExhausted with retry_after_ms: nothing was done) is sent
  // again after the wait the head named, for as long as the timeout allows;
  // then that refusal is returned.
  // head_answered() tells the head's errors apart from local/transport ones.
  Result<Json> Call(const std::string& op, Json args = Json::object());

  // True if the last Call got a reply from the head (ok or not). Exit codes
  // use it: a head error is 1, an unreachable head 3.
  bool head_answered() const { return head_answered_; }
  const std::string& endpoint() const { return options_.endpoint; }
  int timeout_ms() const { return options_.timeout_ms; }

  // True for ops that may be resent after a timeout: reads, and put_code
  // (a page at an offset is stored once however often it arrives).
  static bool IsRetrySafeOp(const std::string& op);

 private:
  // Creates and connects the socket when there is none.
  Status EnsureSocket();
  void CloseSocket();
  // One send + wait. Sets *timed_out when the deadline passed without a reply.
  // Waits up to the timeout plus `extra_ms` (a request's own wait_ms).
  Result<Json> Attempt(uint64_t rid, const std::string& frame, TimeMs extra_ms, bool* timed_out);
  // Interprets a received message; nullopt when it is not the reply to `rid`.
  std::optional<Result<Json>> MatchReply(std::vector<zmq::message_t>& frames, uint64_t rid);

  std::unique_ptr<zmq::context_t> owned_context_;  // set by the owning constructor
  zmq::context_t& context_;
  HeadClientOptions options_;
  std::optional<zmq::socket_t> socket_;
  std::unique_ptr<zmqutil::ConnectionMonitor> monitor_;  // with socket_
  // What the monitor said of socket_ so far: a handshake succeeded; a
  // connection was closed.
  bool handshake_done_ = false;
  bool cut_ = false;
  bool refused_ = false;  // a connect to the endpoint failed since the socket opened
  uint64_t next_rid_ = 1;
  // Appended to a timeout's message: what the connection's events suggest.
  std::string timeout_hint_;
  // > 0 when the last attempt ended in the connect check: refused this long.
  TimeMs connect_refused_ms_ = 0;
  bool head_answered_ = false;
  // Set by MatchReply from a refusal that names when to retry; 0 otherwise.
  int64_t retry_after_ms_ = 0;
};

}  // namespace ztune::client
