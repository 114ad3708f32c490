// CURVE, allow-lists and roles through the real binaries (docs/security.md):
// who is refused, what each role may do, what a revoked key loses, what a
// peer that copies a worker's id gets, and what the wire shows.
#include <csignal>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <zmq.hpp>

#include "common/protocol/codec.h"
#include "common/security/curve_socket.h"
#include "common/zmq/socket_util.h"
#include "tests/e2e/cluster.h"
#include "tests/fakes/peer_messages.h"
#include "tests/e2e/tcp_proxy.h"
#include "tests/e2e/trial_queries.h"

namespace ztune::e2e {
namespace {

using std::chrono::milliseconds;

size_t Count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

std::string FingerprintOf(const std::string& key_file) {
  auto pair = security::ReadKeyPairFile(key_file);
  EXPECT_TRUE(pair.ok()) << pair.status().ToString();
  return pair.ok() ? pair->public_key.Fingerprint() : "?";
}

int PortOf(const std::string& endpoint) {
  return std::stoi(endpoint.substr(endpoint.rfind(':') + 1));
}

// Keys that are not in the allow-lists, no key at all, and a wrong head key
// are refused, each with a message saying which; the head logs a refused
// key's fingerprint once however often it comes back, and serves on.
TEST(SecurityE2ETest, UnknownKeysNoKeysAndAWrongHeadKeyAreRefusedAndTheHeadServesOn) {
  LocalCluster cluster("sec-refuse");
  ASSERT_TRUE(cluster.StartHeadAndWorkers({"w0"}, 1)) << cluster.Logs();
  const std::string stranger = cluster.keys().MakeStrangerKey("stranger");

  for (int i = 0; i < 3; ++i) {
    auto r = cluster.CliAs(stranger, "--timeout-ms 5000 status");
    EXPECT_EQ(r.exit_code, 1) << r.out;
    EXPECT_TRUE(Contains(r.out, "refused this client's key " + FingerprintOf(stranger))) << r.out;
  }
  auto plain = e2e::Run(std::string(ZTUNE_CLI_BIN) + " --head " + cluster.client_endpoint() +
                        " --insecure --timeout-ms 5000 status");
  EXPECT_EQ(plain.exit_code, 3) << plain.out;
  // libzmq reports either side's view: a mechanism mismatch, or a head that
  // closed the connection; both name CURVE.
  EXPECT_TRUE(Contains(plain.out, "disagree on security") ||
              Contains(plain.out, "the head may require CURVE keys"))
      << plain.out;
  // The admin's own key, but a head key that is not this head's.
  auto wrong_head = e2e::Run(std::string(ZTUNE_CLI_BIN) + " --head " + cluster.client_endpoint() +
                             " --key " + cluster.keys().admin_key_file() + " --head-key " +
                             security::PublicKeyPath(stranger) + " --timeout-ms 5000 status");
  EXPECT_EQ(wrong_head.exit_code, 3) << wrong_head.out;
  EXPECT_TRUE(Contains(wrong_head.out, "--head-key")) << wrong_head.out;

  cluster.StartWorker("intruder", 8, {"--key", stranger});
  cluster.StartWorker("plain", 8, {"--insecure"});
  const std::string intruder_log = cluster.dir() + "/logs/worker-intruder.log";
  const std::string plain_log = cluster.dir() + "/logs/worker-plain.log";
  ASSERT_TRUE(WaitFor([&] {
    return Contains(ReadFile(intruder_log), "refused this worker's key") &&
           (Contains(ReadFile(plain_log), "disagree on security") ||
            Contains(ReadFile(plain_log), "the head may require CURVE keys"));
  })) << cluster.Logs();
  // Both keep retrying (with backoff); let them be refused a few more times.
  ASSERT_TRUE(WaitFor([&] { return Count(ReadFile(intruder_log), "registering again") >= 3; }))
      << cluster.Logs();

  const std::string head_log = ReadFile(cluster.head_log());
  EXPECT_EQ(Count(head_log, "is not in the clients allow-list"), 1u) << head_log;
  EXPECT_EQ(Count(head_log, "is not in the workers allow-list"), 1u) << head_log;
  EXPECT_TRUE(Contains(head_log, "key " + FingerprintOf(stranger))) << head_log;
  EXPECT_EQ(Count(ReadFile(intruder_log), "refused this worker's key"), 1u);

  ASSERT_TRUE(cluster.head().Running()) << cluster.Logs();
  auto workers = Workers(cluster);
  ASSERT_EQ(workers.size(), 1u) << "only the allowed worker registered";
  EXPECT_TRUE(workers.begin()->second["alive"].get<bool>());
  const std::string exp = SubmitSpec(cluster, R"({"trainable": "noop", "num_samples": 2,
      "stop": {"training_iteration": 3}})",
                                     "after");
  ASSERT_TRUE(WaitFinished(cluster, exp)) << cluster.Logs();
}

// read may only read; submit changes only its own experiments; admin any.
TEST(SecurityE2ETest, EachRoleDoesWhatItMayAndNothingElse) {
  LocalCluster cluster("sec-roles");
  auto& keys = cluster.keys();
  const std::string reader = keys.AddClient("reader", "read");
  const std::string alice = keys.AddClient("alice", "submit");
  const std::string bob = keys.AddClient("bob", "submit");
  ASSERT_TRUE(cluster.StartHeadAndWorkers({"w0"}, 2)) << cluster.Logs();
  const std::string spec = cluster.dir() + "/long.json";
  std::ofstream(spec) << R"({"trainable": "sleep", "num_samples": 1,
      "param_space": {"sleep_s": 0.01}, "stop": {"training_iteration": 100000}})";

  EXPECT_EQ(cluster.CliAs(reader, "status").exit_code, 0);
  auto refused = cluster.CliAs(reader, "submit " + spec);
  EXPECT_EQ(refused.exit_code, 1) << refused.out;
  EXPECT_TRUE(Contains(refused.out, "PermissionDenied")) << refused.out;
  EXPECT_TRUE(Contains(refused.out, "may not submit")) << refused.out;

  auto submitted = cluster.CliAs(alice, "submit " + spec, /*stdout_only=*/true);
  ASSERT_EQ(submitted.exit_code, 0) << submitted.out;
  const std::string exp = submitted.out.substr(0, submitted.out.find_first_of(" \n"));
  Json doc = cluster.CliJson("experiments");
  ASSERT_EQ(doc["experiments"].size(), 1u) << doc.dump();
  EXPECT_EQ(doc["experiments"][0]["owner"]["name"], "alice") << doc.dump();

  for (const std::string& target : {exp, TrialId(exp, 0)}) {
    auto r = cluster.CliAs(bob, "stop " + target);
    EXPECT_EQ(r.exit_code, 1) << r.out;
    EXPECT_TRUE(Contains(r.out, "PermissionDenied")) << r.out;
    EXPECT_TRUE(Contains(r.out, "belongs to 'alice'")) << r.out;
    EXPECT_EQ(cluster.CliAs(reader, "stop " + target).exit_code, 1);
  }
  doc = cluster.CliJson("experiments");
  EXPECT_FALSE(doc["experiments"][0]["stopped"].get<bool>()) << "a refused stop stopped it";

  EXPECT_EQ(cluster.CliAs(alice, "stop " + exp).exit_code, 0);
  auto bobs = cluster.CliAs(bob, "submit " + spec, /*stdout_only=*/true);
  ASSERT_EQ(bobs.exit_code, 0) << bobs.out;
  const std::string bob_exp = bobs.out.substr(0, bobs.out.find_first_of(" \n"));
  EXPECT_EQ(cluster.CliAs(alice, "stop " + bob_exp).exit_code, 1);
  EXPECT_EQ(cluster.Cli("stop " + bob_exp).exit_code, 0) << "admin stops anyone's experiment";
  ASSERT_TRUE(WaitFinished(cluster, bob_exp)) << cluster.Logs();
}

// Keys removed from the allow-lists lose access at the next SIGHUP: a revoked
// worker is dropped (its trial fails over to another worker and finishes
// there from its checkpoint) and cannot come back; a revoked client is
// refused.
TEST(SecurityE2ETest, RevokedKeysLoseAccessAtTheNextReload) {
  LocalCluster cluster("sec-revoke");
  auto& keys = cluster.keys();
  const std::string doomed = keys.AddWorker("doomed");
  const std::string carol = keys.AddClient("carol", "read");
  cluster.StartHead();
  cluster.StartWorker("w0", 1);
  cluster.StartWorker("w1", 1, {"--key", doomed});
  ASSERT_TRUE(cluster.WaitForWorkers(2)) << cluster.Logs();
  const std::string exp = SubmitSpec(cluster, R"({"trainable": "sleep", "num_samples": 2,
      "param_space": {"sleep_s": 0.02}, "stop": {"training_iteration": 60},
      "checkpoint": {"frequency": 5}, "max_failures": 1})",
                                     "revoke");
  ASSERT_FALSE(exp.empty());
  ASSERT_TRUE(WaitFor([&] {
    Json trials = TrialsOf(cluster, exp);
    if (trials.size() != 2) return false;
    for (const auto& t : trials) {
      if (StatusOf(t) != "RUNNING" || IterationOf(t) < 6) return false;
    }
    return true;
  })) << cluster.Logs();
  EXPECT_EQ(cluster.CliAs(carol, "status").exit_code, 0);

  keys.Revoke(doomed);
  keys.Revoke(carol);
  cluster.head().Signal(SIGHUP);
  ASSERT_TRUE(WaitFor([&] { return Contains(ReadFile(cluster.head_log()), "lost its access"); }))
      << cluster.Logs();
  auto refused = cluster.CliAs(carol, "--timeout-ms 5000 status");
  EXPECT_EQ(refused.exit_code, 1) << refused.out;
  EXPECT_TRUE(Contains(refused.out, "refused this client's key")) << refused.out;

  ASSERT_TRUE(WaitFinished(cluster, exp, 60)) << cluster.Logs();
  int failed_over = 0;
  for (const auto& t : TrialsOf(cluster, exp)) {
    EXPECT_EQ(StatusOf(t), "TERMINATED") << t.dump();
    ExpectResultsOneToN(cluster, t["trial_id"], 60);
    failed_over += t["num_failures"].get<int>();
  }
  EXPECT_EQ(failed_over, 1) << "exactly the revoked worker's trial failed over";
  ASSERT_TRUE(WaitFor([&] {
    return Contains(ReadFile(cluster.dir() + "/logs/worker-w1.log"), "refused this worker's key");
  })) << cluster.Logs();
  auto workers = Workers(cluster);
  EXPECT_FALSE(workers["w1"]["alive"].get<bool>());
  EXPECT_TRUE(workers["w0"]["alive"].get<bool>());
}

// A head and one worker "w0" running a one-trial `sleep` experiment of
// `iterations` steps, past its third.
struct Victim {
  std::string experiment_id;
  std::string trial_id;
  std::string worker_id;
};
void StartVictim(LocalCluster& cluster, int iterations, Victim* v) {
  ASSERT_TRUE(cluster.StartHeadAndWorkers({"w0"}, 1)) << cluster.Logs();
  v->experiment_id = SubmitSpec(cluster,
                                R"({"trainable": "sleep", "num_samples": 1,
      "param_space": {"sleep_s": 0.02}, "stop": {"training_iteration": )" +
                                    std::to_string(iterations) + R"(},
      "metric": "loss", "mode": "min"})",
                                "victim");
  v->trial_id = TrialId(v->experiment_id, 0);
  ASSERT_TRUE(WaitFor([&] { return IterationOf(GetTrial(cluster, v->trial_id)) >= 3; }))
      << cluster.Logs();
  v->worker_id = Workers(cluster)["w0"]["worker_id"];
}

// Peers that take a running worker's id as their routing id and in REGISTER
// (shown by `ztune workers`), and send forged results for its trial: without
// a key, with a key the head does not know, and with another worker's
// allowed key. None gets a single message about a trial, none stores a
// result, and the real worker's trial finishes untouched.
TEST(SecurityE2ETest, APeerTakingAWorkersIdGetsNothingAndStoresNothing) {
  LocalCluster cluster("sec-takeover");
  const std::string mallory = cluster.keys().AddWorker("mallory");
  const std::string stranger = cluster.keys().MakeStrangerKey("stranger");
  Victim victim;
  ASSERT_NO_FATAL_FAILURE(StartVictim(cluster, 80, &victim));
  const auto& [exp, trial, victim_id] = victim;

  zmq::context_t context;
  struct Attacker {
    std::string what;
    std::optional<security::CurveClientKeys> keys;
  };
  std::vector<Attacker> attackers = {
      {"no key", std::nullopt},
      {"an unknown key", cluster.keys().ClientKeys(stranger)},
      {"another worker's allowed key", cluster.keys().ClientKeys(mallory)},
  };
  std::vector<std::unique_ptr<zmq::socket_t>> sockets;
  for (const auto& a : attackers) {
    auto s = std::make_unique<zmq::socket_t>(context, zmq::socket_type::dealer);
    s->set(zmq::sockopt::linger, 0);
    s->set(zmq::sockopt::routing_id, victim_id);
    if (a.keys) {
      ASSERT_TRUE(security::ApplyCurveClient(*s, *a.keys).ok());
    }
    s->connect(cluster.worker_endpoint());
    protocol::Register reg;
    reg.worker_id = victim_id;
    reg.incarnation = 99;
    reg.name = "w0";
    reg.resources = {{"CPU", 64}};
    reg.trainables = {"sleep"};
    zmqutil::SendFrames(*s, protocol::Encode(protocol::Message{reg, {}})).IgnoreError();
    protocol::ResultBatch forged;
    forged.trial_id = trial;
    forged.attempt = 1;
    forged.results = {
        {1, protocol::RawResult::FromJson(Json{{"training_iteration", 79}, {"loss", -1e9}})}};
    zmqutil::SendFrames(*s, protocol::Encode(protocol::Message{forged, {}})).IgnoreError();
    protocol::Reply reply{1, trial, 1, true, "", Json::object()};
    zmqutil::SendFrames(*s, protocol::Encode(protocol::Message{reply, {}})).IgnoreError();
    sockets.push_back(std::move(s));
  }
  for (size_t i = 0; i < sockets.size(); ++i) {
    SCOPED_TRACE(attackers[i].what);
    for (const auto& m : testing::ReceiveMessages(*sockets[i], milliseconds(1000))) {
      // At most "you are not registered": nothing of a trial, no REGISTERED.
      EXPECT_TRUE(std::holds_alternative<protocol::Disconnect>(m.body))
          << protocol::CommandName(m.body);
    }
  }
  ASSERT_TRUE(WaitFinished(cluster, exp, 60)) << cluster.Logs();
  Json t = GetTrial(cluster, trial);
  EXPECT_EQ(StatusOf(t), "TERMINATED") << t.dump();
  EXPECT_EQ(t["num_failures"], 0) << t.dump();
  ExpectResultsOneToN(cluster, trial, 80);
  Json results = cluster.CliJson("results " + trial);
  for (const auto& r : results["results"]) EXPECT_GT(r["loss"].get<double>(), 0) << r.dump();
  Json doc = cluster.CliJson("experiments");
  EXPECT_GT(doc["experiments"][0]["best_trial"]["value"].get<double>(), 0) << doc.dump();
  const std::string head_log = ReadFile(cluster.head_log());
  EXPECT_TRUE(Contains(head_log, "that worker id belongs to key")) << head_log;
  EXPECT_TRUE(Workers(cluster)["w0"]["alive"].get<bool>());
}

// A worker id stays bound to its key across a head crash: while the real
// worker is frozen (so it cannot register first), a peer with another allowed
// key that registers under its id after the restart is refused, and the real
// worker, once thawed, re-attaches and finishes its trial.
TEST(SecurityE2ETest, AfterAHeadCrashAWorkersIdStillBelongsToItsKey) {
  // Room for the frozen worker: the restarted head waits 2 x 100 x 20 ms for
  // it to re-attach, the freeze lasts about one Drain (1 s).
  LocalCluster cluster("sec-binding", LocalCluster::Timing{100, 20});
  const std::string mallory = cluster.keys().AddWorker("mallory");
  Victim victim;
  ASSERT_NO_FATAL_FAILURE(StartVictim(cluster, 60, &victim));
  const auto& [exp, trial, victim_id] = victim;

  cluster.worker(0).Signal(SIGSTOP);
  cluster.head().Kill(SIGKILL);
  cluster.StartHead();
  zmq::context_t context;
  zmq::socket_t s(context, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  ASSERT_TRUE(security::ApplyCurveClient(s, cluster.keys().ClientKeys(mallory)).ok());
  s.connect(cluster.worker_endpoint());
  protocol::Register reg;
  reg.worker_id = victim_id;
  reg.incarnation = 7;
  reg.name = "w0";
  reg.resources = {{"CPU", 1}};
  reg.trainables = {"sleep"};
  protocol::LiveActor claimed;
  claimed.trial_id = trial;
  claimed.attempt = 1;
  reg.live_actors = {claimed};
  ASSERT_TRUE(zmqutil::SendFrames(s, protocol::Encode(protocol::Message{reg, {}})).ok());
  for (const auto& m : testing::ReceiveMessages(s, milliseconds(1000))) {
    EXPECT_TRUE(std::holds_alternative<protocol::Disconnect>(m.body))
        << protocol::CommandName(m.body);
  }
  cluster.worker(0).Signal(SIGCONT);
  const std::string head_log = ReadFile(cluster.head_log());
  EXPECT_TRUE(Contains(head_log, "1 worker id(s) stay bound to their key")) << head_log;
  EXPECT_TRUE(Contains(head_log, "that worker id belongs to key")) << head_log;

  ASSERT_TRUE(WaitFinished(cluster, exp, 60)) << cluster.Logs();
  Json t = GetTrial(cluster, trial);
  EXPECT_EQ(StatusOf(t), "TERMINATED") << t.dump();
  ExpectResultsOneToN(cluster, trial, 60);
  EXPECT_TRUE(Workers(cluster)["w0"]["alive"].get<bool>());
}

// Every byte between the workers and the head, and between a client and the
// head, recorded by a proxy as a capture on the loopback interface would see
// it: no trial config value, no result key, no spec field in clear text. The
// same run without CURVE shows all of them, so the capture does see traffic.
TEST(SecurityE2ETest, CapturedTrafficHoldsNoConfigOrResultInClearText) {
  const std::vector<std::string> secrets = {"ZtuneSecretConfigValue7f3a", "training_iteration",
                                            "sleep_s", "quadratic-of-secrets"};
  for (const bool curve : {true, false}) {
    SCOPED_TRACE(curve ? "CURVE" : "--insecure");
    LocalCluster cluster(curve ? "sec-capture" : "sec-capture-plain");
    cluster.StartHead(curve ? std::vector<std::string>{} : std::vector<std::string>{"--insecure"});
    TcpProxy worker_proxy(PortOf(cluster.worker_endpoint()));
    TcpProxy client_proxy(PortOf(cluster.client_endpoint()));
    ASSERT_TRUE(worker_proxy.error().empty() && client_proxy.error().empty());
    cluster.StartWorkerAt(
        worker_proxy.endpoint(), "w0", 1,
        curve ? std::vector<std::string>{} : std::vector<std::string>{"--insecure"});
    const std::string spec = cluster.dir() + "/capture.json";
    std::ofstream(spec) << R"({"name": "quadratic-of-secrets", "trainable": "sleep",
        "num_samples": 2, "param_space": {"sleep_s": 0.001, "tag": "ZtuneSecretConfigValue7f3a"},
        "stop": {"training_iteration": 5}})";
    auto cli = [&](const std::string& args) {
      if (curve)
        return cluster.CliAs(cluster.keys().admin_key_file(), args, true, client_proxy.endpoint());
      return e2e::Run(
          std::string(ZTUNE_CLI_BIN) + " --head " + client_proxy.endpoint() + " --insecure " + args,
          false);
    };
    auto submitted = cli("submit " + spec);
    ASSERT_EQ(submitted.exit_code, 0) << submitted.out << cluster.Logs();
    const std::string exp = submitted.out.substr(0, submitted.out.find_first_of(" \n"));
    ASSERT_EQ(cli("wait " + exp + " --timeout 30 --interval-ms 50").exit_code, 0) << cluster.Logs();
    auto trials = cli("trials " + exp + " --json");
    ASSERT_EQ(trials.exit_code, 0);
    ASSERT_TRUE(Contains(trials.out, "ZtuneSecretConfigValue7f3a")) << "the client saw the config";
    auto results = cli("results " + TrialId(exp, 0) + " --json");
    ASSERT_TRUE(Contains(results.out, "training_iteration"));

    const std::string wire = worker_proxy.Captured() + client_proxy.Captured();
    ASSERT_GT(wire.size(), 1000u) << "the proxies saw no traffic";
    for (const auto& secret : secrets) {
      EXPECT_EQ(Contains(wire, secret), !curve) << secret;
    }
  }
}

}  // namespace
}  // namespace ztune::e2e
