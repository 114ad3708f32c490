// HeadServer with real sockets on loopback: the head keeps heartbeating its
// workers while a slow commit runs (the store is slowed on purpose), so a
// worker with a liveness window shorter than the commit never sees it silent.
#include "head/head_server.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <optional>
#include <thread>

#include <gtest/gtest.h>

#include "common/protocol/codec.h"
#include "common/zmq/socket_util.h"
#include "storage/fault_injecting_store.h"
#include "storage/in_memory_store.h"

namespace ztune::head {
namespace {

using Clock = std::chrono::steady_clock;

// An in-memory store whose commits take `delay_ms` (set by the test thread,
// read by the head's store thread).
class SlowStore final : public storage::Store {
 public:
  std::atomic<int64_t> delay_ms{0};
  Status Commit(const storage::WriteBatch& batch) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms.load()));
    return base_.Commit(batch);
  }
  Result<std::optional<std::string>> Get(storage::Family f, std::string_view key) override {
    return base_.Get(f, key);
  }
  Status Scan(storage::Family f, std::string_view prefix,
              const std::function<bool(std::string_view, std::string_view)>& fn) override {
    return base_.Scan(f, prefix, fn);
  }

 private:
  storage::InMemoryStore base_;
};

constexpr int64_t kHeartbeatMs = 100;
constexpr int64_t kLiveness = 6;
constexpr int64_t kCommitMs = 20 * kHeartbeatMs;

TEST(HeadServerTest, HeartbeatsKeepGoingWhileACommitIsSlow) {
  zmq::context_t context;
  SlowStore store;
  HeadServerOptions options;
  options.worker_endpoint = "tcp://127.0.0.1:*";
  options.client_endpoint = "tcp://127.0.0.1:*";
  options.runner.heartbeat_ms = kHeartbeatMs;
  options.runner.liveness = kLiveness;
  HeadServer server(context, store, options);
  ASSERT_TRUE(server.Start().ok());
  std::atomic<bool> stop{false};
  std::thread loop([&] { server.Run(stop).IgnoreError(); });

  zmq::socket_t worker(context, zmq::socket_type::dealer);
  ASSERT_TRUE(zmqutil::SetBytesOption(worker, ZMQ_ROUTING_ID, "w-1").ok());
  ASSERT_TRUE(zmqutil::SetIntOption(worker, ZMQ_LINGER, 0).ok());
  ASSERT_TRUE(zmqutil::Connect(worker, server.worker_endpoint()).ok());
  protocol::Register reg;
  reg.worker_id = "w-1";
  reg.resources = {{"CPU", 1}};
  reg.trainables = {"noop"};
  ASSERT_TRUE(zmqutil::SendFrames(worker, protocol::Encode({reg, {}})).ok());

  // Receives one message within `timeout_ms`; std::nullopt otherwise.
  auto receive = [&](int64_t timeout_ms) -> std::optional<protocol::Message> {
    zmq::pollitem_t item{worker.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(timeout_ms));
    auto parts = zmqutil::RecvMultipart(worker);
    if (!parts.ok() || parts->empty()) return std::nullopt;
    std::vector<std::string_view> views;
    for (const auto& p : *parts) views.emplace_back(static_cast<const char*>(p.data()), p.size());
    auto m = protocol::Decode(std::span<const std::string_view>(views));
    if (!m.ok()) return std::nullopt;
    return std::move(m).value();
  };
  bool registered = false;
  for (auto deadline = Clock::now() + std::chrono::seconds(10); !registered && Clock::now() < deadline;) {
    auto m = receive(kHeartbeatMs);
    registered = m && std::holds_alternative<protocol::Registered>(m->body);
  }
  ASSERT_TRUE(registered);

  // Every commit from now takes 20 heartbeat intervals; a submission commits.
  store.delay_ms = kCommitMs;
  zmq::socket_t client(context, zmq::socket_type::dealer);
  ASSERT_TRUE(zmqutil::SetIntOption(client, ZMQ_LINGER, 0).ok());
  ASSERT_TRUE(zmqutil::Connect(client, server.client_endpoint()).ok());
  const auto submitted = Clock::now();
  ASSERT_TRUE(zmqutil::SendFrames(client, {protocol::kVersion,
                                           R"({"op": "submit", "rid": 1, "spec": {"trainable": "noop",
                                              "stop": {"training_iteration": 1}}})"})
                  .ok());

  // As a worker: heartbeat, and note when anything arrives from the head,
  // until the client's answer (after the slow commit) and one more interval.
  std::vector<Clock::time_point> heard;
  auto last_sent = Clock::now();
  bool answered = false;
  Clock::time_point answered_at;
  const auto deadline = Clock::now() + std::chrono::milliseconds(10 * kCommitMs);
  while (Clock::now() < deadline && (!answered || Clock::now() < answered_at + std::chrono::milliseconds(kHeartbeatMs))) {
    if (Clock::now() - last_sent >= std::chrono::milliseconds(kHeartbeatMs)) {
      ASSERT_TRUE(zmqutil::SendFrames(worker, protocol::Encode({protocol::Heartbeat{}, {}})).ok());
      last_sent = Clock::now();
    }
    if (receive(10)) heard.push_back(Clock::now());
    auto reply = zmqutil::RecvMultipart(client);
    if (!answered && reply.ok() && !reply->empty()) {
      answered = true;
      answered_at = Clock::now();
      const Json r = Json::parse((*reply).back().to_string_view(), nullptr, false);
      EXPECT_EQ(r.value("ok", false), true) << r.dump();
    }
  }
  stop = true;
  loop.join();
  ASSERT_TRUE(answered) << "the submission was never answered";
  const auto commit_took =
      std::chrono::duration_cast<std::chrono::milliseconds>(answered_at - submitted).count();
  EXPECT_GE(commit_took, kCommitMs) << "the commit was not slow: the test proves nothing";

  // The longest silence the worker saw, from the submission to the answer.
  int64_t longest = 0;
  auto previous = submitted;
  for (const auto& t : heard) {
    if (t > answered_at) break;
    longest = std::max<int64_t>(
        longest, std::chrono::duration_cast<std::chrono::milliseconds>(t - previous).count());
    previous = t;
  }
  EXPECT_LT(longest, kHeartbeatMs * kLiveness)
      << "the worker would have presumed the head dead during a " << commit_took << " ms commit";
  EXPECT_GT(server.stats().slow_store_operations, 0u);
}

// Issue 8's reproductions on the client endpoint: each gets an error reply,
// and the head answers the next valid request.
TEST(HeadServerTest, HostileClientRequestsGetErrorsAndTheHeadLivesOn) {
  zmq::context_t context;
  storage::InMemoryStore store;
  HeadServerOptions options;
  options.worker_endpoint = "tcp://127.0.0.1:*";
  options.client_endpoint = "tcp://127.0.0.1:*";
  options.runner.heartbeat_ms = kHeartbeatMs;
  HeadServer server(context, store, options);
  ASSERT_TRUE(server.Start().ok());
  std::atomic<bool> stop{false};
  std::thread loop([&] { server.Run(stop).IgnoreError(); });

  zmq::socket_t client(context, zmq::socket_type::dealer);
  ASSERT_TRUE(zmqutil::SetIntOption(client, ZMQ_LINGER, 0).ok());
  ASSERT_TRUE(zmqutil::Connect(client, server.client_endpoint()).ok());
  // Sends one request and returns the parsed reply (null on timeout).
  auto ask = [&](const std::string& request) -> Json {
    if (!zmqutil::SendFrames(client, {protocol::kVersion, request}).ok()) return Json();
    zmq::pollitem_t item{client.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::seconds(10));
    auto reply = zmqutil::RecvMultipart(client);
    if (!reply.ok() || reply->empty()) return Json();
    return Json::parse(reply->back().to_string_view(), nullptr, false);
  };
  const std::string deep(100000, '[');
  const std::string deep_end(100000, ']');
  const std::vector<std::string> hostile = {
      R"({"op": 5, "rid": 1})",
      R"({"op": null})",
      R"({"op": {"x": 1}})",
      R"({"op": "resume", "id": 5})",
      R"({"op": "resume", "id": "e0001", "unfinished": "yes"})",
      R"({"op": "status", "rid": )" + deep + "1" + deep_end + "}",
      R"({"op": "submit", "spec": {"trainable": "noop", "param_space": {"c": )" + deep + "1" +
          deep_end + "}}}",
      "{\"op\": \"status\"",
      "[1, 2, 3]",
  };
  for (const auto& request : hostile) {
    Json reply = ask(request);
    ASSERT_TRUE(reply.is_object()) << "no reply to " << request.substr(0, 80);
    EXPECT_EQ(reply.value("ok", true), false) << request.substr(0, 80) << " -> " << reply.dump();
    ASSERT_TRUE(reply["error"].is_object()) << reply.dump();
    const std::string code = reply["error"].value("code", "");
    EXPECT_TRUE(code == "InvalidArgument" || code == "NotFound") << request.substr(0, 80) << " -> " << code;
  }
  // A request far above the limit (200 MiB) still gets an answer that says so.
  Json huge = ask(R"({"op": "experiments", "pad": ")" + std::string(200u << 20, 'x') + "\"}");
  ASSERT_TRUE(huge.is_object()) << "no reply to a 200 MiB request";
  EXPECT_NE(huge["error"].value("message", "").find("exceeds the limit"), std::string::npos)
      << huge.dump().substr(0, 200);
  Json fine = ask(R"({"op": "experiments", "rid": 2})");
  EXPECT_EQ(fine.value("ok", false), true) << fine.dump();
  EXPECT_EQ(fine["rid"], 2);
  stop = true;
  loop.join();
}

}  // namespace
}  // namespace ztune::head

namespace ztune::head {
namespace {

// A full disk (the store refuses commits with ResourceExhausted): the head
// neither dies nor answers what it could not store. It refuses new work with a
// clear error, answers reads, and goes on by itself once space is back: the
// held submission is then committed and answered.
TEST(HeadServerTest, AFullDiskRefusesNewWorkServesReadsAndResumesByItself) {
  zmq::context_t context;
  storage::InMemoryStore base;
  storage::FaultInjectingStore store(base);
  HeadServerOptions options;
  options.worker_endpoint = "tcp://127.0.0.1:*";
  options.client_endpoint = "tcp://127.0.0.1:*";
  options.runner.heartbeat_ms = kHeartbeatMs;
  HeadServer server(context, store, options);
  ASSERT_TRUE(server.Start().ok());
  std::atomic<bool> stop{false};
  Status run_status;
  std::thread loop([&] { run_status = server.Run(stop); });
  struct Joiner {
    std::atomic<bool>& stop;
    std::thread& loop;
    ~Joiner() {
      stop = true;
      if (loop.joinable()) loop.join();
    }
  } joiner{stop, loop};

  zmq::socket_t client(context, zmq::socket_type::dealer);
  ASSERT_TRUE(zmqutil::SetIntOption(client, ZMQ_LINGER, 0).ok());
  ASSERT_TRUE(zmqutil::Connect(client, server.client_endpoint()).ok());
  auto send = [&](const Json& request) {
    ASSERT_TRUE(zmqutil::SendFrames(client, {protocol::kVersion, request.dump()}).ok());
  };
  // The reply with `rid` (others are kept in `early`); null after 10 s.
  std::map<int, Json> early;
  auto reply_to = [&](int rid) -> Json {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!early.count(rid) && std::chrono::steady_clock::now() < deadline) {
      zmq::pollitem_t item{client.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(50));
      auto reply = zmqutil::RecvMultipart(client);
      if (!reply.ok() || reply->empty()) continue;
      Json j = Json::parse(reply->back().to_string_view(), nullptr, false);
      if (j.is_object() && j["rid"].is_number_integer()) early[j["rid"].get<int>()] = j;
    }
    return early.count(rid) ? early[rid] : Json();
  };
  const Json spec{{"trainable", "noop"}};

  store.FailAllCommits(true, StatusCode::kResourceExhausted);
  send(Json{{"op", "submit"}, {"rid", 1}, {"spec", spec}});  // applied, commit refused
  for (int i = 0; i < 1000 && store.commits_failed() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GE(store.commits_failed(), 1u);
  send(Json{{"op", "submit"}, {"rid", 2}, {"spec", spec}});
  Json refused = reply_to(2);
  ASSERT_TRUE(refused.is_object()) << "no answer while the disk is full";
  EXPECT_EQ(refused["error"].value("code", ""), "ResourceExhausted") << refused.dump();
  EXPECT_NE(refused["error"].value("message", "").find("disk is full"), std::string::npos);
  send(Json{{"op", "experiments"}, {"rid", 3}});
  Json read = reply_to(3);
  EXPECT_EQ(read.value("ok", false), true) << read.dump();
  EXPECT_EQ(early.count(1), 0u) << "a submission was answered before it was durable";

  store.FailAllCommits(false);
  Json accepted = reply_to(1);
  ASSERT_TRUE(accepted.is_object()) << "the held submission was never answered";
  EXPECT_EQ(accepted.value("ok", false), true) << accepted.dump();
  auto got = base.Get(storage::Family::kExperiments, accepted["experiment_id"].get<std::string>());
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(got->has_value()) << "answered but not stored";
  send(Json{{"op", "submit"}, {"rid", 4}, {"spec", spec}});
  EXPECT_EQ(reply_to(4).value("ok", false), true) << "work is taken again";
  stop = true;
  loop.join();
  EXPECT_TRUE(run_status.ok()) << run_status.ToString();
}

}  // namespace
}  // namespace ztune::head
