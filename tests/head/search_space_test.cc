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

}  // namespace
}  // namespace ztune::head
