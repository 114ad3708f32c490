#include "head/search_space.h"

#include <cmath>
#include <set>

#include <gtest/gtest.h>

#include "head/experiment_spec.h"
#include "head/trial.h"

namespace ztune::head {
namespace {

TEST(SearchSpaceTest, GridCrossesAllGridKeys) {
  auto s = SearchSpace::Parse(Json::parse(
      R"({"a": {"grid_search": [1, 2, 3]}, "nested": {"b": {"grid_search": ["x", "y"]}}, "c": 7})"));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->GridSize(), 6u);
  EXPECT_EQ(s->NumVariants(4), 24u);
  EXPECT_EQ(s->NumVariants(int64_t{1} << 62), std::nullopt) << "24 x 2^62 overflows";
  std::set<std::string> seen;
  for (uint64_t i = 0; i < 6; ++i) {
    Json v = s->Variant(1, i);
    EXPECT_EQ(v["c"], 7);
    seen.insert(v["a"].dump() + v["nested"]["b"].dump());
  }
  EXPECT_EQ(seen.size(), 6u);
  // The next repeat visits the same grid points in the same order.
  for (uint64_t i = 0; i < 6; ++i) EXPECT_EQ(s->Variant(1, i)["a"], s->Variant(1, i + 6)["a"]);
}

TEST(SearchSpaceTest, SamplingIsSeededAndReproducible) {
  auto s = SearchSpace::Parse(Json::parse(R"({
      "lr": {"loguniform": [0.001, 0.5]}, "u": {"uniform": [-1, 1]},
      "q": {"quniform": [0, 10, 2.5]}, "n": {"randint": [3, 6]},
      "g": {"normal": [0, 1]}, "c": {"choice": ["a", "b"]}})"));
  ASSERT_TRUE(s.ok());
  for (uint64_t i = 0; i < 200; ++i) {
    Json v = s->Variant(42, i);
    EXPECT_EQ(v, s->Variant(42, i));
    double lr = v["lr"];
    EXPECT_GE(lr, 0.001);
    EXPECT_LE(lr, 0.5);
    EXPECT_GE(v["u"].get<double>(), -1);
    EXPECT_LT(v["u"].get<double>(), 1);
    double q = v["q"];
    EXPECT_DOUBLE_EQ(std::fmod(q, 2.5), 0.0);
    int64_t n = v["n"];
    EXPECT_GE(n, 3);
    EXPECT_LT(n, 6);
    EXPECT_TRUE(v["c"] == "a" || v["c"] == "b");
  }
  EXPECT_NE(s->Variant(42, 0), s->Variant(43, 0));
  EXPECT_NE(s->Variant(42, 0), s->Variant(42, 1));
}

TEST(SearchSpaceTest, RejectsBadSamplersNamingThePath) {
  const char* bad[] = {
      R"({"lr": {"loguniform": [0, 1]}})",     R"({"lr": {"uniform": [2, 1]}})",
      R"({"a": {"b": {"grid_search": []}}})",  R"({"n": {"randint": [1.5, 3]}})",
      R"({"g": {"normal": [0, -1]}})",         R"({"q": {"quniform": [0, 1, 0]}})",
      R"({"c": {"choice": "ab"}})",
  };
  for (const char* b : bad) {
    auto s = SearchSpace::Parse(Json::parse(b));
    ASSERT_FALSE(s.ok()) << b;
    EXPECT_NE(s.status().message().find("param_space."), std::string::npos) << s.status().message();
  }
  EXPECT_FALSE(SearchSpace::Parse(Json::array()).ok());
}

// A spec without a name takes the trainable as its name, and the stored spec
// names it explicitly: a trainable longer than a name may be was accepted at
// submit, then refused when a restarted head read the experiment back, which
// kept the head from starting (found by tests/fuzz/fuzz_spec).
TEST(ExperimentSpecTest, TrainableObeysTheNameLimitSoTheStoredSpecLoads) {
  auto too_long = ExperimentSpec::Parse(Json{{"trainable", std::string(201, 'q')}}, 1);
  ASSERT_FALSE(too_long.ok());
  EXPECT_EQ(too_long.status().message(), "spec.trainable: must be at most 200 characters");

  auto longest = ExperimentSpec::Parse(Json{{"trainable", std::string(200, 'q')}}, 1);
  ASSERT_TRUE(longest.ok()) << longest.status().ToString();
  Experiment e;
  e.experiment_id = "e0001";
  e.spec = *longest;
  auto loaded = Experiment::FromJson(Json::parse(e.ToJson().dump()));
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->spec.name, std::string(200, 'q'));
}

// Issue 14: a misspelt sampler ran every trial with a constant named after
// it; a sampler with company was accepted.
TEST(SearchSpaceTest, AMisspeltSamplerIsRefusedWithTheNameItMeant) {
  auto s = SearchSpace::Parse(Json::parse(R"({"lr": {"log_uniform": [1e-5, 1e-1]}})"));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("param_space.lr: unknown sampler 'log_uniform' (did you "
                                      "mean 'loguniform'?)"),
            std::string::npos)
      << s.status().ToString();
  EXPECT_NE(s.status().message().find("{\"choice\": [VALUE]}"), std::string::npos)
      << "says how to keep such an object as a constant";
  s = SearchSpace::Parse(Json::parse(R"({"model": {"opt": {"unifrom": [0, 1]}}})"));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("param_space.model.opt: unknown sampler 'unifrom' (did "
                                      "you mean 'uniform'?)"),
            std::string::npos)
      << s.status().ToString();
}

TEST(SearchSpaceTest, ASamplerObjectHoldsItsOneKey) {
  auto s = SearchSpace::Parse(Json::parse(R"({"x": {"uniform": [0, 1], "extra": 1}})"));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("param_space.x: unknown key 'extra' beside sampler "
                                      "'uniform'"),
            std::string::npos)
      << s.status().ToString();
}

TEST(SearchSpaceTest, NestedConstantsThatAreNoTyposStayConstants) {
  // Other keys, a near miss whose value is not a list, several keys: all
  // plain configuration.
  auto s = SearchSpace::Parse(Json::parse(
      R"({"model": {"layers": [64, 32]}, "opt": {"choices": 3}, "both": {"normall": [1], "k": 2},
          "wrapped": {"choice": [{"choices": [1, 2]}]}})"));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const Json v = s->Variant(1, 0);
  EXPECT_EQ(v["model"]["layers"], Json::parse("[64, 32]"));
  EXPECT_EQ(v["opt"]["choices"], 3);
  EXPECT_EQ(v["both"]["k"], 2);
  EXPECT_EQ(v["wrapped"]["choices"], Json::parse("[1, 2]")) << "the documented escape";
}

TEST(SearchSpaceTest, AMisspeltSpecKeyGetsTheKeyItMeant) {
  auto e = ExperimentSpec::Parse(Json::parse(R"({"trainable": "q", "num_sample": 3})"), 1);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("unknown key 'num_sample' (did you mean 'num_samples'?)"),
            std::string::npos)
      << e.status().ToString();
  e = ExperimentSpec::Parse(Json::parse(R"({"trainable": "q", "zzz": 3})"), 1);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().message().find("did you mean"), std::string::npos) << e.status().ToString();
}

TEST(SearchSpaceTest, ASpecWithoutAStopConditionIsAcceptedWithAWarning) {
  auto warnings = [](const char* spec) {
    auto e = ExperimentSpec::Parse(Json::parse(spec), 1);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? e->Warnings() : std::vector<std::string>{};
  };
  const auto none = warnings(R"({"trainable": "q"})");
  ASSERT_EQ(none.size(), 1u);
  EXPECT_NE(none[0].find("no stop condition"), std::string::npos) << none[0];
  EXPECT_TRUE(warnings(R"({"trainable": "q", "stop": {"training_iteration": 5}})").empty());
  // ASHA ends every trial at max_t; PBT ends none.
  EXPECT_TRUE(warnings(R"({"trainable": "q", "metric": "loss", "mode": "min",
                           "scheduler": {"type": "asha"}})")
                  .empty());
  EXPECT_EQ(warnings(R"({"trainable": "q", "metric": "loss", "mode": "min", "param_space":
                         {"lr": {"uniform": [0, 1]}}, "scheduler": {"type": "pbt",
                         "hyperparam_mutations": {"lr": [0.1, 0.2]}}})")
                .size(),
            1u);
}

}  // namespace
}  // namespace ztune::head
