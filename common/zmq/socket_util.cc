#include "common/zmq/socket_util.h"

#include <poll.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "common/check.h"

namespace ztune::zmqutil {

namespace {

// A signal that lands in libzmq's command processing, which a send or a
// receive does before touching the message, fails it with EINTR having
// queued or taken nothing: it is tried again. Given up, it lost a TRAIN of a
// head that took a SIGHUP, or cut a multipart message in two.
template <class Op>
auto RetryInterrupted(Op op) {
  while (true) {
    try {
      return op();
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
  }
}

}  // namespace

Result<SocketWait> WaitReadable(std::span<void* const> sockets, int fd, long timeout_ms) {
  constexpr size_t kMaxSockets = 8;
  CHECK(sockets.size() <= kMaxSockets);
  SocketWait out;
  pollfd fds[kMaxSockets + 1];
  int n = 0;
  int socket_of[kMaxSockets];  // the socket of fds[i]
  for (size_t k = 0; k < sockets.size(); ++k) {
    if (sockets[k] == nullptr) continue;
    int events = 0;
    size_t size = sizeof(events);
    if (zmq_getsockopt(sockets[k], ZMQ_EVENTS, &events, &size) != 0) {
      if (zmq_errno() == EINTR) {
        out.interrupted = true;
        return out;
      }
      return Status::IOError(std::string("poll: ") + zmq_strerror(zmq_errno()));
    }
    if ((events & ZMQ_POLLIN) != 0) out.readable |= 1u << k;
    int socket_fd = -1;
    size = sizeof(socket_fd);
    if (zmq_getsockopt(sockets[k], ZMQ_FD, &socket_fd, &size) != 0) {
      return Status::IOError(std::string("poll: ") + zmq_strerror(zmq_errno()));
    }
    socket_of[n] = static_cast<int>(k);
    fds[n++] = {socket_fd, POLLIN, 0};
  }
  if (out.readable != 0 || timeout_ms == 0) return out;
  const int fd_index = n;
  if (fd >= 0) fds[n++] = {fd, POLLIN, 0};
  const int ready = ::poll(fds, static_cast<nfds_t>(n), static_cast<int>(timeout_ms));
  if (ready < 0) {
    if (errno == EINTR) {
      out.interrupted = true;
      return out;
    }
    return Status::IOError(std::string("poll: ") + std::strerror(errno));
  }
  for (int i = 0; i < fd_index; ++i) {
    if (fds[i].revents != 0) out.readable |= 1u << socket_of[i];
  }
  out.fd_readable = fd >= 0 && fds[fd_index].revents != 0;
  return out;
}

Status SendFrames(zmq::socket_t& socket, const std::vector<std::string>& frames,
                  std::string_view routing_id) {
  // Without an allocation for the usual message (4 frames at most).
  std::array<std::string_view, 8> few;
  if (frames.size() <= few.size()) {
    std::copy(frames.begin(), frames.end(), few.begin());
    return SendFrames(socket, std::span<const std::string_view>(few.data(), frames.size()),
                      routing_id);
  }
  std::vector<std::string_view> views(frames.begin(), frames.end());
  return SendFrames(socket, std::span<const std::string_view>(views), routing_id);
}

Status SendFrames(zmq::socket_t& socket, std::span<const std::string_view> frames,
                  std::string_view routing_id) {
  auto send = [&socket](std::string_view frame, zmq::send_flags flags) {
    return RetryInterrupted(
        [&] { return socket.send(zmq::buffer(frame.data(), frame.size()), flags).has_value(); });
  };
  try {
    if (!routing_id.empty()) {
      if (!send(routing_id, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
        return Status::Unavailable("send would block");
      }
    }
    for (size_t i = 0; i < frames.size(); ++i) {
      auto flags = zmq::send_flags::dontwait;
      if (i + 1 < frames.size()) flags = flags | zmq::send_flags::sndmore;
      if (!send(frames[i], flags)) return Status::Unavailable("send would block");
    }
    return Status::Ok();
  } catch (const zmq::error_t& e) {
    if (e.num() == EHOSTUNREACH) return Status::Unavailable("peer unreachable");
    return Status::IOError(std::string("zmq send: ") + e.what());
  }
}

Result<std::vector<zmq::message_t>> RecvMultipart(zmq::socket_t& socket) {
  std::vector<zmq::message_t> parts;
  try {
    while (true) {
      zmq::message_t msg;
      const auto flags = parts.empty() ? zmq::recv_flags::dontwait : zmq::recv_flags::none;
      if (!RetryInterrupted([&] { return socket.recv(msg, flags).has_value(); })) {
        return parts;  // EAGAIN on the first frame: nothing ready
      }
      bool more = msg.more();
      parts.push_back(std::move(msg));
      if (!more) return parts;
    }
  } catch (const zmq::error_t& e) {
    return Status::IOError(std::string("zmq recv: ") + e.what());
  }
}

Result<std::string> LastEndpoint(zmq::socket_t& socket) {
  try {
    return socket.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return Status::IOError(std::string("zmq last_endpoint: ") + e.what());
  }
}

Status Bind(zmq::socket_t& socket, const std::string& endpoint) {
  try {
    socket.bind(endpoint);
    return Status::Ok();
  } catch (const zmq::error_t& e) {
    return Status::Unavailable("cannot bind " + endpoint + ": " + e.what());
  }
}

Status Connect(zmq::socket_t& socket, const std::string& endpoint) {
  try {
    socket.connect(endpoint);
    return Status::Ok();
  } catch (const zmq::error_t& e) {
    return Status::InvalidArgument("cannot connect to " + endpoint + ": " + e.what());
  }
}

Status SetIntOption(zmq::socket_t& socket, int option, int value) {
  if (zmq_setsockopt(socket.handle(), option, &value, sizeof(value)) != 0) {
    return Status::InvalidArgument(std::string("zmq_setsockopt: ") + zmq_strerror(zmq_errno()));
  }
  return Status::Ok();
}

Status SetInt64Option(zmq::socket_t& socket, int option, int64_t value) {
  if (zmq_setsockopt(socket.handle(), option, &value, sizeof(value)) != 0) {
    return Status::InvalidArgument(std::string("zmq_setsockopt: ") + zmq_strerror(zmq_errno()));
  }
  return Status::Ok();
}

Status SetBytesOption(zmq::socket_t& socket, int option, std::string_view value) {
  if (zmq_setsockopt(socket.handle(), option, value.data(), value.size()) != 0) {
    return Status::InvalidArgument(std::string("zmq_setsockopt: ") + zmq_strerror(zmq_errno()));
  }
  return Status::Ok();
}

}  // namespace ztune::zmqutil
