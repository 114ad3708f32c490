// ClientService authorization (docs/security.md): every role may read; submit
// and the controls need role submit and, short of admin, an experiment the
// caller's key submitted. A refusal is PermissionDenied and changes nothing:
// no record to commit, no command to a worker.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/security/curve_keys.h"
#include "head/client_service.h"
#include "tests/head/trial_runner_fixture.h"

namespace ztune::head {
namespace {

constexpr char kSpec[] = R"({"trainable": "quadratic", "num_samples": 3,
    "stop": {"training_iteration": 1000}})";

std::string NewKey() {
  auto pair = security::GenerateKeyPair();
  EXPECT_TRUE(pair.ok()) << pair.status().ToString();
  return pair.ok() ? pair->public_key.z85() : std::string();
}

class ClientAuthorizationTest : public TrialRunnerTest {
 protected:
  ClientAuthorizationTest()
      : reader_{NewKey(), "reader", ClientRole::kRead},
        alice_{NewKey(), "alice", ClientRole::kSubmit},
        bob_{NewKey(), "bob", ClientRole::kSubmit},
        admin_{NewKey(), "admin", ClientRole::kAdmin} {
    // Submit checks that some worker hosts the trainable.
    fleet_->Register("w1", 2);
  }

  // A ClientService per call: it holds the runner by reference, and Reset()
  // (a head restart) replaces the runner.
  Json Call(const Json& request, const ClientCaller& caller) {
    ClientService clients(*runner_);
    return clients.Handle(request, caller);
  }

  // Submits kSpec as `caller` and commits it (the turn's end); its id.
  std::string SubmitAs(const ClientCaller& caller) {
    Json reply = Call(Json{{"op", "submit"}, {"spec", Json::parse(kSpec)}}, caller);
    EXPECT_TRUE(reply.value("ok", false)) << reply.dump();
    Commit();
    return reply.value("experiment_id", std::string());
  }

  static std::string ErrorCode(const Json& reply) {
    if (reply.value("ok", true) || !reply.contains("error")) return "(ok)";
    return reply["error"].value("code", std::string());
  }
  static std::string ErrorMessage(const Json& reply) {
    return reply.contains("error") ? reply["error"].value("message", std::string()) : "";
  }

  // Nothing to commit and nothing sent since the last commit: what a refused
  // request must leave behind.
  void ExpectNothingChanged(size_t sent_before) {
    storage::WriteBatch batch;
    runner_->FlushTo(batch);
    EXPECT_TRUE(batch.empty()) << "a refused request changed state";
    EXPECT_EQ(sink_.sent.size(), sent_before) << "a refused request sent a command";
  }

  ClientCaller reader_;
  ClientCaller alice_;
  ClientCaller bob_;
  ClientCaller admin_;
};

TEST_F(ClientAuthorizationTest, ReaderMayReadEverything) {
  const std::string exp = SubmitAs(alice_);
  const TrialId trial = runner_->FindExperiment(exp)->trial_ids.at(0);
  const Json reads[] = {
      Json{{"op", "experiments"}},
      Json{{"op", "experiment"}, {"experiment_id", exp}},
      Json{{"op", "status"}},
      Json{{"op", "status"}, {"experiment_id", exp}},
      Json{{"op", "trials"}, {"experiment_id", exp}},
      Json{{"op", "trial"}, {"trial_id", trial}},
      Json{{"op", "results"}, {"trial_id", trial}},
      Json{{"op", "workers"}},
  };
  for (const ClientCaller* caller : {&reader_, &bob_, &alice_, &admin_}) {
    for (const Json& request : reads) {
      Json reply = Call(request, *caller);
      EXPECT_TRUE(reply.value("ok", false))
          << caller->name << " " << request.dump() << " -> " << reply.dump().substr(0, 300);
    }
  }
}

TEST_F(ClientAuthorizationTest, ReaderMayNotSubmitOrControl) {
  const std::string exp = SubmitAs(alice_);
  const TrialId trial = runner_->FindExperiment(exp)->trial_ids.at(0);
  const size_t sent = sink_.sent.size();
  const Json mutations[] = {
      Json{{"op", "submit"}, {"spec", Json::parse(kSpec)}},
      Json{{"op", "stop"}, {"id", exp}},
      Json{{"op", "stop"}, {"id", trial}},
      // Refused for the role before anything is looked up.
      Json{{"op", "stop"}, {"id", "no-such-experiment"}},
      Json{{"op", "add_trial"}, {"experiment_id", exp}, {"config", {{"lr", 0.1}}}},
      Json{{"op", "pause"}, {"id", trial}},
      Json{{"op", "resume"}, {"id", trial}},
      Json{{"op", "resume"}, {"id", exp}},
  };
  for (const Json& request : mutations) {
    Json reply = Call(request, reader_);
    EXPECT_EQ(ErrorCode(reply), "PermissionDenied") << request.dump() << " -> " << reply.dump();
    EXPECT_NE(ErrorMessage(reply).find("'reader' (role read)"), std::string::npos)
        << ErrorMessage(reply);
    EXPECT_NE(ErrorMessage(reply).find(request["op"].get<std::string>()), std::string::npos)
        << ErrorMessage(reply);
  }
  EXPECT_EQ(runner_->experiments().size(), 1u);
  ExpectNothingChanged(sent);
}

TEST_F(ClientAuthorizationTest, SubmitRecordsTheCallerAsOwner) {
  const std::string alice_key = alice_.key;
  const std::string exp = SubmitAs(alice_);
  EXPECT_EQ(runner_->FindExperiment(exp)->owner.key, alice_key);
  EXPECT_EQ(runner_->FindExperiment(exp)->owner.name, "alice");

  const Json owner{{"name", "alice"}, {"key", alice_key}};
  Json one = Call(Json{{"op", "experiment"}, {"experiment_id", exp}}, reader_);
  ASSERT_TRUE(one.value("ok", false)) << one.dump();
  EXPECT_EQ(one["experiment"]["owner"], owner);
  Json all = Call(Json{{"op", "experiments"}}, reader_);
  ASSERT_EQ(all["experiments"].size(), 1u);
  EXPECT_EQ(all["experiments"][0]["owner"], owner);
}

TEST_F(ClientAuthorizationTest, OwnerSurvivesAHeadRestart) {
  const std::string exp = SubmitAs(alice_);
  CrashHead();
  ASSERT_NE(runner_->FindExperiment(exp), nullptr);
  EXPECT_EQ(runner_->FindExperiment(exp)->owner.key, alice_.key);
  EXPECT_EQ(runner_->FindExperiment(exp)->owner.name, "alice");
  // Still hers after the restart: bob is refused, she is not.
  EXPECT_EQ(ErrorCode(Call(Json{{"op", "stop"}, {"id", exp}}, bob_)), "PermissionDenied");
  EXPECT_TRUE(Call(Json{{"op", "stop"}, {"id", exp}}, alice_).value("ok", false));
}

TEST_F(ClientAuthorizationTest, SubmitterMayNotTouchAnotherUsersExperiment) {
  const std::string exp = SubmitAs(alice_);
  const Experiment* e = runner_->FindExperiment(exp);
  const std::vector<TrialId> trials_before = e->trial_ids;
  ASSERT_GE(trials_before.size(), 2u);
  const TrialId trial = trials_before[1];
  const TrialStatus status_before = runner_->FindTrial(trial)->status;
  const size_t sent = sink_.sent.size();

  const Json refused[] = {
      Json{{"op", "stop"}, {"id", exp}},
      Json{{"op", "stop"}, {"id", trial}},
      Json{{"op", "pause"}, {"id", trial}},
      Json{{"op", "pause"}, {"trial_id", trial}},
      Json{{"op", "resume"}, {"id", trial}},
      Json{{"op", "resume"}, {"trial_id", trial}},
      Json{{"op", "resume"}, {"id", exp}},
      Json{{"op", "add_trial"}, {"experiment_id", exp}, {"config", {{"lr", 0.1}}}},
  };
  for (const Json& request : refused) {
    Json reply = Call(request, bob_);
    EXPECT_EQ(ErrorCode(reply), "PermissionDenied") << request.dump() << " -> " << reply.dump();
    EXPECT_NE(ErrorMessage(reply).find("'alice'"), std::string::npos) << ErrorMessage(reply);
    EXPECT_NE(ErrorMessage(reply).find(exp), std::string::npos) << ErrorMessage(reply);
  }
  // The key is the identity, not the name: a second "alice" is refused too.
  const ClientCaller impostor{bob_.key, "alice", ClientRole::kSubmit};
  EXPECT_EQ(ErrorCode(Call(Json{{"op", "stop"}, {"id", exp}}, impostor)), "PermissionDenied");

  e = runner_->FindExperiment(exp);
  EXPECT_FALSE(e->stopped);
  EXPECT_FALSE(e->finished);
  EXPECT_EQ(e->trial_ids, trials_before);
  EXPECT_EQ(runner_->FindTrial(trial)->status, status_before);
  EXPECT_FALSE(runner_->FindTrial(trial)->held);
  ExpectNothingChanged(sent);
}

// A trial added with restore_from starts from that trial's checkpoint: a
// submit key may not add one to its own experiment from another user's trial.
TEST_F(ClientAuthorizationTest, SubmitterMayNotRestoreFromAnotherUsersTrial) {
  const std::string alices = SubmitAs(alice_);
  const std::string bobs = SubmitAs(bob_);
  const TrialId alice_trial = runner_->FindExperiment(alices)->trial_ids[0];
  const size_t bob_trials = runner_->FindExperiment(bobs)->trial_ids.size();
  const size_t sent = sink_.sent.size();
  Json reply = Call(Json{{"op", "add_trial"},
                         {"experiment_id", bobs},
                         {"config", {{"lr", 0.1}}},
                         {"restore_from", alice_trial}},
                    bob_);
  EXPECT_EQ(ErrorCode(reply), "PermissionDenied") << reply.dump();
  EXPECT_NE(ErrorMessage(reply).find(alice_trial.str()), std::string::npos) << reply.dump();
  EXPECT_EQ(runner_->FindExperiment(bobs)->trial_ids.size(), bob_trials);
  ExpectNothingChanged(sent);
}

TEST_F(ClientAuthorizationTest, SubmitterControlsItsOwnExperiment) {
  const std::string exp = SubmitAs(alice_);
  const std::vector<TrialId> trials = runner_->FindExperiment(exp)->trial_ids;
  ASSERT_GE(trials.size(), 3u);

  Json added =
      Call(Json{{"op", "add_trial"}, {"experiment_id", exp}, {"config", {{"lr", 0.1}}}}, alice_);
  ASSERT_TRUE(added.value("ok", false)) << added.dump();
  EXPECT_EQ(runner_->FindExperiment(exp)->trial_ids.size(), trials.size() + 1);

  Json paused = Call(Json{{"op", "pause"}, {"id", trials[0]}}, alice_);
  ASSERT_TRUE(paused.value("ok", false)) << paused.dump();
  EXPECT_EQ(paused["status"], "PAUSED");
  Json resumed = Call(Json{{"op", "resume"}, {"trial_id", trials[0]}}, alice_);
  ASSERT_TRUE(resumed.value("ok", false)) << resumed.dump();

  Json one = Call(Json{{"op", "stop"}, {"id", trials[1]}}, alice_);
  ASSERT_TRUE(one.value("ok", false)) << one.dump();
  EXPECT_EQ(one["stopped"], Json::array({trials[1]}));
  EXPECT_FALSE(runner_->FindExperiment(exp)->stopped);

  Json all = Call(Json{{"op", "stop"}, {"id", exp}}, alice_);
  ASSERT_TRUE(all.value("ok", false)) << all.dump();
  EXPECT_TRUE(runner_->FindExperiment(exp)->stopped);
}

TEST_F(ClientAuthorizationTest, AdminControlsAnyExperiment) {
  const std::string alices = SubmitAs(alice_);
  const std::string bobs = SubmitAs(bob_);
  const TrialId trial = runner_->FindExperiment(alices)->trial_ids.at(0);

  Json paused = Call(Json{{"op", "pause"}, {"id", trial}}, admin_);
  ASSERT_TRUE(paused.value("ok", false)) << paused.dump();
  Json added =
      Call(Json{{"op", "add_trial"}, {"experiment_id", bobs}, {"config", {{"lr", 0.2}}}}, admin_);
  ASSERT_TRUE(added.value("ok", false)) << added.dump();
  for (const std::string& exp : {alices, bobs}) {
    Json reply = Call(Json{{"op", "stop"}, {"id", exp}}, admin_);
    ASSERT_TRUE(reply.value("ok", false)) << reply.dump();
    EXPECT_TRUE(runner_->FindExperiment(exp)->stopped) << exp;
  }
}

TEST_F(ClientAuthorizationTest, AnonymousExperimentBelongsToAdminsOnly) {
  const std::string exp = SubmitAs(ClientCaller::Anonymous());
  EXPECT_TRUE(runner_->FindExperiment(exp)->owner.key.empty());
  Json doc = Call(Json{{"op", "experiment"}, {"experiment_id", exp}}, reader_);
  ASSERT_TRUE(doc.value("ok", false)) << doc.dump();
  EXPECT_TRUE(doc["experiment"]["owner"].is_null()) << doc["experiment"]["owner"].dump();

  const size_t sent = sink_.sent.size();
  Json refused = Call(Json{{"op", "stop"}, {"id", exp}}, alice_);
  EXPECT_EQ(ErrorCode(refused), "PermissionDenied") << refused.dump();
  EXPECT_NE(ErrorMessage(refused).find("no client key"), std::string::npos)
      << ErrorMessage(refused);
  EXPECT_FALSE(runner_->FindExperiment(exp)->stopped);
  ExpectNothingChanged(sent);

  Json stopped = Call(Json{{"op", "stop"}, {"id", exp}}, admin_);
  ASSERT_TRUE(stopped.value("ok", false)) << stopped.dump();
  EXPECT_TRUE(runner_->FindExperiment(exp)->stopped);
}

TEST_F(ClientAuthorizationTest, UnknownTargetsAreNotFoundNotPermissionDenied) {
  SubmitAs(alice_);
  struct Case {
    Json request;
    const char* code;
  } cases[] = {
      {Json{{"op", "stop"}, {"id", "no-such-experiment"}}, "NotFound"},
      {Json{{"op", "add_trial"},
            {"experiment_id", "no-such-experiment"},
            {"config", Json::object()}},
       "NotFound"},
      {Json{{"op", "pause"}, {"id", "no-such-trial"}}, "NotFound"},
      {Json{{"op", "resume"}, {"id", "no-such-trial"}}, "NotFound"},
      // Malformed requests are the client's mistake, whoever sends them.
      {Json{{"op", "stop"}}, "InvalidArgument"},
      {Json{{"op", "stop"}, {"id", 7}}, "InvalidArgument"},
  };
  for (const Case& c : cases) {
    Json reply = Call(c.request, alice_);
    EXPECT_EQ(ErrorCode(reply), c.code) << c.request.dump() << " -> " << reply.dump();
  }
}

// Issue 14: `resume e0099` said "unknown trial".
TEST_F(ClientAuthorizationTest, PauseAndResumeNameWhatTheirIdIs) {
  const std::string exp = SubmitAs(alice_);
  Json reply = Call(Json{{"op", "resume"}, {"id", "e0099"}}, alice_);
  EXPECT_EQ(ErrorCode(reply), "NotFound") << reply.dump();
  EXPECT_EQ(ErrorMessage(reply), "unknown experiment 'e0099'") << reply.dump();
  reply = Call(Json{{"op", "pause"}, {"id", "e0099"}}, alice_);
  EXPECT_EQ(ErrorMessage(reply), "unknown experiment 'e0099'") << reply.dump();
  reply = Call(Json{{"op", "resume"}, {"id", "e0099_00001"}}, alice_);
  EXPECT_EQ(ErrorMessage(reply), "unknown trial 'e0099_00001'") << reply.dump();
  reply = Call(Json{{"op", "pause"}, {"id", exp}}, alice_);
  EXPECT_EQ(ErrorCode(reply), "InvalidArgument") << reply.dump();
  EXPECT_EQ(ErrorMessage(reply), "'" + exp + "' is an experiment; pause takes a trial id")
      << reply.dump();
}

// Issue 14: a spec without a stop condition is accepted, and submit's reply
// and the experiment's doc say that its trials run until stopped.
TEST_F(ClientAuthorizationTest, SubmitAndStatusWarnOfASpecThatNeverStops) {
  Json reply = Call(Json{{"op", "submit"}, {"spec", Json{{"trainable", "quadratic"}}}}, alice_);
  ASSERT_TRUE(reply.value("ok", false)) << reply.dump();
  ASSERT_EQ(reply["warnings"].size(), 1u) << reply.dump();
  EXPECT_NE(reply["warnings"][0].get<std::string>().find("no stop condition"), std::string::npos);
  const std::string exp = reply["experiment_id"];
  Json doc = Call(Json{{"op", "experiment"}, {"experiment_id", exp}}, alice_);
  EXPECT_EQ(doc["experiment"]["warnings"], reply["warnings"]) << doc.dump();
  reply = Call(Json{{"op", "submit"}, {"spec", Json::parse(kSpec)}}, alice_);
  EXPECT_TRUE(reply["warnings"].empty()) << reply.dump();
}

}  // namespace
}  // namespace ztune::head
