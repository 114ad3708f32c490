// Hostile peers against the real binaries (issue 8): every input that once
// crashed the head or bent its state, sent on both endpoints, in rounds with a
// kill -9 and restart of the head in between. Afterwards the head is alive,
// the store holds exactly the legitimate experiment, and `ztune-head --check`
// passes.
#include <csignal>
#include <fstream>
#include <limits>
#include <thread>

#include <gtest/gtest.h>
#include <zmq.hpp>

#include "common/protocol/codec.h"
#include "common/zmq/socket_util.h"
#include "tests/e2e/cluster.h"
#include "tests/fakes/peer_messages.h"
#include "tests/e2e/trial_queries.h"

namespace ztune::e2e {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// Sends raw client requests, authenticated with `keys` (hostile, not
// unknown: what an admin's buggy script could send); returns the parsed
// reply, or null after 10 s.
Json Ask(zmq::context_t& context, const std::string& endpoint,
         const security::CurveClientKeys& keys, const std::string& request) {
  zmq::socket_t s(context, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  if (!security::ApplyCurveClient(s, keys).ok()) return Json();
  s.connect(endpoint);
  if (!zmqutil::SendFrames(s, {"ZTUNE1", request}).ok()) return Json();
  zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
  if (zmq::poll(&item, 1, seconds(10)) == 0) return Json();
  auto reply = zmqutil::RecvMultipart(s);
  if (!reply.ok() || reply->empty()) return Json();
  return Json::parse(reply->back().to_string_view(), nullptr, false);
}

std::vector<std::string> HostileClientRequests() {
  const std::string deep(100000, '[');
  const std::string deep_end(100000, ']');
  return {
      R"({"op": 5, "rid": 1})",
      R"({"op": null})",
      R"({"op": {"x": 1}})",
      R"({"op": "resume", "id": 5})",
      R"({"op": "status", "rid": )" + deep + "1" + deep_end + "}",
      R"({"op": "submit", "spec": {"trainable": "noop", "param_space": {"c": )" + deep + "1" +
          deep_end + "}}}",
      R"({"op": "submit", "spec": {"trainable": "noop", "num_samples": 4611686018427387904,
          "param_space": {"a": {"grid_search": [1, 2, 3, 4]}}}})",
      R"({"op": "submit", "spec": {"trainable": "noop", "num_samples": 18446744073709551615}})",
      R"({"op": "submit", "spec": {"trainable": "noop", "resources": {"bundles": [{"CPU": 1e15}]}}})",
      R"({"op": "submit", "spec": {"trainable": "noop", "name": "x\n[error] forged"}})",
      R"({"op": "trials", "experiment_id": "e0001", "offset": -1})",
      "{\"op\": \"status\"",
      "\xff\xfe not json",
      "[1, 2, 3]",
  };
}

// A worker speaking the protocol badly, on its own DEALER, authenticated
// with a worker key the head allows.
class HostileWorker {
 public:
  HostileWorker(zmq::context_t& context, const std::string& endpoint,
                const security::CurveClientKeys& keys, const std::string& id)
      : socket_(context, zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.set(zmq::sockopt::routing_id, id);
    EXPECT_TRUE(security::ApplyCurveClient(socket_, keys).ok());
    socket_.connect(endpoint);
  }
  void Send(const protocol::Body& body, std::string payload = {}) {
    zmqutil::SendFrames(socket_, protocol::Encode(protocol::Message{body, std::move(payload)}))
        .IgnoreError();
  }
  void SendRaw(const std::vector<std::string>& frames) {
    zmqutil::SendFrames(socket_, frames).IgnoreError();
  }
  // Whether a REGISTERED arrives within `wait`.
  bool Registered(milliseconds wait) {
    return testing::ReceiveUntil(socket_, wait, [](const protocol::Message& m) {
      return std::holds_alternative<protocol::Registered>(m.body);
    });
  }

 private:
  zmq::socket_t socket_;
};

protocol::Register RegisterWith(const std::string& id, std::map<std::string, double> resources) {
  protocol::Register r;
  r.worker_id = id;
  r.incarnation = 1;
  r.resources = std::move(resources);
  r.trainables = {"noop"};
  return r;
}

void SendHostileWorkerInput(zmq::context_t& context, const std::string& endpoint,
                            const security::CurveClientKeys& keys,
                            const std::string& finished_trial) {
  const double inf = std::numeric_limits<double>::infinity();
  int n = 0;
  for (double cpus : {1e12, 9e14, std::nan(""), inf, -1.0}) {
    const std::string id = "evil-" + std::to_string(n++);
    HostileWorker w(context, endpoint, keys, id);
    w.Send(RegisterWith(id, {{"CPU", cpus}}));
    EXPECT_FALSE(w.Registered(milliseconds(300))) << "registered with CPU " << cpus;
  }
  // A worker that registers properly, then sends garbage and forgeries.
  HostileWorker w(context, endpoint, keys, "forger");
  w.Send(RegisterWith("forger", {{"CPU", 1}}));
  ASSERT_TRUE(w.Registered(seconds(5)));
  w.SendRaw({"garbage"});
  w.SendRaw({"ZTUNE1"});
  w.SendRaw({"ZTUNE1", std::string(1, '\x02'), "\xc1\xc1\xc1"});
  protocol::ResultBatch batch;
  batch.trial_id = finished_trial;
  batch.attempt = 1;
  for (const Json& bad : {Json{{"training_iteration", int64_t{1} << 62}, {"done", "yes"}},
                          Json{{"training_iteration", 1}, {"done", 1}},
                          Json{{"training_iteration", 2}, {"loss", "\xff\xfe"}}}) {
    batch.results = {{7, protocol::RawResult::FromJson(bad)}};
    w.Send(batch);
  }
  for (uint64_t rid = 1; rid <= 5000; ++rid) {
    w.Send(protocol::Reply{rid, finished_trial, 1, true, "", Json::object()});
  }
  w.Send(protocol::Reply{(uint64_t{2} << 40) | 1, finished_trial, 1, true, "", Json::object()});
}

TEST(HostilePeerE2ETest, TheHeadSurvivesHostilePeersThroughRestartsAndKeepsItsStore) {
  LocalCluster cluster("hostile");
  ASSERT_TRUE(cluster.StartHeadAndWorkers({"w0"}, 1)) << cluster.Logs();
  const std::string exp = SubmitSpec(cluster, R"({"trainable": "quadratic", "num_samples": 2,
      "stop": {"training_iteration": 5}})",
                                     "legit");
  ASSERT_FALSE(exp.empty());
  ASSERT_TRUE(WaitFinished(cluster, exp, 30)) << cluster.Logs();

  zmq::context_t context;
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    for (const auto& request : HostileClientRequests()) {
      Json reply = Ask(context, cluster.client_endpoint(),
                       cluster.keys().ClientKeys(cluster.keys().admin_key_file()), request);
      ASSERT_TRUE(reply.is_object()) << "no reply to " << request.substr(0, 80) << cluster.Logs();
      EXPECT_EQ(reply.value("ok", true), false) << request.substr(0, 80);
    }
    SendHostileWorkerInput(context, cluster.worker_endpoint(),
                           cluster.keys().ClientKeys(cluster.keys().worker_key_file()),
                           TrialId(exp, 0));
    ASSERT_TRUE(cluster.head().Running()) << cluster.Logs();
    Json experiments = cluster.CliJson("experiments");
    ASSERT_TRUE(experiments.is_object()) << "the head does not answer" << cluster.Logs();
    EXPECT_EQ(experiments["experiments"].size(), 1u) << experiments.dump();
    cluster.head().Kill(SIGKILL);
    cluster.StartHead();
  }
  ASSERT_TRUE(cluster.WaitForWorkers(1)) << cluster.Logs();
  for (int k = 0; k < 2; ++k) {
    const std::string id = TrialId(exp, k);
    EXPECT_EQ(StatusOf(GetTrial(cluster, id)), "TERMINATED");
    ExpectResultsOneToN(cluster, id, 5);
  }
  EXPECT_EQ(cluster.head().Stop(), 0);
  auto check = ztune::e2e::Run(std::string(ZTUNE_HEAD_BIN) + " --check --data-dir " + cluster.data_dir());
  EXPECT_EQ(check.exit_code, 0) << check.out;
}

}  // namespace
}  // namespace ztune::e2e
