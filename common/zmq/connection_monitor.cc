#include "common/zmq/connection_monitor.h"

#include <atomic>
#include <cstring>

namespace ztune::zmqutil {
namespace {

constexpr int kEvents = ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CONNECT_RETRIED |
                        ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                        ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;

std::string ProtocolErrorText(uint32_t code) {
  if (code == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) {
    return "the head and this side disagree on security (one uses CURVE, the other does not: "
           "check --insecure on both)";
  }
  if (code == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC ||
      code == ZMQ_PROTOCOL_ERROR_ZMTP_KEY_EXCHANGE) {
    return "the CURVE handshake failed (a wrong head public key?)";
  }
  return "the handshake failed (protocol error " + std::to_string(code) + ")";
}

}  // namespace

Result<std::unique_ptr<ConnectionMonitor>> ConnectionMonitor::Start(zmq::context_t& context,
                                                                    zmq::socket_t& socket) {
  static std::atomic<uint64_t> serial{0};
  const std::string endpoint = "inproc://ztune-connection-monitor-" +
                               std::to_string(reinterpret_cast<uintptr_t>(&socket)) + "-" +
                               std::to_string(++serial);
  if (zmq_socket_monitor(socket.handle(), endpoint.c_str(), kEvents) != 0) {
    return Status::IOError(std::string("cannot monitor a socket: ") + zmq_strerror(zmq_errno()));
  }
  try {
    zmq::socket_t pair(context, zmq::socket_type::pair);
    pair.set(zmq::sockopt::linger, 0);
    pair.connect(endpoint);
    return std::unique_ptr<ConnectionMonitor>(new ConnectionMonitor(socket, std::move(pair)));
  } catch (const zmq::error_t& e) {
    zmq_socket_monitor(socket.handle(), nullptr, 0);
    return Status::IOError(std::string("cannot connect a socket monitor: ") + e.what());
  }
}

ConnectionMonitor::~ConnectionMonitor() { zmq_socket_monitor(monitored_.handle(), nullptr, 0); }

ConnectionEvents ConnectionMonitor::Drain() {
  ConnectionEvents events;
  // Each event is two frames: 2 bytes of event id and 4 of value; the endpoint.
  while (true) {
    zmq::message_t event;
    try {
      if (!pair_.recv(event, zmq::recv_flags::dontwait)) break;
      while (event.more()) {
        zmq::message_t rest;
        if (!pair_.recv(rest, zmq::recv_flags::dontwait) || !rest.more()) break;
      }
    } catch (const zmq::error_t&) {
      break;
    }
    uint16_t id = 0;
    uint32_t value = 0;
    if (event.size() >= sizeof(id) + sizeof(value)) {
      std::memcpy(&id, event.data(), sizeof(id));
      std::memcpy(&value, static_cast<const char*>(event.data()) + sizeof(id), sizeof(value));
    }
    switch (id) {
      case ZMQ_EVENT_DISCONNECTED: events.disconnected = true; break;
      case ZMQ_EVENT_CONNECT_RETRIED: events.connect_retried = true; break;
      case ZMQ_EVENT_HANDSHAKE_SUCCEEDED: events.connected = true; break;
      case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
        events.auth_failed = true;
        events.auth_status = static_cast<int>(value);
        break;
      case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
        events.handshake_failed = true;
        events.handshake_error = ProtocolErrorText(value);
        break;
      case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
        // A CURVE server that cannot decrypt the HELLO (the client has a
        // wrong server key), or that meets a client without CURVE, may just
        // close the connection: this is what the client sees then.
        events.handshake_failed = true;
        events.closed_in_handshake = true;
        events.handshake_error = "the head closed the connection during the handshake (" +
                                 std::string(zmq_strerror(static_cast<int>(value))) + ")";
        break;
      default: break;
    }
  }
  return events;
}

}  // namespace ztune::zmqutil
