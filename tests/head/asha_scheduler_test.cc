// AshaScheduler (Ray Tune 2.2's AsyncHyperBandScheduler): rung layout, cutoffs
// on scripted results checked against hand computations of NumPy's
// nanpercentile, NaN and infinities, one rung per result, max_t, bracket
// draws, and the state a restarted head rebuilds from.
#include "head/asha_scheduler.h"

#include <cmath>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

namespace ztune::head {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

AshaOptions Options(double grace, double max_t, double rf, bool maximize = true) {
  AshaOptions o;
  o.metric = "m";
  o.maximize = maximize;
  o.grace_period = grace;
  o.max_t = max_t;
  o.reduction_factor = rf;
  return o;
}

// A result at time `t` with metric `m` (NaN and infinities as JSON cannot
// carry them are still numbers in memory: the worker's results arrive parsed).
Json R(double t, double m) { return Json{{"training_iteration", t}, {"m", m}}; }

TrialId Id(int i) {
  return TrialId("e0001_" + std::string(5 - std::to_string(i).size(), '0') + std::to_string(i));
}

SchedulerDecision Add(AshaScheduler& s, int i, double t, double m) {
  s.AddTrial(Id(i), static_cast<uint64_t>(i));
  return s.OnResult(Id(i), R(t, m));
}

constexpr auto kStop = SchedulerDecision::kStop;
constexpr auto kContinue = SchedulerDecision::kContinue;

TEST(AshaSchedulerTest, RungsAreRaysIncludingTheFloatingPointTruncation) {
  EXPECT_EQ(AshaScheduler(Options(1, 100, 4)).Milestones(0), (std::vector<double>{64, 16, 4, 1}));
  // log(1000)/log(10) is 2.9999999999999996 in floating point: 3 rungs, not 4.
  EXPECT_EQ(AshaScheduler(Options(1, 1000, 10)).Milestones(0), (std::vector<double>{100, 10, 1}));
  AshaOptions o = Options(1, 100, 4);
  o.brackets = 3;
  AshaScheduler s(o);
  ASSERT_EQ(s.num_brackets(), 3u);
  EXPECT_EQ(s.Milestones(1), (std::vector<double>{64, 16, 4}));
  EXPECT_EQ(s.Milestones(2), (std::vector<double>{64, 16}));
}

// Ray's own docstring example: _Bracket(min_t=1, max_t=10, rf=2, s=0).
TEST(AshaSchedulerTest, TheDocstringExampleOfRaysBracket) {
  AshaScheduler s(Options(1, 10, 2));
  EXPECT_EQ(Add(s, 1, 1, 2), kContinue);
  EXPECT_EQ(Add(s, 2, 1, 4), kContinue);
  EXPECT_EQ(s.Cutoff(0, 1), 3.0);  // percentile([2, 4], 50)
  EXPECT_EQ(Add(s, 3, 1, 1), kStop);
  EXPECT_EQ(s.Cutoff(0, 1), 2.0);  // percentile([1, 2, 4], 50)
  EXPECT_EQ(s.num_stopped(), 1u);
}

// rf 4: the 75th percentile, computed before the trial's own value is added,
// interpolated even with fewer values than rf; ties continue.
TEST(AshaSchedulerTest, CutoffsMatchHandComputedPercentiles) {
  AshaScheduler s(Options(1, 100, 4));
  EXPECT_EQ(Add(s, 1, 1, 1), kContinue);  // nothing recorded
  EXPECT_EQ(Add(s, 2, 1, 2), kContinue);  // cutoff 1
  EXPECT_EQ(s.Cutoff(0, 1), 1.75);        // [1, 2]: 1 + 0.75
  EXPECT_EQ(Add(s, 3, 1, 3), kContinue);
  EXPECT_EQ(s.Cutoff(0, 1), 2.5);  // [1, 2, 3]: index 1.5
  EXPECT_EQ(Add(s, 4, 1, 4), kContinue);
  EXPECT_EQ(s.Cutoff(0, 1), 3.25);  // [1..4]: index 2.25
  EXPECT_EQ(Add(s, 5, 1, 5), kContinue);
  EXPECT_EQ(s.Cutoff(0, 1), 4.0);           // [1..5]: index 3
  EXPECT_EQ(Add(s, 6, 1, 4.0), kContinue);  // equal to the cutoff: goes on
  EXPECT_EQ(Add(s, 7, 1, 3.9), kStop);      // [1,2,3,4,4,5]: index 3.75 -> 4
  EXPECT_EQ(s.num_stopped(), 1u);
}

TEST(AshaSchedulerTest, ModeMinStopsTheHigherLoss) {
  AshaScheduler s(Options(1, 100, 2, /*maximize=*/false));
  EXPECT_EQ(Add(s, 1, 1, 1.0), kContinue);
  EXPECT_EQ(Add(s, 2, 1, 0.5), kContinue);  // better than the cutoff (-1 signed)
  EXPECT_EQ(Add(s, 3, 1, 2.0), kStop);      // cutoff -0.75 signed: loss 0.75
  EXPECT_EQ(s.Cutoff(0, 1), -1.0);          // signed [-2, -1, -0.5]: the median
}

TEST(AshaSchedulerTest, NaNNeverStopsAndIsLeftOutOfTheCutoff) {
  AshaScheduler s(Options(1, 100, 2));
  EXPECT_EQ(Add(s, 1, 1, kNaN), kContinue);
  EXPECT_EQ(Add(s, 2, 1, 1.0), kContinue);  // cutoff of [NaN] is NaN: no stop
  EXPECT_EQ(s.Cutoff(0, 1), 1.0);           // NaN left out
  EXPECT_EQ(Add(s, 3, 1, 0.5), kStop);
  EXPECT_EQ(Add(s, 4, 1, kNaN), kContinue);  // NaN < 0.75 is false
}

TEST(AshaSchedulerTest, AnInfiniteValueMakesTheCutoffNaNSoNothingStopsThere) {
  AshaScheduler s(Options(1, 100, 4));
  EXPECT_EQ(Add(s, 1, 1, kInf), kContinue);
  // NumPy: a + (inf - inf) * 0 is NaN, also for a single infinite value.
  EXPECT_TRUE(std::isnan(*s.Cutoff(0, 1)));
  EXPECT_EQ(Add(s, 2, 1, 1), kContinue);
  EXPECT_EQ(Add(s, 3, 1, -5), kContinue);  // [1, inf] at 0.75: inf - inf
  EXPECT_TRUE(std::isnan(*s.Cutoff(0, 1)));
}

// One rung per result, the highest reached and not recorded; max_t stops
// without recording; completion records the last result.
TEST(AshaSchedulerTest, OneRungPerResultMaxTStopsAndCompletionRecords) {
  AshaScheduler s(Options(1, 16, 2));
  ASSERT_EQ(s.Milestones(0), (std::vector<double>{16, 8, 4, 2, 1}));
  s.AddTrial(Id(1), 1);
  EXPECT_EQ(s.OnResult(Id(1), R(5, 10)), kContinue);  // rung 4 only
  EXPECT_EQ(s.StateOf(Id(1))["rungs"], Json::parse("[[4.0, 10.0]]"));
  EXPECT_EQ(s.OnResult(Id(1), R(6, 11)), kContinue);    // then rung 2, skipped before
  EXPECT_EQ(s.OnResult(Id(1), R(7, 12)), kContinue);    // then rung 1
  EXPECT_EQ(s.OnResult(Id(1), R(7.5, 13)), kContinue);  // nothing left below 8
  EXPECT_EQ(s.StateOf(Id(1))["rungs"], Json::parse("[[1.0, 12.0], [2.0, 11.0], [4.0, 10.0]]"));
  EXPECT_EQ(s.OnResult(Id(1), R(16, 14)), kStop);  // max_t: not recorded
  EXPECT_EQ(s.StateOf(Id(1))["rungs"].size(), 3u);
  s.OnComplete(Id(1), R(16, 14));
  EXPECT_EQ(s.StateOf(Id(1))["rungs"].back(), Json::parse("[16.0, 14.0]"));
  EXPECT_EQ(s.num_stopped(), 1u);
}

TEST(AshaSchedulerTest, WithoutStopLastTrialsMaxTIsARungLikeAnother) {
  AshaOptions o = Options(1, 4, 2);
  o.stop_last_trials = false;
  AshaScheduler s(o);
  s.AddTrial(Id(1), 1);
  s.AddTrial(Id(2), 2);
  EXPECT_EQ(s.OnResult(Id(1), R(4, 10)), kContinue);
  EXPECT_EQ(s.OnResult(Id(2), R(4, 5)), kStop);  // judged at rung 4, not stopped by max_t
  // Past a rung it was recorded at, a trial goes on without a new judgement.
  EXPECT_EQ(s.OnResult(Id(1), R(5, -100)), kContinue);
}

TEST(AshaSchedulerTest, MissingTimeOrMetricContinuesAndRecordsNothing) {
  AshaScheduler s(Options(1, 10, 2));
  s.AddTrial(Id(1), 1);
  EXPECT_EQ(s.OnResult(Id(1), Json{{"training_iteration", 20}}), kContinue);
  EXPECT_EQ(s.OnResult(Id(1), Json{{"m", 1}}), kContinue);
  EXPECT_EQ(s.OnResult(Id(1), Json{{"training_iteration", 1}, {"m", "high"}}), kContinue);
  EXPECT_EQ(s.StateOf(Id(1))["rungs"], Json::array());
}

TEST(AshaSchedulerTest, NestedMetricKeysAreFlatPaths) {
  AshaOptions o = Options(1, 10, 2);
  o.metric = "eval/acc";
  AshaScheduler s(o);
  s.AddTrial(Id(1), 1);
  s.AddTrial(Id(2), 2);
  EXPECT_EQ(s.OnResult(Id(1), Json::parse(R"({"training_iteration": 1, "eval": {"acc": 0.9}})")),
            kContinue);
  EXPECT_EQ(s.OnResult(Id(2), Json::parse(R"({"training_iteration": 1, "eval": {"acc": 0.5}})")),
            kStop);
}

// Brackets drawn with Ray's softmax weights over rung counts; each trial's
// draw depends on the seed and its index only.
TEST(AshaSchedulerTest, BracketsAreDrawnWithRaysWeightsFromTheTrialIndex) {
  AshaOptions o = Options(1, 100, 4);
  o.brackets = 3;  // 4, 3 and 2 rungs: weights 1, 1/e, 1/e^2
  o.seed = 7;
  AshaScheduler s(o);
  constexpr int kTrials = 30000;
  std::vector<int> count(3, 0);
  for (int i = 0; i < kTrials; ++i) {
    s.AddTrial(Id(i), static_cast<uint64_t>(i));
    ++count[*s.BracketOf(Id(i))];
  }
  const double total = 1 + std::exp(-1.0) + std::exp(-2.0);
  EXPECT_NEAR(count[0] / double(kTrials), 1 / total, 0.015);
  EXPECT_NEAR(count[1] / double(kTrials), std::exp(-1.0) / total, 0.015);
  EXPECT_NEAR(count[2] / double(kTrials), std::exp(-2.0) / total, 0.015);
  AshaScheduler again(o);
  for (int i : {5, 17, 29999}) {
    again.AddTrial(Id(i), static_cast<uint64_t>(i));
    EXPECT_EQ(again.BracketOf(Id(i)), s.BracketOf(Id(i)));
  }
  o.seed = 8;
  AshaScheduler other(o);
  int differ = 0;
  for (int i = 0; i < 100; ++i) {
    other.AddTrial(Id(i), static_cast<uint64_t>(i));
    differ += other.BracketOf(Id(i)) != s.BracketOf(Id(i));
  }
  EXPECT_GT(differ, 20) << "the seed does not change the draws";
}

// A head that restarts rebuilds the scheduler from every trial's stored state
// (through JSON text, as the store holds it) and then decides as the
// uninterrupted one does.
TEST(AshaSchedulerTest, StateRebuiltFromTheTrialsDecidesAsTheUninterruptedRun) {
  AshaOptions o = Options(1, 27, 3);
  o.brackets = 2;
  o.seed = 11;
  AshaScheduler run(o);
  constexpr int kTrials = 12;
  // Scripted values with NaN and an infinity among them.
  auto value = [](int trial, int t) {
    if (trial == 4 && t == 3) return kNaN;
    if (trial == 9 && t == 1) return kInf;
    return std::sin(trial * 1.7 + t * 0.3) * 10;
  };
  for (int i = 0; i < kTrials; ++i) run.AddTrial(Id(i), static_cast<uint64_t>(i));
  std::vector<bool> stopped(kTrials, false);
  for (int t = 1; t <= 5; ++t) {
    for (int i = 0; i < kTrials; ++i) {
      if (!stopped[i]) stopped[i] = run.OnResult(Id(i), R(t, value(i, t))) == kStop;
    }
  }
  AshaScheduler rebuilt(o);
  for (int i = 0; i < kTrials; ++i) {
    const Json stored = Json::parse(run.StateOf(Id(i)).dump());
    ASSERT_TRUE(rebuilt.RestoreTrial(Id(i), stored).ok()) << stored.dump();
  }
  int decisions = 0;
  for (int t = 6; t <= 27; ++t) {
    for (int i = 0; i < kTrials; ++i) {
      if (stopped[i]) continue;
      const SchedulerDecision a = run.OnResult(Id(i), R(t, value(i, t)));
      const SchedulerDecision b = rebuilt.OnResult(Id(i), R(t, value(i, t)));
      ASSERT_EQ(a, b) << "trial " << i << " at " << t;
      stopped[i] = a == kStop;
      ++decisions;
    }
  }
  EXPECT_GT(decisions, kTrials);
  for (int i = 0; i < kTrials; ++i) EXPECT_EQ(rebuilt.StateOf(Id(i)), run.StateOf(Id(i)));
  for (double m : run.Milestones(0)) {
    const auto a = run.Cutoff(0, m);
    const auto b = rebuilt.Cutoff(0, m);
    ASSERT_EQ(a.has_value(), b.has_value());
    if (a && !std::isnan(*a)) {
      EXPECT_EQ(*a, *b);
    }
  }
}

TEST(AshaSchedulerTest, DamagedStateIsRefusedAndChangesNothing) {
  AshaScheduler s(Options(1, 16, 2));
  for (const char* bad :
       {R"([])", R"({"rungs": []})", R"({"bracket": 1, "rungs": []})",
        R"({"bracket": -1, "rungs": []})", R"({"bracket": 0})",
        R"({"bracket": 0, "rungs": [[3, 1.0]]})", R"({"bracket": 0, "rungs": [[1, "high"]]})",
        R"({"bracket": 0, "rungs": [[1]]})", R"({"bracket": 0, "rungs": [[1, 1.0], 7]})"}) {
    Status st = s.RestoreTrial(Id(1), Json::parse(bad));
    EXPECT_EQ(st.code(), StatusCode::kCorruption) << bad;
    EXPECT_FALSE(s.BracketOf(Id(1)).has_value()) << bad;
    EXPECT_FALSE(s.Cutoff(0, 1).has_value()) << bad;
  }
  ASSERT_TRUE(
      s.RestoreTrial(Id(1), Json::parse(R"({"bracket": 0, "rungs": [[1, "-inf"], [2, 3]]})")).ok());
  EXPECT_EQ(s.StateOf(Id(1)), Json::parse(R"({"bracket": 0, "rungs": [[1.0, "-inf"], [2.0, 3]]})"));
  EXPECT_EQ(s.Cutoff(0, 2), 3.0);
}

TEST(AshaSchedulerTest, OptionsAreValidatedNamingTheField) {
  struct Case {
    void (*mutate)(AshaOptions&);
    const char* field;
  };
  const Case cases[] = {
      {[](AshaOptions& o) { o.metric.clear(); }, "metric"},
      {[](AshaOptions& o) { o.max_t = 0; }, "max_t"},
      {[](AshaOptions& o) { o.grace_period = 200; }, "grace_period"},
      {[](AshaOptions& o) { o.grace_period = 0; }, "grace_period"},
      {[](AshaOptions& o) { o.reduction_factor = 1; }, "reduction_factor"},
      {[](AshaOptions& o) { o.reduction_factor = kNaN; }, "reduction_factor"},
      {[](AshaOptions& o) { o.brackets = 0; }, "brackets"},
      {[](AshaOptions& o) { o.reduction_factor = 1.000001; }, "reduction_factor"},
      {[](AshaOptions& o) { o.time_attr.clear(); }, "time_attr"},
  };
  for (const Case& c : cases) {
    AshaOptions o = Options(1, 100, 4);
    c.mutate(o);
    Status s = o.Validate();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.field;
    EXPECT_NE(s.message().find(c.field), std::string::npos) << s.message();
  }
  EXPECT_TRUE(Options(1, 100, 4).Validate().ok());
}

}  // namespace
}  // namespace ztune::head
