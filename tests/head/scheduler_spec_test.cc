// The spec's `scheduler` object, through ExperimentSpec::Parse (where users
// meet it): Ray's defaults, metric and mode taken from the spec or the
// scheduler, every refusal naming the key, and the stored form read back
// unchanged.
#include "head/scheduler_spec.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "head/experiment_spec.h"

namespace ztune::head {
namespace {

Result<ExperimentSpec> Parse(const std::string& text) {
  return ExperimentSpec::Parse(Json::parse(text), /*default_seed=*/7);
}

// The refusal of `text`, which must be one.
std::string Refusal(const std::string& text) {
  auto r = Parse(text);
  EXPECT_FALSE(r.ok()) << text;
  return r.ok() ? std::string() : r.status().message();
}

TEST(SchedulerSpecTest, NoSchedulerIsFifo) {
  auto s = Parse(R"({"trainable": "noop"})");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->scheduler.type, SchedulerType::kFifo);
  EXPECT_TRUE(s->scheduler.RequiredResultKeys().empty());
  EXPECT_EQ(s->ToJson()["scheduler"], (Json{{"type", "fifo"}}));
  EXPECT_TRUE(Parse(R"({"trainable": "noop", "scheduler": null})").ok());
  EXPECT_TRUE(Parse(R"({"trainable": "noop", "scheduler": {"type": "fifo"}})").ok());
}

TEST(SchedulerSpecTest, AshaTakesRaysDefaultsAndTheSpecsMetricModeAndSeed) {
  auto s = Parse(R"({"trainable": "noop", "metric": "loss", "mode": "min",
                     "scheduler": {"type": "asha"}})");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const AshaOptions& a = s->scheduler.asha;
  EXPECT_EQ(s->scheduler.type, SchedulerType::kAsha);
  EXPECT_EQ(a.time_attr, "training_iteration");
  EXPECT_EQ(a.metric, "loss");
  EXPECT_FALSE(a.maximize);
  EXPECT_EQ(a.max_t, 100);
  EXPECT_EQ(a.grace_period, 1);
  EXPECT_EQ(a.reduction_factor, 4);
  EXPECT_EQ(a.brackets, 1);
  EXPECT_TRUE(a.stop_last_trials);
  EXPECT_EQ(a.seed, 7u);
  EXPECT_EQ(s->scheduler.RequiredResultKeys(),
            (std::vector<std::string>{"loss", "training_iteration"}));
}

TEST(SchedulerSpecTest, AshaOptionsAndItsOwnMetric) {
  auto s = Parse(R"({"trainable": "noop", "seed": 3,
      "scheduler": {"type": "asha", "metric": "acc", "mode": "max", "time_attr": "epoch",
                    "max_t": 81, "grace_period": 3, "reduction_factor": 3, "brackets": 2,
                    "stop_last_trials": false}})");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const AshaOptions& a = s->scheduler.asha;
  EXPECT_EQ(a.metric, "acc");
  EXPECT_TRUE(a.maximize);
  EXPECT_EQ(a.time_attr, "epoch");
  EXPECT_EQ(a.max_t, 81);
  EXPECT_EQ(a.grace_period, 3);
  EXPECT_EQ(a.reduction_factor, 3);
  EXPECT_EQ(a.brackets, 2);
  EXPECT_FALSE(a.stop_last_trials);
  EXPECT_EQ(a.seed, 3u);
  // The experiment is judged by it too (its best trial).
  EXPECT_EQ(s->metric, "acc");
  EXPECT_EQ(s->mode, "max");
}

TEST(SchedulerSpecTest, MedianStoppingTakesRaysDefaults) {
  auto s = Parse(R"({"trainable": "noop", "metric": "acc", "mode": "max",
                     "scheduler": {"type": "median_stopping"}})");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const MedianStoppingOptions& m = s->scheduler.median_stopping;
  EXPECT_EQ(s->scheduler.type, SchedulerType::kMedianStopping);
  EXPECT_EQ(m.time_attr, "time_total_s");
  EXPECT_EQ(m.metric, "acc");
  EXPECT_TRUE(m.maximize);
  EXPECT_EQ(m.grace_period, 60);
  EXPECT_EQ(m.min_samples_required, 3);
  EXPECT_EQ(m.min_time_slice, 0);
  EXPECT_TRUE(m.hard_stop);
  EXPECT_EQ(s->scheduler.RequiredResultKeys(), (std::vector<std::string>{"acc", "time_total_s"}));
  auto again = ExperimentSpec::Parse(s->ToJson(), 1);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->ToJson(), s->ToJson());
}

TEST(SchedulerSpecTest, HyperBandTakesRaysDefaultsAndForcesOneResultPerTrain) {
  auto s = Parse(R"({"trainable": "noop", "metric": "acc", "mode": "max",
                     "scheduler": {"type": "hyperband"}})");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const HyperBandOptions& h = s->scheduler.hyperband;
  EXPECT_EQ(s->scheduler.type, SchedulerType::kHyperBand);
  EXPECT_EQ(h.time_attr, "training_iteration");
  EXPECT_EQ(h.max_t, 81);
  EXPECT_EQ(h.reduction_factor, 3);
  EXPECT_TRUE(h.stop_last_trials);
  EXPECT_FALSE(s->scheduler.SupportsBufferedResults());
  EXPECT_EQ(s->scheduler.RequiredResultKeys(),
            (std::vector<std::string>{"acc", "training_iteration"}));
  auto again = ExperimentSpec::Parse(s->ToJson(), 1);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->ToJson(), s->ToJson());
}

TEST(SchedulerSpecTest, PbtTakesRaysDefaultsAndItsMutations) {
  auto s = Parse(R"({"trainable": "noop", "metric": "acc", "mode": "max", "seed": 9,
                     "param_space": {"lr": {"loguniform": [0.001, 0.1]}, "opt": {"m": 0.9}},
                     "scheduler": {"type": "pbt", "hyperparam_mutations": {
                         "lr": {"loguniform": [0.0001, 0.1]}, "opt": {"m": [0.8, 0.9, 0.99]}}}})");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const PbtOptions& p = s->scheduler.pbt;
  EXPECT_EQ(s->scheduler.type, SchedulerType::kPbt);
  EXPECT_EQ(p.time_attr, "time_total_s");
  EXPECT_EQ(p.perturbation_interval, 60);
  EXPECT_EQ(p.burn_in_period, 0);
  EXPECT_EQ(p.quantile_fraction, 0.25);
  EXPECT_EQ(p.resample_probability, 0.25);
  EXPECT_EQ(p.perturbation_factors, (std::vector<double>{1.2, 0.8}));
  EXPECT_EQ(p.seed, 9u);
  EXPECT_FALSE(s->scheduler.SupportsBufferedResults());
  auto again = ExperimentSpec::Parse(s->ToJson(), 1);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->ToJson(), s->ToJson());
}

TEST(SchedulerSpecTest, PbtMutationsMustNameParamSpaceKeys) {
  const std::string refusal = Refusal(R"({"trainable": "noop", "metric": "m", "mode": "max",
      "param_space": {"lr": 0.1, "opt": {"m": 0.9}},
      "scheduler": {"type": "pbt", "hyperparam_mutations": {"learning_rate": [0.1, 0.2]}}})");
  EXPECT_NE(refusal.find("spec.scheduler.hyperparam_mutations.learning_rate: mutates "
                         "'learning_rate', which param_space does not have"),
            std::string::npos)
      << refusal;
  EXPECT_NE(Refusal(R"({"trainable": "noop", "metric": "m", "mode": "max",
      "param_space": {"lr": 0.1, "opt": {"m": 0.9}},
      "scheduler": {"type": "pbt", "hyperparam_mutations": {"opt": {"beta": [1, 2]}}}})")
                .find("hyperparam_mutations.opt.beta"),
            std::string::npos);
}

// The stored spec is parsed again by a restarted head: the same scheduler.
TEST(SchedulerSpecTest, TheStoredFormReadsBackUnchanged) {
  auto s = Parse(R"({"trainable": "noop", "metric": "loss", "mode": "min",
      "scheduler": {"type": "asha", "max_t": 20, "grace_period": 2.5}})");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const Json stored = s->ToJson();
  auto again = ExperimentSpec::Parse(stored, /*default_seed=*/99);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->ToJson(), stored);
  EXPECT_EQ(again->scheduler.asha.seed, 7u);
}

TEST(SchedulerSpecTest, MetricAndModeAreRequiredAndMustAgreeWithTheSpecs) {
  EXPECT_NE(Refusal(R"({"trainable": "noop", "scheduler": {"type": "asha"}})")
                .find("spec.scheduler.metric: required by scheduler asha"),
            std::string::npos);
  EXPECT_NE(Refusal(R"({"trainable": "noop", "scheduler": {"type": "asha", "metric": "loss"}})")
                .find("spec.scheduler.mode: required by scheduler asha"),
            std::string::npos);
  EXPECT_NE(Refusal(R"({"trainable": "noop", "metric": "loss", "mode": "min",
                        "scheduler": {"type": "asha", "metric": "acc"}})")
                .find("spec.scheduler.metric: 'acc' differs from spec.metric 'loss'"),
            std::string::npos);
  EXPECT_NE(Refusal(R"({"trainable": "noop", "metric": "loss", "mode": "min",
                        "scheduler": {"type": "asha", "mode": "max"}})")
                .find("spec.scheduler.mode: 'max' differs from spec.mode 'min'"),
            std::string::npos);
  // The same value in both places is one setting.
  EXPECT_TRUE(Parse(R"({"trainable": "noop", "metric": "loss", "mode": "min",
                        "scheduler": {"type": "asha", "metric": "loss", "mode": "min"}})")
                  .ok());
}

TEST(SchedulerSpecTest, BadSchedulersAreRefusedNamingTheKey) {
  const std::string head = R"({"trainable": "noop", "metric": "m", "mode": "max", "scheduler": )";
  const struct {
    const char* scheduler;
    const char* message;
  } cases[] = {
      {R"("asha")", "spec.scheduler: must be an object"},
      {R"({})", "spec.scheduler.type: required"},
      {R"({"type": 4})", "spec.scheduler.type: required"},
      {R"({"type": "hyperbandit"})", "spec.scheduler.type: unknown scheduler 'hyperbandit'"},
      {R"({"type": "fifo", "max_t": 3})", "spec.scheduler: unknown key 'max_t'"},
      {R"({"type": "asha", "grace": 1})", "spec.scheduler: unknown key 'grace'"},
      {R"({"type": "asha", "max_t": 0})", "spec.scheduler.max_t"},
      {R"({"type": "asha", "max_t": "10"})", "spec.scheduler.max_t: must be a finite number"},
      {R"({"type": "asha", "grace_period": 200})", "spec.scheduler.grace_period"},
      {R"({"type": "asha", "grace_period": -1})", "spec.scheduler.grace_period"},
      {R"({"type": "asha", "reduction_factor": 1})", "spec.scheduler.reduction_factor"},
      {R"({"type": "asha", "reduction_factor": 1.0000001})", "more than 1000 rungs"},
      {R"({"type": "asha", "brackets": 0})", "spec.scheduler.brackets"},
      {R"({"type": "asha", "brackets": 1.5})", "spec.scheduler.brackets: must be an integer"},
      {R"({"type": "asha", "brackets": 1001})", "spec.scheduler.brackets"},
      {R"({"type": "asha", "stop_last_trials": "yes"})", "spec.scheduler.stop_last_trials"},
      {R"({"type": "asha", "time_attr": ""})", "spec.scheduler.time_attr"},
      {R"({"type": "asha", "time_attr": "a\u001bb"})", "spec.scheduler.time_attr"},
      {R"({"type": "asha", "mode": "up"})", "spec.scheduler.mode: must be"},
      {R"({"type": "hyperband", "grace_period": 3})", "spec.scheduler: unknown key 'grace_period'"},
      {R"({"type": "hyperband", "max_t": 0.5})", "spec.scheduler.max_t"},
      {R"({"type": "hyperband", "max_t": 1e10})", "spec.scheduler.max_t"},
      {R"({"type": "hyperband", "reduction_factor": 0.5})", "spec.scheduler.reduction_factor"},
      {R"({"type": "hyperband", "reduction_factor": 1.01})", "more than 64 brackets"},
      {R"({"type": "hyperband", "stop_last_trials": 0})", "spec.scheduler.stop_last_trials"},
      {R"({"type": "pbt"})", "spec.scheduler.hyperparam_mutations: required"},
      {R"({"type": "pbt", "hyperparam_mutations": {"m": []}})",
       "spec.scheduler.hyperparam_mutations.m: a list of values to choose from must not be empty"},
      {R"({"type": "pbt", "hyperparam_mutations": {"m": 3}})",
       "spec.scheduler.hyperparam_mutations.m: must be a list of values"},
      {R"({"type": "pbt", "hyperparam_mutations": {"m": {"uniform": [2, 1]}}})",
       "spec.scheduler.hyperparam_mutations.m: uniform needs [low, high]"},
      {R"({"type": "pbt", "hyperparam_mutations": {"m": {"grid_search": [1, 2]}}})",
       "grid_search cannot be mutated"},
      {R"({"type": "pbt", "hyperparam_mutations": {"m": [1]}, "quantile_fraction": 0.6})",
       "spec.scheduler.quantile_fraction: must be from 0 to 0.5"},
      {R"({"type": "pbt", "hyperparam_mutations": {"m": [1]}, "resample_probability": 2})",
       "spec.scheduler.resample_probability"},
      {R"({"type": "pbt", "hyperparam_mutations": {"m": [1]}, "perturbation_interval": 0})",
       "spec.scheduler.perturbation_interval"},
      {R"({"type": "pbt", "hyperparam_mutations": {"m": [1]}, "perturbation_factors": []})",
       "spec.scheduler.perturbation_factors: must not be empty"},
      {R"({"type": "pbt", "hyperparam_mutations": {"m": [1]}, "perturbation_factors": [0]})",
       "spec.scheduler.perturbation_factors: must be numbers above 0"},
      {R"({"type": "pbt", "hyperparam_mutations": {"m": [1]}, "synch": 1})",
       "spec.scheduler.synch"},
      {R"({"type": "pbt", "hyperparam_mutations": {"m": [1]}, "interval": 2})",
       "spec.scheduler: unknown key 'interval'"},
      {R"({"type": "median_stopping", "max_t": 3})", "spec.scheduler: unknown key 'max_t'"},
      {R"({"type": "median_stopping", "grace_period": -1})", "spec.scheduler.grace_period"},
      {R"({"type": "median_stopping", "min_samples_required": 0})",
       "spec.scheduler.min_samples_required"},
      {R"({"type": "median_stopping", "min_time_slice": "1"})", "spec.scheduler.min_time_slice"},
      {R"({"type": "median_stopping", "hard_stop": 1})", "spec.scheduler.hard_stop"},
  };
  for (const auto& c : cases) {
    const std::string refusal = Refusal(head + c.scheduler + "}");
    EXPECT_NE(refusal.find(c.message), std::string::npos) << c.scheduler << " -> " << refusal;
  }
}

// The README runs the specs under examples/: each must be accepted.
TEST(SchedulerSpecTest, TheExampleSpecsAreValid) {
  int checked = 0;
  // examples/*.json and the specs of examples/digits (spec*.json; its
  // trainables.json is a worker's file, not a spec, and spec-submitted.json
  // names a directory that `ztune submit` uploads and replaces by its hash).
  for (const auto& entry :
       std::filesystem::recursive_directory_iterator(std::string(ZTUNE_SOURCE_DIR) + "/examples")) {
    if (entry.path().extension() != ".json") continue;
    if (entry.path().parent_path().filename() != "examples" &&
        (entry.path().filename().string().rfind("spec", 0) != 0 ||
         entry.path().filename() == "spec-submitted.json")) {
      continue;
    }
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    auto spec = Parse(text.str());
    EXPECT_TRUE(spec.ok()) << entry.path() << ": " << spec.status().ToString();
    ++checked;
  }
  EXPECT_GE(checked, 7);
}

}  // namespace
}  // namespace ztune::head
