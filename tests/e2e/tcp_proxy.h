// TcpProxy: a loopback TCP forwarder between workers and the head, whose
// connections a test can cut (RST) at will, as a NAT, a load balancer or a
// flaky link does. Whatever was in flight is lost: bytes in the proxy and in
// the kernel buffers of the cut sockets. ZeroMQ then reconnects by itself.
//
// It can also record every byte it forwards, in both directions, as a
// packet capture on the loopback interface would see them.
//
// One thread forwards everything (poll over the listener, a wake-up pipe and
// every socket); Cut() and Captured() are called from the test thread.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ztune::e2e {

class TcpProxy {
 public:
  // Forwards 127.0.0.1:<port()> to 127.0.0.1:`upstream_port`.
  explicit TcpProxy(int upstream_port) : upstream_port_(upstream_port) {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a = Loopback(0);
    if (bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        listen(listener_, 64) != 0) {
      Fail("bind/listen");
      return;
    }
    socklen_t len = sizeof(a);
    getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) Fail("pipe");
    thread_ = std::thread([this] { Run(); });
  }

  ~TcpProxy() {
    stop_.store(true);
    Wake();
    if (thread_.joinable()) thread_.join();
    for (auto& c : conns_) CloseBoth(c, false);
    close(listener_);
    close(wake_[0]);
    close(wake_[1]);
  }

  int port() const { return port_; }
  std::string endpoint() const { return "tcp://127.0.0.1:" + std::to_string(port_); }
  // Cuts every open connection with a reset; returns at once (the proxy
  // thread cuts them at its next turn, before forwarding another byte).
  void Cut() {
    cut_requests_.fetch_add(1);
    Wake();
  }
  // Every byte forwarded so far (both directions, interleaved as read).
  std::string Captured() const {
    std::lock_guard lock(capture_mu_);
    return captured_;
  }
  // Connections cut so far (each one a client connection and its upstream).
  int cuts_done() const { return cuts_done_.load(); }
  // Cut() requests the proxy thread has carried out (with or without open
  // connections to cut: between a cut and the peer's reconnect there are none).
  int cut_requests_handled() const { return cut_requests_handled_.load(); }
  int accepted() const { return accepted_.load(); }
  const std::string& error() const { return error_; }

 private:
  struct Conn {
    int client = -1;
    int upstream = -1;
  };

  static sockaddr_in Loopback(int port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    return a;
  }

  void Fail(const std::string& what) { error_ = what + ": errno " + std::to_string(errno); }
  void Wake() { (void)!write(wake_[1], "x", 1); }

  // `reset`: SO_LINGER 0, so that the peer sees a RST, not an orderly close.
  static void CloseBoth(Conn& c, bool reset) {
    for (int fd : {c.client, c.upstream}) {
      if (fd < 0) continue;
      if (reset) {
        linger l{1, 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
      }
      close(fd);
    }
    c.client = c.upstream = -1;
  }

  void Accept() {
    int client = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) return;
    int upstream = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a = Loopback(upstream_port_);
    if (connect(upstream, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      close(client);
      close(upstream);
      return;
    }
    int one = 1;
    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(upstream, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    conns_.push_back(Conn{client, upstream});
    accepted_.fetch_add(1);
  }

  // Copies what `from` has to `to` (blocking write: loopback is fast, and the
  // messages here are small). False when either side closed.
  bool Forward(int from, int to) {
    char buf[64 * 1024];
    ssize_t n = read(from, buf, sizeof(buf));
    if (n <= 0) return n < 0 && (errno == EINTR || errno == EAGAIN);
    {
      std::lock_guard lock(capture_mu_);
      if (captured_.size() < (256u << 20)) captured_.append(buf, static_cast<size_t>(n));
    }
    for (ssize_t off = 0; off < n;) {
      ssize_t w = write(to, buf + off, static_cast<size_t>(n - off));
      if (w < 0) {
        if (errno == EINTR) continue;
        return false;
      }
      off += w;
    }
    return true;
  }

  void Run() {
    int cuts_seen = 0;
    while (!stop_.load()) {
      if (int want = cut_requests_.load(); want != cuts_seen) {
        cuts_seen = want;
        for (auto& c : conns_) CloseBoth(c, true);
        cuts_done_.fetch_add(static_cast<int>(conns_.size()));
        conns_.clear();
        cut_requests_handled_.store(cuts_seen);
      }
      std::vector<pollfd> fds = {{listener_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
      for (const auto& c : conns_) {
        fds.push_back({c.client, POLLIN, 0});
        fds.push_back({c.upstream, POLLIN, 0});
      }
      if (poll(fds.data(), fds.size(), 100) < 0) continue;
      if (fds[1].revents != 0) {
        char drain[64];
        while (read(wake_[0], drain, sizeof(drain)) > 0) {
        }
        continue;  // a cut first
      }
      const size_t polled = conns_.size();
      if (fds[0].revents & POLLIN) Accept();
      std::vector<Conn> alive;
      for (size_t i = 0; i < polled; ++i) {
        Conn& c = conns_[i];
        bool ok = true;
        if (fds[2 + 2 * i].revents != 0) ok = Forward(c.client, c.upstream);
        if (ok && fds[3 + 2 * i].revents != 0) ok = Forward(c.upstream, c.client);
        if (ok) {
          alive.push_back(c);
        } else {
          CloseBoth(c, false);
        }
      }
      // Accept() may have appended one that poll did not cover yet.
      for (size_t i = polled; i < conns_.size(); ++i) alive.push_back(conns_[i]);
      conns_ = std::move(alive);
    }
  }

  const int upstream_port_;
  int listener_ = -1;
  int port_ = 0;
  int wake_[2] = {-1, -1};
  std::vector<Conn> conns_;  // proxy thread only (and the destructor, after join)
  std::atomic<bool> stop_{false};
  std::atomic<int> cut_requests_{0};
  std::atomic<int> cuts_done_{0};
  std::atomic<int> cut_requests_handled_{0};
  std::atomic<int> accepted_{0};
  std::string error_;  // set in the constructor only
  mutable std::mutex capture_mu_;
  std::string captured_;  // guarded by capture_mu_
  std::thread thread_;
};

}  // namespace ztune::e2e
