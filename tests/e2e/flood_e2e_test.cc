// Budgets per connection through the real binaries: a worker connection and a
// client connection that send as fast as they can are cut off or refused, on
// their own connection only, while a healthy worker and other clients beside
// them are served as if nothing happened.
#include <algorithm>
#include <chrono>
#include <map>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include <gtest/gtest.h>
#include <zmq.hpp>

#include "common/protocol/codec.h"
#include "common/security/curve_socket.h"
#include "common/zmq/socket_util.h"
#include "tests/e2e/cluster.h"
#include "tests/e2e/trial_queries.h"

namespace ztune::e2e {
namespace {

using std::chrono::milliseconds;
using SteadyTime = std::chrono::steady_clock;

// Only a failure runs into this: each wait it bounds normally ends within a
// few round trips to the head.
constexpr milliseconds kFailureBound(30000);
// The same for a whole experiment (as in the security tests); the ones here
// sleep for 1.6 s and 4 s.
constexpr int kFinishTimeoutS = 60;

std::string FingerprintOf(const std::string& key_file) {
  auto pair = security::ReadKeyPairFile(key_file);
  EXPECT_TRUE(pair.ok()) << pair.status().ToString();
  return pair.ok() ? pair->public_key.Fingerprint() : "?";
}

std::vector<std::string> LinesWith(const std::string& text, const std::string& needle) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (Contains(line, needle)) lines.push_back(line);
  }
  return lines;
}

// Every message a raw worker peer has ready now, decoded (undecodable ones
// are kept as a Disconnect with reason "undecodable"); never blocks.
std::vector<protocol::Message> ReceiveReady(zmq::socket_t& s) {
  std::vector<protocol::Message> got;
  while (true) {
    auto parts = zmqutil::RecvMultipart(s);
    if (!parts.ok() || parts->empty()) return got;
    std::vector<std::string> frames;
    for (auto& p : *parts) frames.push_back(p.to_string());
    auto m = protocol::Decode(frames);
    got.push_back(m.ok() ? *m : protocol::Message{protocol::Disconnect{"undecodable"}, {}});
  }
}

// What a raw worker peer receives within `wait`.
std::vector<protocol::Message> Drain(zmq::socket_t& s, milliseconds wait) {
  std::vector<protocol::Message> got;
  const auto deadline = SteadyTime::now() + wait;
  while (SteadyTime::now() < deadline) {
    zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, milliseconds(20));
    for (auto& m : ReceiveReady(s)) got.push_back(std::move(m));
  }
  return got;
}

// One trial of the `sleep` trainable: `iterations` steps of `sleep_s` each.
std::string SleepSpec(double sleep_s, int iterations) {
  return Json{{"trainable", "sleep"},
              {"num_samples", 1},
              {"param_space", {{"sleep_s", sleep_s}}},
              {"stop", {{"training_iteration", iterations}}}}
      .dump();
}

// Whether `ztune workers` shows the worker named `name` alive (false if absent).
bool AliveIn(const std::map<std::string, Json>& workers, const std::string& name) {
  auto it = workers.find(name);
  return it != workers.end() && it->second.is_object() && it->second.value("alive", false);
}

bool IsRateLimitDisconnect(const protocol::Message& m) {
  const auto* d = std::get_if<protocol::Disconnect>(&m.body);
  return d != nullptr && Contains(d->reason, "rate limit");
}

// The rogue is a real worker key's owner with a bug: it registers properly,
// then sends heartbeats in a tight loop. The head cuts off its connection
// alone; the real worker's trial, running beside it, finishes with every
// result, without a failure and without being cut off itself.
TEST(FloodE2ETest, AWorkerFloodingTheHeadIsCutOffAndAHealthyRunBesideItFinishesIntact) {
  const LocalCluster::Timing timing;
  LocalCluster cluster("flood-worker", timing);
  const std::string rogue_key = cluster.keys().AddWorker("rogue");
  // A real worker sends a heartbeat every heartbeat_ms (20/s here) and one
  // result batch per TRAIN, at most one per step of sleep_s (50/s): under
  // 100 messages/s. 300/s (bursts of 600) leaves it three times that, while
  // a peer in a tight loop sends tens of thousands a second.
  constexpr int kWorkerMessagesPerS = 300;
  constexpr double kSleepS = 0.02;
  constexpr int kIterations = 80;
  cluster.StartHead({"--worker-messages-per-s", std::to_string(kWorkerMessagesPerS)});
  cluster.StartWorker("w0", 1);
  ASSERT_TRUE(cluster.WaitForWorkers(1)) << cluster.Logs();
  const std::string exp = SubmitSpec(cluster, SleepSpec(kSleepS, kIterations), "healthy");
  ASSERT_FALSE(exp.empty());
  const std::string trial = TrialId(exp, 0);
  ASSERT_TRUE(WaitFor([&] { return IterationOf(GetTrial(cluster, trial)) >= 3; }))
      << cluster.Logs();
  const std::string w0_id = Workers(cluster)["w0"]["worker_id"];

  zmq::context_t context;
  zmq::socket_t rogue(context, zmq::socket_type::dealer);
  rogue.set(zmq::sockopt::linger, 0);
  rogue.set(zmq::sockopt::routing_id, "rogue-1");
  ASSERT_TRUE(security::ApplyCurveClient(rogue, cluster.keys().ClientKeys(rogue_key)).ok());
  rogue.connect(cluster.worker_endpoint());
  protocol::Register reg;
  reg.worker_id = "rogue-1";
  reg.incarnation = 1;
  reg.name = "rogue";
  reg.resources = {{"CPU", 1}};
  reg.trainables = {"sleep"};
  ASSERT_TRUE(zmqutil::SendFrames(rogue, protocol::Encode(protocol::Message{reg, {}})).ok());
  bool registered = false;
  const auto register_deadline = SteadyTime::now() + kFailureBound;
  while (!registered && SteadyTime::now() < register_deadline) {
    for (const auto& m : Drain(rogue, milliseconds(20))) {
      registered = registered || std::holds_alternative<protocol::Registered>(m.body);
    }
  }
  ASSERT_TRUE(registered) << cluster.Logs();

  // Several liveness windows (about 2 s): the head, cut off from the rogue,
  // judges it dead while it still floods, and the healthy trial takes many
  // steps under the flood.
  const milliseconds min_flood = 7 * milliseconds(timing.heartbeat_ms * timing.liveness);
  const std::vector<std::string> heartbeat =
      protocol::Encode(protocol::Message{protocol::Heartbeat{}, {}});
  std::vector<protocol::Message> received;
  bool cut_off = false;
  uint64_t sent = 0;
  const auto flood_start = SteadyTime::now();
  while (true) {
    const auto flooded = SteadyTime::now() - flood_start;
    if ((cut_off && flooded >= min_flood) || flooded >= kFailureBound) break;
    for (int i = 0; i < 256; ++i) {
      // EAGAIN once the pipe to the head is full: the head pushes back.
      if (zmqutil::SendFrames(rogue, heartbeat).ok()) ++sent;
    }
    for (auto& m : ReceiveReady(rogue)) {
      cut_off = cut_off || IsRateLimitDisconnect(m);
      received.push_back(std::move(m));
    }
  }
  ASSERT_TRUE(cut_off) << "the rogue sent " << sent << " heartbeats and received "
                       << received.size() << " messages, none a DISCONNECT naming the rate limit"
                       << cluster.Logs();
  rogue.close();

  ASSERT_TRUE(WaitFinished(cluster, exp, kFinishTimeoutS)) << cluster.Logs();
  Json t = GetTrial(cluster, trial);
  EXPECT_EQ(StatusOf(t), "TERMINATED") << t.dump();
  EXPECT_EQ(t["num_failures"], 0) << t.dump();
  ExpectResultsOneToN(cluster, trial, kIterations);

  EXPECT_TRUE(AliveIn(Workers(cluster), "w0")) << cluster.Logs();
  EXPECT_TRUE(WaitFor([&] {
    auto workers = Workers(cluster);
    return workers.count("rogue") == 1 && !AliveIn(workers, "rogue");
  })) << "the rogue, cut off, is still alive"
      << cluster.Logs();
  const std::string head_log = ReadFile(cluster.head_log());
  const auto cut_lines = LinesWith(head_log, "sends more than a connection's budget");
  ASSERT_FALSE(cut_lines.empty()) << head_log;
  for (const auto& line : cut_lines) {
    EXPECT_TRUE(Contains(line, "rogue-1")) << line;
    EXPECT_TRUE(Contains(line, FingerprintOf(rogue_key))) << line;
    EXPECT_FALSE(Contains(line, w0_id)) << "the healthy worker was cut off: " << line;
  }
  EXPECT_FALSE(Contains(ReadFile(cluster.dir() + "/logs/worker-w0.log"), "rate limit"))
      << cluster.Logs();
  EXPECT_TRUE(cluster.head().Running()) << cluster.Logs();
  auto status = cluster.Cli("status");
  EXPECT_EQ(status.exit_code, 0) << status.out;
}

// A client in a tight loop gets its burst and the rate served, the rest
// refused with a hint of when to retry; other connections, the same key's
// included, are served meanwhile; and the CLI, when it goes over its own
// connection's budget, waits as told and carries on.
TEST(FloodE2ETest, AClientFloodingTheHeadIsRefusedWithARetryHintAndOthersAreServed) {
  LocalCluster cluster("flood-client");
  const std::string poller_key = cluster.keys().AddClient("poller", "read");
  constexpr int kRequestsPerS = 50;
  constexpr int kBurst = 2 * kRequestsPerS;  // ztune-head's bursts are twice the rate
  constexpr int kFlood = 600;
  cluster.StartHead({"--client-requests-per-s", std::to_string(kRequestsPerS)});
  const std::string admin_fingerprint = FingerprintOf(cluster.keys().admin_key_file());

  zmq::context_t context;
  zmq::socket_t flood(context, zmq::socket_type::dealer);
  flood.set(zmq::sockopt::linger, 0);
  ASSERT_TRUE(
      security::ApplyCurveClient(flood, cluster.keys().ClientKeys(cluster.keys().admin_key_file()))
          .ok());
  flood.connect(cluster.client_endpoint());
  int ok = 0;
  int refused = 0;
  int64_t max_retry_after_ms = 0;
  std::vector<std::string> odd;
  auto collect = [&](milliseconds wait) {
    zmq::pollitem_t item{flood.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, wait);
    while (true) {
      auto parts = zmqutil::RecvMultipart(flood);
      if (!parts.ok() || parts->empty()) return;
      const Json reply = Json::parse(parts->back().to_string_view(), nullptr, false);
      if (!reply.is_object()) {
        odd.push_back(parts->back().to_string());
        continue;
      }
      const Json error = reply.value("error", Json::object());
      const Json retry_after = reply.value("retry_after_ms", Json());
      if (reply.value("ok", false) && reply.contains("rid")) {
        ++ok;
      } else if (!reply.value("ok", true) && !reply.contains("rid") && error.is_object() &&
                 error.value("code", "") == "ResourceExhausted" &&
                 Contains(error.value("message", ""), "nothing was done") &&
                 retry_after.is_number_integer() && retry_after.get<int64_t>() > 0) {
        ++refused;
        max_retry_after_ms = std::max(max_retry_after_ms, retry_after.get<int64_t>());
      } else {
        odd.push_back(parts->back().to_string());
      }
    }
  };

  // The clock starts before the first request reaches the head and stops
  // after the last reply left it: the head admitted all it did within it.
  const auto start = SteadyTime::now();
  // One request answered first, so the flood below goes to a connection
  // whose handshake is done (it counts towards the burst like any other).
  ASSERT_TRUE(zmqutil::SendFrames(flood, {"ZTUNE1", R"({"op":"status","rid":0})"}).ok());
  while (ok + refused + static_cast<int>(odd.size()) < 1 &&
         SteadyTime::now() - start < kFailureBound) {
    collect(milliseconds(20));
  }
  ASSERT_EQ(ok, 1) << ::testing::PrintToString(odd) << cluster.Logs();
  int sent = 1;
  for (int rid = 1; rid <= kFlood; ++rid) {
    const std::string request = R"({"op":"status","rid":)" + std::to_string(rid) + "}";
    if (zmqutil::SendFrames(flood, {"ZTUNE1", request}).ok()) ++sent;
  }
  ASSERT_EQ(sent, kFlood + 1) << "the DEALER's own queue (1000 messages) refused some";
  // Another connection with the same key is served while this one is over
  // its budget.
  auto during = cluster.Cli("status");
  EXPECT_EQ(during.exit_code, 0) << during.out;
  const auto collect_start = SteadyTime::now();
  while (ok + refused + static_cast<int>(odd.size()) < sent &&
         SteadyTime::now() - collect_start < kFailureBound) {
    collect(milliseconds(20));
  }
  const double elapsed_s = std::chrono::duration<double>(SteadyTime::now() - start).count();

  EXPECT_TRUE(odd.empty()) << ::testing::PrintToString(odd);
  EXPECT_EQ(ok + refused, sent) << "every request is answered exactly once";
  // The bucket starts full: the whole burst is served before any refusal.
  EXPECT_GE(ok, kBurst);
  EXPECT_GT(refused, 0);
  // The +1 absorbs the head's clock counting whole milliseconds.
  EXPECT_LE(ok, kBurst + kRequestsPerS * elapsed_s + 1)
      << "served " << ok << " requests in " << elapsed_s << " s";
  // A refusal names the wait for the next token: at most one token's time.
  EXPECT_LE(max_retry_after_ms, (1000 + kRequestsPerS - 1) / kRequestsPerS);
  auto after = cluster.Cli("status");
  EXPECT_EQ(after.exit_code, 0) << after.out;
  const auto refusals =
      LinesWith(ReadFile(cluster.head_log()), "sends more than its connection's budget");
  ASSERT_FALSE(refusals.empty()) << cluster.Logs();
  EXPECT_TRUE(Contains(refusals.front(), admin_fingerprint)) << refusals.front();
  flood.close();

  // `ztune wait --interval-ms 1` polls one connection far faster than the
  // budget (a poll is a round trip plus 1 ms), so once its burst is spent
  // most of its polls are refused. Its HeadClient sleeps the hinted time and
  // resends; without that, the first refusal would end the command with an
  // error. The experiment lasts iterations x sleep_s (4 s), so the poller is
  // refused for seconds, past the head's one warning a second.
  constexpr double kSleepS = 0.02;
  constexpr int kIterations = 200;
  cluster.StartWorker("w0", 1);
  ASSERT_TRUE(cluster.WaitForWorkers(1)) << cluster.Logs();
  const std::string exp = SubmitSpec(cluster, SleepSpec(kSleepS, kIterations), "polled");
  ASSERT_FALSE(exp.empty());
  auto waited = cluster.CliAs(poller_key, "wait " + exp + " --timeout " +
                                              std::to_string(kFinishTimeoutS) + " --interval-ms 1");
  EXPECT_EQ(waited.exit_code, 0) << waited.out << cluster.Logs();
  Json t = GetTrial(cluster, TrialId(exp, 0));
  EXPECT_EQ(StatusOf(t), "TERMINATED") << t.dump();
  ExpectResultsOneToN(cluster, TrialId(exp, 0), kIterations);
  const std::string poller_fingerprint = FingerprintOf(poller_key);
  bool poller_refused = false;
  for (const auto& line :
       LinesWith(ReadFile(cluster.head_log()), "sends more than its connection's budget")) {
    poller_refused = poller_refused || Contains(line, poller_fingerprint);
  }
  EXPECT_TRUE(poller_refused) << "the poller was never refused: the test proves nothing"
                              << cluster.Logs();
}

}  // namespace
}  // namespace ztune::e2e
