// ZmtpLink: one simulated worker's connection to the head, spoken directly:
// ZMTP 3.1 (rfc.zeromq.org/spec/23) as a DEALER over a non-blocking TCP
// socket, with the NULL mechanism or CURVE (CurveZMQ, spec 26: the HELLO,
// WELCOME, INITIATE and READY handshake, then every frame boxed in a
// MESSAGE command), as libzmq 4.3 speaks them.
//
// Why not a libzmq DEALER per simulated worker: the fleet stands in for a
// thousand machines on the head's own two cores, and with a thousand libzmq
// sockets it spent more CPU per result than the head (85 against 62-75 µs:
// per message a mailbox signal to the I/O thread, an eventfd write and read,
// a poll and getpid calls of libzmq's fork check, besides the TCP and CURVE
// work a real worker also does). What it costs is taken from the head it
// measures (docs/benchmarks.md, "fleet"). Here one thread reads, decrypts,
// encrypts and writes each connection with one system call per direction.
//
// Client side only, enough for the head: no ZMTP heartbeats (the head sets
// none), commands other than the handshake's ignored, one socket type.
//
// Not thread-safe: one owner thread, whose epoll set it keeps its
// descriptor in (EPOLLIN always; EPOLLOUT while bytes wait to be written or
// while connecting).
#pragma once

#include <netinet/in.h>
#include <sodium.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace ztune::fleet {

// This side's and the server's long-term keys, raw.
struct CurveKeys {
  uint8_t server[crypto_box_PUBLICKEYBYTES];
  uint8_t public_key[crypto_box_PUBLICKEYBYTES];
  uint8_t secret_key[crypto_box_SECRETKEYBYTES];
};

// "tcp://HOST:PORT" resolved to an IPv4 address.
Result<sockaddr_in> ResolveTcpEndpoint(const std::string& endpoint);

class ZmtpLink {
 public:
  // What a call of OnEvents ended with.
  enum class Outcome {
    kOpen,     // still connecting or connected
    kRefused,  // the TCP connect failed: Reconnect later (libzmq retries after 100 ms)
    kCut,      // a connection that was made ended (closed, reset, or a protocol error)
  };
  using OnMessage = std::function<void(std::span<const std::string_view> frames)>;

  // Starts connecting to `address` and adds the socket to `epoll_fd` with
  // `tag` as its data. `routing_id` goes to the head as the Identity
  // property; `curve` null: the NULL mechanism. Frames larger than
  // `max_frame_bytes` from the head cut the connection (libzmq's maxmsgsize).
  static Result<std::unique_ptr<ZmtpLink>> Connect(const sockaddr_in& address, int epoll_fd,
                                                   uint64_t tag, std::string routing_id,
                                                   const CurveKeys* curve, size_t max_frame_bytes);
  ~ZmtpLink();
  ZmtpLink(const ZmtpLink&) = delete;
  ZmtpLink& operator=(const ZmtpLink&) = delete;

  // After kRefused: a new TCP connect, with the messages still unsent.
  Status Reconnect();

  // Queues one message (its frames), to be written by Flush; messages sent
  // before the handshake ends wait for it, as libzmq's queue would.
  void Send(std::span<const std::string> frames);
  // Writes what is queued, as far as the socket takes it.
  Outcome Flush();
  // Handles what epoll reported for this socket: completes the connect,
  // reads, hands every whole message to `on_message` (its frames live until
  // it returns), writes what waits.
  Outcome OnEvents(uint32_t events, const OnMessage& on_message);

  bool ready() const { return state_ == State::kReady; }
  // No socket: the connect was refused at once (Reconnect later), or it ended.
  bool closed() const { return fd_ < 0; }
  // Why the connection ended (after kRefused or kCut), in words.
  const std::string& error() const { return error_; }
  // The head refused this side's key: the ZAP status of its ERROR (e.g. 400), else 0.
  int auth_status() const { return auth_status_; }
  // The connection ended during the handshake, without an ERROR.
  bool closed_in_handshake() const { return closed_in_handshake_; }

 private:
  enum class State { kConnecting, kGreeting, kWelcome, kReadyCommand, kReady, kClosed };

  ZmtpLink(const sockaddr_in& address, int epoll_fd, uint64_t tag, std::string routing_id,
           const CurveKeys* curve, size_t max_frame_bytes);
  Status StartConnect();
  void CloseSocket();
  Outcome Fail(std::string error);
  void UpdateEpoll();
  // After the TCP connect: greeting and the first handshake command. False
  // (error_ set) if the server's key cannot be used.
  bool SendHandshakeStart();
  void AppendFrameHeader(uint8_t flags, size_t body_size);
  void AppendFrame(uint8_t flags, std::string_view body);
  // This side's next short nonce after a 16-byte prefix (CurveZMQ: counts up).
  void NextNonce(const char (&prefix)[17], uint8_t (&nonce)[crypto_box_NONCEBYTES]);
  // Opens a box sent with the shared key after its 8-byte short nonce (the
  // head's READY and MESSAGE) into plain_; false if it does not open.
  bool OpenShortNonceBox(const char (&prefix)[17], std::string_view nonce_and_box);
  std::string_view MechanismName() const { return curve_ ? "CURVE" : "NULL"; }
  void AppendCommand(std::string_view body) { AppendFrame(kCommandFlag, body); }
  void AppendMessage(std::span<const std::string> frames);
  std::string Properties() const;
  // Parses what was read; false on a protocol error (error_ set).
  bool Parse(const OnMessage& on_message);
  bool HandleCommand(std::string_view body);
  bool HandleFrame(uint8_t flags, std::string_view body, const OnMessage& on_message);

  static constexpr uint8_t kMoreFlag = 0x01;
  static constexpr uint8_t kLongFlag = 0x02;
  static constexpr uint8_t kCommandFlag = 0x04;
  static constexpr uint8_t kBoxedCommandFlag = 0x02;  // inside a CURVE MESSAGE

  const sockaddr_in address_;
  const int epoll_fd_;
  const uint64_t tag_;
  const std::string routing_id_;
  const std::optional<CurveKeys> curve_;
  const size_t max_frame_bytes_;

  int fd_ = -1;
  State state_ = State::kClosed;
  uint32_t epoll_events_ = 0;  // as registered; 0: not in the epoll set
  std::string in_;             // a buffer: bytes read and not yet parsed are [in_pos_, in_end_)
  size_t in_pos_ = 0;
  size_t in_end_ = 0;
  std::string out_;  // to write (from out_pos_)
  size_t out_pos_ = 0;
  std::vector<std::vector<std::string>> unsent_;  // messages waiting for the handshake's end
  // The message being received: its frames' bytes, and where each ends.
  std::string message_;
  std::vector<size_t> message_ends_;
  std::string plain_;  // scratch for boxing and unboxing
  std::string error_;
  int auth_status_ = 0;
  bool closed_in_handshake_ = false;

  // CURVE: this connection's transient keys, the server's, the cookie, the
  // shared key, and the nonces (short nonces count up from 1 on each side).
  uint8_t cn_public_[crypto_box_PUBLICKEYBYTES] = {};
  uint8_t cn_secret_[crypto_box_SECRETKEYBYTES] = {};
  uint8_t cn_server_[crypto_box_PUBLICKEYBYTES] = {};
  uint8_t cookie_[96] = {};
  uint8_t precomputed_[crypto_box_BEFORENMBYTES] = {};
  uint64_t nonce_ = 1;
  uint64_t peer_nonce_ = 0;
};

}  // namespace ztune::fleet
