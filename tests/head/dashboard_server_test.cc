// The dashboard's pieces that need no head: its endpoint flag, the queue its
// HTTP threads read the loop through, and its data over a fake loop.
#include "head/dashboard_server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "head/loop_reads.h"

namespace ztune::head {
namespace {

TEST(HttpEndpointTest, PortOrLoopbackHostAndPort) {
  auto port_only = ParseHttpEndpoint("8265");
  ASSERT_TRUE(port_only.ok()) << port_only.status().ToString();
  EXPECT_EQ(port_only->host, "127.0.0.1");
  EXPECT_EQ(port_only->port, 8265);
  for (const char* ok : {"127.0.0.1:0", "localhost:80", "[::1]:8265", "127.0.0.5:1"}) {
    EXPECT_TRUE(ParseHttpEndpoint(ok).ok()) << ok;
  }
  EXPECT_EQ(ParseHttpEndpoint("[::1]:8265")->host, "::1");
  for (const char* bad : {"", "x", "80x", "127.0.0.1:", "127.0.0.1:70000", "127.0.0.1:-1"}) {
    auto r = ParseHttpEndpoint(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("want PORT or HOST:PORT"), std::string::npos)
        << r.status().message();
  }
  for (const char* remote : {"0.0.0.0:8265", "10.1.2.3:80", "head.example.org:8265"}) {
    auto r = ParseHttpEndpoint(remote);
    ASSERT_FALSE(r.ok()) << remote;
    EXPECT_NE(r.status().message().find("loopback only"), std::string::npos);
    EXPECT_NE(r.status().message().find("--http-tls-cert"), std::string::npos);
    EXPECT_NE(r.status().message().find("ssh -L"), std::string::npos);
    // With logins (HTTPS) any address will do.
    auto with_logins = ParseHttpEndpoint(remote, /*with_logins=*/true);
    ASSERT_TRUE(with_logins.ok()) << remote << ": " << with_logins.status().ToString();
  }
  EXPECT_EQ(ParseHttpEndpoint("0.0.0.0:8265", true)->host, "0.0.0.0");
  EXPECT_EQ(ParseHttpEndpoint("[::]:8265", true)->host, "::");
  auto no_host = ParseHttpEndpoint(":8265", true);
  ASSERT_FALSE(no_host.ok());
  EXPECT_NE(no_host.status().message().find("no host"), std::string::npos);
}

TEST(LoopReadsTest, AskIsAnsweredByTheLoopThread) {
  LoopReads reads;
  std::atomic<bool> stop{false};
  std::thread loop([&] {
    while (!stop.load()) {
      reads.AnswerAll([](const Json& r) { return Json{{"echo", r["n"]}}; });
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  for (int n = 0; n < 20; ++n) {
    auto reply = reads.Ask(Json{{"n", n}}, std::chrono::seconds(10));
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    EXPECT_EQ((*reply)["echo"], n);
  }
  stop = true;
  loop.join();
}

TEST(LoopReadsTest, UnansweredAsksTimeOutAndCloseFailsEveryone) {
  LoopReads reads;
  auto late = reads.Ask(Json::object(), std::chrono::milliseconds(10));
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().code(), StatusCode::kUnavailable);
  // A waiting Ask returns as soon as the queue closes.
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    reads.Close();
  });
  auto closed = reads.Ask(Json::object(), std::chrono::seconds(60));
  closer.join();
  ASSERT_FALSE(closed.ok());
  EXPECT_NE(closed.status().message().find("stopping"), std::string::npos);
  EXPECT_FALSE(reads.Ask(Json::object(), std::chrono::seconds(60)).ok());
}

TEST(LoopReadsTest, AtMostSoManyWait) {
  LoopReads reads;
  std::vector<std::thread> askers;
  std::atomic<int> refused{0};
  for (size_t i = 0; i < LoopReads::kMaxWaiting + 5; ++i) {
    askers.emplace_back([&] {
      auto r = reads.Ask(Json::object(), std::chrono::seconds(60));
      if (!r.ok() && r.status().code() == StatusCode::kResourceExhausted) ++refused;
    });
  }
  // Everyone has asked when kMaxWaiting wait and the rest were refused.
  while (refused.load() < 5) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  reads.AnswerAll([](const Json&) { return Json{{"ok", true}}; });
  for (auto& t : askers) t.join();
  EXPECT_EQ(refused.load(), 5);
}

// The data of /api/dashboard over a fake loop: experiments, the newest
// chosen by default, trials without exports, series read once and then only
// what is new, read again when PBT rewrote them.
TEST(DashboardServerTest, DataReadsOnlyNewResults) {
  LoopReads reads;
  int64_t iteration = 2;
  Json exploits = Json::array();
  std::vector<Json> asked;
  std::atomic<bool> stop{false};
  std::thread loop([&] {
    while (!stop.load()) {
      reads.AnswerAll([&](const Json& r) -> Json {
        asked.push_back(r);
        const std::string op = r["op"];
        if (op == "experiments") {
          return Json{
              {"ok", true},
              {"experiments", Json::array({{{"experiment_id", "e0001"}, {"metric", "loss"}},
                                           {{"experiment_id", "e0002"}, {"metric", "a/b"}}})}};
        }
        if (op == "trials") {
          return Json{{"ok", true},
                      {"trials", Json::array({{{"trial_id", "e0002_00000"},
                                               {"iteration", iteration},
                                               {"exploits", exploits},
                                               {"exports", {{"w", 1}}}}})}};
        }
        if (op == "results") {
          Json page = Json::array();
          for (int64_t i = r["offset"].get<int64_t>() + 1; i <= iteration; ++i) {
            page.push_back(Json{{"training_iteration", i},
                                {"timestamp", 100 + i},
                                {"a", {{"b", exploits.empty() ? i * 10 : -i}}}});
          }
          return Json{{"ok", true}, {"results", page}};
        }
        return Json{{"ok", false}, {"error", {{"code", "NotFound"}, {"message", "no"}}}};
      });
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  DashboardServer server(reads);
  auto first = server.DashboardData("");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ((*first)["experiment_id"], "e0002");  // the newest
  EXPECT_FALSE((*first)["trials"]["e0002"][0].contains("exports"));
  EXPECT_EQ((*first)["series"]["e0002_00000"], (Json::array({{1, 10, 101}, {2, 20, 102}})));

  iteration = 3;
  asked.clear();
  auto second = server.DashboardData("e0002");
  ASSERT_TRUE(second.ok());
  EXPECT_EQ((*second)["series"]["e0002_00000"].size(), 3u);
  ASSERT_EQ(asked.size(), 3u);  // experiments, trials, one results page
  EXPECT_EQ(asked[2]["offset"], 2) << "only the new result is read";

  exploits = Json::array({{{"iteration", 3}, {"donor_iteration", 1}}});
  auto rewritten = server.DashboardData("e0002");
  ASSERT_TRUE(rewritten.ok());
  EXPECT_EQ((*rewritten)["series"]["e0002_00000"],
            (Json::array({{1, -1, 101}, {2, -2, 102}, {3, -3, 103}})));

  auto unknown = server.DashboardData("e0042");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  stop = true;
  loop.join();
}

}  // namespace
}  // namespace ztune::head
