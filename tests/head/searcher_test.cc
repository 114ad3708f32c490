// Searcher: which experiments search, and the variant sequence it yields.
#include "head/searcher.h"

#include <gtest/gtest.h>

namespace ztune::head {
namespace {

Experiment Exp(const std::string& id, uint64_t seed) {
  Experiment e;
  e.experiment_id = id;
  e.spec.seed = seed;
  return e;
}

SearchSpace Space() {
  return SearchSpace::Parse(Json::parse(R"({"lr": {"grid_search": [0.1, 0.2]},
                                            "x": {"uniform": [0, 1]}})"))
      .value();
}

TEST(SearcherTest, YieldsTheSpacesVariantsInOrderAndAdvancesTheExperiment) {
  Searcher s;
  Experiment e = Exp("e0001", 7);
  e.next_variant = 3;  // a restarted head goes on where the store says
  s.Start(e.experiment_id, Space());
  const SearchSpace reference = Space();
  for (uint64_t k = 3; k < 8; ++k) {
    EXPECT_EQ(s.Next(e), reference.Variant(7, k)) << k;
    EXPECT_EQ(e.next_variant, k + 1);
  }
}

TEST(SearcherTest, SearchingNowIsACopyInIdOrderAndEndDropsTheSpace) {
  Searcher s;
  s.Start("e0002", Space());
  s.Start("e0001", Space());
  EXPECT_EQ(s.NumSearching(), 2u);
  const std::vector<std::string> now = s.SearchingNow();
  EXPECT_EQ(now, (std::vector<std::string>{"e0001", "e0002"}));
  for (const auto& id : now) s.End(id);  // ending while going through the copy
  EXPECT_EQ(s.NumSearching(), 0u);
  EXPECT_FALSE(s.Searching("e0001"));
  s.End("unknown");
}

TEST(SearcherTest, NextOfAnExperimentThatDoesNotSearchIsADefect) {
  Searcher s;
  Experiment e = Exp("e0001", 1);
  EXPECT_DEATH(s.Next(e), "");  // CHECK aborts (its message goes to the log)
}

}  // namespace
}  // namespace ztune::head
