// HeadClient against a FakeHead: round trips, rid matching, Lazy Pirate
// timeouts and retries, error mapping.
#include "client/client.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "tests/client/fake_head.h"

namespace ztune::client {
namespace {

using testing::ClientOptions;
using testing::ErrorReply;
using testing::FakeHead;
using testing::Frames;
using testing::OkReply;
using testing::ReplyFrames;

TEST(HeadClientTest, ReturnsReplyWhenHeadAnswers) {
  FakeHead head(FakeHead::Canned({{"trial", Json{{"trial", {{"trial_id", "e0001_00000"}}}}}}));
  HeadClient client(ClientOptions(head.endpoint()));
  Result<Json> r = client.Call("trial", Json{{"trial_id", "e0001_00000"}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(client.head_answered());
  EXPECT_EQ((*r)["trial"]["trial_id"], "e0001_00000");
  EXPECT_EQ((*r)["ok"], true);

  auto requests = head.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0]["op"], "trial");
  EXPECT_EQ(requests[0]["trial_id"], "e0001_00000");
  EXPECT_TRUE(requests[0]["rid"].is_number_unsigned());
  EXPECT_EQ(head.versions()[0], "ZTUNE1");
}

TEST(HeadClientTest, UsesFreshRidPerCall) {
  FakeHead head(FakeHead::Canned({{"workers", Json{{"workers", Json::array()}}}}));
  HeadClient client(ClientOptions(head.endpoint()));
  ASSERT_TRUE(client.Call("workers").ok());
  ASSERT_TRUE(client.Call("workers").ok());
  auto requests = head.requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_NE(requests[0]["rid"], requests[1]["rid"]);
}

// stale reply (wrong rid) -> ignored -> the matching reply is returned
TEST(HeadClientTest, IgnoresReplyWithStaleRid) {
  FakeHead head([](const Json& req) -> std::vector<Frames> {
    Json stale = OkReply(req, Json{{"which", "stale"}});
    stale["rid"] = req["rid"].get<uint64_t>() + 1000;
    return {ReplyFrames(stale), Frames{"ZTUNE1", "not json"}, Frames{"ZTUNE1"},
            ReplyFrames(OkReply(req, Json{{"which", "fresh"}}))};
  });
  HeadClient client(ClientOptions(head.endpoint()));
  Result<Json> r = client.Call("experiments");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)["which"], "fresh");
}

TEST(HeadClientTest, TimesOutWithEndpointInMessageWhenHeadIsSilent) {
  FakeHead head([](const Json&) { return std::vector<Frames>{}; });
  HeadClient client(ClientOptions(head.endpoint(), 150));
  Result<Json> r = client.Call("experiments");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(r.status().message(), "no reply from head at " + head.endpoint() + " within 150 ms");
  EXPECT_FALSE(client.head_answered());
}

TEST(HeadClientTest, TimesOutWhenNothingListens) {
  // Bind and release a port so that nothing listens on it.
  std::string endpoint;
  {
    FakeHead gone([](const Json&) { return std::vector<Frames>{}; });
    endpoint = gone.endpoint();
  }
  HeadClient client(ClientOptions(endpoint, 100));
  Result<Json> r = client.Call("status");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find(endpoint), std::string::npos);
}

// Issue 14: a client with nothing to talk to says so after a short connect
// check (kConnectCheckMs), not at the end of its timeout.
TEST(HeadClientTest, SaysNoHeadIsRunningAfterTheConnectCheck) {
  std::string endpoint;
  {
    FakeHead gone([](const Json&) { return std::vector<Frames>{}; });
    endpoint = gone.endpoint();
  }
  constexpr int kTimeoutMs = 60'000;  // far beyond the check: failing here means it waited
  HeadClient client(ClientOptions(endpoint, kTimeoutMs));
  const auto start = std::chrono::steady_clock::now();
  Result<Json> r = client.Call("status");
  const auto waited = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(r.status().message(), "cannot connect to the head at " + endpoint +
                                      ": connection refused for " +
                                      std::to_string(kConnectCheckMs) +
                                      " ms; is ztune-head running at " + endpoint + "?");
  EXPECT_LT(waited, std::chrono::milliseconds(kTimeoutMs / 2));
}

// A head that binds while the client's check is under way answers it.
TEST(HeadClientTest, AHeadThatStartsWithinTheConnectCheckAnswers) {
  std::string endpoint;
  {
    FakeHead gone([](const Json&) { return std::vector<Frames>{}; });
    endpoint = gone.endpoint();
  }
  HeadClient client(ClientOptions(endpoint, 10'000));
  std::unique_ptr<FakeHead> late;
  std::thread starter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(kConnectCheckMs / 5));
    late = std::make_unique<FakeHead>(FakeHead::Canned({{"status", Json::object()}}), endpoint);
  });
  Result<Json> r = client.Call("status");
  starter.join();
  EXPECT_TRUE(r.ok()) << r.status().ToString();
}

// --retries rides out a head restart: a read refused by the connect check
// is sent again, and a head back within the retries answers it. A mutation
// is not resent; the last refusal names the attempts.
TEST(HeadClientTest, RetriesRideOutAHeadThatIsBackAfterTheConnectCheck) {
  std::string endpoint;
  {
    FakeHead gone([](const Json&) { return std::vector<Frames>{}; });
    endpoint = gone.endpoint();
  }
  // The call after the head went away first waits this out on its old,
  // connected socket; the retries on new sockets are refused at once.
  HeadClientOptions o = ClientOptions(endpoint, 3'000);
  o.read_retries = 3;
  HeadClient client(o);
  std::unique_ptr<FakeHead> back;
  std::thread starter([&] {
    // Later than one connect check: the first attempt has been refused.
    std::this_thread::sleep_for(std::chrono::milliseconds(kConnectCheckMs * 3 / 2));
    back = std::make_unique<FakeHead>(FakeHead::Canned({{"status", Json::object()}}), endpoint);
  });
  Result<Json> r = client.Call("status");
  starter.join();
  EXPECT_TRUE(r.ok()) << r.status().ToString();

  back.reset();
  Result<Json> refused = client.Call("status");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(),
            "cannot connect to the head at " + endpoint + ": connection refused for " +
                std::to_string(kConnectCheckMs) + " ms (4 attempts); is ztune-head running at " +
                endpoint + "?");
  Result<Json> mutation = client.Call("stop", Json{{"id", "e0001"}});
  ASSERT_FALSE(mutation.ok());
  EXPECT_EQ(mutation.status().message().find("attempts"), std::string::npos)
      << mutation.status().message();
}

// first request unanswered -> socket dropped -> next call answered, and a
// late reply carrying the old rid cannot be taken for the new one
TEST(HeadClientTest, RecoversOnNextCallAfterTimeout) {
  std::atomic<int> seen{0};
  FakeHead head([&seen](const Json& req) -> std::vector<Frames> {
    if (seen++ == 0) return {};
    Json late = OkReply(req, Json{{"which", "late"}});
    late["rid"] = req["rid"].get<uint64_t>() - 1;
    return {ReplyFrames(late), ReplyFrames(OkReply(req, Json{{"which", "fresh"}}))};
  });
  HeadClient client(ClientOptions(head.endpoint(), 500));
  EXPECT_FALSE(client.Call("stop", Json{{"id", "e0001"}}).ok());
  Result<Json> r = client.Call("stop", Json{{"id", "e0001"}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)["which"], "fresh");
}

TEST(HeadClientTest, RetriesReadOnlyOpsButNotMutatingOnes) {
  std::atomic<int> seen{0};
  FakeHead head([&seen](const Json& req) -> std::vector<Frames> {
    if (seen++ % 2 == 0) return {};  // drop every other request
    return {ReplyFrames(OkReply(req, Json::object()))};
  });
  HeadClientOptions o = ClientOptions(head.endpoint(), 500);
  o.read_retries = 1;
  HeadClient client(o);
  Result<Json> r = client.Call("status");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(head.requests().size(), 2u);
  EXPECT_EQ(head.requests()[1]["op"], "status");

  // submit is not idempotent: one attempt only.
  Result<Json> s = client.Call("submit", Json{{"spec", Json::object()}});
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(head.requests().size(), 3u);
}

TEST(HeadClientTest, MapsErrorCodesToStatus) {
  FakeHead head([](const Json& req) -> std::vector<Frames> {
    return {ReplyFrames(ErrorReply(req, req["args_code"], "detail"))};
  });
  HeadClient client(ClientOptions(head.endpoint()));
  const std::pair<const char*, StatusCode> cases[] = {
      {"InvalidArgument", StatusCode::kInvalidArgument},
      {"NotFound", StatusCode::kNotFound},
      {"FailedPrecondition", StatusCode::kFailedPrecondition},
      {"AlreadyExists", StatusCode::kAlreadyExists},
      {"Unavailable", StatusCode::kUnavailable},
      {"Internal", StatusCode::kInternal},
  };
  for (const auto& [name, code] : cases) {
    Result<Json> r = client.Call("trial", Json{{"args_code", name}});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), code) << name;
    EXPECT_EQ(r.status().message(), "detail");
    EXPECT_TRUE(client.head_answered());
  }
  Result<Json> r = client.Call("trial", Json{{"args_code", "Weird"}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
  EXPECT_EQ(r.status().message(), "Weird: detail");
}

TEST(HeadClientTest, ReportsMalformedAndForeignProtocolReplies) {
  FakeHead head([](const Json& req) -> std::vector<Frames> {
    Json reply{{"rid", req["rid"]}};
    if (req["op"] == "trial") return {Frames{"ZTUNE9", reply.dump()}};
    return {ReplyFrames(reply)};  // no "ok"
  });
  HeadClient client(ClientOptions(head.endpoint()));
  Result<Json> foreign = client.Call("trial");
  EXPECT_EQ(foreign.status().code(), StatusCode::kFailedPrecondition);
  Result<Json> malformed = client.Call("workers");
  EXPECT_EQ(malformed.status().code(), StatusCode::kInternal);
}

// the head rejects a request before reading its rid -> the rid-less error is
// this call's answer; a rid-less ok reply is never taken
TEST(HeadClientTest, TakesRidlessErrorAsTheAnswer) {
  FakeHead head([](const Json& req) -> std::vector<Frames> {
    Json bogus_ok{{"ok", true}, {"which", "ridless ok"}};
    Json error{
        {"ok", false},
        {"error", {{"code", "InvalidArgument"}, {"message", "request is not a JSON object"}}}};
    if (req["op"] == "status") return {ReplyFrames(bogus_ok), ReplyFrames(error)};
    return {ReplyFrames(bogus_ok), ReplyFrames(OkReply(req, Json{{"which", "fresh"}}))};
  });
  HeadClient client(ClientOptions(head.endpoint()));
  Result<Json> r = client.Call("status");
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "request is not a JSON object");
  EXPECT_TRUE(client.head_answered());
  Result<Json> ok = client.Call("workers");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ((*ok)["which"], "fresh");
}

// Over its connection's rate limit the head does nothing and names a wait:
// the client waits it out and sends again, mutations included (nothing was
// applied); a ResourceExhausted without a wait (a full disk) is final, and so
// is a throttle that outlasts the call's timeout.
TEST(HeadClientTest, WaitsOutARateLimitRefusalAndSendsAgain) {
  std::atomic<int> seen{0};
  FakeHead head([&seen](const Json& req) -> std::vector<Frames> {
    const int n = seen++;
    Json throttled{{"ok", false},
                   {"retry_after_ms", 50},
                   {"error", {{"code", "ResourceExhausted"}, {"message", "slow down"}}}};
    if (req["op"] == "forever") return {ReplyFrames(throttled)};
    if (req["op"] == "disk") return {ReplyFrames(ErrorReply(req, "ResourceExhausted", "disk"))};
    if (n % 3 != 2) return {ReplyFrames(throttled)};
    return {ReplyFrames(OkReply(req, Json{{"which", "fresh"}}))};
  });
  HeadClient client(ClientOptions(head.endpoint(), 2000));
  const auto start = std::chrono::steady_clock::now();
  Result<Json> r = client.Call("submit", Json{{"spec", Json::object()}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)["which"], "fresh");
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(100));
  ASSERT_EQ(head.requests().size(), 3u);
  EXPECT_NE(head.requests()[0]["rid"], head.requests()[2]["rid"]);
  EXPECT_EQ(head.requests()[2]["spec"], Json::object());

  Result<Json> disk = client.Call("disk");
  EXPECT_EQ(disk.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(disk.status().message(), "disk");
  EXPECT_EQ(head.requests().size(), 4u);

  HeadClient impatient(ClientOptions(head.endpoint(), 300));
  Result<Json> forever = impatient.Call("forever");
  EXPECT_EQ(forever.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(forever.status().message(), "slow down");
  EXPECT_LE(head.requests().size(), 4u + 300 / 50);
}

TEST(HeadClientTest, RejectsOversizedRequestWithoutSending) {
  FakeHead head(FakeHead::Canned({}));
  HeadClient client(ClientOptions(head.endpoint()));
  Json big{{"spec", {{"blob", std::string(kMaxRequestBytes, 'x')}}}};
  Result<Json> r = client.Call("submit", std::move(big));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(client.head_answered());
  EXPECT_TRUE(head.requests().empty());
}

TEST(HeadClientTest, RejectsBadArgsAndEndpoint) {
  HeadClient bad_endpoint(ClientOptions("nonsense://x"));
  EXPECT_EQ(bad_endpoint.Call("status").status().code(), StatusCode::kInvalidArgument);
  HeadClient client(ClientOptions("tcp://127.0.0.1:1"));
  EXPECT_EQ(client.Call("status", Json::array()).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client.Call("status", Json{{"rid", 1}}).status().code(), StatusCode::kInvalidArgument);
}

TEST(HeadClientTest, SharesAContextAcrossClients) {
  FakeHead head(FakeHead::Canned({{"workers", Json{{"workers", Json::array()}}}}));
  zmq::context_t context;
  HeadClient a(context, ClientOptions(head.endpoint()));
  HeadClient b(context, ClientOptions(head.endpoint()));
  EXPECT_TRUE(a.Call("workers").ok());
  EXPECT_TRUE(b.Call("workers").ok());
}

}  // namespace
}  // namespace ztune::client
