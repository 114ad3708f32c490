// ActorCache: per-shape FIFO of reusable actors, indexed by actor key.
#include "head/actor_cache.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ztune::head {
namespace {

CachedActor A(const char* worker, const char* trial, uint64_t group) {
  return CachedActor{worker, trial, 1, group};
}

TEST(ActorCacheTest, HandsOutTheOldestOfAShapeAndKnowsItsActors) {
  ActorCache c;
  c.Put("cpu", A("w1", "t1", 1));
  c.Put("cpu", A("w2", "t2", 2));
  c.Put("gpu", A("w1", "t3", 3));
  EXPECT_EQ(c.size(), 3u);
  EXPECT_EQ(c.Count("cpu"), 2u);
  EXPECT_TRUE(c.Contains("w2", "t2", 1));
  EXPECT_FALSE(c.Contains("w2", "t2", 2));
  auto a = c.Take("cpu");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->trial_id, "t1");
  EXPECT_FALSE(c.Contains("w1", "t1", 1));
  EXPECT_FALSE(c.Take("none"));
  c.Take("cpu");
  EXPECT_FALSE(c.Has("cpu"));
  EXPECT_EQ(c.size(), 1u);
}

TEST(ActorCacheTest, TrimsToDemandOldestFirstAndRemovesByPredicate) {
  ActorCache c;
  for (int i = 0; i < 4; ++i) c.Put("cpu", A("w1", ("t" + std::to_string(i)).c_str(), i));
  c.Put("gpu", A("w2", "g", 9));
  auto gone = c.TrimTo([](const std::string& key) { return key == "cpu" ? size_t{1} : 0; });
  ASSERT_EQ(gone.size(), 4u);
  std::vector<std::string> cpu_gone;  // shapes come in any order; within one, oldest first
  for (const auto& a : gone) {
    if (a.worker_id == "w1") cpu_gone.push_back(a.trial_id);
  }
  EXPECT_EQ(cpu_gone, (std::vector<std::string>{"t0", "t1", "t2"}));
  EXPECT_EQ(c.Count("cpu"), 1u);
  EXPECT_TRUE(c.Contains("w1", "t3", 1));
  EXPECT_FALSE(c.Has("gpu"));
  c.Put("gpu", A("w2", "g", 9));
  auto dead = c.RemoveIf([](const CachedActor& a) { return a.worker_id == "w2"; });
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].group_id, 9u);
  EXPECT_EQ(c.size(), 1u);
  EXPECT_FALSE(c.Contains("w2", "g", 1));
}

}  // namespace
}  // namespace ztune::head
