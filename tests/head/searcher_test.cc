// Searcher: which experiments search, the variant sequence of a basic
// variant search, and an external search that yields none.
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
  s.Start(e.experiment_id, SearchAlgSpec{}, Space());
  const SearchSpace reference = Space();
  for (uint64_t k = 3; k < 8; ++k) {
    EXPECT_EQ(s.Suggest(e), reference.Variant(7, k)) << k;
    EXPECT_EQ(e.next_variant, k + 1);
  }
}

TEST(SearcherTest, AnExternalSearchSuggestsNothingAndLeavesTheExperimentWhereItIs) {
  Searcher s;
  Experiment e = Exp("e0001", 7);
  e.next_variant = 2;
  s.Start(e.experiment_id, SearchAlgSpec{SearchAlgType::kExternal, 4}, Space());
  EXPECT_TRUE(s.Searching("e0001"));
  EXPECT_EQ(s.Suggest(e), std::nullopt);  // its configs come through add_trial
  EXPECT_EQ(e.next_variant, 2u);
}

TEST(SearcherTest, SearchingNowIsACopyInIdOrderAndEndDropsTheSpace) {
  Searcher s;
  s.Start("e0002", SearchAlgSpec{}, Space());
  s.Start("e0001", SearchAlgSpec{}, Space());
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
  EXPECT_DEATH(s.Suggest(e), "");  // CHECK aborts (its message goes to the log)
}

}  // namespace
}  // namespace ztune::head
