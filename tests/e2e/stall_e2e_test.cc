// Stalls with real binaries: a head stopped for 5 s (SIGSTOP) while trials run
// on two workers, and a head answering 50 clients that poll it without pause.
// The workers reconnect meanwhile; no trial may fail, and every trial must end
// with each iteration stored exactly once (issue 8: "worker unreachable").
#include <csignal>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>
#include <zmq.hpp>

#include "common/zmq/socket_util.h"
#include "tests/e2e/cluster.h"
#include "tests/e2e/trial_queries.h"

namespace ztune::e2e {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(StallE2ETest, AHeadStoppedForFiveSecondsFailsNoTrial) {
  LocalCluster cluster("stall-sigstop");
  ASSERT_TRUE(cluster.StartHeadAndWorkers({"w0", "w1"}, 2)) << cluster.Logs();
  const int64_t kIterations = 150;
  std::string exp = SubmitSpec(cluster, R"({"trainable": "sleep", "num_samples": 6,
      "param_space": {"sleep_s": 0.02}, "stop": {"training_iteration": 150},
      "checkpoint": {"frequency": 10}})", "stall");
  ASSERT_FALSE(exp.empty());
  ASSERT_TRUE(WaitFor([&] {
    size_t running = 0;
    for (const auto& t : TrialsOf(cluster, exp)) {
      running += StatusOf(t) == "RUNNING" && IterationOf(t) >= 5 ? 1 : 0;
    }
    return running == 4;
  }, seconds(20))) << cluster.Logs();

  cluster.head().Signal(SIGSTOP);
  std::this_thread::sleep_for(seconds(5));  // 16 x the workers' liveness window
  cluster.head().Signal(SIGCONT);

  ASSERT_TRUE(WaitFinished(cluster, exp, 60)) << cluster.Logs();
  ExpectAllTerminatedOnce(cluster, exp, 6, kIterations);
  const std::string head_log = ReadFile(cluster.head_log());
  EXPECT_TRUE(Contains(head_log, "head loop did not run for")) << "the stall was not seen";
  EXPECT_TRUE(Contains(head_log, "reconnected (incarnation")) << "no worker reconnected";
  EXPECT_FALSE(Contains(head_log, "died:")) << cluster.Logs();
}

// Signals interrupt the loop's system calls wherever it is, not only in its
// blocking poll: in libzmq's mailbox checks (ZMQ_EVENTS) too, which then fail
// with EINTR. A head busy with short steps takes a flood of SIGHUPs (a reload
// each) without stopping, finishes every trial, and stops cleanly on SIGTERM.
TEST(StallE2ETest, AHeadFloodedWithSignalsKeepsRunning) {
  LocalCluster cluster("stall-signals");
  ASSERT_TRUE(cluster.StartHeadAndWorkers({"w0", "w1"}, 4)) << cluster.Logs();
  const int64_t kIterations = 3000;
  std::string exp = SubmitSpec(cluster, R"({"trainable": "noop", "num_samples": 8,
      "stop": {"training_iteration": 3000}})",
                               "signals");
  ASSERT_FALSE(exp.empty());
  // Many short turns, each starting with the mailbox checks, while signals
  // come every half millisecond.
  for (int i = 0; i < 4000 && cluster.head().Running(); ++i) {
    cluster.head().Signal(SIGHUP);
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  ASSERT_TRUE(cluster.head().Running()) << cluster.Logs();
  ASSERT_TRUE(WaitFinished(cluster, exp, 60)) << cluster.Logs();
  ExpectAllTerminatedOnce(cluster, exp, 8, kIterations);
  EXPECT_EQ(cluster.head().Stop(), 0) << cluster.Logs();
}

// Raw client-protocol pollers (docs/client-protocol.md), one DEALER each.
class Pollers {
 public:
  Pollers(const std::string& endpoint, const std::string& exp, int n,
          security::CurveClientKeys keys)
      : keys_(std::move(keys)) {
    for (int i = 0; i < n; ++i) {
      threads_.emplace_back([this, endpoint, exp, i] { Poll(endpoint, exp, i); });
    }
  }
  ~Pollers() { Stop(); }
  void Stop() {
    stop_ = true;
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  int64_t answered() const { return answered_.load(); }

 private:
  void Poll(const std::string& endpoint, const std::string& exp, int i) {
    zmq::socket_t s(context_, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    if (!security::ApplyCurveClient(s, keys_).ok()) return;
    s.connect(endpoint);
    for (uint64_t rid = 1; !stop_; ++rid) {
      Json request{{"op", rid % 2 == 0 ? "status" : "trials"}, {"rid", rid}, {"id", exp}};
      if (i % 10 == 0) request = Json{{"op", "status"}, {"rid", rid}};  // every experiment
      if (!zmqutil::SendFrames(s, {"ZTUNE1", request.dump()}).ok()) return;
      zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
      // A reply can take long while the head is busy: keep waiting unless told to stop.
      while (!stop_ && zmq::poll(&item, 1, milliseconds(100)) == 0) {
      }
      if (stop_) return;
      auto reply = zmqutil::RecvMultipart(s);
      if (!reply.ok()) return;
      answered_ += reply->empty() ? 0 : 1;
    }
  }

  const security::CurveClientKeys keys_;
  zmq::context_t context_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> answered_{0};
  std::vector<std::thread> threads_;
};

TEST(StallE2ETest, FiftyPollingClientsFailNoTrial) {
  LocalCluster cluster("stall-pollers");
  ASSERT_TRUE(cluster.StartHeadAndWorkers({"w0", "w1"}, 2)) << cluster.Logs();
  std::string exp = SubmitSpec(cluster, R"({"trainable": "sleep", "num_samples": 100,
      "param_space": {"sleep_s": 0.01}, "stop": {"training_iteration": 10}})", "pollers");
  ASSERT_FALSE(exp.empty());
  Pollers pollers(cluster.client_endpoint(), exp, 50,
                  cluster.keys().ClientKeys(cluster.keys().admin_key_file()));
  ASSERT_TRUE(WaitFinished(cluster, exp, 120)) << cluster.Logs();
  pollers.Stop();
  EXPECT_GT(pollers.answered(), 50) << "the pollers were not answered";
  ExpectAllTerminatedOnce(cluster, exp, 100, 10);
  EXPECT_FALSE(Contains(ReadFile(cluster.head_log()), "died:")) << cluster.Logs();
}

}  // namespace
}  // namespace ztune::e2e
