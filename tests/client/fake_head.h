// FakeHead: a stand-in for ztune-head's client service in tests. A ROUTER bound
// on tcp://127.0.0.1:* serves requests on its own thread; a handler turns each
// request into zero or more raw replies (zero = never answer, several = e.g. a
// stale reply first). Requests are recorded for the test thread.
//
// The ROUTER lives on the server thread only; the test thread touches nothing
// but the mutex-guarded record.
#pragma once

#include <atomic>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "client/client.h"
#include "common/json.h"
#include "common/zmq/socket_util.h"

namespace ztune::client::testing {

using Frames = std::vector<std::string>;

// The two reply frames for a JSON reply.
inline Frames ReplyFrames(const Json& reply) { return {"ZTUNE1", reply.dump()}; }

// {rid, ok: true, ...fields}.
inline Json OkReply(const Json& request, Json fields) {
  fields["rid"] = request.at("rid");
  fields["ok"] = true;
  return fields;
}

// Options of a HeadClient that talks to `endpoint`.
inline HeadClientOptions ClientOptions(const std::string& endpoint, int timeout_ms = 2000) {
  HeadClientOptions o;
  o.endpoint = endpoint;
  o.timeout_ms = timeout_ms;
  return o;
}

inline Json ErrorReply(const Json& request, const std::string& code, const std::string& msg) {
  return Json{
      {"rid", request.at("rid")}, {"ok", false}, {"error", {{"code", code}, {"message", msg}}}};
}

class FakeHead {
 public:
  using Handler = std::function<std::vector<Frames>(const Json& request)>;

  // Binds `bind` (a free loopback port by default).
  explicit FakeHead(Handler handler, std::string bind = "tcp://127.0.0.1:*")
      : handler_(std::move(handler)) {
    std::promise<std::string> bound;
    auto endpoint = bound.get_future();
    thread_ = std::thread([this, &bound, bind] { Serve(bound, bind); });
    endpoint_ = endpoint.get();
  }

  // Answers each op with {rid, ok: true, ...canned[op]}; a canned value with
  // "ok": false is sent as is (plus rid). Unknown ops get NotFound.
  static Handler Canned(std::map<std::string, Json> canned) {
    return [canned = std::move(canned)](const Json& request) -> std::vector<Frames> {
      const std::string op = request.value("op", "");
      auto it = canned.find(op);
      if (it == canned.end()) return {ReplyFrames(ErrorReply(request, "NotFound", "no op " + op))};
      Json reply = it->second;
      if (reply.contains("ok") && reply["ok"] == false) {
        reply["rid"] = request.at("rid");
        return {ReplyFrames(reply)};
      }
      return {ReplyFrames(OkReply(request, reply))};
    };
  }

  ~FakeHead() {
    stop_ = true;
    thread_.join();
  }

  const std::string& endpoint() const { return endpoint_; }

  std::vector<Json> requests() const {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

  std::vector<std::string> versions() const {
    std::lock_guard<std::mutex> lock(mu_);
    return versions_;
  }

 private:
  void Serve(std::promise<std::string>& bound, const std::string& bind) {
    zmq::context_t context;
    zmq::socket_t router(context, zmq::socket_type::router);
    (void)zmqutil::SetIntOption(router, ZMQ_LINGER, 0);
    (void)zmqutil::Bind(router, bind);
    bound.set_value(zmqutil::LastEndpoint(router).value());
    while (!stop_) {
      zmq_pollitem_t item{router.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq_poll(&item, 1, 10) <= 0) continue;
      auto msg = zmqutil::RecvMultipart(router);
      if (!msg.ok() || msg->size() != 3) continue;
      const std::string identity = (*msg)[0].to_string();
      Json request = Json::parse((*msg)[2].to_string(), nullptr, /*allow_exceptions=*/false);
      {
        std::lock_guard<std::mutex> lock(mu_);
        requests_.push_back(request);
        versions_.push_back((*msg)[1].to_string());
      }
      for (const Frames& reply : handler_(request)) {
        (void)zmqutil::SendFrames(router, reply, identity);
      }
    }
  }

  Handler handler_;
  std::thread thread_;
  std::string endpoint_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::vector<Json> requests_;         // guarded by mu_
  std::vector<std::string> versions_;  // first frame of each request; guarded by mu_
};

}  // namespace ztune::client::testing
