// HyperBandScheduler (Ray Tune's synchronous HyperBand with Ray 2.7's
// milestone fix): Ray's (n0, r0) table, how trials fill brackets and bands,
// successive halving on scripted results (who pauses, who is stopped, who runs
// on), trials that end or fail inside a bracket, and the state a restarted
// head rebuilds from, checked against an uninterrupted run at every step.
#include "head/hyperband_scheduler.h"

#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace ztune::head {
namespace {

constexpr auto kStop = SchedulerDecision::kStop;
constexpr auto kPause = SchedulerDecision::kPause;
constexpr auto kContinue = SchedulerDecision::kContinue;
using Kind = SchedulerAction::Kind;

HyperBandOptions Options(double max_t = 81, double eta = 3, bool maximize = true) {
  HyperBandOptions o;
  o.metric = "m";
  o.maximize = maximize;
  o.max_t = max_t;
  o.reduction_factor = eta;
  return o;
}

TrialId Id(int i) {
  return TrialId("e0001_" + std::string(5 - std::to_string(i).size(), '0') + std::to_string(i));
}

const StoredResultsReader kNoResults = [] {
  return Result<std::vector<Json>>(std::vector<Json>());
};

// The part of the runner a scheduler sees: trials with their status, last
// result and scheduler state, results handed in one at a time, and the
// scheduler's actions applied as TrialLifecycle::ApplySchedulerActions does.
struct Harness {
  explicit Harness(HyperBandOptions o) : options(o), hb(std::make_unique<HyperBandScheduler>(o)) {}

  void Add(int i) {
    Trial t;
    t.experiment_id = "e0001";
    t.trial_id = Id(i);
    t.status = TrialStatus::kPending;
    ASSERT_TRUE(hb->AddTrial(t, kNoResults).ok());
    trials[i] = std::move(t);
  }
  void AddRange(int from, int to) {
    for (int i = from; i < to; ++i) Add(i);
  }
  SchedulerDecision Report(int i, double time, double m) {
    Trial& t = trials.at(i);
    t.status = TrialStatus::kRunning;
    const Json r{{"training_iteration", time}, {"m", m}};
    const SchedulerDecision d = hb->OnTrialResult(t, r, ExperimentView{});
    t.last_result = r;
    if (d == kPause) t.status = TrialStatus::kPaused;
    if (d == kStop) End(i, TrialStatus::kTerminated);
    Apply();
    return d;
  }
  void End(int i, TrialStatus status) {
    Trial& t = trials.at(i);
    t.status = status;
    if (status == TrialStatus::kError) {
      hb->OnTrialError(t);
    } else {
      hb->OnTrialComplete(t);
    }
  }
  void Fail(int i) {
    End(i, TrialStatus::kError);
    Apply();
  }
  void Complete(int i) {
    End(i, TrialStatus::kTerminated);
    Apply();
  }
  void Apply() {
    for (auto actions = hb->TakeActions(); !actions.empty(); actions = hb->TakeActions()) {
      for (SchedulerAction& a : actions) {
        log.push_back(a.trial_id + (a.kind == Kind::kStop ? " stop " : " release ") +
                      a.state.dump());
        Trial& t = trials.at(Index(a.trial_id));
        t.scheduler_state = a.state;
        if (IsFinished(t.status)) continue;
        if (a.kind == Kind::kStop) End(Index(a.trial_id), TrialStatus::kTerminated);
      }
    }
  }
  static int Index(const TrialId& id) { return std::stoi(id.str().substr(6)); }
  std::vector<int> Live(int i) const {
    std::vector<int> out;
    const std::optional<HyperBandScheduler::BracketView> b = hb->BracketOf(Id(i));
    for (const TrialId& id : b->live) out.push_back(Index(id));
    return out;
  }
  std::vector<int> WithStatus(TrialStatus s) const {
    std::vector<int> out;
    for (const auto& [i, t] : trials) {
      if (t.status == s) out.push_back(i);
    }
    return out;
  }
  // A head restarted on what was committed: the trials as they are now.
  std::unique_ptr<HyperBandScheduler> Restarted() const {
    auto fresh = std::make_unique<HyperBandScheduler>(options);
    for (const auto& [i, t] : trials) {
      Trial copy = t;
      EXPECT_TRUE(fresh->AddTrial(copy, kNoResults).ok()) << t.trial_id;
    }
    return fresh;
  }

  HyperBandOptions options;
  std::unique_ptr<HyperBandScheduler> hb;
  std::map<int, Trial> trials;
  std::vector<std::string> log;  // actions, in order
};

TEST(HyperBandSchedulerTest, BracketTableMatchesRays) {
  // Ray's docs and tests for max_t 81, eta 3: s_max_1 5, (n0, r0) per bracket.
  HyperBandScheduler s(Options(81, 3));
  ASSERT_EQ(s.BracketsPerBand(), 5);
  const std::vector<std::pair<int64_t, int64_t>> table{{5, 81}, {8, 27}, {15, 9}, {34, 3}, {81, 1}};
  for (int64_t b = 0; b < 5; ++b) {
    EXPECT_EQ(s.InitialSize(b), table[b].first) << "s=" << b;
    EXPECT_EQ(s.InitialMilestone(b), table[b].second) << "s=" << b;
  }
  // Ray's testConfigSameEta with reduction_factor 10, max_t 1000.
  HyperBandScheduler ten(Options(1000, 10));
  ASSERT_EQ(ten.BracketsPerBand(), 4);
  EXPECT_EQ(ten.InitialSize(0), 4);
  EXPECT_EQ(ten.InitialMilestone(0), 1000);
  EXPECT_EQ(ten.InitialSize(3), 1000);
  EXPECT_EQ(ten.InitialMilestone(3), 1);
  // max_t 1: one bracket per band (testConfigSameEtaSmall).
  EXPECT_EQ(HyperBandScheduler(Options(1, 3)).BracketsPerBand(), 1);
  // np.round rounds halves to even: log(9)/log(9^2) = 0.5 gives 0, not 1.
  EXPECT_EQ(HyperBandScheduler(Options(9, 81)).BracketsPerBand(), 1);
}

TEST(HyperBandSchedulerTest, TrialsFillBracketsThenBands) {
  Harness h(Options());
  h.AddRange(0, 143);  // one full band: 5 + 8 + 15 + 34 + 81
  EXPECT_EQ(h.hb->num_bands(), 1);
  EXPECT_EQ(h.hb->BracketOf(Id(0))->s, 0);
  EXPECT_EQ(h.hb->BracketOf(Id(4))->s, 0);
  EXPECT_EQ(h.hb->BracketOf(Id(5))->s, 1);
  EXPECT_EQ(h.hb->BracketOf(Id(13))->s, 2);
  EXPECT_EQ(h.hb->BracketOf(Id(28))->s, 3);
  EXPECT_EQ(h.hb->BracketOf(Id(62))->s, 4);
  EXPECT_EQ(h.hb->BracketOf(Id(142))->live.size(), 81u);
  h.Add(143);
  EXPECT_EQ(h.hb->num_bands(), 2);
  EXPECT_EQ(h.hb->BracketOf(Id(143))->band, 1);
  EXPECT_EQ(h.hb->BracketOf(Id(143))->s, 0);
  EXPECT_EQ(h.trials.at(143).scheduler_state, (Json{{"band", 1}, {"bracket", 0}, {"halvings", 0}}));
}

TEST(HyperBandSchedulerTest, BracketsWithoutAMilestoneAreSkipped) {
  // max_t 20, eta 3: s_max_1 = round(2.73) + 1 = 4, but r0(3) = int(20/27) = 0
  // (Ray's None bracket, testFilterNoneBracket): a band is s = 0, 1, 2.
  Harness h(Options(20, 3));
  EXPECT_EQ(h.hb->InitialMilestone(3), 0);
  const int64_t band = h.hb->InitialSize(0) + h.hb->InitialSize(1) + h.hb->InitialSize(2);
  h.AddRange(0, static_cast<int>(band) + 1);
  EXPECT_EQ(h.hb->BracketOf(Id(static_cast<int>(band) - 1))->s, 2);
  EXPECT_EQ(h.hb->BracketOf(Id(static_cast<int>(band)))->band, 1);
  EXPECT_EQ(h.hb->BracketOf(Id(static_cast<int>(band)))->s, 0);
}

TEST(HyperBandSchedulerTest, SuccessiveHalvingOfTheLargestBracket) {
  // Ray's testSuccessiveHalving: the 81-trial bracket, results 0..n-1 in
  // order; all but the last pause, the last (best) continues; ceil(n/3) stay.
  // With the fixed rule the milestones are 1, 3, 9, 27, 81.
  Harness h(Options());
  h.AddRange(0, 143);
  std::vector<int> live = h.Live(62);
  ASSERT_EQ(live.size(), 81u);
  int64_t milestone = 1;
  for (const int64_t next : {3, 9, 27, 81}) {
    EXPECT_EQ(h.hb->BracketOf(Id(62))->milestone, milestone);
    for (size_t k = 0; k < live.size(); ++k) {
      const SchedulerDecision d = h.Report(live[k], static_cast<double>(milestone), k);
      EXPECT_EQ(d, k + 1 < live.size() ? kPause : kContinue) << "k=" << k;
    }
    const size_t keep = (live.size() + 2) / 3;
    const std::vector<int> survivors(live.end() - static_cast<long>(keep), live.end());
    EXPECT_EQ(h.Live(62), survivors);
    live = survivors;
    milestone = next;
    // The stopped ones are TERMINATED; the paused survivors may start again.
    for (int i : survivors) EXPECT_TRUE(h.hb->MayStart(h.trials.at(i))) << i;
  }
  EXPECT_EQ(h.Live(62).size(), 1u);
  EXPECT_EQ(h.hb->BracketOf(Id(62))->milestone, 81);
  EXPECT_EQ(h.hb->num_stopped(), 80u);
  // The survivor runs to max_t, where its finished bracket stops it.
  EXPECT_EQ(h.Report(live[0], 81, 100), kStop);
}

TEST(HyperBandSchedulerTest, PausedTrialsWaitForTheirBracketAndAreReleasedByTheHalving) {
  Harness h(Options());
  h.AddRange(0, 13);  // bracket s=1 holds trials 5..12 (n0 8, r0 27)
  for (int i = 5; i < 12; ++i) {
    EXPECT_EQ(h.Report(i, 27, i), kPause);
    EXPECT_FALSE(h.hb->MayStart(h.trials.at(i))) << "held at its milestone";
  }
  EXPECT_TRUE(h.log.empty());
  EXPECT_EQ(h.Report(12, 27, 12), kContinue);  // the best; 3 stay (ceil(8/3))
  EXPECT_EQ(h.log, (std::vector<std::string>{
                       Id(5) + " stop {\"band\":0,\"bracket\":1,\"halvings\":1}",
                       Id(6) + " stop {\"band\":0,\"bracket\":1,\"halvings\":1}",
                       Id(7) + " stop {\"band\":0,\"bracket\":1,\"halvings\":1}",
                       Id(8) + " stop {\"band\":0,\"bracket\":1,\"halvings\":1}",
                       Id(9) + " stop {\"band\":0,\"bracket\":1,\"halvings\":1}",
                       Id(10) + " release {\"band\":0,\"bracket\":1,\"halvings\":1}",
                       Id(11) + " release {\"band\":0,\"bracket\":1,\"halvings\":1}",
                   }));
  EXPECT_EQ(h.trials.at(12).scheduler_state, (Json{{"band", 0}, {"bracket", 1}, {"halvings", 1}}));
  EXPECT_TRUE(h.hb->MayStart(h.trials.at(10)));
  EXPECT_FALSE(h.hb->MayStart(h.trials.at(5))) << "stopped by the halving";
  EXPECT_EQ(h.hb->BracketOf(Id(12))->milestone, 81);  // min(27 * 3, 81)
}

TEST(HyperBandSchedulerTest, TheWorstTriggerIsStoppedAndTiesKeepTheLaterTrial) {
  // Ray's testHalvingStop: results in reverse order, the last reporter worst.
  Harness h(Options());
  h.AddRange(0, 13);
  for (int i = 12; i > 5; --i) EXPECT_EQ(h.Report(i, 27, i), kPause);
  EXPECT_EQ(h.Report(5, 27, 5), kStop);
  // Ties: equal values, the later-added survive (stable ascending sort).
  Harness tie(Options());
  tie.AddRange(0, 13);
  for (int i = 5; i < 13; ++i) tie.Report(i, 27, 1.0);
  EXPECT_EQ(tie.Live(5), (std::vector<int>{10, 11, 12}));
}

TEST(HyperBandSchedulerTest, ModeMinKeepsTheLowestAndNaNIsWorst) {
  Harness h(Options(81, 3, /*maximize=*/false));
  h.AddRange(0, 13);
  const double kNaN = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> loss{0.5, kNaN, 0.1, 0.9, 0.3, 0.7, 0.2, 0.8};
  for (int k = 0; k < 8; ++k) h.Report(5 + k, 27, loss[k]);
  EXPECT_EQ(h.Live(5), (std::vector<int>{7, 9, 11}));  // 0.1, 0.3, 0.2
}

TEST(HyperBandSchedulerTest, TheLastBracketStopsEveryTrialAtMaxT) {
  // Ray's testStopsLastOne: bracket s=0 (5 trials, r0 81): the first four
  // pause at 81, the fifth completes the bracket: all stop.
  Harness h(Options());
  h.AddRange(0, 5);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(h.Report(i, 81, i), kPause);
  EXPECT_EQ(h.Report(4, 81, 4), kStop);
  EXPECT_EQ(h.WithStatus(TrialStatus::kTerminated), (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(HyperBandSchedulerTest, ATrialThatEndsOrFailsLeavesItsBracket) {
  // Ray's testTrialErrored / testTrialEndedEarly: 3 trials in bracket s=1.
  for (const bool error : {true, false}) {
    Harness h(Options());
    h.AddRange(0, 8);
    if (error) {
      h.Fail(7);
    } else {
      h.Complete(7);
    }
    EXPECT_EQ(h.Report(5, 27, 10), kPause);
    EXPECT_EQ(h.Report(6, 27, 10), kContinue);
    EXPECT_EQ(h.Live(5), (std::vector<int>{5, 6}));
  }
  // testTrialErrored2 / EndedEarly2: the last one leaving completes the set,
  // and the halving it triggers is recorded in its own state too.
  Harness h(Options());
  h.AddRange(0, 13);
  for (int i = 5; i < 12; ++i) h.Report(i, 27, i);
  h.Fail(12);
  EXPECT_EQ(h.Live(5), (std::vector<int>{9, 10, 11}));
  EXPECT_EQ(h.trials.at(12).scheduler_state["halvings"], 1);
}

TEST(HyperBandSchedulerTest, ARetriedTrialJoinsTheCurrentBracketAgain) {
  Harness h(Options());
  h.AddRange(0, 7);  // bracket s=1 holds 5 and 6, and is the current one
  h.trials.at(6).status = TrialStatus::kRunning;
  h.hb->OnTrialError(h.trials.at(6));  // still RUNNING: a retry
  h.Apply();
  EXPECT_EQ(h.Live(5), (std::vector<int>{5, 6}));
  EXPECT_TRUE(h.hb->MayStart(h.trials.at(6)));
}

TEST(HyperBandSchedulerTest, ATrialAddedAfterAHalvingRunsToTheNewMilestone) {
  // Ray's testAddAfterHalving, with the fixed milestone rule (27 then 81).
  Harness h(Options());
  h.AddRange(0, 6);                          // bracket s=1 holds only trial 5
  EXPECT_EQ(h.Report(5, 27, 1), kContinue);  // alone: halved at once, keeps 3
  h.Add(6);
  EXPECT_EQ(h.Live(5), (std::vector<int>{5, 6}));
  EXPECT_EQ(h.Report(6, 27, 12), kContinue);
  EXPECT_EQ(h.Report(6, 81, 12), kPause);  // trial 5 has not reached 81 yet
}

TEST(HyperBandSchedulerTest, WithoutStopLastTrialsTheLastSurvivorsRunOn) {
  HyperBandOptions o = Options();
  o.stop_last_trials = false;
  Harness h(o);
  h.AddRange(0, 5);  // bracket s=0: no halving at all
  EXPECT_EQ(h.Report(0, 81, 1), kContinue);
  EXPECT_EQ(h.Report(0, 200, 1), kContinue);
}

// A scripted run over two brackets with random values, where the head is
// "restarted" (a scheduler rebuilt from the trials' stored state) after every
// step; from then on both must decide alike, including the actions.
TEST(HyperBandSchedulerTest, StateRebuiltAfterAnyStepDecidesAsTheUninterruptedRun) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> value(0, 1);
  struct Step {
    int trial;
    double time;  // -1: the trial fails (no retry left)
    double m;
  };
  auto run_step = [](Harness& h, const Step& s) {
    if (s.time >= 0) return h.Report(s.trial, s.time, s.m);
    h.Fail(s.trial);
    return kStop;
  };
  // Trials 5..27 (brackets s=1 and s=2); each reports its milestones in
  // rounds; the order within a round is shuffled. The first of each bracket
  // fails at once (time -1), so that its stored state keeps the bracket's
  // first halvings while the others move on.
  Harness reference(Options());
  reference.AddRange(0, 28);
  std::vector<Step> steps{{5, -1, 0}, {13, -1, 0}};
  {
    Harness plan(Options());
    plan.AddRange(0, 28);
    for (const Step& s : steps) run_step(plan, s);
    for (int round = 0; round < 5; ++round) {
      std::vector<int> order;
      for (int i = 5; i < 28; ++i) {
        if (!IsFinished(plan.trials.at(i).status) && plan.hb->MayStart(plan.trials.at(i))) {
          order.push_back(i);
        }
      }
      std::shuffle(order.begin(), order.end(), rng);
      for (int i : order) {
        if (IsFinished(plan.trials.at(i).status)) continue;
        const double t = static_cast<double>(plan.hb->BracketOf(Id(i))->milestone);
        steps.push_back({i, t, value(rng)});
        plan.Report(i, t, steps.back().m);
      }
    }
  }
  ASSERT_GT(steps.size(), 30u);
  std::vector<SchedulerDecision> expected;
  for (const Step& s : steps) expected.push_back(run_step(reference, s));
  for (size_t crash = 0; crash <= steps.size(); ++crash) {
    Harness run(Options());
    run.AddRange(0, 28);
    for (size_t k = 0; k < crash; ++k) run_step(run, steps[k]);
    run.hb = run.Restarted();
    for (size_t k = crash; k < steps.size(); ++k) {
      ASSERT_EQ(run_step(run, steps[k]), expected[k])
          << "crash after step " << crash << ", step " << k;
    }
    ASSERT_EQ(run.log, reference.log) << "crash after step " << crash;
    for (const auto& [i, t] : reference.trials) {
      ASSERT_EQ(run.trials.at(i).status, t.status) << i << ", crash after step " << crash;
      ASSERT_EQ(run.trials.at(i).scheduler_state, t.scheduler_state) << i;
    }
  }
}

TEST(HyperBandSchedulerTest, DamagedStateIsRefused) {
  HyperBandScheduler s(Options());
  for (const Json& bad :
       {Json("x"), Json{{"band", 0}, {"bracket", 5}, {"halvings", 0}},
        Json{{"band", 0}, {"bracket", 1}, {"halvings", 2}},
        Json{{"band", -1}, {"bracket", 0}, {"halvings", 0}},
        Json{{"band", 99}, {"bracket", 0}, {"halvings", 0}}, Json{{"bracket", 0}}}) {
    Trial t;
    t.experiment_id = "e0001";
    t.trial_id = Id(3);
    t.scheduler_state = bad;
    const Status st = s.AddTrial(t, kNoResults);
    EXPECT_EQ(st.code(), StatusCode::kCorruption) << bad.dump();
    EXPECT_NE(st.message().find(Id(3).str()), std::string::npos) << st.message();
  }
  EXPECT_FALSE(s.BracketOf(Id(3)).has_value());
}

TEST(HyperBandSchedulerTest, OptionsAreValidatedNamingTheField) {
  HyperBandOptions o = Options();
  o.max_t = 0.5;
  EXPECT_NE(o.Validate().message().find("scheduler.max_t"), std::string::npos);
  o = Options();
  o.reduction_factor = 1;
  EXPECT_NE(o.Validate().message().find("scheduler.reduction_factor"), std::string::npos);
  o = Options(1e9, 1.01);
  EXPECT_NE(o.Validate().message().find("more than 64 brackets"), std::string::npos);
  o = Options();
  o.metric.clear();
  EXPECT_NE(o.Validate().message().find("scheduler.metric"), std::string::npos);
}

}  // namespace
}  // namespace ztune::head
