// The progress line of `status` and `wait`: iteration budgets from the spec,
// what counts as done, the bar, durations and the ETA estimator.
#include "client/progress.h"

#include <gtest/gtest.h>

#include <vector>

namespace ztune::client {
namespace {

Json ExperimentWith(Json spec, int64_t total, int64_t terminated, int64_t error,
                    bool finished = false) {
  return Json{{"experiment_id", "e0001"},
              {"total_trials", total},
              {"trial_counts", {{"TERMINATED", terminated}, {"ERROR", error}, {"RUNNING", 1}}},
              {"finished", finished},
              {"created_at", 1000.0},
              {"spec", std::move(spec)}};
}

TEST(IterationBudgetTest, FromStopOrFromAnIterationScheduler) {
  EXPECT_EQ(IterationBudget(ExperimentWith({{"stop", {{"training_iteration", 50}}}}, 4, 0, 0)), 50);
  const Json asha{{"type", "asha"}, {"max_t", 27}};
  EXPECT_EQ(IterationBudget(ExperimentWith({{"scheduler", asha}}, 4, 0, 0)), 27);
  // Both: the smaller ends the trial.
  EXPECT_EQ(IterationBudget(ExperimentWith(
                {{"scheduler", asha}, {"stop", {{"training_iteration", 10}}}}, 4, 0, 0)),
            10);
  // A scheduler that measures time, or lets trials run past max_t: unknown.
  EXPECT_EQ(IterationBudget(ExperimentWith(
                {{"scheduler", {{"type", "asha"}, {"max_t", 9}, {"time_attr", "time_total_s"}}}}, 4,
                0, 0)),
            std::nullopt);
  EXPECT_EQ(IterationBudget(ExperimentWith(
                {{"scheduler", {{"type", "hyperband"}, {"max_t", 9}, {"stop_last_trials", false}}}},
                4, 0, 0)),
            std::nullopt);
  EXPECT_EQ(IterationBudget(ExperimentWith({{"stop", {{"loss", 0.1}}}}, 4, 0, 0)), std::nullopt);
  EXPECT_EQ(IterationBudget(ExperimentWith({{"stop", {{"training_iteration", "x"}}}}, 4, 0, 0)),
            std::nullopt);
  EXPECT_EQ(IterationBudget(Json::object()), std::nullopt);
}

TEST(MeasureProgressTest, FinishedTrialsCountTheirWholeBudget) {
  const Json e = ExperimentWith({{"stop", {{"training_iteration", 10}}}}, 4, 1, 1);
  const Json t0{{"status", "TERMINATED"}, {"iteration", 3}};  // stopped early by a scheduler
  const Json t1{{"status", "ERROR"}, {"iteration", 0}};
  const Json t2{{"status", "RUNNING"}, {"iteration", 5}};
  const Json t3{{"status", "RUNNING"}, {"iteration", 99}};  // capped at the budget
  const std::vector<const Json*> trials = {&t0, &t1, &t2, &t3};
  const Progress p = MeasureProgress(e, &trials);
  EXPECT_EQ(p.trials_done, 2);
  EXPECT_EQ(p.trials_total, 4);
  ASSERT_TRUE(p.iterations_done.has_value());
  EXPECT_EQ(*p.iterations_done, 35);
  EXPECT_EQ(p.iterations_total, 40);
  EXPECT_DOUBLE_EQ(p.Fraction(), 35.0 / 40.0);
  EXPECT_EQ(ProgressText(p, 65.0),
            "[##########################----] 87% \u00b7 2/4 trials done \u00b7 35/40 "
            "iterations \u00b7 ETA 1m05s");

  // Without trials (or a budget): trials only.
  const Progress counts = MeasureProgress(e, nullptr);
  EXPECT_FALSE(counts.iterations_done.has_value());
  EXPECT_DOUBLE_EQ(counts.Fraction(), 0.5);
  EXPECT_EQ(ProgressText(counts, std::nullopt),
            "[###############---------------] 50% \u00b7 2/4 trials done");

  const Progress done = MeasureProgress(ExperimentWith(Json::object(), 4, 3, 1, true), nullptr);
  EXPECT_DOUBLE_EQ(done.Fraction(), 1.0);
  EXPECT_EQ(ProgressText(done, 12.0),
            "[##############################] 100% \u00b7 4/4 trials done");  // no ETA once done
  EXPECT_DOUBLE_EQ(MeasureProgress(ExperimentWith(Json::object(), 0, 0, 0), nullptr).Fraction(),
                   0.0);
}

TEST(ProgressTest, BarsAndDurations) {
  EXPECT_EQ(ProgressBar(0, 4), "[----]");
  EXPECT_EQ(ProgressBar(0.74, 4), "[##--]");
  EXPECT_EQ(ProgressBar(1.5, 4), "[####]");
  EXPECT_EQ(ProgressBar(-1, 4), "[----]");
  EXPECT_EQ(FormatDuration(0), "0s");
  EXPECT_EQ(FormatDuration(0.2), "1s");
  EXPECT_EQ(FormatDuration(59), "59s");
  EXPECT_EQ(FormatDuration(60), "1m00s");
  EXPECT_EQ(FormatDuration(3599), "59m59s");
  EXPECT_EQ(FormatDuration(3600 * 5 + 60 * 7), "5h07m");
  EXPECT_EQ(FormatDuration(86400 * 3 + 3600 * 4), "3d04h");
}

TEST(EtaEstimatorTest, SinceCreationUntilTheWatchSawProgress) {
  EtaEstimator eta;
  // First look: 25% done 100 s after creation -> 300 s left.
  EXPECT_DOUBLE_EQ(*eta.Observe("e1", 0.25, 1000, 1100), 300);
  // No progress seen yet: still the average since creation.
  EXPECT_DOUBLE_EQ(*eta.Observe("e1", 0.25, 1000, 1200), 600);
  // Progress while watched: 0.25 -> 0.5 in 10 s -> 20 s left.
  EXPECT_DOUBLE_EQ(*eta.Observe("e1", 0.5, 1000, 1110), 20);
  // Experiments are tracked apart; nothing done and no rate -> unknown.
  EXPECT_EQ(eta.Observe("e2", 0.0, 1000, 1100), std::nullopt);
  EXPECT_EQ(eta.Observe("e3", 0.5, 0, 1100), std::nullopt);  // no creation time
  EXPECT_EQ(eta.Observe("e1", 1.0, 1000, 1300), std::nullopt);
}

}  // namespace
}  // namespace ztune::client
