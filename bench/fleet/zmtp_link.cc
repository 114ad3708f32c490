#include "bench/fleet/zmtp_link.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ztune::fleet {
namespace {

constexpr size_t kGreetingBytes = 64;
// Room a read asks for at least; the buffer grows only for larger frames.
constexpr size_t kReadChunk = 16 * 1024;
// A frame's boxing: "\x07MESSAGE", the short nonce, the MAC and the flags byte.
constexpr size_t kMessageOverhead = 8 + 8 + crypto_box_MACBYTES + 1;

void PutUint64(uint8_t* p, uint64_t v) {
  for (int i = 7; i >= 0; --i) {
    p[i] = static_cast<uint8_t>(v & 0xff);
    v >>= 8;
  }
}

uint64_t GetUint64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

void PutUint32(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>((v >> shift) & 0xff));
}

const uint8_t* Bytes(std::string_view s) { return reinterpret_cast<const uint8_t*>(s.data()); }
uint8_t* Bytes(std::string& s) { return reinterpret_cast<uint8_t*>(s.data()); }

bool StartsWith(std::string_view body, std::string_view prefix) {
  return body.size() >= prefix.size() && body.substr(0, prefix.size()) == prefix;
}

}  // namespace

Result<sockaddr_in> ResolveTcpEndpoint(const std::string& endpoint) {
  constexpr std::string_view kScheme = "tcp://";
  const size_t colon = endpoint.rfind(':');
  if (!StartsWith(endpoint, kScheme) || colon == std::string::npos || colon < kScheme.size()) {
    return Status::InvalidArgument("endpoint '" + endpoint + "' is not tcp://HOST:PORT");
  }
  const std::string host = endpoint.substr(kScheme.size(), colon - kScheme.size());
  const std::string port = endpoint.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found);
  if (rc != 0 || found == nullptr) {
    return Status::InvalidArgument("cannot resolve '" + endpoint + "': " + gai_strerror(rc));
  }
  sockaddr_in address{};
  std::memcpy(&address, found->ai_addr, sizeof address);
  freeaddrinfo(found);
  return address;
}

ZmtpLink::ZmtpLink(const sockaddr_in& address, int epoll_fd, uint64_t tag, std::string routing_id,
                   const CurveKeys* curve, size_t max_frame_bytes)
    : address_(address),
      epoll_fd_(epoll_fd),
      tag_(tag),
      routing_id_(std::move(routing_id)),
      curve_(curve == nullptr ? std::nullopt : std::optional<CurveKeys>(*curve)),
      max_frame_bytes_(max_frame_bytes) {}

ZmtpLink::~ZmtpLink() {
  CloseSocket();
  sodium_memzero(cn_secret_, sizeof cn_secret_);
  sodium_memzero(precomputed_, sizeof precomputed_);
}

Result<std::unique_ptr<ZmtpLink>> ZmtpLink::Connect(const sockaddr_in& address, int epoll_fd,
                                                    uint64_t tag, std::string routing_id,
                                                    const CurveKeys* curve,
                                                    size_t max_frame_bytes) {
  if (curve != nullptr && sodium_init() < 0) return Status::Internal("libsodium failed to start");
  if (routing_id.size() > 255) return Status::InvalidArgument("routing id over 255 bytes");
  std::unique_ptr<ZmtpLink> link(
      new ZmtpLink(address, epoll_fd, tag, std::move(routing_id), curve, max_frame_bytes));
  RETURN_IF_ERROR(link->Reconnect());
  return link;
}

Status ZmtpLink::Reconnect() {
  CloseSocket();
  in_pos_ = 0;
  in_end_ = 0;
  out_.clear();
  out_pos_ = 0;
  message_.clear();
  message_ends_.clear();
  error_.clear();
  auth_status_ = 0;
  closed_in_handshake_ = false;
  nonce_ = 1;
  peer_nonce_ = 0;
  return StartConnect();
}

Status ZmtpLink::StartConnect() {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return Status::IOError(std::string("socket: ") + std::strerror(errno));
  const int one = 1;
  // As libzmq: every message goes out at once.
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  state_ = State::kConnecting;
  const int rc = ::connect(fd_, reinterpret_cast<const sockaddr*>(&address_), sizeof address_);
  if (rc != 0 && errno != EINPROGRESS) {
    // Refused at once (loopback): the caller sees it at the first OnEvents.
    error_ = std::string("connect: ") + std::strerror(errno);
    ::close(fd_);
    fd_ = -1;
    state_ = State::kClosed;
    return Status::Ok();
  }
  if (rc == 0) {
    state_ = State::kGreeting;
    if (!SendHandshakeStart()) return Status::InvalidArgument(error_);
  }
  UpdateEpoll();
  return Status::Ok();
}

void ZmtpLink::CloseSocket() {
  if (fd_ < 0) return;
  if (epoll_events_ != 0) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd_, nullptr);
  epoll_events_ = 0;
  ::close(fd_);
  fd_ = -1;
}

ZmtpLink::Outcome ZmtpLink::Fail(std::string error) {
  const bool connecting = state_ == State::kConnecting || fd_ < 0;
  if (!connecting && state_ != State::kReady && auth_status_ == 0) closed_in_handshake_ = true;
  if (error_.empty()) error_ = std::move(error);
  CloseSocket();
  state_ = State::kClosed;
  return connecting ? Outcome::kRefused : Outcome::kCut;
}

void ZmtpLink::UpdateEpoll() {
  if (fd_ < 0) return;
  uint32_t want = EPOLLIN;
  if (state_ == State::kConnecting || out_pos_ < out_.size()) want |= EPOLLOUT;
  if (want == epoll_events_) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.u64 = tag_;
  epoll_ctl(epoll_fd_, epoll_events_ == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd_, &ev);
  epoll_events_ = want;
}

std::string ZmtpLink::Properties() const {
  std::string p;
  for (const auto& [name, value] :
       {std::pair<std::string_view, std::string_view>{"Socket-Type", "DEALER"},
        {"Identity", routing_id_}}) {
    p.push_back(static_cast<char>(name.size()));
    p.append(name);
    PutUint32(p, static_cast<uint32_t>(value.size()));
    p.append(value);
  }
  return p;
}

bool ZmtpLink::SendHandshakeStart() {
  // Greeting: signature, version 3.1, mechanism, as-server 0, filler.
  std::string greeting(kGreetingBytes, '\0');
  greeting[0] = static_cast<char>(0xff);
  greeting[9] = 0x7f;
  greeting[10] = 3;
  greeting[11] = 1;
  const std::string_view mechanism = MechanismName();
  std::memcpy(greeting.data() + 12, mechanism.data(), mechanism.size());
  out_.append(greeting);
  if (!curve_) {
    AppendCommand("\x05READY" + Properties());
    return true;
  }
  // HELLO: a fresh transient key, and 64 zero bytes boxed to the server's
  // long-term key (proof that this side knows it).
  crypto_box_keypair(cn_public_, cn_secret_);
  std::string hello(200, '\0');
  std::memcpy(hello.data(), "\x05HELLO\x01\x00", 8);
  uint8_t nonce[crypto_box_NONCEBYTES];
  NextNonce("CurveZMQHELLO---", nonce);
  std::memcpy(hello.data() + 80, cn_public_, 32);
  std::memcpy(hello.data() + 112, nonce + 16, 8);
  const uint8_t zeros[64] = {};
  if (crypto_box_easy(Bytes(hello) + 120, zeros, sizeof zeros, nonce, curve_->server, cn_secret_) !=
      0) {
    error_ = "the head's public key is unusable";
    return false;
  }
  AppendCommand(hello);
  return true;
}

void ZmtpLink::AppendFrameHeader(uint8_t flags, size_t body_size) {
  if (body_size > 255) {
    out_.push_back(static_cast<char>(flags | kLongFlag));
    uint8_t size[8];
    PutUint64(size, body_size);
    out_.append(reinterpret_cast<const char*>(size), 8);
  } else {
    out_.push_back(static_cast<char>(flags));
    out_.push_back(static_cast<char>(body_size));
  }
}

void ZmtpLink::AppendFrame(uint8_t flags, std::string_view body) {
  AppendFrameHeader(flags, body.size());
  out_.append(body);
}

void ZmtpLink::NextNonce(const char (&prefix)[17], uint8_t (&nonce)[crypto_box_NONCEBYTES]) {
  std::memcpy(nonce, prefix, 16);
  PutUint64(nonce + 16, nonce_++);
}

bool ZmtpLink::OpenShortNonceBox(const char (&prefix)[17], std::string_view nonce_and_box) {
  if (nonce_and_box.size() < 8 + crypto_box_MACBYTES) return false;
  uint8_t nonce[crypto_box_NONCEBYTES];
  std::memcpy(nonce, prefix, 16);
  std::memcpy(nonce + 16, nonce_and_box.data(), 8);
  const std::string_view box = nonce_and_box.substr(8);
  plain_.resize(box.size() - crypto_box_MACBYTES);
  return crypto_box_open_easy_afternm(Bytes(plain_), Bytes(box), box.size(), nonce, precomputed_) ==
         0;
}

void ZmtpLink::AppendMessage(std::span<const std::string> frames) {
  for (size_t i = 0; i < frames.size(); ++i) {
    const uint8_t more = i + 1 < frames.size() ? kMoreFlag : 0;
    if (!curve_) {
      AppendFrame(more, frames[i]);
      continue;
    }
    // MESSAGE: the frame's flags (libzmq's msg_t flags: more 1, command 2)
    // and bytes boxed with the shared key; the wire frame itself carries no
    // flags (libzmq's curve_encoding_t).
    plain_.assign(1, static_cast<char>(more));
    plain_.append(frames[i]);
    const size_t body_size = 16 + crypto_box_MACBYTES + plain_.size();
    AppendFrameHeader(0, body_size);
    const size_t body_at = out_.size();
    out_.resize(body_at + body_size);
    uint8_t* body = Bytes(out_) + body_at;
    std::memcpy(body, "\x07MESSAGE", 8);
    uint8_t nonce[crypto_box_NONCEBYTES];
    NextNonce("CurveZMQMESSAGEC", nonce);
    std::memcpy(body + 8, nonce + 16, 8);
    crypto_box_easy_afternm(body + 16, Bytes(plain_), plain_.size(), nonce, precomputed_);
  }
}

void ZmtpLink::Send(std::span<const std::string> frames) {
  if (frames.empty()) return;
  if (state_ != State::kReady) {
    unsent_.emplace_back(frames.begin(), frames.end());
    return;
  }
  AppendMessage(frames);
}

ZmtpLink::Outcome ZmtpLink::Flush() {
  if (fd_ < 0 || state_ == State::kConnecting) return Outcome::kOpen;
  while (out_pos_ < out_.size()) {
    const ssize_t n =
        ::send(fd_, out_.data() + out_pos_, out_.size() - out_pos_, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR) continue;
      return Fail(std::string("send: ") + std::strerror(errno));
    }
    out_pos_ += static_cast<size_t>(n);
  }
  if (out_pos_ == out_.size()) {
    out_.clear();
    out_pos_ = 0;
  }
  UpdateEpoll();
  return Outcome::kOpen;
}

ZmtpLink::Outcome ZmtpLink::OnEvents(uint32_t events, const OnMessage& on_message) {
  if (fd_ < 0) return Fail(error_.empty() ? "not connected" : error_);
  if (state_ == State::kConnecting) {
    if ((events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) == 0) return Outcome::kOpen;
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return Fail(std::string("connect: ") + std::strerror(err));
    state_ = State::kGreeting;
    if (!SendHandshakeStart()) return Fail(error_);
  }
  if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
    while (true) {
      if (in_.size() - in_end_ < kReadChunk) {
        // Unparsed bytes to the front; the buffer grows (zero-filling only
        // the growth) when a frame is larger than what is left.
        std::memmove(in_.data(), in_.data() + in_pos_, in_end_ - in_pos_);
        in_end_ -= in_pos_;
        in_pos_ = 0;
        if (in_.size() - in_end_ < kReadChunk) in_.resize(in_end_ + kReadChunk);
      }
      const size_t room = in_.size() - in_end_;
      const ssize_t n = ::recv(fd_, in_.data() + in_end_, room, MSG_DONTWAIT);
      if (n > 0) {
        in_end_ += static_cast<size_t>(n);
        if (static_cast<size_t>(n) < room) break;
        continue;
      }
      if (n == 0) {
        // What came before the close is still the head's.
        if (!Parse(on_message)) return Fail(error_);
        return Fail("connection closed by the head");
      }
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR) continue;
      return Fail(std::string("recv: ") + std::strerror(errno));
    }
    if (!Parse(on_message)) return Fail(error_);
  }
  return Flush();
}

bool ZmtpLink::Parse(const OnMessage& on_message) {
  while (state_ != State::kClosed) {
    const std::string_view rest(in_.data() + in_pos_, in_end_ - in_pos_);
    if (state_ == State::kGreeting) {
      if (rest.size() < kGreetingBytes) break;
      const std::string_view mechanism = MechanismName();
      std::string want(20, '\0');
      std::memcpy(want.data(), mechanism.data(), mechanism.size());
      if (static_cast<uint8_t>(rest[0]) != 0xff || (rest[9] & 1) == 0 || rest[10] < 3) {
        error_ = "the head's greeting is not ZMTP 3";
        return false;
      }
      if (rest.substr(12, 20) != want) {
        error_ = "the head speaks another security mechanism than " + std::string(mechanism) +
                 (curve_ ? " (is it --insecure?)" : " (it may require CURVE keys)");
        return false;
      }
      in_pos_ += kGreetingBytes;
      state_ = curve_ ? State::kWelcome : State::kReadyCommand;
      continue;
    }
    if (rest.size() < 2) break;
    const uint8_t flags = static_cast<uint8_t>(rest[0]);
    size_t header = 2;
    uint64_t size = static_cast<uint8_t>(rest[1]);
    if (flags & kLongFlag) {
      header = 9;
      if (rest.size() < header) break;
      size = GetUint64(Bytes(rest) + 1);
    }
    if (size > max_frame_bytes_ + kMessageOverhead) {
      error_ = "a frame of " + std::to_string(size) + " bytes from the head, over the limit";
      return false;
    }
    if (rest.size() < header + size) break;
    const std::string_view body = rest.substr(header, size);
    in_pos_ += header + size;
    const bool ok = state_ == State::kReady ? HandleFrame(flags, body, on_message)
                                            : ((flags & kCommandFlag) != 0 && HandleCommand(body));
    if (!ok) {
      if (error_.empty()) error_ = "unexpected frame from the head during the handshake";
      return false;
    }
  }
  if (in_pos_ == in_end_) in_pos_ = in_end_ = 0;
  return true;
}

bool ZmtpLink::HandleCommand(std::string_view body) {
  if (StartsWith(body,
                 "\x05"
                 "ERROR")) {
    const size_t len = body.size() > 6 ? static_cast<uint8_t>(body[6]) : 0;
    const std::string reason(body.substr(7, std::min(len, body.size() > 7 ? body.size() - 7 : 0)));
    if (reason.size() == 3 && std::all_of(reason.begin(), reason.end(), ::isdigit)) {
      auth_status_ = std::stoi(reason);
    }
    error_ = "the head refused the handshake: " + (reason.empty() ? "no reason" : reason);
    return false;
  }
  if (!curve_) {
    if (state_ != State::kReadyCommand || !StartsWith(body, "\x05READY")) return false;
  } else if (state_ == State::kWelcome) {
    if (!StartsWith(body, "\x07WELCOME") || body.size() != 168) return false;
    uint8_t nonce[crypto_box_NONCEBYTES];
    std::memcpy(nonce, "WELCOME-", 8);
    std::memcpy(nonce + 8, body.data() + 8, 16);
    uint8_t plain[128];
    if (crypto_box_open_easy(plain, Bytes(body) + 24, 144, nonce, curve_->server, cn_secret_) !=
        0) {
      error_ = "the head's WELCOME does not open with its key: is --head-key the right one?";
      return false;
    }
    std::memcpy(cn_server_, plain, 32);
    std::memcpy(cookie_, plain + 32, 96);
    if (crypto_box_beforenm(precomputed_, cn_server_, cn_secret_) != 0) return false;
    // INITIATE: the cookie back, and this side's long-term key with a vouch
    // (the transient key and the server's, boxed with the long-term key).
    uint8_t vouch_nonce[crypto_box_NONCEBYTES];
    std::memcpy(vouch_nonce, "VOUCH---", 8);
    randombytes_buf(vouch_nonce + 8, 16);
    uint8_t vouch_plain[64];
    std::memcpy(vouch_plain, cn_public_, 32);
    std::memcpy(vouch_plain + 32, curve_->server, 32);
    std::string inner(32 + 16 + 80, '\0');
    std::memcpy(inner.data(), curve_->public_key, 32);
    std::memcpy(inner.data() + 32, vouch_nonce + 8, 16);
    if (crypto_box_easy(Bytes(inner) + 48, vouch_plain, sizeof vouch_plain, vouch_nonce, cn_server_,
                        curve_->secret_key) != 0) {
      error_ = "the head's transient key is unusable";
      return false;
    }
    inner.append(Properties());
    std::string initiate(9 + 96 + 8 + crypto_box_MACBYTES + inner.size(), '\0');
    std::memcpy(initiate.data(), "\x08INITIATE", 9);
    std::memcpy(initiate.data() + 9, cookie_, 96);
    uint8_t nonce2[crypto_box_NONCEBYTES];
    NextNonce("CurveZMQINITIATE", nonce2);
    std::memcpy(initiate.data() + 105, nonce2 + 16, 8);
    crypto_box_easy_afternm(Bytes(initiate) + 113, Bytes(inner), inner.size(), nonce2,
                            precomputed_);
    sodium_memzero(inner.data(), inner.size());
    AppendCommand(initiate);
    state_ = State::kReadyCommand;
    return true;
  } else {
    if (state_ != State::kReadyCommand || !StartsWith(body, "\x05READY") || body.size() < 30) {
      return false;
    }
    if (!OpenShortNonceBox("CurveZMQREADY---", body.substr(6))) {
      error_ = "the head's READY does not open";
      return false;
    }
    peer_nonce_ = GetUint64(Bytes(body) + 6);
  }
  state_ = State::kReady;
  std::vector<std::vector<std::string>> unsent;
  unsent.swap(unsent_);
  for (const auto& frames : unsent) AppendMessage(frames);
  return true;
}

bool ZmtpLink::HandleFrame(uint8_t flags, std::string_view body, const OnMessage& on_message) {
  uint8_t inner_flags = flags;
  std::string_view data = body;
  if (curve_) {
    if (!StartsWith(body, "\x07MESSAGE") || body.size() < kMessageOverhead) {
      error_ = "a frame from the head that is not a CURVE MESSAGE";
      return false;
    }
    const uint64_t nonce_value = GetUint64(Bytes(body) + 8);
    if (nonce_value <= peer_nonce_) {
      error_ = "a MESSAGE from the head with a nonce out of sequence";
      return false;
    }
    peer_nonce_ = nonce_value;
    if (!OpenShortNonceBox("CurveZMQMESSAGES", body.substr(8))) {
      error_ = "a MESSAGE from the head that does not open";
      return false;
    }
    inner_flags = static_cast<uint8_t>(plain_[0]);
    data = std::string_view(plain_).substr(1);
  }
  // A command (PING, SUBSCRIBE): none is for a DEALER the head talks to.
  if (inner_flags & (curve_ ? kBoxedCommandFlag : kCommandFlag)) return true;
  message_.append(data);
  message_ends_.push_back(message_.size());
  if (inner_flags & kMoreFlag) return true;
  std::vector<std::string_view> frames;
  frames.reserve(message_ends_.size());
  size_t start = 0;
  for (size_t end : message_ends_) {
    frames.emplace_back(message_.data() + start, end - start);
    start = end;
  }
  on_message(frames);
  message_.clear();
  message_ends_.clear();
  return true;
}

}  // namespace ztune::fleet
