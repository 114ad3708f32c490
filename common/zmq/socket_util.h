// Thin adapters over cppzmq: multipart send/receive that never throw. The only
// place besides the socket owners that touches zmq::error_t. A socket is used on
// one thread only (its owner's); these helpers keep no state.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <zmq.hpp>

#include "common/status.h"

namespace ztune::zmqutil {

// Sends `frames` as one multipart message, preceded by `routing_id` when it is
// non-empty (ROUTER sockets). Unavailable on EHOSTUNREACH (peer gone, with
// ROUTER_MANDATORY) or EAGAIN; IOError otherwise.
Status SendFrames(zmq::socket_t& socket, const std::vector<std::string>& frames,
                  std::string_view routing_id = {});
Status SendFrames(zmq::socket_t& socket, std::span<const std::string_view> frames,
                  std::string_view routing_id = {});

// Receives one whole multipart message without blocking. An empty vector means
// nothing was ready. IOError on a socket error (ETERM included).
Result<std::vector<zmq::message_t>> RecvMultipart(zmq::socket_t& socket);

// Waits until one of `sockets` (zmq socket handles; null entries are skipped)
// may have a message or `fd` (-1: none) is readable, or `timeout_ms` passes
// (-1: no limit). Each socket's ZMQ_EVENTS is read first, which runs libzmq's
// pending commands; only when none has a message does it block, in poll(2) on
// the sockets' ZMQ_FDs and `fd`. zmq_poll does both every time and more: a
// getpid and a poll per socket per call, each a microsecond on a VM.
// `readable` has bit k set for a socket that has a message, or whose ZMQ_FD
// woke the poll (a command for it: a message, or only a change of one of its
// pipes; the caller's non-blocking read then may find nothing). A signal
// (EINTR) returns `interrupted`; ETERM and other errors are IOError.
struct SocketWait {
  uint32_t readable = 0;
  bool fd_readable = false;
  bool interrupted = false;
};
Result<SocketWait> WaitReadable(std::span<void* const> sockets, int fd, long timeout_ms);

// The endpoint a socket bound to (resolves "tcp://127.0.0.1:*").
Result<std::string> LastEndpoint(zmq::socket_t& socket);

// Binds, turning a zmq error into a Status that names the endpoint.
Status Bind(zmq::socket_t& socket, const std::string& endpoint);
Status Connect(zmq::socket_t& socket, const std::string& endpoint);

// Sets an integer socket option by raw id, turning errors into a Status.
Status SetIntOption(zmq::socket_t& socket, int option, int value);
Status SetInt64Option(zmq::socket_t& socket, int option, int64_t value);
Status SetBytesOption(zmq::socket_t& socket, int option, std::string_view value);

}  // namespace ztune::zmqutil
