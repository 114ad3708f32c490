// Test helper: a scripted head. Binds a ROUTER on tcp://127.0.0.1:* (with
// ROUTER_MANDATORY; plain TCP: the worker runs without keys), talks to the
// routing id the worker's latest message came from (a new one per
// connection), answers REGISTER with REGISTERED and
// echoes heartbeats unless told to stay silent, and lets a test wait for a
// message of a given type. Test-thread only (it owns its socket).
#pragma once

#include <chrono>
#include <deque>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <zmq.hpp>

#include "common/protocol/codec.h"
#include "common/zmq/socket_util.h"
#include "worker/worker_options.h"

namespace ztune::worker {

class FakeHead {
 public:
  struct Received {
    std::string identity;
    protocol::Message message;
  };

  explicit FakeHead(zmq::context_t& context, int64_t heartbeat_ms, int64_t liveness)
      : router_(context, zmq::socket_type::router),
        heartbeat_ms_(heartbeat_ms),
        liveness_(liveness) {
    EXPECT_TRUE(zmqutil::SetIntOption(router_, ZMQ_ROUTER_MANDATORY, 1).ok());
    EXPECT_TRUE(zmqutil::SetIntOption(router_, ZMQ_ROUTER_HANDOVER, 1).ok());
    EXPECT_TRUE(zmqutil::SetIntOption(router_, ZMQ_LINGER, 0).ok());
    EXPECT_TRUE(zmqutil::Bind(router_, "tcp://127.0.0.1:*").ok());
    auto ep = zmqutil::LastEndpoint(router_);
    EXPECT_TRUE(ep.ok());
    endpoint_ = *ep;
  }

  // Options of a worker "w" in `work_dir` that talks to this head with its
  // heartbeat and liveness: 2 CPUs, reconnects within 200 ms, 2 s to shut
  // down; a test changes what it needs.
  WorkerOptions WorkerOptionsFor(const std::string& work_dir) const {
    WorkerOptions o;
    o.head_endpoint = endpoint_;
    o.name = "w";
    o.work_dir = work_dir;
    o.resources = {{"CPU", 2}};
    o.heartbeat_ms = heartbeat_ms_;
    o.liveness = liveness_;
    o.max_backoff_ms = 200;
    o.shutdown_grace_ms = 2000;
    return o;
  }

  const std::string& endpoint() const { return endpoint_; }
  // The routing id of the worker (known after its first message).
  const std::string& worker() const { return worker_; }

  // Silent: receive and record, answer nothing (the head "hangs").
  bool silent = false;
  // Answer REGISTER with REGISTERED automatically.
  bool auto_register = true;
  // REGISTERED announces protocol::kFeatureResults: the worker may coalesce.
  bool takes_results = false;
  // REGISTERED announces protocol::kFeatureOneFrame, and what Send sends goes
  // in that layout. Either way a message in it before that REGISTERED, or a
  // REGISTER in it, fails the test.
  bool takes_one_frame = false;
  // Messages received in each layout (heartbeats included).
  size_t one_frame_messages = 0;
  size_t split_messages = 0;
  // The batches of every RESULTS received, one entry per message (each
  // batch is also returned by Recv on its own, in order).
  std::vector<std::vector<uint64_t>> results_rids;
  // Every REGISTER seen, in order.
  std::vector<protocol::Register> registers;
  // Every message not consumed by a WaitFor, in order (heartbeats excluded).
  std::vector<protocol::Message> others;
  // Heartbeats received from the worker (answered, never returned by Recv).
  size_t heartbeats = 0;

  template <class Body>
  void Send(const Body& body, std::string payload = {}) {
    const std::vector<std::string> frames = protocol::Encode(protocol::Message{body, payload});
    Status s;
    if (takes_one_frame) {
      const protocol::OneFrameMessage joined(frames);
      s = zmqutil::SendFrames(router_, joined.frames(), worker_);
    } else {
      s = zmqutil::SendFrames(router_, frames, worker_);
    }
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  void SendRaw(const std::vector<std::string>& frames) {
    EXPECT_TRUE(zmqutil::SendFrames(router_, frames, worker_).ok());
  }
  void SendRegistered() {
    const std::string id = registers.empty() ? worker_ : registers.back().worker_id;
    protocol::Registered r{id, heartbeat_ms_, liveness_, 1, {}};
    if (takes_results) r.features = {protocol::kFeatureResults};
    if (takes_one_frame) r.features.push_back(protocol::kFeatureOneFrame);
    Send(r);
    registered_ = true;
  }

  // Receives one message (handling heartbeats and registration per the
  // flags); nullopt on timeout.
  std::optional<protocol::Message> Recv(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      if (!unpacked_.empty()) {
        protocol::Message m = std::move(unpacked_.front());
        unpacked_.pop_front();
        return m;
      }
      auto now = std::chrono::steady_clock::now();
      if (now >= deadline) return std::nullopt;
      // Like the real head, heartbeat every interval on its own too: a worker
      // whose control thread was busy for longer than its liveness window
      // (encoding a huge result on a loaded machine) then finds the head's
      // heartbeats waiting, instead of a silence it caused itself.
      if (!silent && !worker_.empty() &&
          now - last_beat_ >= std::chrono::milliseconds(heartbeat_ms_)) {
        last_beat_ = now;
        zmqutil::SendFrames(router_, protocol::Encode(protocol::Message{protocol::Heartbeat{}, {}}),
                            worker_)
            .IgnoreError();  // the worker may be between connections
      }
      zmq_pollitem_t item = {router_.handle(), 0, ZMQ_POLLIN, 0};
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
      left = std::min<int64_t>(left, heartbeat_ms_);
      zmq_poll(&item, 1, static_cast<long>(std::max<int64_t>(1, left)));
      auto parts = zmqutil::RecvMultipart(router_);
      if (!parts.ok() || parts->empty()) continue;
      std::vector<std::string> frames;
      for (const auto& p : *parts) frames.emplace_back(static_cast<const char*>(p.data()), p.size());
      worker_ = frames[0];
      frames.erase(frames.begin());
      const bool one_frame = frames[0].rfind(protocol::kVersionOneFrame, 0) == 0;
      auto m = protocol::Decode(frames);
      EXPECT_TRUE(m.ok()) << m.status().ToString();
      if (!m.ok()) continue;
      if (one_frame) {
        ++one_frame_messages;
        EXPECT_TRUE(takes_one_frame && registered_)
            << "the one-frame layout to a head that did not announce it";
        EXPECT_FALSE(std::holds_alternative<protocol::Register>(m->body))
            << "a REGISTER in the one-frame layout, which an older head cannot read";
      } else {
        ++split_messages;
      }
      if (std::holds_alternative<protocol::Register>(m->body)) registered_ = false;
      if (std::holds_alternative<protocol::Heartbeat>(m->body)) {
        ++heartbeats;
        if (!silent) Send(protocol::Heartbeat{});
        continue;
      }
      if (auto* r = std::get_if<protocol::Register>(&m->body)) {
        registers.push_back(*r);
        if (!silent && auto_register) SendRegistered();
      }
      if (auto* coalesced = std::get_if<protocol::Results>(&m->body)) {
        EXPECT_TRUE(takes_results) << "RESULTS to a head that did not announce it";
        auto& rids = results_rids.emplace_back();
        for (auto& b : coalesced->batches) {
          rids.push_back(b.rid);
          unpacked_.push_back(protocol::Message{std::move(b), {}});
        }
        continue;
      }
      return std::move(m).value();
    }
  }

  // Waits for the first message of type T accepted by `pred`; everything else
  // goes to `others`. Fails the test on timeout.
  template <class T, class Pred>
  std::optional<T> WaitFor(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(5),
                           std::string* payload = nullptr) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      auto m = Recv(left);
      if (!m) break;
      if (auto* t = std::get_if<T>(&m->body); t != nullptr && pred(*t)) {
        if (payload != nullptr) *payload = m->payload;
        return *t;
      }
      others.push_back(std::move(*m));
    }
    ADD_FAILURE() << "timed out waiting for a message";
    return std::nullopt;
  }
  template <class T>
  std::optional<T> WaitFor(std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    return WaitFor<T>([](const T&) { return true; }, timeout);
  }

  // The REPLY with this rid.
  std::optional<protocol::Reply> WaitReply(uint64_t rid, std::string* payload = nullptr,
                                           std::chrono::milliseconds timeout =
                                               std::chrono::seconds(5)) {
    return WaitFor<protocol::Reply>([rid](const protocol::Reply& r) { return r.rid == rid; },
                                    timeout, payload);
  }
  // The RESULT batch with this rid.
  std::optional<protocol::ResultBatch> WaitBatch(uint64_t rid, std::chrono::milliseconds timeout =
                                                                   std::chrono::seconds(5)) {
    return WaitFor<protocol::ResultBatch>(
        [rid](const protocol::ResultBatch& b) { return b.rid == rid; }, timeout);
  }

  // Keeps the link alive for `d`, collecting what arrives into `others`.
  void Pump(std::chrono::milliseconds d) {
    auto deadline = std::chrono::steady_clock::now() + d;
    while (true) {
      auto now = std::chrono::steady_clock::now();
      if (now >= deadline) return;
      auto m = Recv(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now));
      if (m) others.push_back(std::move(*m));
    }
  }

 private:
  zmq::socket_t router_;
  std::string endpoint_;
  std::chrono::steady_clock::time_point last_beat_{};
  std::string worker_;
  std::deque<protocol::Message> unpacked_;  // batches of a RESULTS not yet returned
  // A REGISTERED answered the last REGISTER received.
  bool registered_ = false;
  int64_t heartbeat_ms_;
  int64_t liveness_;
};

}  // namespace ztune::worker
