// ConnectionMonitor: what happened to a connecting socket's connection, read
// from libzmq's socket monitor (zmq_socket_monitor over an inproc PAIR).
// Tells a worker or client that its link was cut, or that the head refused
// its handshake (a key it does not allow, a wrong head key, a peer that does
// not speak CURVE), so that it can say so instead of waiting silently.
//
// Thread affinity: the monitored socket's thread. Create it before the
// socket connects, so that no event goes unseen; destroy it before the
// socket.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <zmq.hpp>

#include "common/status.h"

namespace ztune::zmqutil {

struct ConnectionEvents {
  bool disconnected = false;
  bool connected = false;  // a handshake succeeded
  // The head's ZAP handler refused this side's key (its status code, e.g. 400).
  bool auth_failed = false;
  int auth_status = 0;
  // The handshake failed otherwise: mechanism mismatch (one side without
  // CURVE) or a malformed/undecryptable handshake (a wrong head key).
  bool handshake_failed = false;
  std::string handshake_error;  // what libzmq said, in words
  // The peer closed the connection mid-handshake without saying why: with
  // CURVE, a wrong head key; without, a head that requires CURVE.
  bool closed_in_handshake = false;
  // A TCP connect failed (refused, unreachable) and libzmq will retry it:
  // nothing listens at the endpoint, at least not yet.
  bool connect_retried = false;
};

// What to check when the head closed a connection mid-handshake, for a side
// that uses CURVE (`curve`) or not.
inline std::string ClosedInHandshakeHint(bool curve) {
  return curve ? "is the head's public key (--head-key) the right one?"
               : "the head may require CURVE keys: pass --key and --head-key (or start the head "
                 "with --insecure)";
}

class ConnectionMonitor {
 public:
  // Starts monitoring `socket` (which must outlive this object).
  static Result<std::unique_ptr<ConnectionMonitor>> Start(zmq::context_t& context,
                                                          zmq::socket_t& socket);
  ~ConnectionMonitor();
  ConnectionMonitor(const ConnectionMonitor&) = delete;
  ConnectionMonitor& operator=(const ConnectionMonitor&) = delete;

  // The events since the last call, without blocking.
  ConnectionEvents Drain();
  // For zmq_poll: readable when an event is waiting.
  void* handle() { return pair_.handle(); }

 private:
  ConnectionMonitor(zmq::socket_t& monitored, zmq::socket_t pair)
      : monitored_(monitored), pair_(std::move(pair)) {}
  zmq::socket_t& monitored_;
  zmq::socket_t pair_;
};

}  // namespace ztune::zmqutil
