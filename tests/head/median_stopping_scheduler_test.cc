// MedianStoppingScheduler (Ray Tune 2.2's MedianStoppingRule): Ray's own
// EarlyStoppingSuite scenarios with the decisions computed by hand, yielding
// to waiting trials, NaN, and a restarted head rebuilding the rule from the
// stored results and state.
#include "head/median_stopping_scheduler.h"

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "head/trial.h"

namespace ztune::head {
namespace {

constexpr auto kContinue = SchedulerDecision::kContinue;
constexpr auto kStop = SchedulerDecision::kStop;
constexpr auto kPause = SchedulerDecision::kPause;

// Ray's result(t, rew): time_total_s t, episode_reward_mean rew,
// training_iteration int(t).
Json R(double t, double rew) {
  return Json{{"time_total_s", t},
              {"episode_reward_mean", rew},
              {"training_iteration", static_cast<int64_t>(t)}};
}

MedianStoppingOptions Options(double grace, int64_t min_samples, bool hard_stop = true) {
  MedianStoppingOptions o;
  o.metric = "episode_reward_mean";
  o.maximize = true;
  o.grace_period = grace;
  o.min_samples_required = min_samples;
  o.hard_stop = hard_stop;
  return o;
}

// The rule with its trials, and every result each was given (what the store
// would hold), so that a test can rebuild the rule as a restarted head does.
class Harness {
 public:
  explicit Harness(MedianStoppingOptions o)
      : options_(o), rule_(std::make_unique<MedianStoppingScheduler>(o)) {}

  Trial& T(int k) {
    auto it = trials_.find(k);
    if (it != trials_.end()) return it->second;
    Trial t;
    t.experiment_id = "e0001";
    t.trial_id = TrialIdFor("e0001", static_cast<uint64_t>(k));
    Trial& added = trials_.emplace(k, std::move(t)).first->second;
    EXPECT_TRUE(
        rule_->AddTrial(added, [] { return ztune::Result<std::vector<Json>>(std::vector<Json>()); })
            .ok());
    return added;
  }
  SchedulerDecision Report(int k, const Json& r, size_t waiting = 0) {
    Trial& t = T(k);
    stored_[k].push_back(r);
    t.last_result = r;
    ExperimentView view;
    view.num_waiting = waiting;
    return rule_->OnTrialResult(t, r, view);
  }
  // The trial ends with `r` (stored, then completed; as a result that stops
  // by itself, the rule does not see it as a result).
  void Complete(int k, const Json& r) {
    Trial& t = T(k);
    if (t.last_result.Get() != r) stored_[k].push_back(r);
    t.last_result = r;
    rule_->OnTrialComplete(t);
  }
  // A restarted head: a new rule, every trial added again with its state
  // (through its JSON record) and its stored results.
  void Restart() {
    rule_ = std::make_unique<MedianStoppingScheduler>(options_);
    for (auto& [k, t] : trials_) {
      auto record = Trial::FromJson(t.ToJson());
      ASSERT_TRUE(record.ok()) << record.status().ToString();
      t = std::move(record).value();
      const std::vector<Json> stored = stored_[k];
      ASSERT_TRUE(
          rule_->AddTrial(t, [stored] { return ztune::Result<std::vector<Json>>(stored); }).ok());
    }
  }
  MedianStoppingScheduler& rule() { return *rule_; }

  // Ray's basicSetup: t1 reports (i, 100 i) for i < 10 (mean 450, max 900),
  // t2 (i, 450) for i < 5; all continue.
  void BasicSetup() {
    for (int i = 0; i < 10; ++i) EXPECT_EQ(Report(1, R(i, i * 100)), kContinue) << i;
    for (int i = 0; i < 5; ++i) EXPECT_EQ(Report(2, R(i, 450)), kContinue) << i;
  }

 private:
  MedianStoppingOptions options_;
  std::unique_ptr<MedianStoppingScheduler> rule_;
  std::map<int, Trial> trials_;
  std::map<int, std::vector<Json>> stored_;
};

// t1's running means over [0, t]: mean(0, 100, ..., 100 t) = 50 t, and 500
// at t = 10 once its completion (10, 1000) is counted.
TEST(MedianStoppingSchedulerTest, ConstantPerformanceIsStoppedOnceBelowTheMedian) {
  Harness h(Options(0, 1));
  h.BasicSetup();
  h.Complete(1, R(10, 1000));
  EXPECT_EQ(h.Report(2, R(5, 450)), kContinue);  // 450 vs 250
  EXPECT_EQ(h.Report(2, R(6, 0)), kContinue);    // best 450 vs 300
  EXPECT_EQ(h.Report(2, R(10, 450)), kStop);     // 450 vs 500
  EXPECT_EQ(h.rule().num_stopped(), 1u);
}

TEST(MedianStoppingSchedulerTest, OnlyTrialsThatReachedTheTimeCount) {
  Harness h(Options(0, 1));
  h.BasicSetup();
  EXPECT_EQ(h.Report(2, R(100, 0)), kContinue);  // t1 never reached 100: too few samples
  h.Complete(1, R(101, 1000));
  EXPECT_EQ(h.Report(2, R(101, 0)), kStop);  // 450 vs t1's mean over [0, 101] = 5500/11
}

TEST(MedianStoppingSchedulerTest, NothingIsJudgedBeforeTheGracePeriodNorCountedFromBefore) {
  Harness h(Options(2.5, 1));
  h.BasicSetup();
  h.Complete(1, R(10, 1000));
  h.Complete(2, R(10, 1000));
  EXPECT_EQ(h.Report(3, R(1, 10)), kContinue);
  EXPECT_EQ(h.Report(3, R(2, 10)), kContinue);
  // t = 3: t1's mean over [2.5, 3] = 300, t2's = 450: median 375 > 10.
  EXPECT_EQ(h.rule().MedianAt(TrialIdFor("e0001", 3), 3), 375);
  EXPECT_EQ(h.Report(3, R(3, 10)), kStop);
}

TEST(MedianStoppingSchedulerTest, MinSamplesRequired) {
  Harness h(Options(0, 2));
  h.BasicSetup();
  h.Complete(1, R(10, 1000));
  EXPECT_EQ(h.Report(3, R(5, 10)), kContinue);  // only t1 reached 5
  h.Complete(2, R(5, 1000));
  EXPECT_EQ(h.Report(3, R(5, 10)), kStop);  // median(250, 540) = 395
}

TEST(MedianStoppingSchedulerTest, UsesTheMedianNotTheMean) {
  Harness h(Options(0, 1));
  h.BasicSetup();
  h.Complete(1, R(10, 1000));
  h.Complete(2, R(10, 1000));
  EXPECT_EQ(h.Report(3, R(1, 260)), kContinue);  // median(50, 450) = 250
  EXPECT_EQ(h.Report(3, R(2, 260)), kStop);      // median(100, 450) = 275
}

TEST(MedianStoppingSchedulerTest, SoftStopPausesAndThenLeavesTheTrialToFifo) {
  Harness h(Options(0, 1, /*hard_stop=*/false));
  h.BasicSetup();
  h.Complete(1, R(10, 1000));
  h.Complete(2, R(10, 1000));
  EXPECT_EQ(h.Report(3, R(1, 260)), kContinue);
  EXPECT_EQ(h.Report(3, R(2, 260)), kPause);
  EXPECT_EQ(h.Report(3, R(3, 0)), kContinue) << "resumed: never judged again";
  EXPECT_EQ(h.Report(3, R(4, 0)), kContinue);
}

TEST(MedianStoppingSchedulerTest, MinimisingCompareTheOtherWay) {
  MedianStoppingOptions o = Options(0, 1);
  o.metric = "mean_loss";
  o.maximize = false;
  o.time_attr = "training_iteration";
  Harness h(o);
  auto r = [](int i, double loss) { return Json{{"training_iteration", i}, {"mean_loss", loss}}; };
  for (int i = 0; i < 10; ++i) EXPECT_EQ(h.Report(1, r(i, -i * 100)), kContinue);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(h.Report(2, r(i, -450)), kContinue);
  h.Complete(1, r(10, -1000));
  EXPECT_EQ(h.Report(2, r(5, -450)), kContinue);
  EXPECT_EQ(h.Report(2, r(6, 0)), kContinue);
  EXPECT_EQ(h.Report(2, r(10, -450)), kStop);
}

// With too few peers, a trial yields when others wait to start, once per
// min_time_slice of its own time; never when nobody waits.
TEST(MedianStoppingSchedulerTest, TooFewSamplesYieldsToWaitingTrials) {
  MedianStoppingOptions o = Options(0, 3);
  o.min_time_slice = 2;
  Harness h(o);
  EXPECT_EQ(h.Report(1, R(1, 5), /*waiting=*/0), kContinue);
  EXPECT_EQ(h.Report(1, R(2, 5), /*waiting=*/2), kPause);  // first yield: 2 - (-inf) > 2
  EXPECT_EQ(h.Report(1, R(3, 5), 2), kContinue);           // 3 - 2 = 1, not > 2
  EXPECT_EQ(h.Report(1, R(4, 5), 2), kContinue);           // 2, not > 2
  EXPECT_EQ(h.Report(1, R(5, 5), 2), kPause);              // 3 > 2
}

// A NaN best (a NaN first result) or median never compares equal: STOP, as
// Python's max() makes it in Ray.
TEST(MedianStoppingSchedulerTest, NaNStopsAsInRay) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Harness h(Options(0, 1));
  EXPECT_EQ(h.Report(1, R(1, 100)), kContinue);
  EXPECT_EQ(h.Report(1, R(2, 100)), kContinue);
  EXPECT_EQ(h.Report(2, R(1, nan)), kStop);
  Harness g(Options(0, 1));
  EXPECT_EQ(g.Report(1, R(1, nan)), kContinue);  // no peers yet
  EXPECT_EQ(g.Report(1, R(2, 1)), kContinue);
  EXPECT_EQ(g.Report(2, R(1, 1000)), kStop) << "t1's running mean at 1 is NaN";
}

// A restarted head rebuilds the rule from the stored results and each
// trial's state: the same decisions follow as without the restart. The
// scenario hinges on Ray's double count: t2, stopped by the rule at (10, 0),
// has that result counted again by its completion, so its running mean at 10
// is (6 x 450 + 0 + 0) / 8 = 337.5 (385.7 counted once), the median with
// t1's 500 is 418.75 (442.9), and t3 at (10, 430) goes on (would stop).
TEST(MedianStoppingSchedulerTest, ARestartedHeadDecidesAsTheUninterruptedOne) {
  auto scenario = [](bool restart) {
    std::vector<SchedulerDecision> out;
    Harness h(Options(0, 1));
    h.BasicSetup();
    h.Complete(1, R(10, 1000));
    out.push_back(h.Report(2, R(5, 450)));
    out.push_back(h.Report(2, R(10, 0)));  // best 450 < 500: STOP
    h.Complete(2, R(10, 0));
    if (restart) h.Restart();
    EXPECT_EQ(h.rule().MedianAt(TrialIdFor("e0001", 3), 10), 418.75);
    out.push_back(h.Report(3, R(10, 430)));
    out.push_back(h.Report(3, R(11, 0)));  // nobody else reached 11
    return out;
  };
  const std::vector<SchedulerDecision> uninterrupted = scenario(false);
  EXPECT_EQ(uninterrupted,
            (std::vector<SchedulerDecision>{kContinue, kStop, kContinue, kContinue}));
  EXPECT_EQ(scenario(true), uninterrupted);
}

TEST(MedianStoppingSchedulerTest, ADamagedStateIsCorruption) {
  MedianStoppingScheduler rule(Options(0, 1));
  Trial t;
  t.experiment_id = "e0001";
  t.trial_id = TrialIdFor("e0001", 0);
  auto none = [] { return ztune::Result<std::vector<Json>>(std::vector<Json>()); };
  for (const char* bad : {R"({})", R"({"stopped_at": "x", "last_pause": null,
                                      "completed_at": null, "completed_seen": false})",
                          R"({"stopped_at": null, "last_pause": null,
                              "completed_at": 3, "completed_seen": false})"}) {
    t.scheduler_state = Json::parse(bad);
    const Status s = rule.AddTrial(t, none);
    EXPECT_EQ(s.code(), StatusCode::kCorruption) << bad;
    EXPECT_NE(s.message().find("e0001_00000"), std::string::npos) << s.ToString();
  }
}

}  // namespace
}  // namespace ztune::head
