// The dashboard's pieces that need no head: its endpoint flag, the queue its
// HTTP threads read the loop through, and its data over a fake loop.
#include "head/dashboard_server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "common/base64.h"
#include "head/loop_reads.h"
#include "tests/fakes/fake_loop.h"

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
  testing::FakeLoop loop(reads, [](const Json& r) { return Json{{"echo", r["n"]}}; });
  for (int n = 0; n < 20; ++n) {
    auto reply = reads.Ask(Json{{"n", n}}, std::chrono::seconds(10));
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    EXPECT_EQ((*reply)["echo"], n);
  }
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
  testing::FakeLoop loop(
      reads, [&](const Json& r) -> Json {
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
}

TEST(LoopReadsTest, ADeferredReadIsAnsweredLaterOnceAndCloseAnswersTheRest) {
  LoopReads reads;
  std::vector<LoopReads::Respond> held;
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::thread loop([&] {
    while (!stop.load()) {
      reads.AnswerAllDeferred([&](const Json& r, LoopReads::Respond respond) {
        std::lock_guard<std::mutex> lock(mu);
        if (r["later"] == true) {
          held.push_back(std::move(respond));
        } else {
          respond(Json{{"now", true}});
        }
      });
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  auto now = reads.Ask(Json{{"later", false}}, std::chrono::seconds(10));
  ASSERT_TRUE(now.ok());
  EXPECT_EQ((*now)["now"], true);
  // Answered from another thread, after the loop's turn; a second answer is
  // ignored.
  std::thread answerer([&] {
    while (true) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!held.empty()) {
          held[0](Json{{"later", 1}});
          held[0](Json{{"later", 2}});
          held.clear();
          return;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  auto later = reads.Ask(Json{{"later", true}}, std::chrono::seconds(10));
  answerer.join();
  ASSERT_TRUE(later.ok()) << later.status().ToString();
  EXPECT_EQ((*later)["later"], 1);
  // One never answered: Close answers it, so its Ask returns at once.
  std::thread closer([&] {
    while (true) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!held.empty()) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    reads.Close();
  });
  auto closed = reads.Ask(Json{{"later", true}}, std::chrono::seconds(60));
  closer.join();
  ASSERT_FALSE(closed.ok());
  EXPECT_NE(closed.status().message().find("stopping"), std::string::npos);
  stop = true;
  loop.join();
  held.clear();
}

// /api/logs over a fake loop: a short output whole, a long one's last 64 KiB
// (asked for at its offset, of the attempt the first page named), and the
// loop's errors as their codes.
TEST(DashboardServerTest, LogsAreTheTailOfTheOutput) {
  LoopReads reads;
  std::string output = "short output\n";
  std::vector<Json> asked;
  testing::FakeLoop loop(reads, [&](const Json& r) -> Json {
    asked.push_back(r);
    if (r["trial_id"] == "e0001_00009") {
      return Json{{"ok", false}, {"error", {{"code", "NotFound"}, {"message", "no output"}}}};
    }
    if (r["trial_id"] == "e0001_00008") {
      return Json{{"ok", false},
                  {"error", {{"code", "Unavailable"}, {"message", "worker not connected"}}}};
    }
    const uint64_t offset = r["offset"], limit = r["limit"];
    const std::string page = output.substr(std::min<size_t>(offset, output.size()), limit);
    return Json{{"ok", true},
                {"trial_id", r["trial_id"]},
                {"attempt", 2},
                {"attempts", {1, 2}},
                {"stream", r["stream"]},
                {"size", output.size()},
                {"offset", offset},
                {"data", Base64Encode(page)},
                {"complete", false},
                {"trial_status", "RUNNING"},
                {"worker", "w1"}};
  });
  DashboardServer server(reads);
  auto short_logs = server.TrialLogs("e0001_00000", "stderr", 0);
  ASSERT_TRUE(short_logs.ok()) << short_logs.status().ToString();
  EXPECT_EQ((*short_logs)["text"], output);
  EXPECT_EQ((*short_logs)["offset"], 0);
  EXPECT_EQ((*short_logs)["attempt"], 2);
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0]["op"], "logs");
  EXPECT_EQ(asked[0]["stream"], "stderr");
  EXPECT_FALSE(asked[0].contains("attempt"));

  output.clear();
  for (int i = 0; output.size() < 100'000; ++i) output += "line " + std::to_string(i) + "\n";
  asked.clear();
  auto long_logs = server.TrialLogs("e0001_00000", "stdout", 0);
  ASSERT_TRUE(long_logs.ok()) << long_logs.status().ToString();
  const uint64_t tail = DashboardServer::kLogTailBytes;
  EXPECT_EQ((*long_logs)["text"], output.substr(output.size() - tail));
  EXPECT_EQ((*long_logs)["offset"], output.size() - tail);
  EXPECT_EQ((*long_logs)["size"], output.size());
  ASSERT_EQ(asked.size(), 2u);
  EXPECT_EQ(asked[1]["offset"], output.size() - tail);
  EXPECT_EQ(asked[1]["attempt"], 2) << "the tail of the attempt the first page named";

  auto missing = server.TrialLogs("e0001_00009", "stdout", 0);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "no output");
  auto gone = server.TrialLogs("e0001_00008", "stdout", 0);
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(gone.status().message(), "worker not connected");
  EXPECT_EQ(server.TrialLogs("", "stdout", 0).status().code(), StatusCode::kInvalidArgument);
  asked.clear();
  ASSERT_TRUE(server.TrialLogs("e0001_00000", "stdout", 1).ok());
  EXPECT_EQ(asked[0]["attempt"], 1);
}

}  // namespace
}  // namespace ztune::head
