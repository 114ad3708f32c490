// What a hand-made peer (a raw DEALER speaking the worker protocol) receives
// from the head, decoded. Test-thread only.
#pragma once

#include <chrono>
#include <functional>
#include <vector>

#include <zmq.hpp>

#include "common/protocol/codec.h"
#include "common/zmq/socket_util.h"

namespace ztune::testing {

// Receives on `s` until `stop` holds for a message or `wait` passes; returns
// what arrived, in order, each decoded (an undecodable one is kept as a
// Disconnect with reason "undecodable").
inline std::vector<protocol::Message> ReceiveMessages(
    zmq::socket_t& s, std::chrono::milliseconds wait,
    const std::function<bool(const protocol::Message&)>& stop = nullptr) {
  std::vector<protocol::Message> got;
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (std::chrono::steady_clock::now() < deadline) {
    zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(20));
    auto parts = zmqutil::RecvMultipart(s);
    if (!parts.ok() || parts->empty()) continue;
    std::vector<std::string> frames;
    for (const auto& p : *parts) frames.push_back(p.to_string());
    auto m = protocol::Decode(frames);
    got.push_back(m.ok() ? *m : protocol::Message{protocol::Disconnect{"undecodable"}, {}});
    if (stop && stop(got.back())) break;
  }
  return got;
}

// Whether a message for which `pred` holds arrives on `s` within `wait`
// (what arrives before it is dropped).
inline bool ReceiveUntil(zmq::socket_t& s, std::chrono::milliseconds wait,
                         const std::function<bool(const protocol::Message&)>& pred) {
  const std::vector<protocol::Message> got = ReceiveMessages(s, wait, pred);
  return !got.empty() && pred(got.back());
}

}  // namespace ztune::testing
