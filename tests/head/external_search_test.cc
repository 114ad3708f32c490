// An external search (search_alg "external", the head's half of ask/tell):
// the head generates no config; each add_trial is one of num_samples; an
// add_trial with wait_ms waits for a trial slot (max_concurrent) and
// wait_trials reports which trials have finished, with their last results.
// Runs the real runner and ClientService on a fake worker fleet.
#include <string>

#include <gtest/gtest.h>

#include "head/client_service.h"
#include "tests/head/trial_runner_fixture.h"

namespace ztune::head {
namespace {

constexpr char kSpec[] = R"({"trainable": "quadratic", "num_samples": 3,
    "param_space": {"lr": {"loguniform": [0.001, 1]}}, "metric": "loss", "mode": "min",
    "search_alg": {"type": "external", "max_concurrent": 2},
    "stop": {"training_iteration": 3}})";

class ExternalSearchTest : public TrialRunnerTest {
 protected:
  ExternalSearchTest() { fleet_->Register("w1", 4); }

  Json Call(const Json& request) {
    ClientService clients(*runner_);
    return clients.Handle(request, ClientCaller::Anonymous());
  }
  std::optional<TimeMs> Waits(const Json& request) {
    ClientService clients(*runner_);
    return clients.Waits(request);
  }
  static Json AddTrial(const std::string& exp, double lr) {
    return Json{{"op", "add_trial"}, {"experiment_id", exp}, {"config", {{"lr", lr}}}};
  }
  static Json WaitTrials(const Json& ids, int64_t wait_ms) {
    return Json{{"op", "wait_trials"}, {"trial_ids", ids}, {"wait_ms", wait_ms}};
  }
  static std::string Code(const Json& reply) {
    return reply.value("ok", false) ? "(ok)" : reply["error"].value("code", std::string());
  }

  // Turns until `id` has finished (bounded).
  void RunUntilFinished(const TrialId& id) {
    for (int i = 0; i < 2000 && !IsFinished(runner_->FindTrial(id)->status); ++i) {
      fleet_->Turn();
      fleet_->Heartbeat();
      clock_.AdvanceMs(10);
    }
    ASSERT_TRUE(IsFinished(runner_->FindTrial(id)->status));
  }
};

TEST_F(ExternalSearchTest, EachAddedConfigIsOneOfNumSamplesAndTheHeadGeneratesNone) {
  const std::string exp = Submit(kSpec);
  for (int i = 0; i < 5; ++i) fleet_->Turn();
  EXPECT_TRUE(runner_->FindExperiment(exp)->trial_ids.empty());
  EXPECT_FALSE(runner_->FindExperiment(exp)->finished);

  for (double lr : {0.1, 0.01, 0.2}) {
    Json reply = Call(AddTrial(exp, lr));
    ASSERT_EQ(Code(reply), "(ok)") << reply.dump();
    if (lr == 0.01) {
      // Two live of max_concurrent 2: no slot, but add_trial without wait_ms adds anyway.
      EXPECT_FALSE(runner_->HasTrialSlot(*runner_->FindExperiment(exp)));
    }
  }
  const Experiment& e = *runner_->FindExperiment(exp);
  EXPECT_EQ(e.next_variant, 3u);
  EXPECT_EQ(e.added_trials, 0u);
  EXPECT_TRUE(e.SearchFinished());
  Json fourth = Call(AddTrial(exp, 0.3));
  EXPECT_EQ(Code(fourth), "FailedPrecondition");
  EXPECT_NE(fourth["error"]["message"].get<std::string>().find("num_samples"), std::string::npos)
      << fourth.dump();
  RunToEnd(exp);
  EXPECT_EQ(runner_->FindExperiment(exp)->trial_ids.size(), 3u);
  EXPECT_EQ(CountStatus(exp, TrialStatus::kTerminated), 3);
}

TEST_F(ExternalSearchTest, AddTrialWithWaitMsTakesOnlyAFreeSlot) {
  const std::string exp = Submit(kSpec);
  const TrialId first(Call(AddTrial(exp, 0.1))["trial_id"].get<std::string>());
  Json waiting = AddTrial(exp, 0.01);
  waiting["wait_ms"] = 500;
  EXPECT_EQ(Waits(waiting), std::nullopt);  // a slot is free: handled at once
  ASSERT_EQ(Code(Call(waiting)), "(ok)");
  Commit();

  Json third = AddTrial(exp, 0.2);
  third["wait_ms"] = 500;
  EXPECT_EQ(Waits(third), std::optional<TimeMs>(500));  // held by the head server
  EXPECT_EQ(Waits(AddTrial(exp, 0.2)), std::nullopt);   // without wait_ms: no waiting
  // Its deadline passed without a slot: refused, nothing added.
  Json refused = Call(third);
  EXPECT_EQ(Code(refused), "Unavailable");
  EXPECT_NE(refused["error"]["message"].get<std::string>().find("2 trials live of at most 2"),
            std::string::npos)
      << refused.dump();
  storage::WriteBatch batch;
  runner_->FlushTo(batch);
  EXPECT_TRUE(batch.empty()) << "a refused add_trial changed state";
  EXPECT_EQ(runner_->FindExperiment(exp)->next_variant, 2u);

  RunUntilFinished(first);
  EXPECT_EQ(Waits(third), std::nullopt);  // a slot came free
  ASSERT_EQ(Code(Call(third)), "(ok)");
  RunToEnd(exp);
}

TEST_F(ExternalSearchTest, TheSearchGoesOnWhereItStoodAfterAHeadRestart) {
  const std::string exp = Submit(kSpec);
  ASSERT_EQ(Code(Call(AddTrial(exp, 0.1))), "(ok)");
  ASSERT_EQ(Code(Call(AddTrial(exp, 0.01))), "(ok)");
  Commit();
  CrashHead();
  fleet_->Reregister(WorkerId("w1"), 4);
  const Experiment* e = runner_->FindExperiment(exp);
  ASSERT_NE(e, nullptr);
  EXPECT_TRUE(e->spec.ExternalSearch());
  EXPECT_EQ(e->spec.search_alg.max_concurrent, 2);
  EXPECT_EQ(e->next_variant, 2u);
  EXPECT_EQ(e->trial_ids.size(), 2u);
  ASSERT_EQ(Code(Call(AddTrial(exp, 0.2))), "(ok)");
  EXPECT_EQ(Code(Call(AddTrial(exp, 0.3))), "FailedPrecondition");
  RunToEnd(exp);
  EXPECT_EQ(CountStatus(exp, TrialStatus::kTerminated), 3);
}

TEST_F(ExternalSearchTest, WaitTrialsReportsTheFinishedWithTheirLastResults) {
  const std::string exp = Submit(kSpec);
  const std::string a = Call(AddTrial(exp, 0.1))["trial_id"];
  const std::string b = Call(AddTrial(exp, 0.01))["trial_id"];
  const Json ids{a, b};
  EXPECT_EQ(Waits(WaitTrials(ids, 1000)), std::optional<TimeMs>(1000));
  Json none = Call(WaitTrials(ids, 1000));
  ASSERT_EQ(Code(none), "(ok)") << none.dump();
  EXPECT_TRUE(none["finished"].empty());
  EXPECT_EQ(none["unfinished"], ids);

  RunUntilFinished(TrialId(a));
  EXPECT_EQ(Waits(WaitTrials(ids, 1000)), std::nullopt);
  Json one = Call(WaitTrials(ids, 1000));
  // b runs beside a and may have finished in the same turn.
  ASSERT_GE(one["finished"].size(), 1u) << one.dump();
  EXPECT_EQ(one["finished"].size() + one["unfinished"].size(), 2u);
  EXPECT_EQ(one["finished"][0]["trial_id"], a);  // in the order asked
  EXPECT_EQ(one["finished"][0]["status"], "TERMINATED");
  EXPECT_EQ(one["finished"][0]["last_result"]["training_iteration"], 3);
  EXPECT_TRUE(one["finished"][0]["last_result"].contains("loss"));
  for (const Json& id : one["unfinished"]) EXPECT_NE(id, a);
}

TEST_F(ExternalSearchTest, BadWaitingRequestsAreRefusedAtOnceNamingTheArgument) {
  const std::string exp = Submit(kSpec);
  const std::string a = Call(AddTrial(exp, 0.1))["trial_id"];
  struct Case {
    Json request;
    std::string code;
    std::string names;
  };
  const std::vector<Case> cases = {
      {WaitTrials(Json::array(), 10), "InvalidArgument", "trial_ids"},
      {WaitTrials(Json{a, a}, 10), "InvalidArgument", "twice"},
      {WaitTrials(Json{a, 5}, 10), "InvalidArgument", "trial_ids"},
      {WaitTrials(Json{a, "e0001_99999"}, 10), "NotFound", "e0001_99999"},
      {WaitTrials(Json{a}, 60001), "InvalidArgument", "wait_ms"},
      {WaitTrials(Json{a}, -1), "InvalidArgument", "wait_ms"},
      {Json{{"op", "add_trial"},
            {"experiment_id", exp},
            {"config", Json::object()},
            {"wait_ms", "soon"}},
       "InvalidArgument", "wait_ms"},
      {Json{{"op", "add_trial"},
            {"experiment_id", "e0404"},
            {"config", Json::object()},
            {"wait_ms", 100}},
       "NotFound", "e0404"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(Waits(c.request), std::nullopt) << c.request.dump();  // answered now
    Json reply = Call(c.request);
    EXPECT_EQ(Code(reply), c.code) << c.request.dump() << " -> " << reply.dump();
    EXPECT_NE(reply.dump().find(c.names), std::string::npos) << reply.dump();
  }
}

TEST(SearchAlgSpecTest, ParsesTypesAndLimitsAndRefusesNamingTheKey) {
  auto spec = [](const std::string& search_alg) {
    return ExperimentSpec::Parse(
        Json::parse(R"({"trainable": "quadratic", "search_alg": )" + search_alg + "}"), 1);
  };
  ASSERT_TRUE(spec("null").ok());
  EXPECT_EQ(spec("null")->search_alg.type, SearchAlgType::kBasicVariant);
  auto external = spec(R"({"type": "external", "max_concurrent": 4})");
  ASSERT_TRUE(external.ok()) << external.status().ToString();
  EXPECT_TRUE(external->ExternalSearch());
  EXPECT_EQ(external->ConcurrencyLimit(), 4);
  // Stored and loaded again: the same.
  auto again = ExperimentSpec::Parse(external->ToJson(), 2);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->ToJson(), external->ToJson());
  for (const auto& [bad, key] : std::vector<std::pair<std::string, std::string>>{
           {R"({"type": "optuna"})", "search_alg.type"},
           {R"({"max_concurent": 4})", "max_concurent"},
           {R"({"max_concurrent": -1})", "search_alg.max_concurrent"},
           {R"("external")", "search_alg"}}) {
    auto r = spec(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find(key), std::string::npos) << r.status().message();
  }
}

TEST(SearchAlgSpecTest, TheConcurrencyLimitIsTheSmallerOneSet) {
  ExperimentSpec s;
  EXPECT_EQ(s.ConcurrencyLimit(), 0);
  s.max_concurrent_trials = 3;
  EXPECT_EQ(s.ConcurrencyLimit(), 3);
  s.search_alg.max_concurrent = 5;
  EXPECT_EQ(s.ConcurrencyLimit(), 3);
  s.search_alg.max_concurrent = 2;
  EXPECT_EQ(s.ConcurrencyLimit(), 2);
  s.max_concurrent_trials = 0;
  EXPECT_EQ(s.ConcurrencyLimit(), 2);
}

}  // namespace
}  // namespace ztune::head
