// ZapHandler: the head's ZeroMQ authentication handler (ZAP, RFC 27). libzmq
// asks it about every CURVE handshake on the head's sockets; it answers from
// the current AccessLists: 200 with the key as the connection's User-Id, or
// 400 for a key that is not allowed (logged once per key and list version).
//
// Thread affinity: Start, Publish and Stop are called from the head's loop
// thread; the handler runs on its own thread, so that handshakes go on while
// the loop is busy. The only shared state is the published lists (under a
// mutex, also read by Published from any thread) and counters (atomics).
//
// Invariant: the handler is bound before the head's sockets bind and stays
// until they are closed. libzmq lets every CURVE key in when no handler is
// bound, so a head without one would be open to anyone with its public key.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include <zmq.hpp>

#include "common/status.h"
#include "head/access_lists.h"

namespace ztune::head {

// ZAP domains of the head's two sockets.
inline constexpr char kWorkersZapDomain[] = "workers";
inline constexpr char kClientsZapDomain[] = "clients";

class ZapHandler {
 public:
  explicit ZapHandler(zmq::context_t& context) : context_(context) {}
  ~ZapHandler() { Stop(); }
  ZapHandler(const ZapHandler&) = delete;
  ZapHandler& operator=(const ZapHandler&) = delete;

  // Binds inproc://zeromq.zap.01 in the context and starts answering.
  Status Start(std::shared_ptr<const AccessLists> lists);
  // Later handshakes are judged by `lists`.
  void Publish(std::shared_ptr<const AccessLists> lists);
  void Stop();
  // The lists handshakes are judged by now (null before Start). Any thread.
  std::shared_ptr<const AccessLists> Published();

  uint64_t accepted() const { return accepted_.load(); }
  uint64_t refused() const { return refused_.load(); }

 private:
  void Run();
  // One request's reply frames.
  std::vector<std::string> Answer(const std::vector<zmq::message_t>& request);
  // Published(), for the handler thread: also forgets the keys it logged
  // when the lists changed.
  std::shared_ptr<const AccessLists> Current();

  zmq::context_t& context_;
  std::optional<zmq::socket_t> socket_;  // the handler thread's once started
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::shared_ptr<const AccessLists> lists_;  // guarded by mu_
  bool lists_changed_ = false;                // guarded by mu_
  // Handler thread only: refused keys already logged since the last Publish.
  std::set<std::string> logged_;
  std::atomic<uint64_t> accepted_{0};
  std::atomic<uint64_t> refused_{0};
};

}  // namespace ztune::head
