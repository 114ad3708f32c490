// Bad specs through the real CLI and head: an infeasible request and a
// malformed spec are refused with clear errors and change nothing; then a valid
// spec completes on the same head.
#include <gtest/gtest.h>

#include "tests/e2e/cluster.h"

namespace ztune::e2e {
namespace {

TEST(SpecErrorsE2ETest, RejectsBadSpecsThenRunsAValidOne) {
  LocalCluster cluster("spec-errors");
  ASSERT_TRUE(cluster.StartHeadAndWorkers({"a"}, 2)) << cluster.Logs();

  std::string infeasible = cluster.dir() + "/infeasible.json";
  std::ofstream(infeasible) << R"({"trainable": "quadratic",
      "resources": {"bundles": [{"CPU": 64, "GPU": 1}]}})";
  auto r = cluster.Cli("submit " + infeasible);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("infeasible"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("CPU: 64"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("largest worker has {CPU: 2}"), std::string::npos) << r.out;

  std::string unknown_key = cluster.dir() + "/unknown.json";
  std::ofstream(unknown_key) << R"({"trainable": "quadratic", "num_sample": 4})";
  r = cluster.Cli("submit " + unknown_key);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("num_sample"), std::string::npos) << r.out;

  // The real worker declares what its built-ins export (REGISTER).
  std::string onnx = cluster.dir() + "/onnx.json";
  std::ofstream(onnx) << R"({"trainable": "quadratic", "export_formats": ["json", "onnx"]})";
  r = cluster.Cli("submit " + onnx);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("spec.export_formats: trainable 'quadratic' cannot export 'onnx' (its "
                       "workers export: json)"),
            std::string::npos)
      << r.out;

  std::string not_json = cluster.dir() + "/broken.json";
  std::ofstream(not_json) << R"({"trainable": "quadratic", )";
  r = cluster.Cli("submit " + not_json);
  EXPECT_EQ(r.exit_code, 2) << r.out;

  r = cluster.Cli("submit " + cluster.dir() + "/does-not-exist.json");
  EXPECT_EQ(r.exit_code, 2) << r.out;

  // Raw garbage straight at the client socket is answered, not fatal.
  Json exps = cluster.CliJson("experiments");
  ASSERT_TRUE(exps.is_object()) << cluster.Logs();
  EXPECT_TRUE(exps["experiments"].empty());

  r = cluster.Cli("trial e0042_00000");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("unknown trial"), std::string::npos) << r.out;

  std::string valid = cluster.dir() + "/valid.json";
  std::ofstream(valid) << R"({"trainable": "quadratic", "num_samples": 2,
      "stop": {"training_iteration": 5}, "metric": "loss", "mode": "min"})";
  r = cluster.Cli("submit " + valid, /*stdout_only=*/true);
  ASSERT_EQ(r.exit_code, 0) << r.out << cluster.Logs();
  std::string exp = r.out.substr(0, r.out.find_first_of(" \n"));
  r = cluster.Cli("wait " + exp + " --timeout 60");
  EXPECT_EQ(r.exit_code, 0) << r.out << cluster.Logs();
  Json trials = cluster.CliJson("trials " + exp);
  ASSERT_EQ(trials["trials"].size(), 2u);
  for (const auto& t : trials["trials"]) EXPECT_EQ(t["status"], "TERMINATED");
  EXPECT_TRUE(cluster.head().Running());
}

}  // namespace
}  // namespace ztune::e2e

#include <zmq.hpp>

#include "common/protocol/codec.h"
#include "common/zmq/socket_util.h"

namespace ztune::e2e {
namespace {

std::vector<std::string> RecvWithin(zmq::socket_t& s, int ms) {
  zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
  zmq::poll(&item, 1, std::chrono::milliseconds(ms));
  std::vector<std::string> frames;
  if (!(item.revents & ZMQ_POLLIN)) return frames;
  auto parts = zmqutil::RecvMultipart(s);
  if (!parts.ok()) return frames;
  for (auto& p : *parts) frames.push_back(p.to_string());
  return frames;
}

// garbage on both sockets -> answered or dropped, never fatal; the store keeps
// what it had.
TEST(BadInputE2ETest, HeadSurvivesMalformedFramesAndUnknownSenders) {
  LocalCluster cluster("bad-input");
  cluster.StartHead();
  zmq::context_t ctx(1);

  zmq::socket_t worker(ctx, zmq::socket_type::dealer);
  ASSERT_TRUE(zmqutil::SetBytesOption(worker, ZMQ_ROUTING_ID, "intruder").ok());
  ASSERT_TRUE(security::ApplyCurveClient(
                  worker, cluster.keys().ClientKeys(cluster.keys().worker_key_file()))
                  .ok());
  ASSERT_TRUE(zmqutil::SetIntOption(worker, ZMQ_LINGER, 0).ok());
  ASSERT_TRUE(zmqutil::Connect(worker, cluster.worker_endpoint()).ok());
  // Garbage frames, a bad version, an unknown command byte, a truncated header.
  ASSERT_TRUE(zmqutil::SendFrames(worker, {"hello", "world"}).ok());
  ASSERT_TRUE(zmqutil::SendFrames(worker, {"ZTUNE9", std::string(1, '\x04'), "\x80"}).ok());
  ASSERT_TRUE(zmqutil::SendFrames(worker, {"ZTUNE1", std::string(1, '\x63'), "\x80"}).ok());
  ASSERT_TRUE(zmqutil::SendFrames(worker, {"ZTUNE1", std::string(1, '\x01'), "\x85\xa1"}).ok());
  // A well-formed message from a worker that never registered: told to re-register.
  ASSERT_TRUE(zmqutil::SendFrames(
                  worker, protocol::Encode(protocol::Message{protocol::Heartbeat{}, {}}))
                  .ok());
  auto reply = RecvWithin(worker, 5000);
  ASSERT_FALSE(reply.empty()) << cluster.Logs();
  auto decoded = protocol::Decode(reply);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  ASSERT_TRUE(std::holds_alternative<protocol::Disconnect>(decoded->body));
  EXPECT_NE(std::get<protocol::Disconnect>(decoded->body).reason.find("register"),
            std::string::npos);
  // A REGISTER without a worker id is refused too (one naming another key's
  // worker id: SecurityE2ETest).
  protocol::Register fake;
  fake.worker_id = "";
  fake.resources = {{"CPU", 1000}};
  ASSERT_TRUE(zmqutil::SendFrames(worker, protocol::Encode(protocol::Message{fake, {}})).ok());

  zmq::socket_t client(ctx, zmq::socket_type::dealer);
  ASSERT_TRUE(zmqutil::SetIntOption(client, ZMQ_LINGER, 0).ok());
  ASSERT_TRUE(
      security::ApplyCurveClient(client, cluster.keys().ClientKeys(cluster.keys().admin_key_file()))
          .ok());
  ASSERT_TRUE(zmqutil::Connect(client, cluster.client_endpoint()).ok());
  ASSERT_TRUE(zmqutil::SendFrames(client, {"ZTUNE1", "{not json"}).ok());
  auto r = RecvWithin(client, 5000);
  ASSERT_EQ(r.size(), 2u);
  Json err = Json::parse(r[1]);
  EXPECT_FALSE(err["ok"].get<bool>());
  EXPECT_EQ(err["error"]["code"], "InvalidArgument");
  ASSERT_TRUE(zmqutil::SendFrames(client, {"ZTUNE1", R"({"op": "frobnicate", "rid": 5})"}).ok());
  r = RecvWithin(client, 5000);
  ASSERT_EQ(r.size(), 2u);
  err = Json::parse(r[1]);
  EXPECT_EQ(err["rid"], 5);
  EXPECT_NE(err["error"]["message"].get<std::string>().find("unknown op"), std::string::npos);
  ASSERT_TRUE(zmqutil::SendFrames(client, {"only-one-frame"}).ok());
  r = RecvWithin(client, 5000);
  ASSERT_EQ(r.size(), 2u);

  EXPECT_TRUE(cluster.head().Running());
  Json workers = cluster.CliJson("workers");
  ASSERT_TRUE(workers.is_object()) << cluster.Logs();
  EXPECT_TRUE(workers["workers"].empty()) << workers.dump();
  Json exps = cluster.CliJson("experiments");
  EXPECT_TRUE(exps["experiments"].empty());
}

// Issue 14: an unknown command said only "A subcommand is required".
TEST(CliUsageE2ETest, AnUnknownCommandSaysSoAndSuggestsTheNearestOne) {
  const std::string cli = ZTUNE_CLI_BIN;
  CommandResult r = e2e::Run(cli + " stauts");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("ztune: unknown command 'stauts' (did you mean 'status'?)"),
            std::string::npos)
      << r.out;
  // After global options, and one that takes a value: still the command word.
  r = e2e::Run(cli + " --timeout-ms 5 --insecure frobnicate x");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("unknown command 'frobnicate'"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("did you mean"), std::string::npos) << r.out;
  // No command at all is CLI11's own message; a known one parses.
  r = e2e::Run(cli);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("A subcommand is required"), std::string::npos) << r.out;
  r = e2e::Run(cli + " keygen --help");
  EXPECT_EQ(r.exit_code, 0) << r.out;
}

}  // namespace
}  // namespace ztune::e2e
